"""Kernel websocket /api/kernels/{id}/channels, legacy and v1.kernel.websocket.jupyter.org.

Expectations were checked against jupyter_server 1.23 (KGW_REFERENCE=jupyter_server);
tests marked kgw_only check what kgw does beyond it.
"""
import asyncio
import json
import os
import time
import uuid

import pytest
import websockets.exceptions

import jclient as J
from jclient import run

# Over the websocket message limit (jupyter_server/tornado: 10 MiB, kgw default: 64 MiB).
OVERSIZED_FRAME = int(os.environ.get("KGW_TEST_OVERSIZED_FRAME", 100 << 20))

COMM_TARGET = """
def _kgw_echo_target(comm, open_msg):
    comm.send({"opened": open_msg["content"]["data"]})
    @comm.on_msg
    def _recv(msg):
        comm.send({"echo": msg["content"]["data"], "nbuf": len(msg["buffers"])},
                  buffers=msg["buffers"])
get_ipython().kernel.comm_manager.register_target("kgw_echo", _kgw_echo_target)
"""


@pytest.fixture(params=J.PROTOCOLS)
def proto(request):
    return request.param


@pytest.fixture(scope="module")
def mkernel(gateway):
    """A kernel shared by the tests that leave it as they found it."""
    model = gateway.start_kernel()
    yield model
    gateway.delete_kernel(model["id"])


def status_of(m):
    return m["header"]["msg_type"] == "status" and m["content"]["execution_state"]


def assert_frames(c):
    """Legacy: text frames exactly for messages without buffers. v1: decode_v1 checked binary."""
    if c.protocol == "legacy":
        assert all(binary == (nbuf > 0) for binary, _, nbuf in c.frames), c.frames


# ------------------------------------------------------------------ execution

def test_first_frame_execute(gateway, kernel, proto):
    """The first frame, sent right after the handshake to a fresh kernel, is served."""
    async def go():
        c = await J.connect(gateway, kernel["id"], proto)
        ex = await c.execute('print("hi")')
        assert ex.reply["header"]["msg_type"] == "execute_reply"
        assert ex.reply["channel"] == "shell"
        assert ex.status == "ok" and isinstance(ex.reply["content"]["execution_count"], int)
        assert ex.types == ["status", "execute_input", "stream", "status"]
        assert [status_of(m) for m in ex.of_type("status")] == ["busy", "idle"]
        assert ex.of_type("execute_input")[0]["content"]["code"] == 'print("hi")'
        assert ex.of_type("stream")[0]["content"] == {"name": "stdout", "text": "hi\n"}
        for m in ex.iopub + [ex.reply]:
            assert m["parent_header"]["msg_id"] == ex.msg_id
            assert m["parent_header"]["session"] == c.session
        assert_frames(c)
        await c.close()
    run(go())


def test_execute_result_and_error(gateway, mkernel, proto):
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto)
        ex = await c.execute("1+1")
        assert ex.status == "ok"
        (res,) = ex.of_type("execute_result")
        assert res["content"]["data"]["text/plain"] == "2"
        assert res["content"]["execution_count"] == ex.reply["content"]["execution_count"]

        # stop_on_error would make ipykernel abort what the next case sends to this shared
        # kernel if it arrives within its abort window after the error
        ex = await c.execute("1/0", stop_on_error=False)
        assert ex.status == "error"
        assert ex.reply["content"]["ename"] == "ZeroDivisionError"
        (err,) = ex.of_type("error")
        assert err["content"]["ename"] == "ZeroDivisionError"
        assert isinstance(err["content"]["traceback"], list) and err["content"]["traceback"]
        assert_frames(c)
        await c.close()
    run(go())


