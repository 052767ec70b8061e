"""Workspaces: a kernel's /mnt/data, new by default or shared with kernels of the same tenant,
kept for a grace period after its last kernel so results can still be fetched."""
import pytest

import sbxutil as S
from sbxutil import kcall


@pytest.fixture(scope="module")
def gw(gateway):
    S.assert_sandboxed_gateway(gateway)
    return gateway


def start(gw, **body):
    status, model, _ = gw.request("POST", "/api/kernels", body)
    return status, model


def test_model_names_a_new_workspace_per_kernel(gw):
    s1, a = start(gw)
    s2, b = start(gw)
    try:
        assert (s1, s2) == (201, 201)
        assert a["workspace"] and b["workspace"] and a["workspace"] != b["workspace"]
        status, model, _ = gw.request("GET", f"/api/kernels/{a['id']}")
        assert status == 200 and model["workspace"] == a["workspace"]
        # separate workspaces: b does not see what a writes
        kcall(gw, a["id"], "open('/mnt/data/only-a', 'w').write('x'); R['ok'] = 1")
        r = kcall(gw, b["id"], "import os; R['ls'] = os.listdir('/mnt/data')")
        assert "only-a" not in r["ls"]
    finally:
        gw.delete_kernel(a["id"])
        gw.delete_kernel(b["id"])


def test_shared_workspace_is_read_and_written_by_both_kernels(gw):
    _, a = start(gw)
    try:
        status, b = start(gw, workspace=a["workspace"])
        assert status == 201, b
        try:
            assert b["workspace"] == a["workspace"]
            kcall(gw, a["id"], "open('/mnt/data/shared.txt', 'w').write('from a\\n'); R['ok'] = 1")
            r = kcall(gw, b["id"], """
with open('/mnt/data/shared.txt', 'a') as f:
    f.write('from b\\n')
import os
os.mkdir('/mnt/data/dir-b')
R['text'] = open('/mnt/data/shared.txt').read()
""")
            assert r["text"] == "from a\nfrom b\n"
            r = kcall(gw, a["id"], """
import os
open('/mnt/data/dir-b/by-a', 'w').write('ok')
R['text'] = open('/mnt/data/shared.txt').read()
R['ls'] = sorted(os.listdir('/mnt/data'))
""")
            assert r["text"] == "from a\nfrom b\n"
            assert r["ls"] == ["dir-b", "shared.txt"]
        finally:
            gw.delete_kernel(b["id"])
    finally:
        gw.delete_kernel(a["id"])


def test_workspace_outlives_its_kernel_for_the_grace_period(gw):
    _, a = start(gw)
    ws = a["workspace"]
    kcall(gw, a["id"], "open('/mnt/data/result.csv', 'w').write('1,2\\n'); R['ok'] = 1")
    assert gw.delete_kernel(a["id"]) == 204
    status, b = start(gw, workspace=ws)
    assert status == 201, b
    try:
        r = kcall(gw, b["id"], "R['text'] = open('/mnt/data/result.csv').read()")
        assert r["text"] == "1,2\n"
    finally:
        gw.delete_kernel(b["id"])


def test_workspace_is_removed_after_the_grace_period(gateway_factory):
    gw = gateway_factory("--workspace-grace=0")
    S.assert_sandboxed_gateway(gw)
    _, a = start(gw)
    assert gw.delete_kernel(a["id"]) == 204
    status, body = start(gw, workspace=a["workspace"])
    assert status == 404, body
    assert "workspace" in body["message"].lower()


@pytest.mark.parametrize("ws", ["no-such-workspace-id-0000", "00000000-0000-0000-0000-000000000000"])
def test_unknown_workspace_is_404(gw, ws):
    status, body = start(gw, workspace=ws)
    assert status == 404, body


@pytest.mark.parametrize("ws", [12, "../etc", "a/b", "", {"id": "x"}, "x" * 300])
def test_malformed_workspace_is_400(gw, ws):
    status, body = start(gw, workspace=ws)
    assert status == 400, body
    assert "workspace" in body["message"]


def test_workspace_size_is_enforced(gw):
    status, a = start(gw, limits={"workspace": 4 * 1024 * 1024})
    assert status == 201, a
    try:
        r = kcall(gw, a["id"], """
try:
    with open('/mnt/data/big', 'wb') as f:
        f.write(b'x' * (8 * 1024 * 1024))
    R['err'] = None
except OSError as e:
    R['err'] = e.errno
""")
        assert r["err"] == 28  # ENOSPC
    finally:
        gw.delete_kernel(a["id"])
