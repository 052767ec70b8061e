"""Every execution ends with an outcome a client can see: when the kernel dies or is stopped
with requests in flight, a plain Jupyter websocket client gets, for its execute_request, an
iopub error (ename from the taxonomy in docs/protocol.md), an iopub idle and an execute_reply
with status "error" -- before the kernel's "restarting" status -- and the kernel (where it
restarts) works afterwards. Real kernels, real websockets, real limits."""
import asyncio
import os
import signal
import time

import jclient as J
import sbxutil as S
from jclient import run

MiB = 1 << 20


async def outcome_of(c, msg_id, timeout):
    """Everything the client sees for msg_id up to its reply and idle, plus the statuses
    without a parent seen meanwhile (restarting/starting), in arrival order."""
    seen = []
    deadline = time.monotonic() + timeout
    reply = idle = None
    while reply is None or idle is None:
        m = await c.recv(lambda m: m["parent_header"].get("msg_id") == msg_id or
                         (m["channel"] == "iopub" and m["header"]["msg_type"] == "status" and
                          not m["parent_header"]),
                         max(deadline - time.monotonic(), 0.001))
        seen.append(m)
        if m["channel"] == "shell":
            reply = m
        elif S.status_of(m) == "idle" and m["parent_header"].get("msg_id") == msg_id:
            idle = m
    return reply, seen


def check_terminal(reply, seen, ename, words):
    assert reply["content"]["status"] == "error", reply["content"]
    assert reply["content"]["ename"] == ename, reply["content"]
    for w in words:
        assert w in reply["content"]["evalue"], reply["content"]["evalue"]
    errors = [m for m in seen if m["header"]["msg_type"] == "error"]
    assert [e["content"]["ename"] for e in errors] == [ename], errors
    kinds = [(m["header"]["msg_type"], S.status_of(m), bool(m["parent_header"])) for m in seen]
    # the outcome comes before any "restarting" status
    first_restart = next((i for i, k in enumerate(kinds)
                          if k[1] in ("restarting", "dead") and not k[2]), len(kinds))
    last_own = max(i for i, k in enumerate(kinds) if k[2])
    assert last_own < first_restart, kinds
    # exactly one idle and one reply for the request
    assert sum(1 for m in seen if m["channel"] == "shell") == 1
    assert sum(1 for k in kinds if k[1] == "idle" and k[2]) == 1, kinds


