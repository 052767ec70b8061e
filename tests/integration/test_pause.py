"""Pausing a kernel (POST /api/kernels/{id}/pause, /resume): its sandbox's processes are frozen
in place (this host: cgroup v1, so SIGSTOP to every process of the kernel's cgroup), its
variables survive, a busy loop makes no progress while paused, missed heartbeats do not kill it,
and new executions are refused (409) until it is resumed. Real sandboxed ipykernels."""
import asyncio
import os
import time

import pytest

import sbxutil as S
from test_channel import connect, ready_client, raises
from test_execute import call, check_stream, execute

pytestmark = [pytest.mark.kgw_only, pytest.mark.needs_sandbox]

HB_MS = 100  # three missed beats would take 0.3 s: the pauses below last much longer


@pytest.fixture(scope="module")
def pgw():
    gw = S.start_sandboxed("--hb-interval-ms", str(HB_MS))
    yield gw
    S.conftest.stop_gateway(gw)


def run(gw, kid, code):
    """The execution's end event (ok) and its stdout."""
    status, events, _ = execute(gw, kid, {"code": code})
    assert status in (200, 201), (status, events)
    end = check_stream(events)
    out = "".join(e.get("text", "") for e in events if e["type"] == "stream")
    assert end["status"] == "ok", events
    return out


def kernel_pids(gw, kid):
    """The host pids of the kernel's processes: those in its pid namespace (read from inside)."""
    ns = run(gw, kid, "import os; print(os.readlink('/proc/self/ns/pid'))").strip()
    assert ns.startswith("pid:["), ns
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{p}/ns/pid") == ns:
                pids.append(int(p))
        except OSError:
            pass
    assert pids, "no process in the kernel's pid namespace"
    return pids


def stat(pid):
    """(state, utime + stime in ticks) of a process, None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return fields[0], int(fields[11]) + int(fields[12])


def cpu(pids):
    return sum(st[1] for st in map(stat, pids) if st)


def post(gw, kid, action):
    return call(gw, "POST", f"/api/kernels/{kid}/{action}")


def refused_by_rpc(gw, kid, client):
    """The /channel RPC's execute of a paused kernel: its error message."""
    async def go():
        return str(await raises(client[0].execute("1"), "RuntimeError"))
    return client[1].run_until_complete(go())


def test_pause_freezes_and_resume_goes_on(pgw):
    kid = S.new_kernel(pgw)
    loop = asyncio.new_event_loop()
    ch = loop.run_until_complete(connect(pgw))
    client = (loop.run_until_complete(ready_client(ch, kid))[1], loop)
    try:
        run(pgw, kid, "x = 41\nimport threading\nn = 0\n"
                      "def spin():\n    global n\n    while True:\n        n += 1\n"
                      "threading.Thread(target=spin, daemon=True).start()")
        pids = kernel_pids(pgw, kid)
        c0 = cpu(pids)
        time.sleep(0.3)
        assert cpu(pids) > c0, "the busy loop made no progress before the pause"

        status, model, _ = post(pgw, kid, "pause")
        assert status == 200, model
        assert model["paused"] is True and model["id"] == kid
        S.wait_for(lambda: all(st is None or st[0] == "T" for st in map(stat, pids)), 5,
                   what="every process of the kernel stopped (state T)")
        assert [st[0] for st in map(stat, pids) if st] == ["T"] * len(pids)
        frozen = cpu(pids)
        time.sleep(HB_MS * 8 / 1000 + 0.5)  # more than three heartbeat intervals
        assert cpu(pids) == frozen, "CPU time went on while paused"
        assert [st[0] for st in map(stat, pids) if st] == ["T"] * len(pids)

        status, model, _ = call(pgw, "GET", f"/api/kernels/{kid}")
        assert status == 200 and model["paused"] is True, model
        assert "heartbeats missed" not in pgw.log()

        # refused while paused, not queued: executions, commands, a second pause
        status, body, _ = execute(pgw, kid, {"code": "x"})
        assert status == 409 and "paused" in body["message"], (status, body)
        status, body, _ = pgw.request("POST", f"/api/kernels/{kid}/commands",
                                      {"argv": ["/bin/true"]})
        assert status == 409 and "paused" in body["message"], (status, body)
        status, body, _ = post(pgw, kid, "pause")
        assert status == 409 and "paused already" in body["message"], body
        status, body, _ = post(pgw, kid, "interrupt")
        assert status == 409 and "paused" in body["message"], body
        assert "paused" in refused_by_rpc(pgw, kid, client)

        status, model, _ = post(pgw, kid, "resume")
        assert status == 200 and model["paused"] is False, model
        S.wait_for(lambda: any(st and st[0] != "T" for st in map(stat, pids)), 5,
                   what="the kernel's processes running again")
        time.sleep(0.3)
        assert cpu(pids) > frozen, "the busy loop did not go on after the resume"
        # its state survived, and the same process runs it
        assert run(pgw, kid, "print(x + 1)").strip() == "42"
        status, body, _ = post(pgw, kid, "resume")
        assert status == 409 and "not paused" in body["message"], body
        status, model, _ = call(pgw, "GET", f"/api/kernels/{kid}")
        assert model["execution_state"] in ("idle", "busy") and model["paused"] is False
    finally:
        loop.run_until_complete(ch.close())
        loop.close()
        pgw.delete_kernel(kid)


def test_delete_and_restart_of_a_paused_kernel(pgw):
    kid = S.new_kernel(pgw)
    run(pgw, kid, "y = 7")
    assert post(pgw, kid, "pause")[0] == 200
    # a restart resumes it first: its new process runs, its variables are gone
    t0 = time.monotonic()
    status, model, _ = post(pgw, kid, "restart")
    assert status == 200 and model["paused"] is False, model
    assert run(pgw, kid, "print('y' in dir())").strip() == "False"
    assert post(pgw, kid, "pause")[0] == 200
    t0 = time.monotonic()
    assert pgw.delete_kernel(kid) == 204
    assert time.monotonic() - t0 < 5, "the DELETE of a paused kernel waited for its grace"
    status, _, _ = call(pgw, "GET", f"/api/kernels/{kid}")
    assert status == 404
    # an unknown kernel: 404, as for every kernel operation
    assert post(pgw, "00000000-0000-0000-0000-000000000000", "pause")[0] == 404