def test_stdin_input(gateway, mkernel, proto):
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto)
        msg_id = await c.request("execute_request", {
            "code": 'x = input("q? ")\nprint("got", x)', "silent": False, "store_history": True,
            "user_expressions": {}, "allow_stdin": True, "stop_on_error": True})
        req = await c.recv(lambda m: m["channel"] == "stdin")
        assert req["header"]["msg_type"] == "input_request"
        assert req["parent_header"]["msg_id"] == msg_id
        assert req["content"]["prompt"] == "q? " and req["content"]["password"] is False
        await c.send(c.msg("input_reply", {"value": "forty two"}, channel="stdin",
                           parent=req["header"]))
        reply, iopub = await c.collect(msg_id)
        assert reply["content"]["status"] == "ok"
        out = [m["content"]["text"] for m in iopub if m["header"]["msg_type"] == "stream"]
        assert "".join(out) == "got forty two\n"
        await c.close()
    run(go())


def test_two_clients(gateway, kernel, proto):
    """Both clients get the iopub of an execution; only the requester gets the reply."""
    async def go():
        a = await J.connect(gateway, kernel["id"], proto)
        b = await J.connect(gateway, kernel["id"], proto)
        # jupyter_server subscribes a new connection to iopub only after the handshake; a
        # round trip on b proves its iopub is live before a executes
        await b.wait_ready()
        assert gateway.request("GET", f"/api/kernels/{kernel['id']}")[1]["connections"] == 2
        ex = await a.execute("print('both')")
        assert ex.stdout == "both\n"
        mine = lambda m: m["parent_header"].get("msg_id") == ex.msg_id  # noqa: E731
        got = [await b.recv(lambda m: mine(m) and m["channel"] == "iopub") for _ in range(4)]
        assert [m["header"]["msg_type"] for m in got] == ex.types
        assert got[2]["content"]["text"] == "both\n"
        late = await b.drain(1.0)
        assert not [m for m in late + b.backlog if mine(m) and m["channel"] != "iopub"]
        await a.close()
        await b.close()
    run(go())


# ------------------------------------------------------------------ comms and requests

def test_comm_roundtrip_with_buffers(gateway, mkernel, proto):
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto)
        assert (await c.execute(COMM_TARGET)).status == "ok"
        comm_id = uuid.uuid4().hex
        is_comm = lambda m: m["header"]["msg_type"] == "comm_msg" and \
            m["content"]["comm_id"] == comm_id  # noqa: E731
        await c.request("comm_open", {"comm_id": comm_id, "target_name": "kgw_echo",
                                      "data": {"hello": 1}})
        opened = await c.recv(is_comm)
        assert opened["channel"] == "iopub"
        assert opened["content"]["data"] == {"opened": {"hello": 1}}
        assert opened["buffers"] == []

        payload = bytes(range(256)) + b"\x00kgw\xff"
        await c.request("comm_msg", {"comm_id": comm_id, "data": {"x": [1, 2]}},
                        buffers=[payload, b"second"])
        echo = await c.recv(is_comm)
        assert echo["content"]["data"] == {"echo": {"x": [1, 2]}, "nbuf": 2}
        assert echo["buffers"] == [payload, b"second"]
        assert echo["_binary"]

        msg_id = await c.request("comm_info_request", {"target_name": "kgw_echo"})
        info = await c.reply(msg_id)
        assert info["content"]["comms"][comm_id] == {"target_name": "kgw_echo"}
        await c.request("comm_close", {"comm_id": comm_id, "data": {}})
        assert (await c.execute("pass")).status == "ok"
        assert_frames(c)
        await c.close()
    run(go())


@pytest.mark.parametrize("channel", ["shell", "control"])
def test_kernel_info(gateway, mkernel, proto, channel):
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto)
        msg_id = await c.request("kernel_info_request", {}, channel=channel)
        r = await c.reply(msg_id, channel)
        assert r["header"]["msg_type"] == "kernel_info_reply"
        assert r["content"]["status"] == "ok"
        assert r["content"]["protocol_version"].startswith("5.")
        assert r["content"]["language_info"]["name"] == "python"
        await c.close()
    run(go())


