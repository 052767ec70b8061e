"""REST API: /api, /api/kernelspecs, /api/kernels, /api/sessions, authentication.

Every expectation was checked against jupyter_server 1.23 (KGW_REFERENCE=jupyter_server);
tests marked kgw_only check what kgw does beyond it.
"""
import os
import socket
import struct
import threading
import time
import uuid
from datetime import datetime

import pytest

import jclient
from conftest import stop_gateway

TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
KERNEL_KEYS = {"id", "name", "last_activity", "execution_state", "connections"}
# kgw's default request body limit must be below this (override for a bigger configured limit)
OVERSIZED_BODY = int(os.environ.get("KGW_TEST_OVERSIZED_BODY", 64 << 20))


def assert_error(resp, status):
    code, body, hdrs = resp
    assert code == status, (code, body)
    assert isinstance(body, dict), body
    assert isinstance(body.get("message"), str) and body["message"], body
    return body


def assert_kernel_model(model, name="python3"):
    assert isinstance(model, dict), model
    assert KERNEL_KEYS <= set(model), model
    uuid.UUID(model["id"])
    assert model["name"] == name
    datetime.strptime(model["last_activity"], TS_FORMAT)
    assert model["execution_state"] in ("starting", "idle", "busy", "restarting"), model
    assert isinstance(model["connections"], int) and not isinstance(model["connections"], bool)


def kernel_ids(gw):
    status, kernels, _ = gw.request("GET", "/api/kernels")
    assert status == 200 and isinstance(kernels, list), (status, kernels)
    return [k["id"] for k in kernels]


@pytest.fixture(scope="module")
def mkernel(gateway):
    """A kernel shared by the tests of this module that do not change it."""
    model = gateway.start_kernel()
    yield model
    gateway.delete_kernel(model["id"])


# ------------------------------------------------------------------ /api, kernelspecs

def test_api_version(gateway):
    status, body, hdrs = gateway.request("GET", "/api")
    assert status == 200
    assert isinstance(body["version"], str) and body["version"]
    assert hdrs["Content-Type"].startswith("application/json")


def test_kernelspecs(gateway):
    status, body, _ = gateway.request("GET", "/api/kernelspecs")
    assert status == 200
    assert body["default"] == "python3"
    spec = body["kernelspecs"]["python3"]
    assert spec["name"] == "python3"
    assert isinstance(spec["spec"]["argv"], list) and spec["spec"]["argv"]
    assert "{connection_file}" in spec["spec"]["argv"]
    assert spec["spec"]["display_name"]
    assert spec["spec"]["language"] == "python"
    assert isinstance(spec["resources"], dict)
    assert spec["resources"]["logo-64x64"].endswith("/kernelspecs/python3/logo-64x64.png")


def test_kernelspec_one(gateway):
    status, body, _ = gateway.request("GET", "/api/kernelspecs/python3")
    assert status == 200
    assert body["name"] == "python3"
    assert body["spec"]["language"] == "python"
    assert body == gateway.request("GET", "/api/kernelspecs")[1]["kernelspecs"]["python3"]


def test_kernelspec_unknown(gateway):
    assert_error(gateway.request("GET", "/api/kernelspecs/no-such-spec"), 404)


def test_kernelspec_logo(gateway):
    resource = gateway.request("GET", "/api/kernelspecs/python3")[1]["resources"]["logo-64x64"]
    for path in ("/kernelspecs/python3/logo-64x64.png", resource):
        status, body, hdrs = gateway.request("GET", path)
        assert status == 200
        assert hdrs["Content-Type"] == "image/png"
        assert isinstance(body, bytes) and body.startswith(b"\x89PNG\r\n\x1a\n")
        assert body[12:16] == b"IHDR"
        assert struct.unpack(">II", body[16:24]) == (64, 64)


# ------------------------------------------------------------------ kernels

@pytest.mark.parametrize("body", [{}, None, {"name": "python3"}], ids=["empty-object", "no-body",
                                                                         "name"])
def test_start_kernel(gateway, body):
    kw = {"body": body} if body is not None else {"raw_body": b""}
    status, model, hdrs = gateway.request("POST", "/api/kernels", **kw)
    assert status == 201, (status, model)
    try:
        assert_kernel_model(model)
        assert hdrs["Location"].endswith(f"/api/kernels/{model['id']}")
        assert model["connections"] == 0
        assert model["id"] in kernel_ids(gateway)
        status, one, _ = gateway.request("GET", f"/api/kernels/{model['id']}")
        assert status == 200
        assert_kernel_model(one)
        assert one["id"] == model["id"]
    finally:
        gateway.delete_kernel(model["id"])


