"""Graceful drain on SIGTERM: readiness goes 503 at once and new kernels are refused (503 with
Retry-After), the executions already running finish and their output and replies reach their
websockets, then every websocket is closed with 1001 (going away), the kernels are shut down
and kgw exits 0 with nothing left behind: no kernel process, cgroup or runtime directory.
--drain-timeout, or a second signal, cuts the wait short."""
import asyncio
import os
import re
import signal
import sys
import time

import pytest
import websockets.exceptions

from conftest import REPO, _own_cgroup_dirs
import jclient as J
from jclient import run

sys.path.insert(0, os.path.join(REPO, "examples"))
from channel_client import Channel, RemoteError  # noqa: E402

pytestmark = [pytest.mark.kgw_only, pytest.mark.needs_sandbox]

# prints a line every 0.4 s, n times, then "done"
TICKS = "import time\nfor i in range({n}):\n    print('tick', i, flush=True)\n    time.sleep(0.4)\n" \
        "print('done', flush=True)"


def instance_of(gw):
    """(runtime directory, instance name gw-XXXXXX) of a running gateway: the lock it holds."""
    fds = f"/proc/{gw.proc.pid}/fd"
    for fd in os.listdir(fds):
        try:
            target = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        m = re.fullmatch(r"(.*/(gw-[A-Za-z0-9]+))/\.lock", target)
        if m:
            return m.group(1), m.group(2)
    raise AssertionError("the gateway holds no runtime directory lock")


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def processes_in(inst):
    """{pid: start time} of the processes in the instance's cgroups (kernels, fork server)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                cg = f.read()
        except OSError:
            continue
        if f"/kgw-{inst}/" in cg:
            found[int(pid)] = start_time(pid)
    return found


def cgroups_of(inst):
    return [os.path.join(base, n) for base in _own_cgroup_dirs() if os.path.isdir(base)
            for n in os.listdir(base) if n.startswith(f"kgw-{inst}")]


def running(pid, st):
    """The process that had start time st still runs (a zombie waiting for its reaper does
    not: killed processes the gateway left to init are reaped by it a moment later)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == st and fields[0] != "Z"


def assert_nothing_left(gw, rundir, inst, procs):
    deadline = time.monotonic() + 5  # SIGKILLed processes may take a moment on a loaded host
    while (alive := [pid for pid, st in procs.items() if running(pid, st)]) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"processes left: {alive}"
    assert not processes_in(inst)
    assert not cgroups_of(inst), cgroups_of(inst)
    assert not os.path.exists(rundir), os.listdir(rundir)


async def http(gw, method, path, body=None, auth=True):
    return await asyncio.to_thread(gw.request, method, path, body, None, auth)


async def closed_with(c, timeout):
    """Reads until the client's websocket closes (what arrives goes to its backlog); returns
    the close code."""
    deadline = time.monotonic() + timeout
    with pytest.raises(websockets.exceptions.ConnectionClosed):
        while True:
            c.backlog.append(await c._recv_frame(max(deadline - time.monotonic(), 0.01)))
    return c.ws.close_code


async def wait_running(c, msg_id):
    """Until the execution's first output (kept for later reads): it surely runs."""
    m = await c.recv(lambda m: m["channel"] == "iopub" and m["header"]["msg_type"] == "stream"
                     and m["parent_header"].get("msg_id") == msg_id, timeout=30)
    c.backlog.append(m)