def test_shell_requests(gateway, mkernel, proto):
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto)

        async def ask(msg_type, content):
            reply, _ = await c.collect(await c.request(msg_type, content))
            assert reply["header"]["msg_type"] == msg_type.replace("_request", "_reply")
            assert reply["content"]["status"] in ("ok", "incomplete", "complete")
            return reply["content"]

        r = await ask("complete_request", {"code": "impo", "cursor_pos": 4})
        assert "import" in r["matches"] and (r["cursor_start"], r["cursor_end"]) == (0, 4)
        r = await ask("inspect_request", {"code": "len", "cursor_pos": 3, "detail_level": 0})
        assert r["found"] is True and "text/plain" in r["data"]
        r = await ask("is_complete_request", {"code": "for i in x:"})
        assert r["status"] == "incomplete"
        r = await ask("is_complete_request", {"code": "x = 1"})
        assert r["status"] == "complete"
        tag = uuid.uuid4().hex
        assert (await c.execute(f"'{tag}'")).status == "ok"
        r = await ask("history_request", {"output": False, "raw": True, "session": 0,
                                          "hist_access_type": "range", "start": 1,
                                          "stop": 10000})
        assert any(tag in entry[2] for entry in r["history"]), r["history"]
        await c.close()
    run(go())


# ------------------------------------------------------------------ handshake

def test_connect_without_session_id(gateway, mkernel, proto):
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto, session_id=None)
        assert (await c.execute("print(6*7)")).stdout == "42\n"
        await c.close()
    run(go())


@pytest.mark.parametrize("offered", [None, [J.V1]])
def test_unknown_kernel_is_404(gateway, offered):
    assert J.handshake_status(gateway, str(uuid.uuid4()), subprotocols=offered) == 404


def test_ws_auth(gateway, mkernel):
    async def go():
        # jupyter_server: 403, kgw: 401
        assert J.handshake_status(gateway, mkernel["id"], auth_header=False) in (401, 403)
        assert J.handshake_status(gateway, mkernel["id"], auth_header=False,
                                  query="token=wrong") in (401, 403)
        c = await J.connect(gateway, mkernel["id"], auth_header=False,
                            query=f"token={gateway.token}")
        assert (await c.execute("print('tok')")).stdout == "tok\n"
        await c.close()
    run(go())


@pytest.mark.kgw_only
def test_ws_no_token_is_401(gateway, mkernel):
    assert J.handshake_status(gateway, mkernel["id"], auth_header=False) == 401


@pytest.mark.parametrize("offered,selected", [
    ([J.V1], J.V1), (None, None), (["foo"], None), (["foo", J.V1], J.V1),
    (["v2.kernel.websocket.jupyter.org"], None), (["foo", "bar.baz"], None),
    (["v2.kernel.websocket.jupyter.org", J.V1], J.V1)],
    ids=["v1", "nothing", "unknown-only", "unknown+v1", "future-only", "two-unknown",
         "future+v1"])
def test_subprotocol_selection(gateway, mkernel, offered, selected):
    """As jupyter_server: v1 when offered, otherwise none selected and the legacy protocol."""
    async def go():
        proto = "v1" if selected == J.V1 else "legacy"
        c = await J.connect(gateway, mkernel["id"], proto, subprotocols=offered)
        assert c.ws.subprotocol == selected
        assert (await c.execute("print('p')")).stdout == "p\n"
        await c.close()
    run(go())


def test_header_variants_and_sessions(gateway, mkernel, proto):
    """subshell_id null, version 5.2, float date are accepted and passed through untouched;
    kernel messages keep the kernel's header.session."""
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto)
        m = c.msg("execute_request", {"code": "print('odd')", "silent": False},
                  header={"subshell_id": None, "version": "5.2", "date": time.time()})
        await c.send(m)
        reply, iopub = await c.collect(m["msg_id"])
        assert reply["content"]["status"] == "ok"
        assert reply["parent_header"] == m["header"]
        sessions = {x["header"]["session"] for x in iopub + [reply]}
        assert len(sessions) == 1 and c.session not in sessions
        await c.close()
    run(go())