def test_list_kernels(gateway, mkernel):
    status, kernels, _ = gateway.request("GET", "/api/kernels")
    assert status == 200
    mine = [k for k in kernels if k["id"] == mkernel["id"]]
    assert len(mine) == 1
    assert_kernel_model(mine[0])


def test_get_unknown_kernel(gateway):
    assert_error(gateway.request("GET", f"/api/kernels/{uuid.uuid4()}"), 404)


@pytest.mark.parametrize("action", ["interrupt", "restart"])
def test_action_unknown_kernel(gateway, action):
    if action == "restart":
        # jupyter_server 1.23 answers 500 "Exception restarting kernel" here
        code, body, _ = gateway.request("POST", f"/api/kernels/{uuid.uuid4()}/restart")
        assert code in (404, 500) and body["message"], (code, body)
    else:
        assert_error(gateway.request("POST", f"/api/kernels/{uuid.uuid4()}/interrupt"), 404)


def test_start_unknown_kernel_name(gateway):
    # jupyter_server 1.23 answers 500 ("Unhandled error", NoSuchKernel traceback); kgw 404
    before = kernel_ids(gateway)
    code, body, _ = gateway.request("POST", "/api/kernels", {"name": "no-such-kernel"})
    assert code in (404, 500), (code, body)
    assert isinstance(body, dict) and body["message"]
    assert sorted(kernel_ids(gateway)) == sorted(before)


@pytest.mark.kgw_only
def test_start_unknown_kernel_name_404(gateway):
    body = assert_error(gateway.request("POST", "/api/kernels", {"name": "no-such-kernel"}), 404)
    assert "no-such-kernel" in body["message"]


@pytest.mark.parametrize("raw", [
    b"{bad", b"[1,",
    # jupyter_server 1.23 answers 500 (UnicodeDecodeError) for a body that is not UTF-8
    pytest.param(b"\xff\xfe", marks=pytest.mark.kgw_only, id="not-utf8"),
])
def test_start_kernel_bad_json(gateway, raw):
    before = kernel_ids(gateway)
    assert_error(gateway.request("POST", "/api/kernels", raw_body=raw), 400)
    assert sorted(kernel_ids(gateway)) == sorted(before)


def test_interrupt(gateway, mkernel):
    status, body, _ = gateway.request("POST", f"/api/kernels/{mkernel['id']}/interrupt")
    assert (status, body) == (204, None)


def test_restart(gateway, kernel):
    status, model, _ = gateway.request("POST", f"/api/kernels/{kernel['id']}/restart")
    assert status == 200, model
    assert_kernel_model(model)
    assert model["id"] == kernel["id"]
    assert kernel["id"] in kernel_ids(gateway)


def test_delete(gateway):
    kid = gateway.start_kernel()["id"]
    status, body, _ = gateway.request("DELETE", f"/api/kernels/{kid}")
    assert (status, body) == (204, None)
    assert_error(gateway.request("GET", f"/api/kernels/{kid}"), 404)
    assert kid not in kernel_ids(gateway)
    assert_error(gateway.request("DELETE", f"/api/kernels/{kid}"), 404)


@pytest.mark.parametrize("method,path", [
    ("PUT", "/api/kernels/{kid}"),
    ("PATCH", "/api/kernels"),
    ("DELETE", "/api/kernels"),
    ("GET", "/api/kernels/{kid}/interrupt"),
    ("GET", "/api/kernels/{kid}/restart"),
    ("DELETE", "/api/kernelspecs"),
    ("POST", "/api/kernelspecs/python3"),
    ("POST", "/api"),
])
def test_wrong_method(gateway, mkernel, method, path):
    assert_error(gateway.request(method, path.format(kid=mkernel["id"]), body={}), 405)
    assert mkernel["id"] in kernel_ids(gateway)


@pytest.mark.parametrize("path", ["/api/kernels", "/api/kernelspecs", "/api/sessions"])
def test_cache_buster_query(gateway, path):
    status, body, _ = gateway.request("GET", path + "?1712345678901")
    assert status == 200
    plain = gateway.request("GET", path)[1]
    if path == "/api/kernelspecs":
        assert body == plain
    else:
        assert sorted(x["id"] for x in body) == sorted(x["id"] for x in plain)


# ------------------------------------------------------------------ env

def run_code(gw, kid, code):
    async def go():
        c = await jclient.connect(gw, kid)
        try:
            ex = await c.execute(code)
            assert ex.status == "ok", ex.reply["content"]
            return ex.stdout
        finally:
            await c.close()
    return jclient.run(go())


ENV_PROBE = "import os; print(*(repr(os.environ.get(k)) for k in ('KERNEL_FOO', 'PATH_LEAK')))"


