"""/mcp named kernels (docs/mcp.md "Named kernels"): MCP clients that open a new session per
tool call (LangChain's MultiServerMCPClient tools, LlamaIndex's BasicMCPClient) keep one kernel
by sending `Kgw-Kernel-Name: NAME` on every request.

Checked with raw HTTP against a real gateway and real kernels: state across sessions of one
name, separate kernels for other names, no name and other tenants, the per-tenant bound, name
syntax, a deleted or dead kernel replaced (and the client told), restart, two sessions at once
on one kernel, the idle end, the tenant's session limit making room from named sessions. LangChain's JS adapter (@langchain/mcp-adapters from tests/mcp's
lockfile) is driven by tests/mcp/langchain_named.mjs, one MultiServerMCPClient per call.
"""
import json
import os
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import key_file
from test_mcp import MCP_DIR, NODE, run_node

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "named", "version": "1"}}}


def post(gw, body, session=None, name=None, method="POST", token=None, headers=None):
    """(status, parsed JSON body or None, headers) of one request to /mcp."""
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "Authorization": f"Bearer {token or gw.token}", **(headers or {})}
    if session:
        h["Mcp-Session-Id"] = session
    if name is not None:
        h["Kgw-Kernel-Name"] = name
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gw.url + "/mcp", data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            payload, status, hdrs = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        payload, status, hdrs = e.read(), e.code, e.headers
    return status, (json.loads(payload) if payload else None), hdrs


def session(gw, name=None, token=None):
    """A new MCP session (its id), sending name as Kgw-Kernel-Name."""
    st, body, h = post(gw, INIT, name=name, token=token)
    assert st == 200, (st, body)
    sid = h["Mcp-Session-Id"]
    assert post(gw, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid, name,
                token=token)[0] == 202
    return sid


def end(gw, sid, name=None, token=None):
    assert post(gw, None, sid, name, method="DELETE", token=token)[0] == 204


def run(gw, sid, code, name=None, token=None, tool="execute_code"):
    """execute_code (or tool with {"code"} left out when code is None): (text, structured)."""
    args = {"code": code} if code is not None else {}
    st, body, _ = post(gw, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": tool, "arguments": args}}, sid, name,
                       token=token)
    assert st == 200 and "result" in body, (st, body)
    res = body["result"]
    text = "".join(c.get("text", "") for c in res["content"] if c["type"] == "text")
    return text, res.get("structuredContent") or {}


def per_call(gw, code, name=None, token=None, tool="execute_code"):
    """One tool call in a session of its own, as a per-call client makes it."""
    sid = session(gw, name, token)
    try:
        return run(gw, sid, code, name, token, tool)
    finally:
        end(gw, sid, name, token)