def provoke(gw, code, ename, words, *, after=None, restarts=True, timeout=30):
    kid = S.new_kernel(gw)

    async def go():
        c = await J.connect(gw, kid)
        await S.aexec(c, "pass")                   # the containment check first
        msg_id = await c.request("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})
        await c.recv(lambda m: S.status_of(m) == "busy" and
                     m["parent_header"].get("msg_id") == msg_id, 20)
        t0 = time.monotonic()
        if after:
            await asyncio.get_running_loop().run_in_executor(None, after, kid)
        reply, seen = await outcome_of(c, msg_id, timeout)
        took = time.monotonic() - t0
        ex = None
        if restarts:
            await c.wait_ready(timeout=60)
            ex = await c.execute("1+1", timeout=30)
        await c.close()
        return reply, seen, took, ex

    reply, seen, took, ex = run(go(), timeout + 120)
    check_terminal(reply, seen, ename, words)
    if restarts:
        assert ex.status == "ok", S.errors_of(ex)
        assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "2"
    return took


def test_out_of_memory(gateway_factory):
    gw = gateway_factory("--mem-limit", str(256 * MiB), "--autorestart")
    S.assert_sandboxed_gateway(gw)
    took = provoke(gw, "b = []\nwhile True:\n    b.append(bytearray(16 << 20))",
                   "OutOfMemory", ["out of memory", "256 MiB"])
    assert took < 30


def test_exit(gateway_factory):
    gw = gateway_factory("--autorestart")
    provoke(gw, "import time, os\ntime.sleep(0.5)\nos._exit(3)", "KernelDied",
            ["exited with status 3"])


def test_segfault(gateway_factory):
    gw = gateway_factory("--autorestart")
    provoke(gw, "import os, signal, time\ntime.sleep(0.5)\nos.kill(os.getpid(), signal.SIGSEGV)",
            "KernelKilled", ["signal 11", "SEGV"])


def test_restart_mid_execution(gateway_factory):
    gw = gateway_factory()

    def restart(kid):
        time.sleep(0.3)
        assert gw.request("POST", f"/api/kernels/{kid}/restart")[0] == 200

    took = provoke(gw, "import time\ntime.sleep(100)", "KernelRestarted",
                   ["restarted by a client"], after=restart)
    assert took < 10


def test_shutdown_mid_execution(gateway_factory):
    gw = gateway_factory()

    def delete(kid):
        time.sleep(0.3)
        assert gw.request("DELETE", f"/api/kernels/{kid}")[0] == 204

    provoke(gw, "import time\ntime.sleep(100)", "KernelShutdown", ["shut down by a client"],
            after=delete, restarts=False)


def test_queued_requests_all_end(gateway_factory):
    """Requests queued behind the one running end too, each exactly once."""
    gw = gateway_factory("--autorestart")
    kid = S.new_kernel(gw)

    async def go():
        c = await J.connect(gw, kid)
        await S.aexec(c, "pass")
        body = {"silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": False}
        first = await c.request("execute_request",
                                dict(body, code="import os, time\ntime.sleep(1)\nos._exit(7)"))
        queued = [await c.request("execute_request", dict(body, code=f"{i}")) for i in range(3)]
        # messages that are not requests get no answer from a kernel, nor from the gateway
        comm = await c.request("comm_open", {"comm_id": "kgw-test", "target_name": "nobody",
                                             "data": {}})
        got = {}
        for mid in [first] + queued:
            got[mid] = await outcome_of(c, mid, 30)
        await c.wait_ready(timeout=60)
        await c.drain(0.5)
        stray = [m for m in c.backlog if m["parent_header"].get("msg_id") == comm and
                 m["channel"] == "shell"]
        await c.close()
        return first, queued, got, stray

    first, queued, got, stray = run(go(), 120)
    for mid in [first] + queued:
        reply, seen = got[mid]
        check_terminal(reply, seen, "KernelDied", ["status 7"])
    assert not stray, stray


def test_gateway_shutdown_ends_executions(gateway_factory):
    gw = gateway_factory("--drain-timeout", "0")
    kid = S.new_kernel(gw)

    async def go():
        c = await J.connect(gw, kid)
        await S.aexec(c, "pass")
        msg_id = await c.request("execute_request", {
            "code": "import time\ntime.sleep(100)", "silent": False, "store_history": True,
            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        await c.recv(lambda m: S.status_of(m) == "busy" and
                     m["parent_header"].get("msg_id") == msg_id, 20)
        t0 = time.monotonic()
        os.kill(gw.proc.pid, signal.SIGTERM)
        reply, seen = await outcome_of(c, msg_id, 10)
        return reply, seen, time.monotonic() - t0

    reply, seen, took = run(go(), 60)
    check_terminal(reply, seen, "KernelShutdown", ["gateway is shutting down"])
    assert took < 1.0, took


def test_channel_client_gets_the_outcome(gateway_factory):
    """The /channel RPC face: a client waiting on get_shell_msg / get_iopub_msg receives the
    gateway's answer for a kernel that died mid-execution."""
    import sys
    from conftest import REPO
    sys.path.insert(0, os.path.join(REPO, "examples"))
    from channel_client import Channel

    gw = gateway_factory("--autorestart")
    kid = S.new_kernel(gw)

    async def go():
        ch = await Channel.connect(gw.ws_url, gw.token)
        try:
            km = await ch.mkm.get_kernel(kid)
            client = await km.client()
            await client.start_channels()
            await client.wait_for_ready(timeout=30)
            msg_id = await client.execute("import os, time\ntime.sleep(0.5)\nos._exit(5)",
                                          silent=False, store_history=True, allow_stdin=False)
            reply = await client.get_shell_msg(timeout=30)
            iopub = []
            while not (iopub and iopub[-1]["msg_type"] == "status" and
                       iopub[-1]["content"]["execution_state"] == "idle"):
                iopub.append(await client.get_iopub_msg(timeout=30))
            return msg_id, reply, iopub
        finally:
            await ch.close()

    msg_id, reply, iopub = run(go(), 90)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert (reply["content"]["status"], reply["content"]["ename"]) == ("error", "KernelDied")
    assert "status 5" in reply["content"]["evalue"]
    errors = [m for m in iopub if m["msg_type"] == "error"]
    assert [e["content"]["ename"] for e in errors] == ["KernelDied"]
    assert all(m["parent_header"]["msg_id"] == msg_id for m in iopub)


CUT_STREAM = "import sys\nsys.stdout.write('a' * {n})\nsys.stdout.flush()"
CUT_RICH = ("from IPython.display import display\n"
            "display({{'text/html': '<p>' + 'b' * {n} + '</p>', 'text/plain': 'big'}}, raw=True)")


def test_output_cap_cuts_within_the_message(gateway_factory):
    """The output message that crosses --output-cap is cut to it rather than dropped whole: a
    first stream message three times the cap shows its text up to the cap and a notice naming
    the limit; a first rich output over the cap becomes a text/plain notice. On the Jupyter
    websocket and in the execute API's events alike."""
    cap = 1 * MiB
    gw = gateway_factory("--output-cap", str(cap))
    kid = S.new_kernel(gw)
    notice = f"[output truncated: the execution's output exceeded its limit of {cap} bytes]"

    def check_text(text):
        body, _, tail = text.partition("\n")
        assert tail == notice + "\n", tail[:200]
        assert set(body) == {"a"} and cap - 4096 <= len(body) <= cap, len(body)

    async def go():
        c = await J.connect(gw, kid)
        try:
            await S.aexec(c, "pass")                   # the containment check first
            stream = await c.execute(CUT_STREAM.format(n=3 * cap), timeout=60)
            rich = await c.execute(CUT_RICH.format(n=2 * cap), timeout=60)
            return stream, rich
        finally:
            await c.close()

    stream, rich = run(go(), 150)
    assert stream.status == "ok" and rich.status == "ok", S.errors_of(stream) + S.errors_of(rich)
    check_text(stream.stdout)
    assert "output limit" in "".join(m["content"]["text"] for m in stream.of_type("stream")
                                     if m["content"]["name"] == "stderr")
    shown = [m["content"] for m in rich.of_type("display_data")]
    assert [d["data"] for d in shown] == [{"text/plain": notice}], str(shown)[:300]

    # the execute API: the same cut in its events, and output_limit as the end status
    for code, kind in ((CUT_STREAM, "stream"), (CUT_RICH, "display")):
        status, doc, _ = gw.request("POST", f"/api/kernels/{kid}/execute",
                                    body={"code": code.format(n=3 * cap)},
                                    headers={"Accept": "application/json"})
        assert status in (200, 201), (status, str(doc)[:300])
        ev = doc["events"]
        assert ev[-1]["type"] == "end" and ev[-1]["status"] == "output_limit", ev[-1]
        assert f"{cap} bytes" in ev[-1]["cause"], ev[-1]
        if kind == "stream":
            check_text("".join(e["text"] for e in ev
                               if e["type"] == "stream" and e["name"] == "stdout"))
        else:
            shown = [e["data"] for e in ev if e["type"] == "display"]
            assert shown == [{"text/plain": notice}], str(shown)[:300]


def test_printing_on_past_the_cap_is_interrupted(gateway_factory):
    """An execution that goes on printing past --output-cap is interrupted (its output would
    only be thrown away): an endless print loop ends within seconds with output_limit, not at
    its wall-time limit, and the kernel keeps its state; a cell whose last output crosses the
    cap is not interrupted, nor is the next one."""
    gw = gateway_factory("--output-cap", str(MiB))
    kid = S.new_kernel(gw)

    def run_code(code, timeout=120):
        status, doc, _ = gw.request("POST", f"/api/kernels/{kid}/execute",
                                    body={"code": code, "timeout": timeout},
                                    headers={"Accept": "application/json"})
        assert status in (200, 201), (status, str(doc)[:300])
        return doc["events"]

    assert run_code("kgw_state = 7")[-1]["status"] == "ok"
    t0 = time.monotonic()
    # paced: a kernel printing flat out can batch one stream message over
    # --max-kernel-message-bytes, which restarts it (test_kernel_cannot_balloon_gateway_memory)
    ev = run_code("import time\nwhile True:\n    print('x' * 1000)\n    time.sleep(0.0005)")
    took = time.monotonic() - t0
    assert ev[-1]["status"] == "output_limit", ev[-1]
    assert took < 30, f"the flood ran {took:.1f} s"
    errors = [e for e in ev if e["type"] == "error"]
    assert errors and errors[0]["ename"] == "KeyboardInterrupt", errors
    ev = run_code(CUT_STREAM.format(n=3 * MiB) + "\nimport time; time.sleep(0.5)\n" + "kgw_state")
    assert ev[-1]["status"] == "output_limit" and not [e for e in ev if e["type"] == "error"]
    ev = run_code("import time; time.sleep(1); kgw_state * 6")
    assert ev[-1]["status"] == "ok", ev[-1]
    assert [e["data"]["text/plain"] for e in ev if e["type"] == "result"] == ["42"]


def test_oversize_message_on_stdin_restarts_the_kernel(gateway_factory):
    """A kernel message over --max-kernel-message-bytes on a session's own socket (here an
    input_request with a 2 MiB prompt on stdin, against 1 MiB): libzmq refuses it and drops
    that connection; the gateway connects the session's socket again, the execution ends with
    OutputLimit naming the channel and the limit, and after the restart the same websocket
    session works on every channel, stdin included."""
    gw = gateway_factory("--max-kernel-message-bytes", str(MiB))
    kid = S.new_kernel(gw)

    def idle_again():
        deadline = time.monotonic() + 60
        while gw.request("GET", f"/api/kernels/{kid}")[1].get("execution_state") != "idle":
            assert time.monotonic() < deadline, "the kernel did not come back"
            time.sleep(0.2)

    async def go():
        c = await J.connect(gw, kid)
        try:
            await S.aexec(c, "pass")                   # the containment check first
            msg_id = await c.request("execute_request", {
                "code": "input('p' * (2 << 20))", "silent": False, "store_history": True,
                "user_expressions": {}, "allow_stdin": True, "stop_on_error": True})
            reply, seen = await outcome_of(c, msg_id, 60)
            await asyncio.get_running_loop().run_in_executor(None, idle_again)
            await c.wait_ready(timeout=60)
            msg_id = await c.request("execute_request", {
                "code": 'x = input("q? ")\nprint("got", x)', "silent": False,
                "store_history": True, "user_expressions": {}, "allow_stdin": True,
                "stop_on_error": True})
            req = await c.recv(lambda m: m["channel"] == "stdin", 30)
            await c.send(c.msg("input_reply", {"value": "forty two"}, channel="stdin",
                               parent=req["header"]))
            after, iopub = await c.collect(msg_id, timeout=30)
            return reply, seen, req, after, iopub
        finally:
            await c.close()

    reply, seen, req, after, iopub = run(go(), 200)
    check_terminal(reply, seen, "OutputLimit",
                   ["on stdin", f"limit of {MiB} bytes", "--max-kernel-message-bytes"])
    assert req["content"]["prompt"] == "q? ", req["content"]
    assert after["content"]["status"] == "ok", after["content"]
    assert "".join(m["content"]["text"] for m in iopub
                   if m["header"]["msg_type"] == "stream") == "got forty two\n"


# The kernel drops the idle status of the execution that runs this (as its PUB socket drops
# what its queue cannot hold when the gateway's I/O thread falls behind on a loaded host).
DROP_OWN_IDLE = r'''
k = get_ipython().kernel
publish = k._publish_status
def drop_next_idle(status, *a, **kw):
    if status == "idle" and not getattr(k, "idle_dropped", False):
        k.idle_dropped = True
        return None
    return publish(status, *a, **kw)
k._publish_status = drop_next_idle
print("patched")
'''


def test_lost_idle_after_the_reply_is_made(gateway_factory):
    """An execution whose iopub idle never comes (the kernel's PUB dropped it) still ends: the
    gateway makes the idle a while after the reply, with a notice, so the websocket client,
    the kernel's state and the execute API do not stay busy for good."""
    gw = gateway_factory()
    kid = S.new_kernel(gw)

    async def go():
        c = await J.connect(gw, kid)
        await c.wait_ready(timeout=60)
        t0 = time.monotonic()
        reply, iopub = await c.collect(await c.request("execute_request", {
            "code": DROP_OWN_IDLE, "silent": False}), timeout=30)
        took = time.monotonic() - t0
        ex = await c.execute("1+1", timeout=30)   # the kernel's own idles come again
        await c.close()
        return reply, iopub, took, ex

    reply, iopub, took, ex = run(go(), 120)
    assert reply["content"]["status"] == "ok", reply["content"]
    kinds = [m["header"]["msg_type"] for m in iopub]
    assert kinds[-1] == "status" and "patched\n" in [m["content"].get("text") for m in iopub]
    notices = [m["content"]["text"] for m in iopub if m["header"]["msg_type"] == "stream" and
               "idle status did not follow its reply" in m["content"].get("text", "")]
    assert len(notices) == 1, kinds
    assert 1.5 < took < 20, took
    assert ex.status == "ok" and ex.of_type("execute_result")[0]["content"]["data"][
        "text/plain"] == "2"
    st, body, _ = gw.request("GET", f"/api/kernels/{kid}")
    assert st == 200 and body["execution_state"] == "idle", body
