"""Capacity: kgw knows what a kernel costs in descriptors and refuses a start its open-file
limit could not carry with a 503 and a reason, before anything fails half-way (the fork server
and exec once failed with "Too many open files", answered 500). The gateway runs under a small
RLIMIT_NOFILE (prlimit, with CAP_SYS_RESOURCE out of its bounding set so that it cannot raise
the hard limit again) so that the limit is reached with a couple of dozen kernels.
"""
import os
import re
import shutil
import time

import pytest

import sbxutil as S

pytestmark = [pytest.mark.kgw_only,
              pytest.mark.skipif(not (shutil.which("prlimit") and shutil.which("setpriv")),
                                 reason="needs prlimit and setpriv (util-linux)")]

NOFILE = 500
MOST = 60  # far above what NOFILE fits: the loop ends on a refusal, not here


def limited(nofile):
    return ("prlimit", f"--nofile={nofile}:{nofile}", "setpriv", "--bounding-set=-sys_resource",
            "--")


def metric(gw, name):
    status, body, _ = gw.request("GET", "/metrics")
    assert status == 200
    text = body.decode() if isinstance(body, bytes) else str(body)
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def open_fds(gw):
    return len(os.listdir(f"/proc/{gw.proc.pid}/fd"))  # prlimit and setpriv exec kgw


def start(gw):
    return gw.request("POST", "/api/kernels", {})


@pytest.fixture
def small(gateway_factory):
    # a kernel's own open-file limit must fit under the gateway's hard limit
    gw = gateway_factory("--max-kernels", "200", "--nofile-limit", "256",
                         prefix=limited(NOFILE))
    yield gw
    for k in gw.request("GET", "/api/kernels")[1] or []:
        gw.delete_kernel(k["id"])


def test_start_until_refused_is_503_with_reason_and_kernels_keep_serving(small):
    gw = small
    log = gw.log()
    assert re.search(r"--max-kernels 200: the open-file limit \(500\) fits about \d+ kernels",
                     log), log[-2000:]
    assert metric(gw, "kgw_open_fds_limit") == NOFILE
    assert metric(gw, "kgw_kernel_slots_free") >= 1

    # until three refusals in a row: each refusal the same, nothing half-started
    open_before = open_fds(gw)
    ids, refusals, in_a_row = [], [], 0
    while len(ids) < MOST and in_a_row < 3:
        status, model, _ = start(gw)
        if status == 201:
            ids.append(model["id"])
            in_a_row = 0
        else:
            refusals.append((status, model))
            in_a_row += 1
    assert in_a_row == 3, f"{len(ids)} kernels started under an open-file limit of {NOFILE}"
    assert len(ids) >= 8, f"only {len(ids)} kernels fit {NOFILE} descriptors"
    for status, body in refusals:
        assert status == 503, (status, body)
        assert "open-file limit" in body["message"], body
    # the number held is the arithmetic's: the refused start did not fit (what is open, the
    # reserve and a kernel's budget exceed the limit) and the last accepted one did (one
    # kernel's measured cost less was open then)
    per = metric(gw, "kgw_kernel_fds")
    # (its own count: the metric's is sampled)
    cost = (open_fds(gw) - open_before) / len(ids)  # the pool's kernels gave way meanwhile
    m = re.findall(r"the open-file limit leaves (-?\d+) descriptors for kernels, a kernel needs "
                   r"(\d+)", gw.log())
    assert m, gw.log()[-2000:]
    left, need = int(m[-1][0]), int(m[-1][1])
    print(f"{len(ids)} kernels held, about {cost:.1f} descriptors each; {left} left of a "
          f"budget of {need}")
    assert need == per and left < need, (left, need, per)
    assert left + cost + 2 >= need, (left, cost, need)
    status, body, _ = gw.request("GET", "/api/kernels")
    assert status == 200 and sorted(k["id"] for k in body) == sorted(ids)
    assert all(k["execution_state"] != "dead" for k in body), body

    # the headroom is shown: not ready, no slot free
    status, body, _ = gw.request("GET", "/check_ready", auth=False)
    assert status == 503 and "open-file limit" in body["reason"] and body["kernels_free"] == 0
    assert metric(gw, "kgw_kernel_slots_free") == 0
    assert metric(gw, "kgw_kernel_fd_slots_free") == 0
    assert metric(gw, 'kgw_requests_refused_total{reason="kernel_limit"}') == len(refusals)

    # the kernels it has keep working, clients still connect to them
    for kid in (ids[0], ids[len(ids) // 2], ids[-1]):
        assert S.kcall(gw, kid, "R['x'] = 6 * 7")["x"] == 42

    # kernels gone free their descriptors: a start fits again once a kernel and a client's
    # worth (kgw_kernel_fds) is free: a few kernels of about 9 each (docs/operations.md
    # "Capacity"), less the sessions the calls above left open
    assert 20 <= per <= 40
    for gone in range(1, 8):
        assert gw.delete_kernel(ids.pop()) == 204
        deadline = time.monotonic() + 10  # its process reaped, its sockets closed
        while gw.request("GET", "/check_ready", auth=False)[0] != 200 and \
                time.monotonic() < deadline:
            time.sleep(0.5)
        if gw.request("GET", "/check_ready", auth=False)[0] == 200:
            break
    else:
        pytest.fail("not ready again after seven kernels were deleted")
    status, model, _ = start(gw)
    assert status == 201, (status, model)
    ids.append(model["id"])
    assert S.kcall(gw, model["id"], "R['x'] = 1 + 1")["x"] == 2

    log = gw.log()
    assert "Too many open files" not in log, log[-3000:]
    assert "kernel start refused: the open-file limit leaves" in log
    assert gw.alive()