def test_start_kernel_with_env_accepted(gateway):
    # jupyter_server 1.23 accepts "env" but does not pass it to the kernel
    model = gateway.start_kernel(env={"KERNEL_FOO": "bar", "PATH_LEAK": "x"})
    try:
        assert_kernel_model(model)
        assert run_code(gateway, model["id"], ENV_PROBE) in ("None None\n", "'bar' None\n")
    finally:
        gateway.delete_kernel(model["id"])


@pytest.mark.kgw_only
def test_start_kernel_env_only_kernel_vars(gateway):
    model = gateway.start_kernel(env={"KERNEL_FOO": "bar", "PATH_LEAK": "x"})
    try:
        assert run_code(gateway, model["id"], ENV_PROBE) == "'bar' None\n"
    finally:
        gateway.delete_kernel(model["id"])


# ------------------------------------------------------------------ auth

@pytest.mark.parametrize("path", ["/api/kernels", "/api/kernelspecs", "/api/sessions",
                                  "/api/kernels/{kid}"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "token wrong"}], ids=["none", "wrong"])
def test_auth_required(gateway, mkernel, path, headers):
    code, body, _ = gateway.request("GET", path.format(kid=mkernel["id"]), auth=False,
                                    headers=headers)
    assert code in (401, 403), (code, body)   # jupyter_server: 403, kgw: 401
    assert isinstance(body, dict) and body["message"]


def test_auth_required_for_mutations(gateway, mkernel):
    before = kernel_ids(gateway)
    code, _, _ = gateway.request("POST", "/api/kernels", body={}, auth=False)
    assert code in (401, 403)
    code, _, _ = gateway.request("DELETE", f"/api/kernels/{mkernel['id']}", auth=False)
    assert code in (401, 403)
    assert sorted(kernel_ids(gateway)) == sorted(before)


def test_token_query_parameter(gateway):
    code, body, _ = gateway.request("GET", f"/api/kernels?token={gateway.token}", auth=False)
    assert code == 200 and isinstance(body, list)


@pytest.mark.kgw_only
def test_no_token_is_401_json(gateway):
    code, body, hdrs = gateway.request("GET", "/api/kernels", auth=False)
    assert code == 401
    assert hdrs["Content-Type"].startswith("application/json")
    assert isinstance(body, dict) and body["message"]


@pytest.mark.kgw_only
@pytest.mark.parametrize("header", ["X-API-Key: {t}", "Authorization: Bearer {t}",
                                    "Authorization: token {t}"])
def test_token_headers(gateway, header):
    name, value = header.format(t=gateway.token).split(": ", 1)
    code, body, _ = gateway.request("GET", "/api/kernels", auth=False, headers={name: value})
    assert code == 200 and isinstance(body, list)
    code, _, _ = gateway.request("GET", "/api/kernels", auth=False,
                                 headers={name: value.replace(gateway.token, "x" * 32)})
    assert code == 401


@pytest.mark.kgw_only
def test_error_has_reason(gateway):
    body = assert_error(gateway.request("GET", f"/api/kernels/{uuid.uuid4()}"), 404)
    assert isinstance(body.get("reason"), str) and body["reason"], body


@pytest.mark.kgw_only
def test_body_too_large_413(gateway):
    """A body over the limit is answered 413 (the server may stop reading early)."""
    head = (f"POST /api/kernels HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
            f"Authorization: token {gateway.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {OVERSIZED_BODY}\r\n\r\n").encode()
    received = bytearray()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        def reader():
            try:
                while chunk := s.recv(65536):
                    received.extend(chunk)
            except OSError:
                pass
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        try:
            s.sendall(head)
            chunk = b" " * 65536
            sent = 0
            while sent < OVERSIZED_BODY and not received:
                s.sendall(chunk[:OVERSIZED_BODY - sent])
                sent += len(chunk)
        except OSError:
            pass
        deadline = time.monotonic() + 10
        while not received.count(b"\r\n\r\n") and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.02)
    assert received.startswith(b"HTTP/1.1 413"), bytes(received[:200])
    assert gateway.request("GET", "/api")[0] == 200


# ------------------------------------------------------------------ sessions

