"""/mcp, the Model Context Protocol endpoint (docs/mcp.md).

The official TypeScript SDK's client (tests/mcp/mcp_client.mjs) drives a real gateway with real
sandboxed kernels: initialize, tools, state across calls, images, errors, progress, cancel,
files, isolation of sessions, 401, session end. The MCP Inspector's CLI lists and calls the
tools. The transport's rules and JSON-RPC error codes are checked here with raw HTTP.

Needs `node` (>= 20) and `npm ci` run in tests/mcp (scripts/test.sh does that) for the first
two; the raw checks always run.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import pytest

from conftest import key_file

HERE = os.path.dirname(os.path.abspath(__file__))
MCP_DIR = os.path.join(os.path.dirname(HERE), "mcp")
NODE = shutil.which("node")
CLIENT_TIMEOUT_S = 600  # generous: a loaded machine starts kernels slowly; outcomes are asserted


def _node_skip_reason():
    if NODE is None:
        return "node is not on PATH"
    if not os.path.isdir(os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "sdk")):
        return f"tests/mcp/node_modules missing: run `npm ci` in {MCP_DIR}"
    return None


needs_node = pytest.mark.skipif(_node_skip_reason() is not None,
                                reason=_node_skip_reason() or "")


def run_node(argv, timeout=CLIENT_TIMEOUT_S, env=None):
    """Runs a node program in tests/mcp; (returncode, combined output). Always reaps it."""
    proc = subprocess.Popen(argv, cwd=MCP_DIR, env=env or dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -signal.SIGKILL, out + f"\n[test] killed after {timeout}s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out


# ---- raw HTTP ----

def post(gw, body, session=None, headers=None, auth=True, raw=None, method="POST"):
    """(status, parsed JSON body or None, headers) of one request to /mcp."""
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if auth:
        h["Authorization"] = f"Bearer {gw.token}"
    if session:
        h["Mcp-Session-Id"] = session
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(gw.url + "/mcp", data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            payload, status, hdrs = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        payload, status, hdrs = e.read(), e.code, e.headers
    return status, (json.loads(payload) if payload else None), hdrs


def initialize(gw, version="2025-06-18"):
    st, body, h = post(gw, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                            "params": {"protocolVersion": version, "capabilities": {},
                                       "clientInfo": {"name": "raw", "version": "1"}}})
    assert st == 200, (st, body)
    sid = h["Mcp-Session-Id"]
    assert uuid.UUID(sid).version == 4, sid
    st, body, _ = post(gw, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    assert st == 202 and body is None
    return sid


def call(gw, sid, id_, name, args):
    return post(gw, {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                     "params": {"name": name, "arguments": args}}, sid)


def test_negotiates_revisions(gateway):
    for asked, got in [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"),
                       ("2025-03-26", "2025-03-26"), ("2024-11-05", "2025-11-25"),
                       ("1999-01-01", "2025-11-25")]:
        st, body, h = post(gateway, {"jsonrpc": "2.0", "id": "a", "method": "initialize",
                                     "params": {"protocolVersion": asked, "capabilities": {}}})
        assert st == 200 and body["id"] == "a", body
        assert body["result"]["protocolVersion"] == got, (asked, body)
        assert body["result"]["capabilities"]["tools"] is not None
        post(gateway, None, h["Mcp-Session-Id"], method="DELETE")
    # outputSchema only where the revision has structured content
    sid = initialize(gateway, "2025-03-26")
    st, body, _ = post(gateway, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
    assert st == 200 and all("outputSchema" not in t for t in body["result"]["tools"])
    sid = initialize(gateway, "2025-06-18")
    st, body, _ = post(gateway, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
    assert st == 200 and all(t["outputSchema"]["type"] == "object"
                             for t in body["result"]["tools"])


def test_jsonrpc_error_codes(gateway):
    sid = initialize(gateway)
    cases = [
        (b"{not json", 400, -32700),
        (b"", 400, -32700),
        (b'"just a string"', 400, -32600),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', 400, -32600),  # no batches
        (b'{"id":1,"method":"ping"}', 400, -32600),  # no "jsonrpc"
        (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":7}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"no/such"}', 200, -32601),
        (b'{"jsonrpc":"2.0","id":1,"method":"resources/list"}', 200, -32601),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm_rf"}}', 200,
         -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code",'
         b'"arguments":{"code":5}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code",'
         b'"arguments":{}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code",'
         b'"arguments":{"code":"1","timeout":-1}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code",'
         b'"arguments":{"code":"1","extra":1}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file",'
         b'"arguments":{"path":"../etc/passwd"}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file",'
         b'"arguments":{"path":"/etc/passwd"}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file",'
         b'"arguments":{"path":"a","content":"x","encoding":"utf-16"}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}', 200, -32602),
        # a quoted name cut inside a character still makes a valid JSON message
        (('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"' + "a" * 63 +
          '\u00e9\u00e9"}}').encode(), 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code",'
         b'"arguments":{"code":"1","' + "\u00e9".encode() * 40 + b'":1}}}', 200, -32602),
        (b'{"jsonrpc":"2.0","id":1,"meth\xff":"x"}', 400, -32700),
    ]
    for raw, status, code in cases:
        st, body, _ = post(gateway, None, sid, raw=raw)
        assert st == status and body["jsonrpc"] == "2.0", (raw, st, body)
        assert body["error"]["code"] == code and body["error"]["message"], (raw, body)
        # the id is echoed when there was a valid one
        if code in (-32601, -32602):
            assert body["id"] == 1, (raw, body)
    # a ping still works: nothing above broke the session
    st, body, _ = post(gateway, {"jsonrpc": "2.0", "id": "p", "method": "ping"}, sid)
    assert st == 200 and body == {"jsonrpc": "2.0", "id": "p", "result": {}}
    # a response from the client, and an unknown notification: 202
    assert post(gateway, {"jsonrpc": "2.0", "id": 9, "result": {}}, sid)[0] == 202
    assert post(gateway, {"jsonrpc": "2.0", "method": "notifications/x"}, sid)[0] == 202
    assert gateway.alive()
    # refused arguments are refused before the session's kernel starts
    assert gateway.request("GET", "/api/kernels")[1] == []
    assert post(gateway, None, sid, method="DELETE")[0] == 204


def test_arguments_checked_against_the_schemas(gateway):
    """A tool's arguments are checked against its inputSchema (docs/mcp_tools.json) before its
    kernel starts: a wrong type, a missing required argument, an unknown one and a broken bound
    are refused with -32602 and a message naming the argument and the rule."""
    sid = initialize(gateway)
    schemas = {t["name"]: t["inputSchema"] for t in post(
        gateway, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, sid)[1]["result"]["tools"]}
    cases = [
        ("execute_code", {"code": 5}, 'execute_code: argument "code" must be a string'),
        ("execute_code", {"timeout": 5}, 'execute_code: argument "code" is required'),
        ("execute_code", {"code": "1", "color": "red"},
         'execute_code: argument "color" is unknown (allowed: code, timeout, checkpoint, '
         'rollback_on_error)'),
        ("execute_code", {"code": "1", "timeout": 0},
         'execute_code: argument "timeout" must be a number > 0 and <= 604800'),
        ("execute_code", {"code": "1", "checkpoint": "yes"},
         'execute_code: argument "checkpoint" must be true or false'),
        ("write_file", {"path": "a.txt", "content": ["x"]},
         'write_file: argument "content" must be a string'),
        ("write_file", {"path": "a.txt"}, 'write_file: argument "content" is required'),
        ("write_file", {"path": "a.txt", "content": "x", "mode": 420},
         'write_file: argument "mode" is unknown (allowed: path, content, encoding)'),
        ("write_file", {"path": "a.txt", "content": "x", "encoding": "latin-1"},
         'write_file: argument "encoding" must be one of "utf-8", "base64"'),
        ("run_command", {"command": True}, 'run_command: argument "command" must be a string of '
         '1 to 65536 characters'),
        ("run_command", {}, 'run_command: argument "command" is required'),
        ("run_command", {"command": "true", "cwd": "/"},
         'run_command: argument "cwd" is unknown (allowed: command, timeout)'),
        ("fork", {"name": "x" * 65}, 'fork: argument "name" must be a string of 1 to 64 '
         'characters'),
        ("list_files", {"all": True}, 'list_files: argument "all" is unknown (none allowed)'),
    ]
    for i, (tool, args, message) in enumerate(cases):
        st, body, _ = call(gateway, sid, i, tool, args)
        assert st == 200 and body["id"] == i and "result" not in body, (tool, args, body)
        assert body["error"] == {"code": -32602, "message": message}, (tool, args, body)
        # the argument named is one tools/list's schema refuses: unknown to it, required by
        # it, or given with a value it does not allow
        named = message.split('"')[1]
        props, required = schemas[tool]["properties"], schemas[tool].get("required", [])
        assert (named not in props) == ("is unknown" in message), (message, props)
        assert (named in required and named not in args) == ("is required" in message), message
    assert gateway.request("GET", "/api/kernels")[1] == []
    assert post(gateway, None, sid, method="DELETE")[0] == 204


def test_transport_rules(gateway):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}}}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    # kgw's own authentication
    st, body, _ = post(gateway, init, auth=False)
    assert st == 401, (st, body)
    st, body, _ = post(gateway, init, auth=False, headers={"Authorization": "Bearer nope"})
    assert st == 401, (st, body)
    # no server-to-client stream: GET is not offered
    st, _, _ = post(gateway, None, method="GET")
    assert st == 405
    st, _, _ = post(gateway, None, method="PUT", raw=b"{}")
    assert st == 405
    # the session header
    st, body, _ = post(gateway, ping)
    assert st == 400 and body["error"]["code"] == -32000 and "Mcp-Session-Id" in \
        body["error"]["message"]
    st, body, _ = post(gateway, ping, "0" * 32)
    assert st == 404 and body["error"]["code"] == -32001
    sid = initialize(gateway)
    # the protocol version header
    st, body, _ = post(gateway, ping, sid, headers={"MCP-Protocol-Version": "2024-01-01"})
    assert st == 400 and "MCP-Protocol-Version" in body["error"]["message"], body
    st, body, _ = post(gateway, ping, sid, headers={"MCP-Protocol-Version": "2025-06-18"})
    assert st == 200 and body["result"] == {}
    st, body, _ = post(gateway, ping, sid)  # absent: taken as 2025-03-26
    assert st == 200
    # Accept and Content-Type
    st, body, _ = post(gateway, ping, sid, headers={"Accept": "text/html"})
    assert st == 406 and body["error"]["code"] == -32000, body
    st, body, _ = post(gateway, ping, sid, headers={"Content-Type": "text/plain"})
    assert st == 415 and body["error"]["code"] == -32000, body
    st, body, _ = post(gateway, ping, sid, headers={"Content-Type": "application/jsonx"})
    assert st == 415
    st, body, _ = post(gateway, ping, sid,
                       headers={"Content-Type": "application/json; charset=utf-8",
                                "Accept": "application/json"})
    assert st == 200 and body["result"] == {}
    # a client that takes only event streams gets its answer as one
    req = urllib.request.Request(gateway.url + "/mcp", data=json.dumps(ping).encode(),
                                 method="POST",
                                 headers={"Authorization": f"Bearer {gateway.token}",
                                          "Content-Type": "application/json",
                                          "Accept": "text/event-stream", "Mcp-Session-Id": sid})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        text = r.read().decode()
    assert text.startswith("event: message\ndata: ") and text.endswith("\n\n"), text
    assert json.loads(text.split("data: ", 1)[1]) == {"jsonrpc": "2.0", "id": 2, "result": {}}
    # Origin: DNS rebinding protection (no --allow-origin: no browser origin is allowed)
    st, body, _ = post(gateway, ping, sid, headers={"Origin": "http://evil.example"})
    assert st == 403 and body["error"]["code"] == -32000, body
    st, body, _ = post(gateway, init, headers={"Origin": "http://127.0.0.1:1"})
    assert st == 403
    # another tenant's session is not found: (one tenant here) a made-up id of the right form
    st, body, _ = post(gateway, ping, sid[::-1])
    assert st == 404
    # DELETE ends the session; it is then unknown
    st, _, _ = post(gateway, None, sid, method="DELETE")
    assert st == 204
    st, body, _ = post(gateway, ping, sid)
    assert st == 404
    st, _, _ = post(gateway, None, sid, method="DELETE")
    assert st == 404
    st, _, _ = post(gateway, None, method="DELETE")
    assert st == 400


def test_allowed_origin_and_idle_end(gateway_factory):
    gw = gateway_factory("--allow-origin=https://app.example", "--mcp-idle-timeout=10")
    st, body, h = post(gw, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                            "params": {"protocolVersion": "2025-06-18", "capabilities": {}}},
                       headers={"Origin": "https://app.example"})
    assert st == 200 and h["Access-Control-Allow-Origin"] == "https://app.example"
    # a browser client may send and read the session header
    assert "Mcp-Session-Id" in h["Access-Control-Expose-Headers"]
    assert "Mcp-Session-Id" in h["Access-Control-Allow-Headers"]
    assert "MCP-Protocol-Version" in h["Access-Control-Allow-Headers"]
    sid = h["Mcp-Session-Id"]
    st, body, _ = post(gw, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid,
                       headers={"Origin": "https://other.example"})
    assert st == 403
    st, body, _ = call(gw, sid, 3, "execute_code", {"code": "y = 5\nprint(y)"})
    assert st == 200 and body["result"]["isError"] is False, body
    kid = body["result"]["structuredContent"]["kernel_id"]
    assert gw.request("GET", f"/api/kernels/{kid}")[0] == 200
    # idle for --mcp-idle-timeout: the session ends and its kernel is shut down
    deadline = time.time() + 120
    while time.time() < deadline and gw.request("GET", f"/api/kernels/{kid}")[0] != 404:
        time.sleep(1)
    assert gw.request("GET", f"/api/kernels/{kid}")[0] == 404, gw.log()[-4000:]
    st, body, _ = post(gw, {"jsonrpc": "2.0", "id": 4, "method": "ping"}, sid)
    assert st == 404


def test_other_tenant_sees_nothing(gateway_factory, tmp_path):
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}")
    gw.token = keys["alice"]
    sid = initialize(gw)
    st, body, _ = call(gw, sid, 1, "execute_code", {"code": "secret = 1"})
    assert st == 200 and body["result"]["isError"] is False, body
    kid = body["result"]["structuredContent"]["kernel_id"]
    # bob cannot use, see or end alice's session, nor reach its kernel
    gw.token = keys["bob"]
    st, body, _ = call(gw, sid, 2, "execute_code", {"code": "print(secret)"})
    assert st == 404 and body["error"]["code"] == -32001, body
    assert post(gw, None, sid, method="DELETE")[0] == 404
    assert gw.request("GET", f"/api/kernels/{kid}")[0] == 404
    gw.token = keys["alice"]
    st, body, _ = call(gw, sid, 3, "execute_code", {"code": "print(secret + 1)"})
    assert st == 200 and body["result"]["content"][0]["text"] == "2\n", body
    assert post(gw, None, sid, method="DELETE")[0] == 204


def test_raw_tool_calls(gateway):
    sid = initialize(gateway, "2025-03-26")
    st, body, _ = call(gateway, sid, 1, "execute_code", {"code": "import sys\n"
                                                                 "print('out')\n"
                                                                 "print('err', file=sys.stderr)\n"
                                                                 "6 * 7"})
    assert st == 200, body
    res = body["result"]
    texts = [c["text"] for c in res["content"] if c["type"] == "text"]
    assert texts[0] == "out\n" and texts[1] == "err\n" and texts[2] == "42\n", texts
    assert res["isError"] is False and res["structuredContent"]["status"] == "ok"
    # the end event is also text (revisions before structured content)
    assert json.loads(texts[-1])["status"] == "ok"
    # a timeout interrupts the code: isError, status timeout
    st, body, _ = call(gateway, sid, 2, "execute_code",
                       {"code": "import time\ntime.sleep(60)", "timeout": 1})
    assert st == 200 and body["result"]["isError"] is True, body
    assert body["result"]["structuredContent"]["status"] == "timeout"
    assert any(c["type"] == "text" and c["text"].startswith("[kgw] the execution ended: timeout")
               for c in body["result"]["content"]), body
    # files changed are in the end
    st, body, _ = call(gateway, sid, 3, "execute_code",
                       {"code": "open('made.txt', 'w').write('x')"})
    assert "made.txt" in body["result"]["structuredContent"]["files"]["created"], body
    post(gateway, None, sid, method="DELETE")
    if os.environ.get("KGW_WRAPPER"):
        return  # valgrind has no openat2(): the file tools answer isError (ENOSYS) there
    sid = initialize(gateway, "2025-03-26")
    # write_file in base64, read back as text
    st, body, _ = call(gateway, sid, 4, "write_file",
                       {"path": "sub/b.txt", "content": "aMOpbGxv", "encoding": "base64"})
    assert body["result"].get("structuredContent") == {"path": "sub/b.txt", "size": 6}, body
    st, body, _ = call(gateway, sid, 5, "read_file", {"path": "sub/b.txt"})
    assert body["result"]["content"][0]["text"] == "h\u00e9llo"
    st, body, _ = call(gateway, sid, 6, "read_file", {"path": "nope.txt"})
    assert body["result"]["isError"] is True and "no such file" in \
        body["result"]["content"][0]["text"]
    st, body, _ = call(gateway, sid, 7, "write_file",
                       {"path": "x.bin", "content": "!!!", "encoding": "base64"})
    assert body["error"]["code"] == -32602
    post(gateway, None, sid, method="DELETE")


def test_output_and_progress_as_the_kernel_wrote_it(gateway):
    """execute_code's result and progress carry the kernel's output text exactly (escapes, UTF-8,
    a write larger than a progress notification), joined per kind in order."""
    from test_execute import TRICKY, TRICKY_CODE, TRICKY_ERR
    sid = initialize(gateway)
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "execute_code", "arguments": {"code": TRICKY_CODE},
                       "_meta": {"progressToken": "p"}}}
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "Authorization": f"Bearer {gateway.token}", "Mcp-Session-Id": sid}
    req = urllib.request.Request(gateway.url + "/mcp", data=json.dumps(body).encode(),
                                 headers=h, method="POST")
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        msgs = [json.loads(line[6:]) for line in r if line.startswith(b"data: ")]
    progress = [m["params"] for m in msgs if m.get("method") == "notifications/progress"]
    results = [m for m in msgs if m.get("id") == 9]
    assert len(results) == 1 and msgs[-1] is results[0], msgs[-3:]
    res = results[0]["result"]
    assert res["isError"] is False and res["structuredContent"]["status"] == "ok", res
    texts = [(c["type"], c["text"]) for c in res["content"]]
    assert [t for t, _ in texts] == ["text"] * 4, [ascii(x[:40]) for _, x in texts]
    assert texts[0][1] == "".join(t + "\n" for t in TRICKY), texts[0][1][:300]
    assert texts[1][1] == TRICKY_ERR and texts[2][1] == "tree\n", texts[1:3]
    assert json.loads(texts[3][1]) == res["structuredContent"]
    # one notification per output message, its text cut to 64 KiB
    want = [t + "\n" for t in TRICKY] + [TRICKY_ERR, "tree\n"]
    assert [p["message"] for p in progress] == [w[:65536] for w in want], \
        [p["message"][:80] for p in progress]
    assert [p["progress"] for p in progress] == list(range(1, len(want) + 1))
    assert all(p["progressToken"] == "p" for p in progress)
    post(gateway, None, sid, method="DELETE")


def test_result_limit(gateway):
    """Output past the result's 8 MiB is left out, with a notice; what fits keeps its order."""
    sid = initialize(gateway)
    code = ("import sys\nfor i in range(10):\n    sys.stdout.write(str(i) * 1_000_000)\n"
            "    sys.stdout.flush()\n_ = sys.stderr.write('tail\\n')\n")
    st, body, _ = call(gateway, sid, 2, "execute_code", {"code": code})
    assert st == 200, body
    res = body["result"]
    texts = [c["text"] for c in res["content"] if c["type"] == "text"]
    assert res["isError"] is False and len(texts) == 4, [t[:40] for t in texts]
    # 8 MB of stdout in one item, then the stderr line that still fits, the notice, the end
    assert texts[0] == "".join(str(i) * 1_000_000 for i in range(8)), len(texts[0])
    assert texts[1] == "tail\n"
    assert texts[2] == "[kgw] output beyond the MCP result limit was left out"
    assert json.loads(texts[3])["status"] == "ok"
    post(gateway, None, sid, method="DELETE")