def kernel_status(gw, kid, token=None):
    h = {"Authorization": f"token {token or gw.token}"}
    req = urllib.request.Request(f"{gw.url}/api/kernels/{kid}", headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def test_state_across_sessions(gateway):
    text, st = per_call(gateway, "x = 41", "calc")
    assert st["status"] == "ok", text
    assert "a new kernel named 'calc' was started" in text, text
    kid = st["kernel_id"]
    # the session ended; the named kernel stays
    assert kernel_status(gateway, kid)[0] == 200
    text, st = per_call(gateway, "print(x + 1)", "calc")
    assert st["status"] == "ok" and st["kernel_id"] == kid, text
    assert text.startswith("42\n") and "[kgw]" not in text, text
    # another name, and no name: kernels of their own
    for name in ("calc2", None):
        text, st = per_call(gateway, "print(x)", name)
        assert st["status"] == "error" and "NameError" in text, text
        assert st["kernel_id"] != kid
    # an unnamed session's kernel still ends with its session
    text, st = per_call(gateway, "z = 1", None)
    for _ in range(100):
        if kernel_status(gateway, st["kernel_id"])[0] == 404:
            break
        time.sleep(0.2)
    assert kernel_status(gateway, st["kernel_id"])[0] == 404
    # files too live in the named kernel's workspace
    per_call(gateway, "open('keep.txt', 'w').write('kept')", "calc")
    text, _ = per_call(gateway, None, "calc", tool="list_files")
    assert "keep.txt" in text, text


def test_headers_checked(gateway_factory):
    gw = gateway_factory("--mcp-named-kernels=2", "--allow-origin=https://app.example")
    for bad in (".hidden", "-x", "a b", "a/b", "k" * 65, "caf\u00e9".encode().decode("latin-1")):
        st, body, _ = post(gw, INIT, name=bad)
        assert st == 400 and body["error"]["code"] == -32000, (bad, st, body)
        assert "Kgw-Kernel-Name" in body["error"]["message"]
    # a browser client may send it
    st, body, h = post(gw, INIT, name="a", headers={"Origin": "https://app.example"})
    assert st == 200 and "Kgw-Kernel-Name" in h["Access-Control-Allow-Headers"], (st, body)
    end(gw, h["Mcp-Session-Id"], "a")
    # the name a session was initialized with (or none) is the one its requests send
    sid = session(gw, "a")
    st, body, _ = post(gw, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid, "b")
    assert st == 400 and "differs" in body["error"]["message"], body
    assert post(gw, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid, "a")[0] == 200
    assert post(gw, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid)[0] == 200
    plain = session(gw)
    st, body, _ = post(gw, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, plain, "a")
    assert st == 400, body
    # the bound: two names per tenant here; a name in use is taken again
    sid_b = session(gw, "b")
    st, body, _ = post(gw, INIT, name="c")
    assert st == 429 and "--mcp-named-kernels" in body["error"]["message"], body
    end(gw, session(gw, "a"), "a")
    # a name nobody holds and without a kernel makes room at once
    end(gw, sid_b, "b")
    end(gw, session(gw, "c"), "c")
    off = gateway_factory("--mcp-named-kernels=0")
    st, body, _ = post(off, INIT, name="a")
    assert st == 400 and "off" in body["error"]["message"], body
    assert post(off, INIT)[0] == 200


def test_session_limit_evicts_named_sessions_only(gateway_factory):
    """Per-call clients that never end their sessions leave them to idle out; at the tenant's
    limit of sessions (1000) the named kernel's session idle the longest makes room (it holds
    nothing its name does not); sessions of their own kernels are never evicted."""
    LIMIT = 1000
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    gw = gateway_factory()
    first = session(gw, "many")
    others = [post(gw, INIT, name="many")[2]["Mcp-Session-Id"] for _ in range(LIMIT - 2)]
    plain = session(gw)
    assert post(gw, ping, first, "many")[0] == 200  # now the most recently used
    st, body, _ = post(gw, INIT)
    assert st == 200, body
    assert post(gw, ping, others[0], "many")[0] == 404
    assert post(gw, ping, first, "many")[0] == 200
    assert post(gw, ping, others[1], "many")[0] == 200
    assert post(gw, ping, plain)[0] == 200
    assert "evicted: the tenant's session limit" in gw.log()
    # only sessions of their own: the limit refuses, whatever the newcomer asks
    gw2 = gateway_factory()
    for _ in range(LIMIT):
        assert post(gw2, INIT)[0] == 200
    for name in (None, "x"):
        st, body, _ = post(gw2, INIT, name=name)
        assert st == 429 and "1000 MCP sessions" in body["error"]["message"], body


def test_tenants_do_not_share_names(gateway_factory, tmp_path):
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}", "--mcp-named-kernels=1")
    text, st = per_call(gw, "secret = 41", "shared", keys["alice"])
    assert st["status"] == "ok", text
    kid = st["kernel_id"]
    # bob's "shared" is his own: a new kernel, alice's variables not there
    text, st = per_call(gw, "print(secret)", "shared", keys["bob"])
    assert "NameError" in text and "a new kernel named 'shared'" in text, text
    assert st["kernel_id"] != kid
    assert kernel_status(gw, kid, keys["bob"])[0] == 404
    # and the bound is per tenant: alice's one name does not count for bob, nor his for her
    text, st = per_call(gw, "print(secret + 1)", "shared", keys["alice"])
    assert text.startswith("42\n") and st["kernel_id"] == kid, text
    st, body, _ = post(gw, INIT, name="other", token=keys["alice"])
    assert st == 429, body


def test_deleted_kernel_is_replaced_and_told(gateway):
    per_call(gateway, "x = 1\nopen('f.txt', 'w').write('still here')", "phoenix")
    sid = session(gateway, "phoenix")
    text, st = run(gateway, sid, "print(x)", "phoenix")
    kid = st["kernel_id"]
    assert gateway.delete_kernel(kid) == 204
    # the same session goes on with a new kernel, told so, in the same workspace
    text, st = run(gateway, sid, "print(open('f.txt').read())\nprint(x)", "phoenix")
    assert st["kernel_id"] != kid
    assert "had ended" in text and "workspace files are kept" in text, text
    assert "still here" in text and "NameError" in text, text
    # restart_kernel restarts the shared kernel: every session of the name sees it
    run(gateway, sid, "y = 2", "phoenix")
    text, st2 = per_call(gateway, None, "phoenix", tool="restart_kernel")
    assert st2 == {"kernel_id": st["kernel_id"], "status": "restarted"}, text
    text, st3 = run(gateway, sid, "print(y)", "phoenix")
    assert "NameError" in text and st3["kernel_id"] == st["kernel_id"], text
    end(gateway, sid, "phoenix")