def test_sessions_lifecycle(gateway):
    path = f"kgw-test-{uuid.uuid4().hex}.ipynb"
    body = {"path": path, "name": "nb", "type": "notebook", "kernel": {"name": "python3"}}
    status, model, hdrs = gateway.request("POST", "/api/sessions", body)
    assert status == 201, model
    sid, kid = model["id"], model["kernel"]["id"]
    try:
        uuid.UUID(sid)
        assert hdrs["Location"].endswith(f"/api/sessions/{sid}")
        assert (model["path"], model["name"], model["type"]) == (path, "nb", "notebook")
        assert_kernel_model(model["kernel"])
        assert kid in kernel_ids(gateway)

        status, sessions, _ = gateway.request("GET", "/api/sessions")
        assert status == 200
        assert [s["id"] for s in sessions if s["id"] == sid] == [sid]

        status, one, _ = gateway.request("GET", f"/api/sessions/{sid}")
        assert status == 200
        assert (one["id"], one["path"], one["kernel"]["id"]) == (sid, path, kid)

        status, patched, _ = gateway.request("PATCH", f"/api/sessions/{sid}",
                                             {"path": "renamed.ipynb"})
        assert status == 200, patched
        assert (patched["id"], patched["path"], patched["kernel"]["id"]) == \
            (sid, "renamed.ipynb", kid)
        assert gateway.request("GET", f"/api/sessions/{sid}")[1]["path"] == "renamed.ipynb"

        status, body, _ = gateway.request("DELETE", f"/api/sessions/{sid}")
        assert (status, body) == (204, None)
        assert_error(gateway.request("GET", f"/api/sessions/{sid}"), 404)
        assert sid not in [s["id"] for s in gateway.request("GET", "/api/sessions")[1]]
        assert kid not in kernel_ids(gateway)      # deleting a session stops its kernel
    finally:
        gateway.request("DELETE", f"/api/sessions/{sid}")
        gateway.delete_kernel(kid)


def test_sessions_errors(gateway):
    assert_error(gateway.request("GET", f"/api/sessions/{uuid.uuid4()}"), 404)
    assert_error(gateway.request("DELETE", f"/api/sessions/{uuid.uuid4()}"), 404)
    assert_error(gateway.request("POST", "/api/sessions", {"type": "notebook"}), 400)
    assert_error(gateway.request("POST", "/api/sessions", raw_body=b""), 400)
    assert_error(gateway.request("POST", "/api/sessions", raw_body=b"{bad"), 400)


@pytest.mark.kgw_only
@pytest.mark.parametrize("value", ["-5", "12abc", "99999999999999999999999"])
def test_invalid_content_length_is_400(gateway, value):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall((f"POST /api/kernels HTTP/1.1\r\nHost: x\r\nAuthorization: token "
                   f"{gateway.token}\r\nContent-Length: {value}\r\n\r\n").encode())
        status = s.recv(4096).split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 400"), status


@pytest.mark.kgw_only
def test_stale_runtime_directory_is_removed(gateway_factory, tmp_path):
    """A gateway that died without cleaning up (its .lock free) leaves <runtime>/gw-*/ with a
    directory per kernel; the next gateway on that runtime directory removes it, and leaves a
    directory that is not an instance's alone."""
    rt = tmp_path / "rt"
    stale = rt / "gw-deadbe"
    (stale / "k1").mkdir(parents=True)
    (stale / ".lock").write_text("")
    (stale / "k1" / "connection.json").write_text("{}")
    (stale / "k1" / "k-1").write_text("")
    (rt / "other").mkdir()
    # the fork server's scratch directory, nested; and a directory an older gateway left
    # without its lock (it removed the lock but could not remove the scratch directory)
    (stale / "zygote" / ".ipython" / "profile_default" / "db").mkdir(parents=True)
    (stale / "zygote" / ".ipython" / "profile_default" / "README").write_text("x")
    os.symlink("/etc", stale / "zygote" / "link")  # removed, never followed
    unlocked = rt / "gw-nolock"
    (unlocked / "zygote" / ".ipython").mkdir(parents=True)
    old = time.time() - 3600
    os.utime(unlocked, (old, old))
    young = rt / "gw-young1"  # no lock yet: a gateway starting now; left alone
    young.mkdir()
    for p in (tmp_path, rt):
        os.chmod(p, 0o755)  # sandboxed kernels run as other uids
    gw = gateway_factory("--runtime-dir", str(rt))
    assert not stale.exists(), list(stale.rglob("*"))
    assert not unlocked.exists(), list(unlocked.rglob("*"))
    assert young.is_dir() and os.path.isdir("/etc")
    assert (rt / "other").is_dir()
    assert "removing stale runtime directory" in gw.log()
    mine = [p for p in rt.iterdir() if p.name.startswith("gw-") and p != young]
    assert len(mine) == 1, mine
    deadline = time.monotonic() + 30  # the fork server (where there is one) has written there
    while "fork server: started" in gw.log() and "fork server: ready" not in gw.log():
        assert time.monotonic() < deadline, gw.log()
        time.sleep(0.1)
    stop_gateway(gw)
    assert not mine[0].exists(), list(mine[0].rglob("*"))  # a gateway removes its own
