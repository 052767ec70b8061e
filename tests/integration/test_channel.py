"""The /channel RPC websocket with real kernels: the call flow of a code-interpreter backend,
every method of the allowlist, and what happens to calls outside it."""
import asyncio
import json
import os
import sys
import time

import pytest
import websockets

from conftest import REPO
import jclient as J
from jclient import run

sys.path.insert(0, os.path.join(REPO, "examples"))
from channel_client import Channel, RemoteError, run_cell  # noqa: E402

MSG_KEYS = {"header", "msg_id", "msg_type", "parent_header", "metadata", "content", "buffers"}


async def connect(gw):
    return await Channel.connect(gw.ws_url, gw.token)


async def ready_client(ch, kernel_id):
    km = await ch.mkm.get_kernel(kernel_id)
    client = await km.client()
    await client.start_channels()
    await client.wait_for_ready(timeout=30)
    return km, client


async def raises(coro, type_):
    with pytest.raises(RemoteError) as ei:
        await coro
    assert ei.value.type == type_, ei.value
    return ei.value


def test_code_interpreter_flow(gateway, kernel):
    """The sequence a code-interpreter backend sends, answered as jupyter_client would."""
    async def go():
        ch = await connect(gateway)
        try:
            ids = await ch.mkm.list_kernel_ids()
            assert kernel["id"] in ids
            km = await ch.mkm.get_kernel(kernel["id"])
            assert km.type == "kernel_manager" and km.id
            assert await km.is_alive() is True
            await ch.register_activity(kernel["id"])
            client = await km.client()
            assert client.type == "client"
            assert await client.start_channels() is None
            assert await client.wait_for_ready(timeout=15.0) is None
            msg_id = await client.execute("print(6*7)\n6*7", silent=False, store_history=True,
                                          allow_stdin=False)
            assert isinstance(msg_id, str) and msg_id
            seen = []
            while True:
                m = await client.get_iopub_msg(timeout=30)
                assert set(m) >= MSG_KEYS, m
                assert m["header"]["msg_id"] == m["msg_id"]
                assert m["header"]["msg_type"] == m["msg_type"]
                assert m["parent_header"]["msg_id"] == msg_id
                seen.append(m)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
            types = [m["msg_type"] for m in seen]
            assert types[0] == "status" and seen[0]["content"]["execution_state"] == "busy"
            assert "execute_input" in types
            stream = [m for m in seen if m["msg_type"] == "stream"]
            assert stream and stream[0]["content"]["text"] == "42\n"
            result = [m for m in seen if m["msg_type"] == "execute_result"]
            assert result[0]["content"]["data"]["text/plain"] == "42"
            reply = await client.get_shell_msg(timeout=30)
            assert reply["msg_type"] == "execute_reply"
            assert reply["parent_header"]["msg_id"] == msg_id
            assert reply["content"]["status"] == "ok"
        finally:
            await ch.close()
    run(go())


def test_start_kernel_returns_its_id_and_shutdown_removes_it(gateway):
    async def go():
        ch = await connect(gateway)
        try:
            kid = await ch.mkm.start_kernel(kernel_name="python3", env={"KERNEL_X": "1"})
            assert kid in await ch.mkm.list_kernel_ids()
            status, model, _ = gateway.request("GET", f"/api/kernels/{kid}")
            assert status == 200 and model["execution_state"] != "starting"
            km = await ch.mkm.get_kernel(kid)
            _, client = await ready_client(ch, kid)
            status, _ = await run_cell(client, "import os; print(os.environ['KERNEL_X'])",
                                       out=None)
            assert status == "ok"
            assert await ch.mkm.shutdown_kernel(kid) is None
            assert kid not in await ch.mkm.list_kernel_ids()
            assert await km.is_alive() is False
            await raises(client.execute("1"), "RuntimeError")
            await raises(ch.mkm.get_kernel(kid), "KeyError")
        finally:
            await ch.close()
    run(go(), timeout=120)


