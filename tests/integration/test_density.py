"""Density: what an idle kernel and a connected websocket cost the gateway in descriptors
(docs/operations.md "Capacity" has the table), counted from the gateway's /proc/PID/fd over N
kernels and divided by N; and that the heartbeats, one sweep over all kernels, still find a
hung kernel.

The descriptors are counted twice: every entry of /proc/PID/fd, and the open files behind them
(kcmp(2): entries that are copies of one open file count once; an event loop that watched
copies of what it is given, as lws's did, would cost the entries, not the files). Targets: an
idle kernel at most 12, a websocket at most 8 more, both ways.
"""
import asyncio
import ctypes
import os
import re
import time

import pytest

import jclient as J
import sbxutil as S

pytestmark = pytest.mark.kgw_only

N_KERNELS = 20
N_WS = 10
PER_KERNEL_MAX = 12
PER_WS_MAX = 8

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_KCMP = 312  # x86_64
_KCMP_FILE = 0


def _same_file(pid, a, b):
    r = _libc.syscall(_SYS_KCMP, pid, pid, _KCMP_FILE, a, b)
    if r < 0:
        raise OSError(ctypes.get_errno(), "kcmp")
    return r == 0


def descriptors(pid):
    """(entries in /proc/PID/fd, distinct open files behind them)"""
    groups = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        groups.setdefault(target, []).append(int(name))
    entries = distinct = 0
    for fds in groups.values():
        entries += len(fds)
        seen = []
        for fd in fds:
            try:
                if not any(_same_file(pid, fd, s) for s in seen):
                    seen.append(fd)
            except OSError:  # closed meanwhile
                pass
        distinct += len(seen)
    return entries, distinct