@needs_node
def test_sdk_client(gateway):
    env = dict(os.environ)
    if os.environ.get("KGW_WRAPPER"):
        env["KGW_MCP_NO_FILES"] = "1"  # valgrind has no openat2(): the file checks are left out
    rc, out = run_node([NODE, "mcp_client.mjs", gateway.url, gateway.token], env=env)
    print(out)
    checks = ["initialize", "list_tools", "state_persists", "plot_image", "exception_is_error",
              "arguments_refused", "progress", "cancel", "sessions_isolated", "restart_kernel",
              "wrong_key_401", "session_end_shuts_kernel"]
    if "KGW_MCP_NO_FILES" not in env:
        checks.append("files")
    assert rc == 0 and all(f"ok {c}\n" in out for c in checks), (
        f"mcp_client.mjs exited {rc}:\n{out}\n----- server log (tail) -----\n"
        + gateway.log()[-15000:])
    # both sessions ended: their kernels are gone
    deadline = time.time() + 60
    while time.time() < deadline and gateway.request("GET", "/api/kernels")[1]:
        time.sleep(0.5)
    assert gateway.request("GET", "/api/kernels")[1] == []


@needs_node
def test_inspector_cli(gateway):
    """The MCP Inspector's command-line mode lists and calls the tools."""
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home, MCP_CATALOG_PATH=os.path.join(home, "mcp.json"),
                   NO_UPDATE_NOTIFIER="1", npm_config_update_notifier="false")
        base = [NODE, os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "inspector",
                                   "clients", "launcher", "build", "index.js"),
                "--cli", gateway.url + "/mcp", "--transport", "http",
                "--header", f"Authorization: Bearer {gateway.token}"]
        # --strict: the tool schemas have no portability problems (exit 6 on an error; warnings
        # are printed on stderr)
        rc, out = run_node(base + ["--method", "tools/list", "--strict"], timeout=300, env=env)
        assert rc == 0 and "Warning" not in out, out
        listed, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])
        assert sorted(t["name"] for t in listed["tools"]) == [
            "execute_code", "fork", "list_files", "read_file", "restart_kernel", "rollback",
            "run_command",
            "write_file"], out
        rc, out = run_node(base + ["--method", "tools/call", "--tool-name", "execute_code",
                                   "--tool-arg", "code=print(6 * 7)"], timeout=300, env=env)
        assert rc == 0, out
        res, _ = json.JSONDecoder().raw_decode(out[out.index("{"):])
        assert res["isError"] is False and res["content"][0]["text"] == "42\n", res
        assert res["structuredContent"]["status"] == "ok"
    # (the CLI does not end its session: its kernel goes after --mcp-idle-timeout)