def test_start_errors_match_rest(gateway_factory):
    """REST and RPC refuse a start alike: one table (gateway/kops.c) gives both the message."""
    gw = gateway_factory("--max-kernels=1")

    async def go():
        ch = await connect(gw)
        try:
            status, body, _ = gw.request("POST", "/api/kernels", {"name": "no-such-spec"})
            assert status == 404, body
            e = await raises(ch.mkm.start_kernel(kernel_name="no-such-spec"), "KeyError")
            assert e.message == body["message"] == 'No such kernel spec "no-such-spec"', e
            status, body, _ = gw.request("POST", "/api/kernels", {"workspace": "not-an-id"})
            assert status == 400, body
            e = await raises(ch.mkm.start_kernel(workspace="not-an-id"), "ValueError")
            assert e.message == body["message"] == '"workspace" must be a workspace id', e
            kid = await ch.mkm.start_kernel()
            try:
                status, body, _ = gw.request("POST", "/api/kernels", {})
                assert status == 503 and body["message"] == "kernel limit reached (1)", body
                e = await raises(ch.mkm.start_kernel(), "RuntimeError")
                assert e.message == body["message"], e
            finally:
                await ch.mkm.shutdown_kernel(kid)
        finally:
            await ch.close()
    run(go(), timeout=120)


@pytest.mark.needs_sandbox
def test_start_kernel_errors(gateway):
    async def go():
        ch = await connect(gateway)
        try:
            await raises(ch.mkm.start_kernel(kernel_name="no-such-spec"), "KeyError")
            await raises(ch.mkm.start_kernel(workspace="00000000-0000-0000-0000-000000000000"),
                         "KeyError")
            await raises(ch.mkm.start_kernel(limits={"memory": 1 << 49}), "ValueError")
            await raises(ch.mkm.start_kernel(limits={"bogus": 1}), "ValueError")
            await raises(ch.mkm.start_kernel(env={"PATH": "/tmp"}), "ValueError")
            await raises(ch.mkm.start_kernel("python3"), "TypeError")  # keyword-only
        finally:
            await ch.close()
    run(go())


def test_shared_workspace_through_rpc(gateway):
    async def go():
        ch = await connect(gateway)
        a = b = None
        try:
            a = await ch.mkm.start_kernel()
            status, model, _ = gateway.request("GET", f"/api/kernels/{a}")
            b = await ch.mkm.start_kernel(workspace=model["workspace"])
            status, model_b, _ = gateway.request("GET", f"/api/kernels/{b}")
            assert model_b["workspace"] == model["workspace"]
        finally:
            for k in (a, b):
                if k:
                    await ch.mkm.shutdown_kernel(k)
            await ch.close()
    run(go(), timeout=120)


@pytest.mark.parametrize("method", ["set_trait", "__dir__", "__class__", "_private",
                                    "kernel_manager_class", "client.execute", "", "getattr",
                                    "__init__", "start_kernel ", "Start_Kernel"])
def test_methods_outside_the_allowlist_are_refused(gateway, method):
    async def go():
        ch = await connect(gateway)
        try:
            e = await raises(ch.call("multi_kernel_manager", "", method,
                                     "kernel_manager_class", "payload.X"),
                             "AttributeError")
            assert "set_trait" not in e.message or method == "set_trait"
            # the connection still works
            assert isinstance(await ch.mkm.list_kernel_ids(), list)
        finally:
            await ch.close()
    run(go())
    assert gateway.alive()