# ------------------------------------------------------------------ kernel lifecycle

def test_restart_while_connected(gateway, kernel, proto):
    """jupyter_server sends no status on a REST restart; the connection stays usable once zmq
    has reconnected (until then jupyter_server may drop requests and iopub messages)."""
    async def go():
        c = await J.connect(gateway, kernel["id"], proto)
        assert (await c.execute("kgw_marker = 1")).status == "ok"
        status, model, _ = gateway.request("POST", f"/api/kernels/{kernel['id']}/restart")
        assert status == 200 and model["id"] == kernel["id"]
        await c.wait_ready(20)
        ex = await c.execute("print('kgw_marker' in globals())")
        assert ex.stdout == "False\n"
        assert ex.reply["content"]["execution_count"] == 1
        await c.close()
    run(go())


@pytest.mark.kgw_only
def test_restart_sends_restarting_status(gateway, kernel, proto):
    async def go():
        c = await J.connect(gateway, kernel["id"], proto)
        assert gateway.request("POST", f"/api/kernels/{kernel['id']}/restart")[0] == 200
        m = await c.recv(lambda m: status_of(m) in ("restarting", "starting"))
        assert m["channel"] == "iopub"
        assert (await c.execute("print(1)", timeout=20)).stdout == "1\n"
        await c.close()
    run(go())


@pytest.mark.kgw_only
def test_connection_hears_the_kernel_state_first(gateway, kernel, proto):
    """A new connection gets the kernel's execution_state before it asks anything (parent {},
    the gateway's session), so a client whose first kernel_info_request a proxy lost still
    learns that the kernel is idle (or busy: the state is the kernel's, not a fixed one)."""
    async def go():
        c = await J.connect(gateway, kernel["id"], proto)
        await c.wait_ready(20)
        await c.close()
        c = await J.connect(gateway, kernel["id"], proto)
        first = await c.recv(timeout=5)
        assert status_of(first) == "idle" and first["parent_header"] == {}, first
        assert first["channel"] == "iopub" and first["header"]["session"] != c.session
        msg_id = await c.request("execute_request", {"code": "import time; time.sleep(3)",
                                                      "silent": False})
        await c.recv(lambda m: status_of(m) == "busy" and
                     m["parent_header"].get("msg_id") == msg_id)
        other = await J.connect(gateway, kernel["id"], proto)
        assert status_of(await other.recv(timeout=5)) == "busy"
        await c.reply(msg_id, timeout=20)
        await other.close()
        await c.close()
    run(go())


@pytest.mark.kgw_only
def test_start_probes_stay_private(gateway, kernel, proto):
    """The kernel_info_request the gateway sends to learn that a (re)started kernel is ready is
    its own: a client connected meanwhile sees none of the kernel's answers to it."""
    async def go():
        c = await J.connect(gateway, kernel["id"], proto)
        assert gateway.request("POST", f"/api/kernels/{kernel['id']}/restart")[0] == 200
        assert (await c.execute("print(1)", timeout=20)).stdout == "1\n"
        got = c.backlog + await c.drain(0.5)
        probes = [m for m in got if m["parent_header"].get("msg_type") == "kernel_info_request"
                  and m["parent_header"].get("session") != c.session]
        assert not probes, probes
        await c.close()
    run(go())


def test_interrupt(gateway, kernel, proto):
    async def go():
        c = await J.connect(gateway, kernel["id"], proto)
        # stop_on_error False: otherwise ipykernel aborts a request that reaches it before it
        # has ended its abort window after the error (a race under load)
        msg_id = await c.request("execute_request", {"code": "import time; time.sleep(30)",
                                                     "silent": False, "stop_on_error": False})
        await c.recv(lambda m: m["header"]["msg_type"] == "execute_input" and
                     m["parent_header"]["msg_id"] == msg_id)
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        assert gateway.request("POST", f"/api/kernels/{kernel['id']}/interrupt")[0] == 204
        reply, iopub = await c.collect(msg_id, timeout=5)
        assert time.monotonic() - t0 < 5
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert [m["content"]["ename"] for m in iopub if m["header"]["msg_type"] == "error"] \
            == ["KeyboardInterrupt"]
        assert (await c.execute("print('after')")).stdout == "after\n"
        await c.close()
    run(go())