def steady(pid, what, timeout=60):
    """The count once it has not changed for a second (kernels and the pool settle)."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = descriptors(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            return now
        time.sleep(0.2)
    pytest.fail(f"the gateway's descriptors did not settle ({what}): {last}")


@pytest.fixture(scope="module")
def kcmp_works():
    try:
        _same_file(os.getpid(), 0, 0)
    except OSError as e:
        pytest.skip(f"kcmp(2) not available: {e}")


def all_idle(gw, ids):
    status, body, _ = gw.request("GET", "/api/kernels")
    states = {k["id"]: k["execution_state"] for k in body}
    return all(states.get(k) == "idle" for k in ids)


def execute(gw, kid):
    status, body, _ = gw.request("POST", f"/api/kernels/{kid}/execute", {"code": "6 * 7"})
    assert status == 201 and b'"status":"ok"' in body, (status, body)


def test_idle_kernel_and_websocket_descriptors(gateway_factory, kcmp_works):
    gw = gateway_factory("--pool", "python3=0", "--max-kernels", "100")
    pid = gw.proc.pid
    # what a first kernel opens once for all (the fork server, its first use) is not a kernel's
    warm = gw.start_kernel()["id"]
    execute(gw, warm)
    base = steady(pid, "one kernel")

    ids = [gw.start_kernel()["id"] for _ in range(N_KERNELS)]
    # idle after an execution each (its accounting reads the kernel's cgroup: nothing held)
    for kid in ids:
        execute(gw, kid)
    S.wait_for(lambda: all_idle(gw, ids), 120, what="all kernels idle")
    kernels = steady(pid, f"{N_KERNELS} kernels")
    per_entry = (kernels[0] - base[0]) / N_KERNELS
    per_file = (kernels[1] - base[1]) / N_KERNELS
    print(f"an idle kernel: {per_entry:.2f} fd entries, {per_file:.2f} open files")
    assert per_file <= PER_KERNEL_MAX and per_entry <= PER_KERNEL_MAX, (base, kernels)

    # a restart opens the control socket (its shutdown_request) and closes it with the old
    # process: the kernel is idle again at an idle kernel's cost
    assert gw.request("POST", f"/api/kernels/{ids[0]}/restart")[0] == 200
    S.wait_for(lambda: all_idle(gw, ids), 120, what="the restarted kernel idle")
    after = steady(pid, "after a restart")
    assert after[1] <= kernels[1], (kernels, after)

    async def connect_all():
        return [await J.connect(gw, kid) for kid in ids[:N_WS]]

    loop = asyncio.new_event_loop()
    try:
        clients = loop.run_until_complete(connect_all())
        try:
            # each session works (its sockets are the ones counted)
            for c in clients[:2]:
                loop.run_until_complete(c.wait_ready(timeout=60))
            conns = steady(pid, f"{N_WS} websockets")
        finally:
            for c in clients:
                loop.run_until_complete(c.close())
    finally:
        loop.close()
    ws_entry = (conns[0] - kernels[0]) / N_WS
    ws_file = (conns[1] - kernels[1]) / N_WS
    print(f"a websocket: {ws_entry:.2f} fd entries, {ws_file:.2f} open files")
    assert ws_file <= PER_WS_MAX and ws_entry <= PER_WS_MAX, (kernels, conns)

    # the kernels still work
    for kid in (warm, ids[0], ids[-1]):
        assert S.kcall(gw, kid, "R['x'] = 6 * 7")["x"] == 42
    for kid in [warm, *ids]:
        gw.delete_kernel(kid)


def deaths(gw, cause):
    status, body, _ = gw.request("GET", "/metrics")
    text = body.decode() if isinstance(body, bytes) else str(body)
    m = re.search(rf'^kgw_kernel_deaths_total{{[^}}]*cause="{cause}"[^}}]*}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_stopped_kernel_misses_its_heartbeats_and_is_killed(gateway_factory):
    """The heartbeat sweep pings every running kernel: one that stops (SIGSTOP, its heartbeat
    thread with it) misses --hb-misses of them and is killed as hung, its cause "heartbeat",
    while a kernel next to it is left alone."""
    gw = gateway_factory("--pool", "python3=0", "--hb-interval-ms", "300", "--autorestart=false")
    hung, fine = S.new_kernel(gw), S.new_kernel(gw)
    assert S.kcall(gw, fine, "R['x'] = 1")["x"] == 1
    before = deaths(gw, "heartbeat")
    # the kernel stops itself: its execution ends only with the kernel
    stop = S.Background(lambda: gw.request(
        "POST", f"/api/kernels/{hung}/execute",
        {"code": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)"}))
    stop.start()
    S.wait_for(lambda: deaths(gw, "heartbeat") > before, 60, what="a heartbeat death")
    S.wait_for(lambda: gw.request("GET", f"/api/kernels/{hung}")[1].get("execution_state")
               in ("dead", None), 30, what="the hung kernel dead")
    assert "heartbeats missed; treating it as hung" in gw.log()
    stop.value(60)
    assert S.kcall(gw, fine, "R['x'] = 2")["x"] == 2
    for kid in (hung, fine):
        gw.delete_kernel(kid)


def test_heartbeat_socket_is_renewed_and_still_finds_a_hung_kernel(gateway_factory):
    """libzmq keeps a pipe's emptied chunk of 256 messages: the heartbeat socket is opened anew
    every 200 pings, so an idle kernel's heartbeat never holds a second chunk (docs/operations.md
    "Capacity"). After the renewal, pings still reach both kernels: neither is killed, and one
    that then stops is still found hung."""
    gw = gateway_factory("--pool", "python3=0", "--hb-interval-ms", "150", "--autorestart=false")
    hung, fine = S.new_kernel(gw), S.new_kernel(gw)
    for kid in (hung, fine):
        S.wait_for(lambda: f"kernel={kid}: heartbeat socket opened anew after 200 pings"
                   in gw.log(), 90, what=f"a renewed heartbeat socket for {kid}")
    assert deaths(gw, "heartbeat") == 0
    assert S.kcall(gw, fine, "R['x'] = 1")["x"] == 1
    stop = S.Background(lambda: gw.request(
        "POST", f"/api/kernels/{hung}/execute",
        {"code": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)"}))
    stop.start()
    S.wait_for(lambda: deaths(gw, "heartbeat") >= 1, 60, what="a heartbeat death")
    S.wait_for(lambda: gw.request("GET", f"/api/kernels/{hung}")[1].get("execution_state")
               in ("dead", None), 30, what="the hung kernel dead")
    stop.value(60)
    assert S.kcall(gw, fine, "R['x'] = 2")["x"] == 2
    for kid in (hung, fine):
        gw.delete_kernel(kid)