def test_set_trait_on_every_object_type(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            km, client = await ready_client(ch, kernel["id"])
            for ref in (ch.mkm, km, client):
                await raises(ref.set_trait("kernel_manager_class", "payload.X"),
                             "AttributeError")
            # methods of another object type do not exist on this one
            await raises(km.execute("1"), "AttributeError")
            await raises(client.shutdown_kernel(), "AttributeError")
            await raises(ch.mkm.is_alive(), "AttributeError")
        finally:
            await ch.close()
    run(go())


def test_bad_arguments_are_type_and_value_errors(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, client = await ready_client(ch, kernel["id"])
            await raises(client.execute(123), "TypeError")
            await raises(client.execute("1", bogus=True), "TypeError")
            await raises(client.execute(), "TypeError")
            await raises(client.execute("1", silent="yes"), "TypeError")
            await raises(client.execute("1", code="2"), "TypeError")
            await raises(client.get_iopub_msg(timeout=-1), "ValueError")
            await raises(client.get_iopub_msg(timeout="1"), "TypeError")
            await raises(client.history(hist_access_type="everything"), "ValueError")
            await raises(client.execute("x" * (1024 * 1024 + 1)), "ValueError")
            await raises(ch.mkm.get_kernel({"id": "x"}), "TypeError")
        finally:
            await ch.close()
    run(go())


def test_references_belong_to_their_connection(gateway, kernel):
    async def go():
        a = await connect(gateway)
        b = await connect(gateway)
        try:
            km, client = await ready_client(a, kernel["id"])
            # b never obtained these references
            await raises(b.call("kernel_manager", km.id, "is_alive"), "KeyError")
            await raises(b.call("client", client.id, "execute", "1"), "KeyError")
            await raises(a.call("client", "made-up-id", "execute", "1"), "KeyError")
            # a's references work, and die with a's connection; the kernel stays
            assert await km.is_alive() is True
        finally:
            await a.close()
            await b.close()
        c = await connect(gateway)
        try:
            await raises(c.call("client", client.id, "kernel_info"), "KeyError")
            assert kernel["id"] in await c.mkm.list_kernel_ids()
        finally:
            await c.close()
    run(go())


def test_repeated_violations_close_the_connection_1008(gateway):
    async def go():
        ch = await connect(gateway)
        codes = []
        try:
            for i in range(30):
                try:
                    await ch.call("multi_kernel_manager", "", "set_trait", "a", "b")
                except RemoteError:
                    pass
        except (ConnectionError, websockets.ConnectionClosed):
            pass
        try:
            await asyncio.wait_for(ch.ws.wait_closed(), 10)
        finally:
            codes.append(ch.ws.close_code)
        return codes[0]
    assert run(go()) == 1008
    assert gateway.alive()


def test_malformed_messages_get_no_answer_and_count_as_violations(gateway):
    async def go():
        ch = await connect(gateway)
        bad = ["not json", "[]", "{}", json.dumps({"message_type": "call_request"}),
               json.dumps({"message_type": "rm -rf", "request_id": "x"}),
               '{"message_type": "call_request", "request_id": "a", "request_id": "b"}',
               "[" * 100000]
        for b in bad:
            await ch.send_raw(b)
        # still answering
        assert isinstance(await ch.mkm.list_kernel_ids(), list)
        for b in bad[:3]:  # the 10th refusal closes the connection
            await ch.send_raw(b)
        await asyncio.wait_for(ch.ws.wait_closed(), 10)
        return ch.ws.close_code
    assert run(go()) == 1008
    assert gateway.alive()


def test_oversized_message_closes_1009(gateway):
    async def go():
        ch = await connect(gateway)
        await ch.send_raw(json.dumps({"message_type": "call_request", "request_id": "x",
                                      "args": ["a" * (5 * 1024 * 1024)]}))
        await asyncio.wait_for(ch.ws.wait_closed(), 10)
        return ch.ws.close_code
    assert run(go()) == 1009
    assert gateway.alive()


def test_channel_needs_the_key_and_a_good_origin(gateway):
    assert J.handshake_status(gateway, None, path="/channel", auth_header=False) == 401
    assert J.handshake_status(gateway, None, path="/channel?token=wrong", auth_header=False) == 401
    assert J.handshake_status(gateway, None, path="/channel",
                              headers=["Origin: https://evil.example"]) == 403
    assert J.handshake_status(gateway, None, path="/channel") == 101


def test_get_msg_timeouts_are_empty_and_do_not_block_other_calls(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, client = await ready_client(ch, kernel["id"])
            t0 = time.monotonic()
            await raises(client.get_iopub_msg(timeout=0), "Empty")
            await raises(client.get_stdin_msg(timeout=0.3), "Empty")
            assert 0.25 < time.monotonic() - t0 < 5
            # a long wait pending; other calls on the same connection are answered meanwhile
            waiting = asyncio.ensure_future(client.get_shell_msg(timeout=5))
            t0 = time.monotonic()
            for _ in range(20):
                await ch.mkm.list_kernel_ids()
            assert time.monotonic() - t0 < 2
            assert not waiting.done()
            msg_id = await client.kernel_info()
            reply = await waiting  # the pending get_shell_msg gets the reply
            assert reply["msg_type"] == "kernel_info_reply"
            assert reply["parent_header"]["msg_id"] == msg_id
        finally:
            await ch.close()
    run(go())


def test_shell_requests_of_the_client(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, client = await ready_client(ch, kernel["id"])

            async def reply_to(msg_id):
                while True:
                    m = await client.get_shell_msg(timeout=30)
                    if m["parent_header"]["msg_id"] == msg_id:
                        return m

            m = await reply_to(await client.complete("import o", 8))
            assert m["msg_type"] == "complete_reply" and "os" in m["content"]["matches"]
            m = await reply_to(await client.complete("import o"))  # cursor_pos None: the end
            assert "os" in m["content"]["matches"]
            m = await reply_to(await client.inspect("len", 3, 0))
            assert m["msg_type"] == "inspect_reply" and m["content"]["found"] is True
            m = await reply_to(await client.is_complete("for i in x:"))
            assert m["content"]["status"] == "incomplete"
            m = await reply_to(await client.kernel_info())
            assert m["content"]["language_info"]["name"] == "python"
            m = await reply_to(await client.comm_info())
            assert m["msg_type"] == "comm_info_reply"
            await run_cell(client, "a_value = 1", out=None)
            m = await reply_to(await client.history(hist_access_type="tail", n=5))
            assert m["msg_type"] == "history_reply"
        finally:
            await ch.close()
    run(go())


def test_input_round_trip(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, client = await ready_client(ch, kernel["id"])
            msg_id = await client.execute("print('got', input('name? '))", allow_stdin=True)
            req = await client.get_stdin_msg(timeout=30)
            assert req["msg_type"] == "input_request"
            assert req["content"]["prompt"] == "name? "
            assert await client.input("kgw") is None
            out = ""
            while True:
                m = await client.get_iopub_msg(timeout=30)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                if m["msg_type"] == "stream":
                    out += m["content"]["text"]
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
            assert out == "got kgw\n"
        finally:
            await ch.close()
    run(go())


def test_interrupt_and_restart(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            km, client = await ready_client(ch, kernel["id"])
            await run_cell(client, "survivor = 41", out=None)
            # stop_on_error False: no abort window for the next request (ipykernel)
            msg_id = await client.execute("import time; time.sleep(60)", stop_on_error=False)
            # wait for it to start, then interrupt through the kernel manager
            while True:
                m = await client.get_iopub_msg(timeout=30)
                if m["msg_type"] == "execute_input":
                    break
            await asyncio.sleep(0.3)
            assert await km.interrupt_kernel() is None
            errors = []
            while True:
                m = await client.get_iopub_msg(timeout=30)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                if m["msg_type"] == "error":
                    errors.append(m["content"]["ename"])
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
            assert errors == ["KeyboardInterrupt"]
            status, _ = await run_cell(client, "survivor + 1", out=None)
            assert status == "ok"
            t0 = time.monotonic()
            assert await km.restart_kernel() is None
            assert await km.is_alive() is True
            await client.wait_for_ready(timeout=30)
            status, outputs = await run_cell(client, "'survivor' in globals()", out=None)
            result = [m for m in outputs if m["msg_type"] == "execute_result"]
            assert result[0]["content"]["data"]["text/plain"] == "False"
            assert time.monotonic() - t0 < 30
        finally:
            await ch.close()
    run(go(), timeout=120)


def test_two_clients_on_one_kernel_both_see_iopub(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, c1 = await ready_client(ch, kernel["id"])
            _, c2 = await ready_client(ch, kernel["id"])
            assert c1.id != c2.id
            msg_id = await c1.execute("print('hello both')")
            for c in (c1, c2):
                texts = []
                while True:
                    m = await c.get_iopub_msg(timeout=30)
                    if m["parent_header"].get("msg_id") != msg_id:
                        continue
                    if m["msg_type"] == "stream":
                        texts.append(m["content"]["text"])
                    if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                        break
                assert texts == ["hello both\n"]
            # the shell reply goes to the client that asked only
            m = await c1.get_shell_msg(timeout=30)
            assert m["parent_header"]["msg_id"] == msg_id
            await raises(c2.get_shell_msg(timeout=0.3), "Empty")
        finally:
            await ch.close()
    run(go())


def test_stop_channels_stops_collecting(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, client = await ready_client(ch, kernel["id"])
            await client.stop_channels()
            await client.execute("print(1)")
            await asyncio.sleep(1)
            await raises(client.get_iopub_msg(timeout=0.2), "Empty")
        finally:
            await ch.close()
    run(go())


def test_shutdown_during_a_pending_get_fails_it(gateway):
    async def go():
        ch = await connect(gateway)
        try:
            kid = await ch.mkm.start_kernel()
            _, client = await ready_client(ch, kid)

            async def drain():
                while True:  # the kernel's last messages, then the failure
                    await client.get_iopub_msg(timeout=60)
            waiting = asyncio.ensure_future(drain())
            await asyncio.sleep(0.2)
            await ch.mkm.shutdown_kernel(kid)
            with pytest.raises(RemoteError) as ei:
                await asyncio.wait_for(waiting, 20)
            assert ei.value.type == "RuntimeError"
        finally:
            await ch.close()
    run(go(), timeout=90)


def test_many_pending_calls_are_bounded(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, client = await ready_client(ch, kernel["id"])
            waits = [asyncio.ensure_future(client.get_stdin_msg(timeout=3)) for _ in range(80)]
            results = await asyncio.gather(*waits, return_exceptions=True)
            types = [r.type for r in results if isinstance(r, RemoteError)]
            assert types.count("RuntimeError") >= 16  # over the limit: refused at once
            assert types.count("Empty") >= 32         # the others time out normally
        finally:
            await ch.close()
    run(go())


def test_example_channel_client(gateway):
    import subprocess
    client = os.path.join(REPO, "examples", "channel_client.py")
    p = subprocess.run([sys.executable, client, "--url", gateway.ws_url, "--token", gateway.token,
                        "print(6*7)", "1/0"], capture_output=True, text=True, timeout=90)
    assert p.returncode == 1, p.stderr
    assert "42\n" in p.stdout and "ZeroDivisionError" in p.stdout
    status, kernels, _ = gateway.request("GET", "/api/kernels")
    assert status == 200


# ---- callbacks: kgw_tools in the kernel calls the /channel client that runs the cell ----

async def cell_output(client, code, timeout=60):
    """Runs code; returns (stdout, [(ename, evalue)])."""
    msg_id = await client.execute(code)
    out, errors = "", []
    while True:
        m = await client.get_iopub_msg(timeout=timeout)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            out += m["content"]["text"]
        elif m["msg_type"] == "error":
            errors.append((m["content"]["ename"], m["content"]["evalue"]))
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return out, errors


@pytest.mark.needs_sandbox
def test_callbacks_reach_the_client_running_the_cell(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        try:
            _, client = await ready_client(ch, kernel["id"])
            ch.on_callback = lambda method, args, kwargs: {"shown": method, "title":
                                                          kwargs.get("title")}
            out, errors = await cell_output(client, """
import kgw_tools
r = kgw_tools.display_chart_to_user(path='/mnt/data/c.png', title='Sales', chart_type='bar')
print(r)
r = kgw_tools.display_matplotlib_image_to_user('Plot', reason='asked', exception_ids=[1])
print(r['shown'])
""")
            assert not errors, errors
            assert out == ("{'shown': 'display_chart_to_user', 'title': 'Sales'}\n"
                           "display_matplotlib_image_to_user\n")
            method, args, kwargs = ch.callbacks[0]
            assert method == "display_chart_to_user"
            assert kwargs == {"path": "/mnt/data/c.png", "title": "Sales", "chart_type": "bar"}
            assert ch.callbacks[1][2]["exception_ids"] == ["1"]

            # a dataframe: written as CSV into the workspace, path and preview sent
            out, errors = await cell_output(client, """
import pandas as pd, kgw_tools
kgw_tools.display_dataframe_to_user('Q1 results', pd.DataFrame({'a': [1, 2]}))
print(open('/mnt/data/Q1_results.csv').read(), end='')
""")
            assert not errors, errors
            assert out == "a\n1\n2\n"
            method, args, kwargs = ch.callbacks[-1]
            assert method == "display_dataframe_to_user" and kwargs["title"] == "Q1 results"
            assert kwargs["path"] == "/mnt/data/Q1_results.csv"

            # the client's exception is raised in the kernel
            def refuse(method, args, kwargs):
                raise ValueError("unsupported chart type")
            ch.on_callback = refuse
            out, errors = await cell_output(client, """
import kgw_tools
try:
    kgw_tools.display_chart_to_user(path='x.png', title='t', chart_type='pie3d')
except ValueError as e:
    print('ValueError', e)
""")
            assert "ValueError" in out and "unsupported chart type" in out, (out, errors)

            # names outside the allowlist never leave the kernel
            n = len(ch.callbacks)
            out, errors = await cell_output(client, """
import kgw_tools
for name in ('set_trait', '__class__', 'open_url'):
    try:
        kgw_tools.call_function(name, [], {})
    except PermissionError as e:
        print('refused', name)
""")
            assert out == "refused set_trait\nrefused __class__\nrefused open_url\n", errors
            assert len(ch.callbacks) == n
        finally:
            await ch.close()
    run(go(), timeout=120)


def test_callbacks_go_only_to_their_own_client(gateway):
    async def go():
        a = await connect(gateway)
        b = await connect(gateway)
        try:
            ka = await a.mkm.start_kernel()
            kb = await b.mkm.start_kernel()
            _, ca = await ready_client(a, ka)
            _, cb = await ready_client(b, kb)
            # b also watches a's kernel but does not run the cell
            _, cb_on_a = await ready_client(b, ka)
            a.on_callback = lambda m, args, kw: "from a"
            b.on_callback = lambda m, args, kw: "from b"
            out, errors = await cell_output(ca, """
import kgw_tools
print(kgw_tools.display_chart_to_user(path='p.png', title='t', chart_type='bar'))
""")
            assert out == "from a\n", errors
            assert len(a.callbacks) == 1 and b.callbacks == []
            await a.mkm.shutdown_kernel(ka)
            await b.mkm.shutdown_kernel(kb)
        finally:
            await a.close()
            await b.close()
    run(go(), timeout=120)


def test_callback_without_a_channel_client_fails_in_the_kernel(gateway, kernel):
    """A cell run from a notebook websocket has no /channel client to call."""
    import sbxutil as S
    ex = S.kexec(gateway, kernel["id"], """
import kgw_tools
try:
    kgw_tools.display_chart_to_user(path='p.png', title='t', chart_type='bar')
except RuntimeError as e:
    print('RuntimeError', e)
""", guard=False)
    assert "RuntimeError" in ex.stdout and "client" in ex.stdout, ex.stdout


def test_client_disconnecting_during_a_callback(gateway, kernel):
    async def go():
        ch = await connect(gateway)
        _, client = await ready_client(ch, kernel["id"])
        got = asyncio.Event()
        ch.on_callback = None

        async def never(msg):  # receives the call_request and never answers
            ch.callbacks.append(msg)
            got.set()
        ch._answer_callback = never
        await client.execute("""
import kgw_tools
try:
    kgw_tools.display_chart_to_user(path='p.png', title='t', chart_type='bar')
except RuntimeError as e:
    open('/tmp/cb-result', 'w').write(str(e))
""")
        await asyncio.wait_for(got.wait(), 30)
        await ch.close()
        # another connection sees the cell end with the kernel's exception
        ch2 = await connect(gateway)
        try:
            _, c2 = await ready_client(ch2, kernel["id"])
            for _ in range(100):
                out, errors = await cell_output(c2, """
import os
print(open('/tmp/cb-result').read() if os.path.exists('/tmp/cb-result') else '')
""")
                if out.strip():
                    return out
                await asyncio.sleep(0.1)
        finally:
            await ch2.close()
    out = run(go(), timeout=120)
    assert "disconnected" in out, out