def test_kernel_death_autorestart(gateway, kernel, proto):
    """jupyter_server: iopub status "restarting" (no parent), then the kernel works again."""
    async def go():
        c = await J.connect(gateway, kernel["id"], proto)
        await c.request("execute_request", {"code": "import os; os._exit(1)", "silent": False})
        m = await c.recv(lambda m: status_of(m) == "restarting", timeout=20)
        assert m["channel"] == "iopub" and m["parent_header"] == {}
        await c.wait_ready(30)
        ex = await c.execute("print('back')")
        assert ex.stdout == "back\n" and ex.reply["content"]["execution_count"] == 1
        status, model, _ = gateway.request("GET", f"/api/kernels/{kernel['id']}")
        assert status == 200 and model["execution_state"] in ("idle", "busy")
        await c.close()
    run(go(), timeout=90)


# ------------------------------------------------------------------ robustness

def test_unknown_channel_ignored(gateway, mkernel, proto):
    async def go():
        c = await J.connect(gateway, mkernel["id"], proto)
        bogus = c.msg("kernel_info_request", channel="nope")
        await c.send(bogus)
        assert (await c.execute("print('still')")).stdout == "still\n"
        assert not [m for m in c.backlog
                    if m["parent_header"].get("msg_id") == bogus["msg_id"]]
        await c.close()
    run(go())


def test_legacy_message_without_channel_goes_to_shell(gateway, mkernel):
    async def go():
        c = await J.connect(gateway, mkernel["id"], "legacy")
        m = c.msg("kernel_info_request")
        del m["channel"]
        await c.send_raw(json.dumps({k: m[k] for k in ("header", "parent_header",
                                                          "metadata", "content")}))
        r = await c.reply(m["msg_id"], "shell")
        assert r["header"]["msg_type"] == "kernel_info_reply"
        await c.close()
    run(go())


MALFORMED = {
    "legacy": ["{not json", b"\x00\x00\x00\x02\x00\x00\x00\x0c\xff\xff\xff\xff"],
    "v1": [b"\x01\x00", (6).to_bytes(8, "little") + (10**9).to_bytes(8, "little") * 6],
}


@pytest.mark.parametrize("which", [0, 1])
def test_malformed_frame_does_not_hurt_others(gateway, kernel, proto, which):
    """The offending connection may be closed; the server and other connections live on."""
    async def go():
        good = await J.connect(gateway, kernel["id"], proto)
        bad = await J.connect(gateway, kernel["id"], proto)
        await bad.send_raw(MALFORMED[proto][which])
        await bad.drain(0.3)
        assert (await good.execute("print('ok')")).stdout == "ok\n"
        assert gateway.request("GET", "/api")[0] == 200
        fresh = await J.connect(gateway, kernel["id"], proto)
        assert (await fresh.execute("print('new')")).stdout == "new\n"
        for c in (good, bad, fresh):
            await c.close()
    run(go())
    assert gateway.alive()


def test_oversized_frame_closed_1009(gateway, kernel, proto):
    async def go():
        big = await J.connect(gateway, kernel["id"], proto)
        other = await J.connect(gateway, kernel["id"], proto)
        m = big.msg("comm_msg", {"comm_id": "none", "data": {}}, buffers=[b"\0" * OVERSIZED_FRAME])
        with pytest.raises(websockets.exceptions.ConnectionClosed):
            await big.send(m)
            await big.recv(lambda m: False, timeout=10)
        assert big.ws.close_code == 1009
        assert (await other.execute("print('fine')")).stdout == "fine\n"
        await other.close()
    run(go())
    assert gateway.request("GET", "/api")[0] == 200