def test_died_kernel_is_replaced_and_told(gateway_factory):
    gw = gateway_factory("--max-restarts=0")
    text, st = per_call(gw, "x = 1", "fragile")
    kid = st["kernel_id"]
    text, st = per_call(gw, "import os\nos._exit(3)", "fragile")
    assert st["status"] == "kernel_died", text
    for _ in range(100):  # (dead: not restarted)
        if kernel_status(gw, kid)[0] == 404:
            break
        time.sleep(0.2)
    text, st = per_call(gw, "print(x)", "fragile")
    assert "NameError" in text and "had ended" in text and st["kernel_id"] != kid, text


def test_two_sessions_at_once_queue(gateway):
    """Two sessions of one name run on one kernel: the second execution waits for the first."""
    _, st = per_call(gateway, "import time", "queue")
    kid = st["kernel_id"]
    a, b = session(gateway, "queue"), session(gateway, "queue")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "a", run(gateway, a, "time.sleep(3)\nflag = 'set by a'", "queue")))
    t.start()
    deadline = time.time() + 120
    while time.time() < deadline:  # a's execution is running
        if kernel_status(gateway, kid)[1]["execution_state"] == "busy":
            break
        time.sleep(0.05)
    text, st = run(gateway, b, "print(flag)", "queue")
    t.join(300)
    assert out["a"][1]["status"] == "ok", out
    assert text.startswith("set by a\n") and st["kernel_id"] == kid, text
    end(gateway, a, "queue")
    end(gateway, b, "queue")


def test_idle_named_kernel_ends(gateway_factory):
    gw = gateway_factory("--mcp-idle-timeout=10")
    text, st = per_call(gw, "x = 1", "sleepy")
    kid = st["kernel_id"]
    assert kernel_status(gw, kid)[0] == 200  # the session ended; the kernel did not
    deadline = time.time() + 120
    while time.time() < deadline and kernel_status(gw, kid)[0] != 404:
        time.sleep(1)
    assert kernel_status(gw, kid)[0] == 404, gw.log()[-4000:]
    assert "named kernel 'sleepy'" in gw.log() and "idle, shut down" in gw.log()
    text, st = per_call(gw, "print(x)", "sleepy")
    assert "NameError" in text and st["kernel_id"] != kid, text
    assert "a new kernel named 'sleepy'" in text, text


LANGCHAIN = os.path.join(MCP_DIR, "node_modules", "@langchain", "mcp-adapters")


@pytest.mark.skipif(NODE is None or not os.path.isdir(LANGCHAIN),
                    reason=f"node or @langchain/mcp-adapters missing: run `npm ci` in {MCP_DIR}")
def test_langchain_per_call_clients(gateway):
    rc, out = run_node([NODE, "langchain_named.mjs", gateway.url, gateway.token])
    assert rc == 0, out
    for check in ("state_across_clients", "names_apart", "no_name_apart", "name_per_call_hook"):
        assert f"ok {check}" in out, out


def call(gw, sid, tool, args, name=None, token=None):
    """One tools/call: (isError, text, structuredContent)."""
    st, body, _ = post(gw, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": tool, "arguments": args}}, sid, name,
                       token=token)
    assert st == 200 and "result" in body, (st, body)
    res = body["result"]
    text = "".join(c.get("text", "") for c in res["content"] if c["type"] == "text")
    return res["isError"], text, res.get("structuredContent") or {}