async def execute(c, code):
    return await c.request("execute_request", {
        "code": code, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": True})


def wait_exit(gw, timeout):
    t0 = time.monotonic()
    rc = gw.proc.wait(timeout=timeout)
    return rc, time.monotonic() - t0


def test_sigterm_lets_running_executions_finish(gateway_factory):
    gw = gateway_factory("--drain-timeout", "30")
    k1, k2 = gw.start_kernel(), gw.start_kernel()
    rundir, inst = instance_of(gw)

    async def go():
        c1, c2 = await J.connect(gw, k1["id"]), await J.connect(gw, k2["id"], "v1")
        ch = await Channel.connect(gw.ws_url, gw.token)
        id1, id2 = await execute(c1, TICKS.format(n=10)), await execute(c2, TICKS.format(n=12))
        await wait_running(c1, id1)
        await wait_running(c2, id2)
        procs = processes_in(inst)
        assert len(procs) >= 2, procs
        gw.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()

        # at once: not ready, no new kernels or sessions that would start one; still alive
        status, body, _ = await http(gw, "GET", "/check_ready", auth=False)
        assert status == 503 and body["status"] == "unavailable", body
        assert "draining" in body["reason"]
        status, body, hdrs = await http(gw, "POST", "/api/kernels", {})
        assert status == 503 and int(hdrs["Retry-After"]) > 0, (status, body)
        assert "shutting down" in body["message"]
        status, body, hdrs = await http(gw, "POST", "/api/sessions",
                                        {"path": "a.ipynb", "type": "notebook",
                                         "kernel": {"name": "python3"}})
        assert status == 503 and int(hdrs["Retry-After"]) > 0, (status, body)
        with pytest.raises(RemoteError) as e:
            await ch.mkm.start_kernel()
        assert "shutting down" in str(e.value)
        assert (await http(gw, "GET", "/check_liveness", auth=False))[0] == 200
        status, body, _ = await http(gw, "GET", "/api/status")
        assert status == 200 and body["pool"] == {}, body  # pooled kernels are gone
        assert time.monotonic() - t0 < 3.5  # all while the executions still run

        # the executions finish: every line of output and the replies arrive
        for c, msg_id, n in ((c1, id1, 10), (c2, id2, 12)):
            reply, iopub = await c.collect(msg_id, timeout=30)
            assert reply["content"]["status"] == "ok", reply["content"]
            out = "".join(m["content"]["text"] for m in iopub
                          if m["header"]["msg_type"] == "stream")
            assert out == "".join(f"tick {i}\n" for i in range(n)) + "done\n", out
        # then every websocket goes away with 1001
        assert await closed_with(c1, 15) == 1001
        assert await closed_with(c2, 15) == 1001
        await asyncio.wait_for(ch.reader, 15)
        assert ch.ws.close_code == 1001
        return procs

    procs = run(go(), timeout=90)
    rc, waited = wait_exit(gw, 30)
    assert rc == 0, gw.log()
    assert_nothing_left(gw, rundir, inst, procs)
    log = gw.log()
    for line in ("drain: SIGTERM: accepting no new kernels", "drain: no execution running",
                 "drain: closing", "drain: done"):
        assert line in log, line


def test_drain_timeout_cuts_a_long_execution(gateway_factory):
    gw = gateway_factory("--drain-timeout", "2")
    k = gw.start_kernel()
    rundir, inst = instance_of(gw)

    async def go():
        c = await J.connect(gw, k["id"])
        msg_id = await execute(c, TICKS.format(n=100))  # 40 s
        await wait_running(c, msg_id)
        procs = processes_in(inst)
        gw.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert (await http(gw, "GET", "/check_ready", auth=False))[0] == 503
        # output keeps coming until the timeout, then the websocket closes
        assert await closed_with(c, 20) == 1001
        cut = time.monotonic() - t0
        ticks = [m for m in c.backlog if m["header"]["msg_type"] == "stream"
                 and m["parent_header"].get("msg_id") == msg_id]
        assert len(ticks) >= 4, ticks  # it ran on during the 2 s
        # it was cut: the gateway answers for the kernel, before the close
        replies = [m for m in c.backlog if m["channel"] == "shell"]
        assert [(r["content"]["status"], r["content"]["ename"]) for r in replies] == \
            [("error", "KernelShutdown")], replies
        assert 1.5 < cut < 6, cut
        return procs

    procs = run(go(), timeout=60)
    rc, waited = wait_exit(gw, 15)
    assert rc == 0, gw.log()
    assert_nothing_left(gw, rundir, inst, procs)
    assert "--drain-timeout of 2 s reached with 1 execution running" in gw.log()


@pytest.mark.parametrize("second", ["SIGTERM", "SIGINT"])
def test_second_signal_stops_waiting(gateway_factory, second):
    gw = gateway_factory("--drain-timeout", "120")
    k = gw.start_kernel()
    rundir, inst = instance_of(gw)

    async def go():
        c = await J.connect(gw, k["id"])
        msg_id = await execute(c, TICKS.format(n=100))
        await wait_running(c, msg_id)
        procs = processes_in(inst)
        gw.proc.send_signal(signal.SIGTERM)
        assert (await http(gw, "GET", "/check_ready", auth=False))[0] == 503
        await asyncio.sleep(1)
        assert gw.alive()  # waiting for the execution
        gw.proc.send_signal(getattr(signal, second))
        t0 = time.monotonic()
        assert await closed_with(c, 10) == 1001
        assert time.monotonic() - t0 < 3
        return procs

    procs = run(go(), timeout=60)
    rc, waited = wait_exit(gw, 15)
    assert rc == 0, gw.log()
    assert waited < 8, waited
    assert_nothing_left(gw, rundir, inst, procs)
    assert f"drain: {second} again: not waiting for the 1 execution running" in gw.log()


def test_sigterm_without_executions_exits_at_once(gateway_factory):
    gw = gateway_factory("--drain-timeout", "120")
    k = gw.start_kernel()
    rundir, inst = instance_of(gw)

    async def go():
        c = await J.connect(gw, k["id"])
        await c.wait_ready()
        procs = processes_in(inst)
        gw.proc.send_signal(signal.SIGTERM)
        assert await closed_with(c, 10) == 1001
        return procs

    t0 = time.monotonic()
    procs = run(go(), timeout=60)
    rc, _ = wait_exit(gw, 15)
    assert rc == 0, gw.log()
    assert time.monotonic() - t0 < 10
    assert_nothing_left(gw, rundir, inst, procs)