def test_reconnect_replays_missed_messages(gateway, kernel, proto):
    """A client that drops and reconnects with the same session_id gets what was sent while it
    was away: the reply and the output of a cell that finished meanwhile (jupyter_server
    buffers the same way; JupyterLab relies on it after a network blip)."""
    async def go():
        sid = uuid.uuid4().hex
        c = await J.connect(gateway, kernel["id"], proto, session_id=sid)
        await c.execute("1")  # the session is live
        msg_id = await c.request("execute_request", {
            "code": "import time; time.sleep(1.5); print('late')", "silent": False})
        await c.close()
        await asyncio.sleep(2.5)  # the cell finishes while nobody is connected
        c2 = await J.connect(gateway, kernel["id"], proto, session_id=sid)
        reply, iopub = await c2.collect(msg_id, timeout=10)
        assert reply["content"]["status"] == "ok"
        texts = [m["content"]["text"] for m in iopub if m["header"]["msg_type"] == "stream"]
        assert "".join(texts) == "late\n", texts
        await c2.close()
    run(go())


def test_replay_of_disconnected_sessions_is_bounded(gateway_factory):
    """What disconnected sessions keep for replay is bounded for all of them together
    (--max-replay-bytes): past it a session stops buffering (its client reconnects to live
    output only) instead of the gateway's memory growing with every client that went away."""
    gw = gateway_factory("--max-replay-bytes=65536")

    async def go():
        k = gw.start_kernel()["id"]
        sid = uuid.uuid4().hex
        c = await J.connect(gw, k, "legacy", session_id=sid)
        await c.execute("1")
        msg_id = await c.request("execute_request", {
            "code": "import time; time.sleep(1)\nfor i in range(400): print('x' * 500)",
            "silent": False})
        await c.close()
        await asyncio.sleep(4)  # about 200 KB of output while nobody is connected
        c2 = await J.connect(gw, k, "legacy", session_id=sid)
        try:
            reply, iopub = await c2.collect(msg_id, timeout=5)
            got = reply is not None
        except Exception:
            got = False
        assert not got, "the whole cell was replayed past the replay limit"
        # the connection itself works
        assert (await c2.execute("print('live')")).stdout == "live\n"
        await c2.close()
        gw.delete_kernel(k)
    run(go())
    assert "not replaying it" in gw.log()


@pytest.mark.kgw_only
def test_client_that_does_not_read_is_disconnected(gateway_factory):
    """A client that stops reading while its kernel writes output: once more than
    --max-ws-queue-bytes wait for it, it is closed with 1008 and its queue freed."""
    gw = gateway_factory("--max-ws-queue-bytes=65536")

    async def go():
        k = gw.start_kernel()["id"]
        # max_queue=1, read_limit=4096: once one message waits, websockets stops reading the
        # socket, so the gateway's writes pile up (TCP buffers first, then the queue)
        session = uuid.uuid4().hex
        slow = await J.K.connect(gw.ws_url, gw.token, k, "legacy", session,
                                 max_queue=1, read_limit=4096, close_timeout=2)
        await slow.send(J.K.encode(J.make_msg("execute_request", {
            "code": "for i in range(2000): print('x' * 16384, flush=True)", "silent": False},
            session=session), "legacy"))
        deadline = time.monotonic() + 120
        while "is not reading fast enough" not in gw.log():
            assert time.monotonic() < deadline, "the client that does not read is not cut off"
            await asyncio.sleep(0.2)
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(slow.recv(), 30)
        assert closed.value.code == 1008, closed.value
        assert "too slow" in closed.value.reason, closed.value.reason
        # the gateway goes on serving, and the kernel is deleted as usual
        assert gw.request("GET", f"/api/kernels/{k}")[0] == 200
        assert gw.delete_kernel(k) == 204
    run(go(), timeout=300)