def test_fork_into_a_named_kernel(gateway):
    """The fork tool: an unnamed session's kernel forked into the named kernel "b"; a session
    with Kgw-Kernel-Name: b sees the state, then the two go their own ways."""
    sid = session(gateway)
    try:
        text, st = run(gateway, sid, "x = 41")
        assert st["status"] == "ok", text
        parent = st["kernel_id"]
        err, text, fk = call(gateway, sid, "fork", {"name": "fb"})
        assert not err, text
        assert fk["name"] == "fb" and fk["forked_from"] == parent and fk["checkpoint"] is None
        assert fk["kernel_id"] != parent and kernel_status(gateway, fk["kernel_id"])[0] == 200
        text, st = per_call(gateway, "print(x); x = 1", "fb")
        assert st["status"] == "ok" and st["kernel_id"] == fk["kernel_id"], text
        assert text.startswith("41\n") and "[kgw]" not in text, text
        text, st = run(gateway, sid, "print(x)")
        assert text.startswith("41\n") and st["kernel_id"] == parent, text
        text, st = per_call(gateway, "print(x)", "fb")
        assert text.startswith("1\n"), text
        # a taken name (the fork's, or a named session's own), a bad name, a bad checkpoint
        err, text, _ = call(gateway, sid, "fork", {"name": "fb"})
        assert err and "the name 'fb' is taken" in text, text
        err, text, _ = call(gateway, sid, "fork", {"name": "..x"})
        assert err and "not a kernel name" in text, text
        err, text, _ = call(gateway, sid, "fork", {"name": "fc", "checkpoint": "nope"})
        assert err and "not a checkpoint id" in text, text
        err, text, _ = call(gateway, sid, "fork",
                            {"name": "fc",
                             "checkpoint": "00000000-0000-4000-8000-000000000000"})
        assert err and "Checkpoint does not exist" in text, text
    finally:
        end(gateway, sid)
    # the unnamed session's kernel ended with its session, and the fork in its sandbox with
    # it: the name's next session is told, and gets a new kernel
    for _ in range(100):
        if kernel_status(gateway, fk["kernel_id"])[0] != 200 or \
                kernel_status(gateway, fk["kernel_id"])[1]["execution_state"] == "dead":
            break
        time.sleep(0.2)
    text, st = per_call(gateway, "print(x)", "fb")
    assert "the kernel named 'fb' had ended" in text and "NameError" in text, text


def test_fork_from_a_checkpoint(gateway):
    sid = session(gateway, "fsrc")
    try:
        text, st = run(gateway, sid, "y = 1", "fsrc")
        assert st["status"] == "ok", text
        # (the checkpoint is taken right before its code runs: y is 1 in it)
        err, text, st = call(gateway, sid, "execute_code",
                             {"code": "y = 2", "checkpoint": True}, "fsrc")
        assert not err and st["status"] == "ok" and st["checkpoint"], text
        cp = st["checkpoint"]
        err, text, fk = call(gateway, sid, "fork", {"name": "fold", "checkpoint": cp}, "fsrc")
        assert not err and fk["checkpoint"] == cp, text
        text, st = per_call(gateway, "print(y)", "fold")
        assert text.startswith("1\n") and st["kernel_id"] == fk["kernel_id"], text
        text, st = run(gateway, sid, "print(y)", "fsrc")
        assert text.startswith("2\n"), text
        err, text, _ = call(gateway, sid, "fork", {"name": "fsrc"}, "fsrc")
        assert err and "the name 'fsrc' is taken" in text, text
    finally:
        end(gateway, sid, "fsrc")


def test_fork_tenancy_and_bound(gateway_factory, tmp_path):
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}", "--mcp-named-kernels=1")
    a, b = session(gw, token=keys["alice"]), session(gw, token=keys["bob"])
    try:
        run(gw, a, "secret = 41", token=keys["alice"])
        err, text, fa = call(gw, a, "fork", {"name": "t"}, token=keys["alice"])
        assert not err, text
        # bob's "t" is his own: free to fork into, and it holds his state, not alice's
        run(gw, b, "mine = 5", token=keys["bob"])
        err, text, fb = call(gw, b, "fork", {"name": "t"}, token=keys["bob"])
        assert not err and fb["kernel_id"] != fa["kernel_id"], text
        assert kernel_status(gw, fa["kernel_id"], keys["bob"])[0] == 404
        text, _ = per_call(gw, "print(mine); print(secret)", "t", keys["bob"])
        assert text.startswith("5\n") and "NameError" in text, text
        text, _ = per_call(gw, "print(secret)", "t", keys["alice"])
        assert text.startswith("41\n"), text
        # at the tenant's bound (--mcp-named-kernels=1): refused, with the reason
        err, text, _ = call(gw, a, "fork", {"name": "t2"}, token=keys["alice"])
        assert err and "named kernels, the most" in text, text
    finally:
        end(gw, a, token=keys["alice"])
        end(gw, b, token=keys["bob"])
