"""The E2B-compatible API (docs/e2b.md): the real E2B SDKs from npm against a real gateway.

tests/e2b/e2b_client.mjs runs @e2b/code-interpreter 2.8.0, e2b 2.51.0 and e2b 2.50.0 (an npm
alias) with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set: create, runCode (state,
streamed stdout, an error, a matplotlib PNG; charts and dataframes, python/kgw_e2b.py), files, contexts, commands.run and kill
(process.Start, SendSignal), setTimeout,
connect, kill, tenancy and expiry. The wire details the SDKs depend on (chunked request bodies,
Connect's unimplemented, tokens) are also checked here with raw HTTP.

Needs `node` (>= 20) and `npm ci` run in tests/e2b (scripts/test.sh does that) for the SDK run;
the raw checks always run.
"""
import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.parse

import pytest

from conftest import key_file

HERE = os.path.dirname(os.path.abspath(__file__))
E2B_DIR = os.path.join(os.path.dirname(HERE), "e2b")
NODE = shutil.which("node")
CLIENT_TIMEOUT_S = 900  # generous: a loaded machine starts kernels slowly; outcomes are asserted


def _node_skip_reason():
    if NODE is None:
        return "node is not on PATH"
    for pkg in ("e2b", "e2b-old", os.path.join("@e2b", "code-interpreter")):
        if not os.path.isdir(os.path.join(E2B_DIR, "node_modules", pkg)):
            return f"tests/e2b/node_modules missing: run `npm ci` in {E2B_DIR}"
    return None


needs_node = pytest.mark.skipif(_node_skip_reason() is not None,
                                reason=_node_skip_reason() or "")


@pytest.fixture(scope="module")
def gw2(tmp_path_factory):
    """A gateway with two tenants' keys: (gateway, {tenant: key})."""
    from conftest import start_gateway, stop_gateway
    d = tmp_path_factory.mktemp("e2bkeys")
    path, keys = key_file(["alice", "bob"], directory=str(d))
    gw = start_gateway(["--key-file", path])
    yield gw, keys
    stop_gateway(gw)


def request(gw, method, path, body=None, headers=None, chunked=False):
    """(status, parsed JSON or raw bytes, headers) of one request on its own connection."""
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=300)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = dict(headers or {})
        if chunked:
            c.putrequest(method, path)
            for k, v in h.items():
                c.putheader(k, v)
            c.putheader("Transfer-Encoding", "chunked")
            c.endheaders()
            if data:
                c.send(b"%x\r\n%s\r\n" % (len(data), data))
            c.send(b"0\r\n\r\n")
        else:
            c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw
        return r.status, payload, r.headers
    finally:
        c.close()


def create(gw, key, body=None, chunked=False):
    return request(gw, "POST", "/e2b/api/v2/sandboxes", body if body is not None else {},
                   {"X-API-KEY": key, "Content-Type": "application/json"}, chunked=chunked)


def sbx_headers(model, token=None):
    return {"E2b-Sandbox-Id": model["sandboxID"],
            "X-Access-Token": model["envdAccessToken"] if token is None else token}


def test_chunked_create_and_connection_close(gw2):
    """undici sends every JSON body chunked: it is decoded, answered, and the connection ends
    (lws cannot find a next request after it). Before hchunk.c this got no answer at all."""
    gw, keys = gw2
    status, model, hdrs = create(gw, keys["alice"], {"templateID": "base", "timeout": 60},
                                 chunked=True)
    assert status == 201, model
    assert hdrs.get("Connection", "").lower() == "close"
    assert model["templateID"] == "base" and model["envdVersion"]
    assert model["envdAccessToken"] != model["trafficAccessToken"]
    assert len(model["envdAccessToken"]) >= 32
    # a malformed chunked body: 400, not a hang
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    try:
        c.putrequest("POST", "/e2b/api/v2/sandboxes")
        c.putheader("X-API-KEY", keys["alice"])
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        c.send(b"zz\r\n{}\r\n0\r\n\r\n")
        assert c.getresponse().status == 400
    finally:
        c.close()
    request(gw, "DELETE", f"/e2b/api/sandboxes/{model['sandboxID']}",
            headers={"X-API-KEY": keys["alice"]})


def test_refusals_and_tenancy(gw2):
    gw, keys = gw2
    status, body, _ = create(gw, keys["alice"], {"templateID": "base",
                                                 "allow_internet_access": True})
    assert status == 400 and "internet" in body["message"], body
    assert body["code"] == 400 and body["reason"] == "Bad Request"
    status, body, _ = create(gw, keys["alice"], {"templateID": "nope"})
    assert status == 400 and "not offered" in body["message"]
    status, body, _ = create(gw, keys["alice"], {"templateID": "base", "timeout": 0})
    assert status == 400
    status, body, _ = create(gw, "wrong-key", {})
    assert status == 401
    status, body, _ = request(gw, "GET", "/e2b/api/templates",
                              headers={"X-API-KEY": keys["alice"]})
    assert status == 501 and "not offered" in body["message"]

    status, m, _ = create(gw, keys["alice"], {"templateID": "base", "timeout": 120})
    assert status == 201, m
    sid = m["sandboxID"]
    # another tenant: as if it did not exist
    for method, path in (("GET", f"/e2b/api/sandboxes/{sid}"),
                         ("DELETE", f"/e2b/api/sandboxes/{sid}"),
                         ("POST", f"/e2b/api/sandboxes/{sid}/connect")):
        status, body, _ = request(gw, method, path, {} if method == "POST" else None,
                                  {"X-API-KEY": keys["bob"]})
        assert status == 404, (method, path, body)
    # the sandbox plane: the sandbox's token only, never the tenant's key
    status, _, _ = request(gw, "GET", "/e2b/sbx/health", headers=sbx_headers(m))
    assert status == 204
    for token in ("", "x" * 48, m["trafficAccessToken"], keys["alice"]):
        status, body, _ = request(gw, "POST", "/e2b/sbx/execute", {"code": "1"},
                                  sbx_headers(m, token))
        assert status == 401, token
    status, body, _ = request(gw, "POST", "/e2b/sbx/contexts", {},
                              {"E2b-Sandbox-Id": sid, "Authorization": f"token {keys['alice']}"})
    assert status == 401
    status, body, _ = request(gw, "POST", "/e2b/sbx/execute", {"code": "1"},
                              {"X-Access-Token": m["envdAccessToken"]})
    assert status == 400 and "E2b-Sandbox-Id" in body["message"]

    # /execute: the code interpreter's NDJSON lines
    status, raw, hdrs = request(gw, "POST", "/e2b/sbx/execute",
                                {"code": "print('hi')\n6 * 7"}, sbx_headers(m))
    assert status == 200 and hdrs["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(l) for l in raw.decode().splitlines()] if isinstance(raw, bytes) \
        else [raw]
    types = [l["type"] for l in lines if l["type"] != "keepalive"]
    assert types == ["stdout", "result", "number_of_executions", "end_of_execution"], lines
    assert lines[0]["text"] == "hi\n"
    assert lines[1]["text"] == "42" and lines[1]["is_main_result"] is True

    # Connect: a unary call not offered answers unimplemented (501), a streaming one at once
    # with an end-stream envelope holding the error
    status, body, _ = request(gw, "POST", "/e2b/sbx/process.Process/Update", {},
                              {**sbx_headers(m), "Content-Type": "application/json"})
    assert status == 501 and body["code"] == "unimplemented", body
    # (List is offered: the sandbox's running commands)
    status, body, _ = request(gw, "POST", "/e2b/sbx/process.Process/List", {},
                              {**sbx_headers(m), "Content-Type": "application/json"})
    assert status == 200 and body == {"processes": []}, body
    env = json.dumps({"process": {"pid": 1}}).encode()
    for method, code in (("StreamInput", "unimplemented"), ("Connect", "not_found")):
        t0 = time.monotonic()
        status, raw, hdrs = request(gw, "POST", f"/e2b/sbx/process.Process/{method}",
                                    bytes([0]) + len(env).to_bytes(4, "big") + env,
                                    {**sbx_headers(m), "Content-Type": "application/connect+json"})
        assert time.monotonic() - t0 < 30
        assert status == 200 and hdrs["Content-Type"] == "application/connect+json"
        assert raw[0] == 2 and int.from_bytes(raw[1:5], "big") == len(raw) - 5
        assert json.loads(raw[5:])["error"]["code"] == code, (method, raw)
    # Connect's body: a selector by pid (tags are not kept)
    for bad in ({"process": {"tag": "x"}}, {"process": {}}, {"pid": 1}, []):
        b = json.dumps(bad).encode()
        status, raw, _ = request(gw, "POST", "/e2b/sbx/process.Process/Connect",
                                 bytes([0]) + len(b).to_bytes(4, "big") + b,
                                 {**sbx_headers(m), "Content-Type": "application/connect+json"})
        assert status == 200 and json.loads(raw[5:])["error"]["code"] == "invalid_argument", raw
    # filesystem calls stay inside /home/user
    status, body, _ = request(gw, "POST", "/e2b/sbx/filesystem.Filesystem/ListDir",
                              {"path": "/etc"}, {**sbx_headers(m),
                                                 "Content-Type": "application/json"})
    assert status == 403 and body["code"] == "permission_denied"
    status, body, _ = request(gw, "POST", "/e2b/sbx/filesystem.Filesystem/Stat",
                              {"path": "/home/user/../../etc/passwd"},
                              {**sbx_headers(m), "Content-Type": "application/json"})
    assert status == 403
    # the kernel's own symlink is not followed out of the workspace
    status, raw, _ = request(gw, "POST", "/e2b/sbx/execute",
                             {"code": "import os; os.symlink('/etc', '/home/user/etc')"},
                             sbx_headers(m))
    assert status == 200
    status, body, _ = request(gw, "POST", "/e2b/sbx/filesystem.Filesystem/ListDir",
                              {"path": "/home/user/etc"},
                              {**sbx_headers(m), "Content-Type": "application/json"})
    assert status in (400, 404) and body["code"] != "ok", body
    status, body, _ = request(gw, "GET", "/e2b/sbx/files?path=/home/user/etc/passwd",
                              headers=sbx_headers(m))
    assert status in (400, 404, 409), body

    # killed: its tokens die with it
    status, _, _ = request(gw, "DELETE", f"/e2b/api/sandboxes/{sid}",
                           headers={"X-API-KEY": keys["alice"]})
    assert status == 204
    status, body, _ = request(gw, "POST", "/e2b/sbx/execute", {"code": "1"}, sbx_headers(m))
    assert status == 502
    status, _, _ = request(gw, "GET", f"/e2b/api/sandboxes/{sid}",
                           headers={"X-API-KEY": keys["alice"]})
    assert status == 404


def test_execute_cancelled_when_the_client_goes_away(gw2):
    """The run is interrupted when its reader leaves: the next run on the same kernel (they
    run one after another) does not wait for a 300 s sleep."""
    gw, keys = gw2
    status, m, _ = create(gw, keys["alice"], {"templateID": "base", "timeout": 600})
    assert status == 201, m
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    body = json.dumps({"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(300)"})
    c.request("POST", "/e2b/sbx/execute", body=body,
              headers={**sbx_headers(m), "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    first = json.loads(r.readline())  # (HTTPResponse decodes the chunks)
    while first.get("type") == "keepalive":
        first = json.loads(r.readline())
    assert first == {"type": "stdout", "text": "sleeping\n", "timestamp": first["timestamp"]}
    c.close()  # gone mid-run
    t0 = time.monotonic()
    status, raw, _ = request(gw, "POST", "/e2b/sbx/execute", {"code": "'after'"},
                             sbx_headers(m))
    assert status == 200
    lines = [json.loads(l) for l in raw.decode().splitlines()]
    # a str result is its text, as E2B's code interpreter shows it (not its repr)
    assert any(l.get("text") == "after" for l in lines), lines
    assert time.monotonic() - t0 < 120
    request(gw, "DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}",
            headers={"X-API-KEY": keys["alice"]})


def test_expiry_shuts_its_kernel_down(gw2):
    gw, keys = gw2
    status, m, _ = create(gw, keys["alice"], {"templateID": "base", "timeout": 2})
    assert status == 201, m
    status, kernels, _ = request(gw, "GET", "/api/kernels",
                                 headers={"Authorization": f"token {keys['alice']}"})
    before = {k["id"] for k in kernels}
    assert before
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, _, _ = request(gw, "GET", f"/e2b/api/sandboxes/{m['sandboxID']}",
                               headers={"X-API-KEY": keys["alice"]})
        if status == 404:
            break
        time.sleep(0.5)
    assert status == 404
    status, _, _ = request(gw, "GET", "/e2b/sbx/health", headers=sbx_headers(m))
    assert status == 502
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, kernels, _ = request(gw, "GET", "/api/kernels",
                                     headers={"Authorization": f"token {keys['alice']}"})
        if not kernels:
            break
        time.sleep(0.5)
    assert kernels == [], kernels


def run_node(argv, env, timeout=CLIENT_TIMEOUT_S):
    proc = subprocess.Popen(argv, cwd=E2B_DIR, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
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


@needs_node
def test_real_e2b_sdks(gw2):
    gw, keys = gw2
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update({
        "E2B_API_URL": f"http://127.0.0.1:{gw.port}/e2b/api",
        "E2B_SANDBOX_URL": f"http://127.0.0.1:{gw.port}/e2b/sbx",
        "E2B_API_KEY": keys["alice"],
        "KGW_E2B_OTHER_KEY": keys["bob"],
    })
    rc, out = run_node([NODE, "e2b_client.mjs"], env)
    assert rc == 0 and "ALL OK" in out, out


def test_delete_while_creating():
    """DELETE of a sandbox whose create still waits for its kernel: the create is answered (the
    sandbox ended while it started), the gateway lives on, and nothing of the sandbox is left.
    Before kernel waiters were called from the loop, the shutdown ran the create's callback
    inside the DELETE, which freed the sandbox that the DELETE then unlinked: a segfault for
    every tenant."""
    import threading
    from conftest import start_gateway, stop_gateway
    gw = start_gateway(["--pool", "python3=0"])
    try:
        key = {"X-API-KEY": gw.token}
        for _ in range(3):
            res = {}
            th = threading.Thread(target=lambda: res.update(c=create(gw, gw.token)))
            th.start()
            sid, deadline = None, time.monotonic() + 60
            while sid is None and time.monotonic() < deadline and th.is_alive():
                _, listed, _ = request(gw, "GET", "/e2b/api/v2/sandboxes", headers=key)
                sid = listed[0]["sandboxID"] if listed else None
            assert sid, "the sandbox never showed in the listing while it started"
            status, _, _ = request(gw, "DELETE", f"/e2b/api/sandboxes/{sid}", headers=key)
            th.join(120)
            assert gw.alive(), gw.log()[-3000:]
            assert status == 204
            # either the kernel won the race (201) or the delete did (the create says so)
            assert res["c"][0] in (201, 409), res["c"]
            assert request(gw, "GET", f"/e2b/api/sandboxes/{sid}", headers=key)[0] == 404
        deadline = time.monotonic() + 30
        while gw.request("GET", "/api/kernels")[1] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert gw.request("GET", "/api/kernels")[1] == []
    finally:
        stop_gateway(gw)


def test_list_filters_and_pages(gw2):
    """GET /sandboxes (v1, v2): metadata, state, template, startedAfter, order, limit and
    nextToken as E2B's API applies them (X-Next-Token, X-Total-Running); a filter kgw cannot
    apply is 400, never dropped (a clean-up that lists its own by metadata and kills them must
    not kill every sandbox)."""
    import urllib.parse
    gw, keys = gw2
    key = {"X-API-KEY": keys["bob"]}
    tag = os.urandom(4).hex()
    made = []
    try:
        for i in range(3):
            status, m, _ = create(gw, keys["bob"], {"templateID": "base", "metadata": {
                "run": tag, "i": str(i), "odd key": "a b&c=d%"}})
            assert status == 201, m
            made.append(m["sandboxID"])
        other, _, _ = create(gw, keys["bob"], {"templateID": "base", "metadata": {"run": "x"}})

        def listing(query, v2=True):
            path = ("/e2b/api/v2/sandboxes" if v2 else "/e2b/api/sandboxes") + query
            return request(gw, "GET", path, headers=key)

        def meta(d):  # as the JS SDK encodes it: each pair encoded, then the query
            inner = urllib.parse.urlencode({urllib.parse.quote(k, safe=""):
                                            urllib.parse.quote(v, safe="") for k, v in d.items()})
            return urllib.parse.quote(inner, safe="")

        for v2 in (True, False):
            status, items, hdrs = listing(f"?metadata={meta({'run': tag})}", v2)
            assert status == 200, items
            assert sorted(s["sandboxID"] for s in items) == sorted(made)
            assert hdrs["X-Total-Running"] == "3"
        # newest first by default, oldest first with order=asc
        status, items, _ = listing(f"?metadata={meta({'run': tag})}")
        assert [s["sandboxID"] for s in items] == made[::-1]
        status, items, _ = listing(f"?metadata={meta({'run': tag})}&order=asc")
        assert [s["sandboxID"] for s in items] == made
        # every pair must match; keys and values with reserved characters survive the encoding
        status, items, _ = listing(f"?metadata={meta({'run': tag, 'i': '1'})}")
        assert [s["sandboxID"] for s in items] == [made[1]]
        status, items, _ = listing(f"?metadata={meta({'run': tag, 'odd key': 'a b&c=d%'})}")
        assert len(items) == 3
        status, items, _ = listing(f"?metadata={meta({'run': tag, 'i': '7'})}")
        assert status == 200 and items == []
        # pages of one
        seen, token = [], None
        for _ in range(5):
            q = f"?metadata={meta({'run': tag})}&limit=1"
            if token:
                q += f"&nextToken={urllib.parse.quote(token)}"
            status, items, hdrs = listing(q)
            assert status == 200 and len(items) == 1, items
            seen.append(items[0]["sandboxID"])
            token = hdrs.get("X-Next-Token")
            if not token:
                break
        assert seen == made[::-1]
        # state: all run; paused ones are none
        status, items, hdrs = listing(f"?metadata={meta({'run': tag})}&state=running,paused")
        assert len(items) == 3
        status, items, hdrs = listing(f"?metadata={meta({'run': tag})}&state=paused")
        assert items == [] and "X-Total-Running" not in hdrs
        status, items, _ = listing("?template=base&startedAfter=2000-01-01T00:00:00.000Z")
        assert {s["sandboxID"] for s in items} >= set(made)
        status, items, _ = listing("?startedAfter=2999-01-01T00:00:00Z")
        assert items == []
        # what kgw cannot apply: 400 with a reason
        for bad in ("?state=sleeping", "?limit=0", "?limit=101", "?order=up", "?nextToken=zz",
                    "?startedAfter=yesterday", "?owner=me", "?metadata=novalue"):
            status, body, _ = listing(bad)
            assert status == 400, (bad, status, body)
            assert body["message"], body
        # another tenant sees none of them
        status, items, _ = request(gw, "GET", f"/e2b/api/v2/sandboxes?metadata={meta({'run': tag})}",
                                   headers={"X-API-KEY": keys["alice"]})
        assert status == 200 and items == []
    finally:
        for sid in made:
            request(gw, "DELETE", f"/e2b/api/sandboxes/{sid}", headers=key)
        if other == 201:
            for s in request(gw, "GET", "/e2b/api/v2/sandboxes", headers=key)[1]:
                request(gw, "DELETE", f"/e2b/api/sandboxes/{s['sandboxID']}", headers=key)


def test_sandbox_ids_that_are_not_there(gw2):
    """A sandbox id kgw never gives (not a UUID) is 404 like a missing one (the SDK's
    Sandbox.kill('x') then returns false); an E2B action kgw does not offer on a sandbox that
    exists is 501 and names it."""
    gw, keys = gw2
    key = {"X-API-KEY": keys["alice"]}
    for method, path in (("DELETE", "/e2b/api/sandboxes/x"), ("GET", "/e2b/api/sandboxes/x"),
                         ("POST", "/e2b/api/sandboxes/x/timeout"),
                         ("POST", "/e2b/api/sandboxes/not-a-uuid/connect"),
                         ("POST", "/e2b/api/v2/sandboxes/x/connect"),
                         ("DELETE", "/e2b/api/sandboxes/00000000-0000-4000-8000-000000000000")):
        status, body, _ = request(gw, method, path, body=b"{}", headers=key)
        assert status == 404, (method, path, status, body)
        assert "not found" in body["message"]
    status, m, _ = create(gw, keys["alice"], {"templateID": "base"})
    assert status == 201, m
    try:
        status, body, _ = request(gw, "POST", f"/e2b/api/sandboxes/{m['sandboxID']}/refreshes",
                                  body=b"{}", headers=key)
        assert status == 501 and "refreshes" in body["message"], body
    finally:
        request(gw, "DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}", headers=key)


def test_env_var_names(gw2):
    """envVars: one name rule with commands' envs ([A-Za-z_][A-Za-z0-9_]*): a bad name is 400 at
    the create, not a sandbox whose variables never reach its kernel."""
    gw, keys = gw2
    for name in ("1X", "A-B", "A B", "A=B", "ä"):
        status, body, _ = create(gw, keys["alice"], {"templateID": "base",
                                                     "envVars": {"OK": "1", name: "v"}})
        assert status == 400, (name, status, body)
        assert "envVars" in body["message"], body


def sbx_results(gw, h, code, **extra):
    """POST /e2b/sbx/execute with headers h: the texts of its result lines."""
    status, raw, _ = request(gw, "POST", "/e2b/sbx/execute", {"code": code, **extra}, h)
    assert status == 200, raw
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    return [x["text"] for x in lines if x.get("type") == "result"]


def test_context_cwd(gw2):
    """A context's cwd (createCodeContext({cwd})): its kernel works there (made if missing) and
    the listing says so; the default context works in /home/user."""
    gw, keys = gw2
    status, m, _ = create(gw, keys["alice"], {"templateID": "base"})
    assert status == 201, m
    h = {**sbx_headers(m), "Content-Type": "application/json"}
    try:
        def run(code, ctx=None):
            return sbx_results(gw, h, code, **({"context_id": ctx} if ctx else {}))
        assert run("import os; os.getcwd()") == ["/home/user"]
        for cwd in ("/home/user/sub/dir", "/tmp/elsewhere"):
            status, c, _ = request(gw, "POST", "/e2b/sbx/contexts", {"cwd": cwd}, h)
            assert status == 200 and c["cwd"] == cwd, c
            assert run("import os; os.getcwd()", c["id"]) == [cwd]
        status, listed, _ = request(gw, "GET", "/e2b/sbx/contexts", None, h)
        assert sorted(c["cwd"] for c in listed) == \
            ["/home/user", "/home/user/sub/dir", "/tmp/elsewhere"], listed
        for bad in ("relative", "/" + "x" * 300):
            status, body, _ = request(gw, "POST", "/e2b/sbx/contexts", {"cwd": bad}, h)
            assert status == 400, (bad, body)
    finally:
        request(gw, "DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}",
                headers={"X-API-KEY": keys["alice"]})


def test_sandbox_metrics(gw2):
    """GET /sandboxes/{id}/metrics: samples of the default kernel's cgroup and workspace every
    5 s (and at the create), E2B's SandboxMetric shape, filtered by start and end."""
    gw, keys = gw2
    key = {"X-API-KEY": keys["alice"]}
    status, m, _ = create(gw, keys["alice"], {"templateID": "base"})
    assert status == 201, m
    sid = m["sandboxID"]
    try:
        h = {**sbx_headers(m), "Content-Type": "application/json"}
        request(gw, "POST", "/e2b/sbx/execute",
                {"code": "import time\nt = time.time()\nwhile time.time() - t < 2: pass\n"
                         "open('blob', 'wb').write(b'x' * (1 << 20))"}, h)
        deadline = time.monotonic() + 30
        while True:
            status, ms, _ = request(gw, "GET", f"/e2b/api/sandboxes/{sid}/metrics", headers=key)
            assert status == 200, ms
            if len(ms) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert len(ms) >= 2, ms
        last = ms[-1]
        assert set(last) >= {"timestamp", "cpuCount", "cpuUsedPct", "memUsed", "memTotal",
                             "diskUsed", "diskTotal"}, last
        assert last["cpuCount"] >= 1 and last["memTotal"] > 0 and last["diskTotal"] > 0
        assert last["memUsed"] > 0 and last["diskUsed"] >= 1 << 20, last
        assert all(0 <= x["cpuUsedPct"] <= 100 * last["cpuCount"] + 5 for x in ms), ms
        status, none, _ = request(gw, "GET", f"/e2b/api/sandboxes/{sid}/metrics?start=4000000000",
                                  headers=key)
        assert status == 200 and none == []
        status, body, _ = request(gw, "GET", f"/e2b/api/sandboxes/{sid}/metrics?start=x",
                                  headers=key)
        assert status == 400, body
        status, body, _ = request(gw, "GET", f"/e2b/api/sandboxes/{sid}/metrics?end={'9' * 70}",
                                  headers=key)
        assert status == 400, body  # too long to read is refused, never taken for absent
        status, _, _ = request(gw, "GET", f"/e2b/api/sandboxes/{sid}/metrics",
                               headers={"X-API-KEY": keys["bob"]})
        assert status == 404
    finally:
        request(gw, "DELETE", f"/e2b/api/sandboxes/{sid}", headers=key)


def test_per_run_env_vars(gw2):
    """/execute's env_vars hold for that run only: set before it, put back after it (a variable
    of the sandbox's envVars comes back)."""
    gw, keys = gw2
    status, m, _ = create(gw, keys["alice"], {"templateID": "base", "envVars": {"KEEP": "sbx"}})
    assert status == 201, m
    h = {**sbx_headers(m), "Content-Type": "application/json"}
    try:
        def run(code, env=None):
            return sbx_results(gw, h, code, **({"env_vars": env} if env else {}))
        code = "import os; (os.environ.get('KEEP'), os.environ.get('RUN_ONLY'))"
        assert run(code, {"KEEP": "run", "RUN_ONLY": "yes"}) == ["('run', 'yes')"]
        assert run(code) == ["('sbx', None)"]
        # a run that fails puts them back too (ipykernel aborts what waits in its queue behind
        # a failed cell: the put-back must not be among it)
        assert run("raise ValueError('x')", {"KEEP": "err", "RUN_ONLY": "err"}) == []
        assert run(code) == ["('sbx', None)"]
        status, body, _ = request(gw, "POST", "/e2b/sbx/execute",
                                  {"code": "1", "env_vars": {"A-B": "x"}}, h)
        assert status == 400, body
    finally:
        request(gw, "DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}",
                headers={"X-API-KEY": keys["alice"]})


def test_lifetime_from_ready_and_a_kernel_ended_elsewhere(tmp_path):
    """A sandbox's lifetime counts from the create's answer: one asked for 2 s whose kernel
    takes longer to start is answered 201 (it was 409, expired while it started). A sandbox
    whose kernel is shut down through /api/kernels is gone at once for every route (it was
    half there until the next tick: health 204, /execute 404). POST .../timeout with 0 is
    refused as a create's is (it killed the sandbox). Found by test_e2b_model.py."""
    from conftest import start_gateway, stop_gateway
    d = tmp_path / "kernels" / "slow2"
    d.mkdir(parents=True)
    (d / "kernel.json").write_text(json.dumps({
        "argv": ["/usr/bin/python3", "-c", "import runpy, sys, time; time.sleep(3); "
                 "sys.argv = ['k', '-f', sys.argv[1]]; "
                 "runpy.run_module('ipykernel_launcher', run_name='__main__')",
                 "{connection_file}"],
        "display_name": "slow2", "language": "python"}))
    gw = start_gateway(["--pool", "python3=0", "--e2b-templates", "base=,slow=slow2"],
                       env={"JUPYTER_PATH": str(tmp_path)})
    try:
        key = {"X-API-KEY": gw.token}
        status, m, _ = create(gw, gw.token, {"templateID": "slow", "timeout": 2})
        assert status == 201, m
        status, d, _ = request(gw, "GET", f"/e2b/api/sandboxes/{m['sandboxID']}", headers=key)
        assert status == 200, d             # still within its lifetime
        deadline = time.monotonic() + 30
        while request(gw, "GET", "/e2b/sbx/health", headers=sbx_headers(m))[0] == 204 and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        assert request(gw, "GET", "/e2b/sbx/health", headers=sbx_headers(m))[0] == 502

        status, m, _ = create(gw, gw.token, {"templateID": "base", "timeout": 300})
        assert status == 201, m
        sid = m["sandboxID"]
        status, _, _ = request(gw, "POST", f"/e2b/api/sandboxes/{sid}/timeout", {"timeout": 0},
                               {**key, "Content-Type": "application/json"})
        assert status == 400
        status, ctxs, _ = request(gw, "GET", "/e2b/sbx/contexts", headers=sbx_headers(m))
        assert status == 200, ctxs
        assert gw.request("DELETE", f"/api/kernels/{ctxs[0]['id']}")[0] == 204
        assert request(gw, "POST", "/e2b/sbx/execute", {"code": "1"}, sbx_headers(m))[0] == 502
        assert request(gw, "GET", "/e2b/sbx/health", headers=sbx_headers(m))[0] == 502
        assert request(gw, "GET", f"/e2b/api/sandboxes/{sid}", headers=key)[0] == 404
        assert request(gw, "GET", "/e2b/api/v2/sandboxes", headers=key)[1] == []
    finally:
        stop_gateway(gw)


PLOT = ("import matplotlib.pyplot as plt, numpy as np\n"
        "plt.plot(np.arange(1_000_000), np.arange(1_000_000) * 2.0, label='big')\n"
        "plt.title('T')\nplt.show()\n")


def test_charts_only_for_e2b_kernels_and_bounded(gw2):
    """A figure's chart (e2b/chart, python/kgw_e2b.py) comes in an E2B sandbox's result line,
    sampled to a bounded size (a million points: one line well under a MiB beside its PNG);
    a kernel of kgw's own API shows the same figure as Jupyter's display data, unchanged."""
    gw, keys = gw2
    status, m, _ = create(gw, keys["alice"], {"templateID": "base"})
    assert status == 201, m
    h = {**sbx_headers(m), "Content-Type": "application/json"}
    try:
        status, raw, _ = request(gw, "POST", "/e2b/sbx/execute", {"code": PLOT}, h)
        assert status == 200, raw
        lines = [json.loads(x) for x in raw.decode().splitlines()]
        results = [x for x in lines if x.get("type") == "result"]
        assert len(results) == 1, lines
        r = results[0]
        assert set(r) >= {"png", "text", "chart"} and "e2b/chart" not in r, sorted(r)
        assert r["chart"]["type"] == "line" and r["chart"]["title"] == "T"
        assert r["chart"]["truncated"] is True
        assert r["chart"]["elements"][0]["total_points"] == 1_000_000
        assert len(json.dumps(r["chart"])) < 1024 * 1024
    finally:
        request(gw, "DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}",
                headers={"X-API-KEY": keys["alice"]})
    auth = {"Authorization": f"token {keys['alice']}", "Content-Type": "application/json"}
    status, k, _ = request(gw, "POST", "/api/kernels", {}, auth)
    assert status == 201, k
    try:
        status, raw, _ = request(gw, "POST", f"/api/kernels/{k['id']}/execute",
                                 {"code": PLOT}, auth)
        assert status == 201, raw
        events = [json.loads(x) for x in raw.decode().splitlines()]
        shown = [e for e in events if e.get("type") == "display"]
        assert len(shown) == 1, events
        assert set(shown[0]["data"]) == {"image/png", "text/plain"}, sorted(shown[0]["data"])
    finally:
        request(gw, "DELETE", f"/api/kernels/{k['id']}", headers=auth)


# ---- process.Process/Start within the output budget (the commands API's streams) ----

BUDGET = 64 * 1024  # --output-buffer-bytes: a lone kernel's share is all of it
FLOOD = 16 << 20    # what the command prints: far more than the budget
# what the stream may hold at once: its share, and the one read (64 KiB of output, as framed:
# base64 in a Connect envelope, or a JSON event) that took it over, before the command pauses
HELD_BOUND = BUDGET + 96 * 1024


def envelope(obj, flags=0):
    data = json.dumps(obj).encode()
    return bytes([flags]) + struct.pack(">I", len(data)) + data


def output_held(gw):
    """kgw_output_buffer_bytes: kernel output the gateway holds for clients now."""
    _, text, _ = gw.request("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else text
    return int(float(re.search(r"^kgw_output_buffer_bytes (\S+)$", text, re.M).group(1)))


def unread_post(gw, path, body, headers):
    """A POST whose response its client does not read yet: sent on a connection with a small
    receive buffer (the client itself holds little), the response left for getresponse()."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    s.settimeout(120)
    s.connect(("127.0.0.1", gw.port))
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=120)
    c.sock = s
    c.request("POST", path, body=body, headers=headers)
    return c


def held_while_unread(gw):
    """What the gateway holds once a flooding command's unread stream stopped growing: the
    samples of kgw_output_buffer_bytes over a second after it settled."""
    deadline, last, same = time.monotonic() + 60, -1, 0
    while time.monotonic() < deadline and same < 4:
        time.sleep(0.25)
        held = output_held(gw)
        same = same + 1 if held == last and held > 0 else 0
        last = held
    return [output_held(gw) for _ in range(4)]


def test_process_output_within_the_output_budget():
    """process.Process/Start streams a command as the commands API does (gateway/xcmd.c): a
    client that does not read has the command's output wait within the kernel's share of
    --output-buffer-bytes, charged to it (kgw_output_buffer_bytes), the command paused on its
    pipe meanwhile; read later, the output is whole. The same command through
    POST /api/kernels/{id}/commands is held alike. (Before: an E2B process queued up to 256 KiB
    beside the budget, which never counted it.)"""
    from conftest import start_gateway, stop_gateway
    gw = start_gateway(["--output-buffer-bytes", str(BUDGET), "--pool", "python3=0"])
    cmd = f"head -c {FLOOD} /dev/zero | tr '\\0' x"
    try:
        status, m, _ = create(gw, gw.token, {"templateID": "base", "timeout": 600})
        assert status == 201, m
        kid = gw.request("GET", "/api/kernels")[1][0]["id"]
        assert output_held(gw) == 0

        # E2B: Connect envelopes, base64 data events
        c = unread_post(gw, "/e2b/sbx/process.Process/Start",
                        envelope({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}),
                        {**sbx_headers(m), "Content-Type": "application/connect+json"})
        held = held_while_unread(gw)
        assert 0 < min(held) and max(held) <= HELD_BOUND, held
        r = c.getresponse()
        assert r.status == 200
        out, end = 0, None
        while True:
            head = r.read(5)
            if len(head) < 5:
                break
            msg = json.loads(r.read(struct.unpack(">I", head[1:])[0]))
            ev = msg.get("event", {})
            out += len(base64.b64decode(ev.get("data", {}).get("stdout", "")))
            end = ev.get("end", end)
        c.close()
        assert out == FLOOD and end and end["exitCode"] == 0, (out, end)
        e2b_held = held

        # the commands API, on the sandbox's kernel: NDJSON events
        c = unread_post(gw, f"/api/kernels/{kid}/commands", json.dumps({"command": cmd}),
                        gw.headers())
        held = held_while_unread(gw)
        assert 0 < min(held) and max(held) <= HELD_BOUND, held
        r = c.getresponse()
        assert r.status == 201
        evs = [json.loads(line) for line in r if line.strip()]
        c.close()
        out = sum(len(e["text"]) for e in evs if e["type"] == "stdout")
        assert out == FLOOD and evs[-1]["status"] == "ok", (out, evs[-1])
        print(f"held while unread: E2B {e2b_held}, commands API {held} (budget {BUDGET})")
        deadline = time.monotonic() + 10
        while output_held(gw) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert output_held(gw) == 0  # all released once written
    finally:
        stop_gateway(gw)


def proc_call(gw, m, method, body):
    """A unary process.Process call: (status, answer)."""
    status, ans, _ = request(gw, "POST", f"/e2b/sbx/process.Process/{method}", body,
                             {**sbx_headers(m), "Content-Type": "application/json"})
    return status, ans


def proc_pids(gw, m):
    status, a = proc_call(gw, m, "List", {})
    assert status == 200, a
    return [p["pid"] for p in a["processes"]]


def start_detached(gw, m, argv, headers=None):
    """process.Process/Start whose client reads the start event and goes: the pid, or the
    stream's end (a refusal)."""
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    c.request("POST", "/e2b/sbx/process.Process/Start",
              envelope({"process": {"cmd": argv[0], "args": argv[1:]}}),
              {**sbx_headers(m), "Content-Type": "application/connect+json", **(headers or {})})
    r = c.getresponse()
    assert r.status == 200
    head = r.read(5)
    msg = json.loads(r.read(struct.unpack(">I", head[1:])[0]))
    c.close()
    return msg["event"]["start"]["pid"] if "event" in msg else msg


def test_process_detached_holds_nothing_and_is_bounded():
    """A process.Process command outlives its Start stream (docs/e2b.md, "Commands"): detached,
    its output is read and dropped, so a flood neither blocks it on its pipe nor has the
    gateway hold anything (kgw_output_buffer_bytes stays 0); List shows it while it runs.
    Detached commands still count in --max-commands-per-kernel; Connect to one that ended is
    not_found."""
    from conftest import start_gateway, stop_gateway
    gw = start_gateway(["--output-buffer-bytes", str(BUDGET), "--pool", "python3=0",
                        "--max-commands-per-kernel", "2"])
    try:
        status, m, _ = create(gw, gw.token, {"templateID": "base", "timeout": 600})
        assert status == 201, m
        pid = start_detached(gw, m, ["/bin/bash", "-c",
                                     f"sleep 1; head -c {FLOOD * 4} /dev/zero | tr '\\0' x"])
        assert isinstance(pid, int), pid
        assert pid in proc_pids(gw, m)  # it runs on without its client
        held, deadline = [], time.monotonic() + 60
        while pid in proc_pids(gw, m) and time.monotonic() < deadline:
            held.append(output_held(gw))
            time.sleep(0.05)
        assert pid not in proc_pids(gw, m), "a detached flood must not block on its pipe"
        assert len(held) > 5 and max(held) == 0, held
        # ended: Connect finds nothing
        c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        c.request("POST", "/e2b/sbx/process.Process/Connect", envelope({"process": {"pid": pid}}),
                  {**sbx_headers(m), "Content-Type": "application/connect+json"})
        r = c.getresponse()
        body = r.read()
        c.close()
        assert r.status == 200 and body[0] == 2, body
        assert json.loads(body[5:])["error"]["code"] == "not_found", body

        # the kernel's limit of commands counts detached ones
        a = start_detached(gw, m, ["sleep", "60"])
        b = start_detached(gw, m, ["sleep", "60"])
        assert isinstance(a, int) and isinstance(b, int), (a, b)
        third = start_detached(gw, m, ["sleep", "60"])
        assert third.get("error", {}).get("code") == "resource_exhausted", third
        assert sorted(proc_pids(gw, m)) == sorted([a, b])
        status, ans = proc_call(gw, m, "SendSignal",
                                {"process": {"pid": a}, "signal": "SIGNAL_SIGKILL"})
        assert status == 200, ans
        deadline = time.monotonic() + 10
        while a in proc_pids(gw, m) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc_pids(gw, m) == [b]
        c = start_detached(gw, m, ["sleep", "60"])  # a slot again
        assert isinstance(c, int), c
        proc_call(gw, m, "SendSignal", {"process": {"pid": b}, "signal": "SIGNAL_SIGKILL"})
        proc_call(gw, m, "SendSignal", {"process": {"pid": c}, "signal": "SIGNAL_SIGKILL"})
        deadline = time.monotonic() + 10
        while proc_pids(gw, m) and time.monotonic() < deadline:  # (their slots free at their end)
            time.sleep(0.1)
        assert proc_pids(gw, m) == []

        # the call's deadline (the SDKs' timeoutMs) still ends a detached command
        t0 = time.monotonic()
        d = start_detached(gw, m, ["sleep", "60"], {"Connect-Timeout-Ms": "1500"})
        assert isinstance(d, int), d
        while d in proc_pids(gw, m) and time.monotonic() - t0 < 20:
            time.sleep(0.1)
        assert d not in proc_pids(gw, m) and time.monotonic() - t0 >= 1.4
    finally:
        stop_gateway(gw)


# ---- directory watches (docs/e2b.md, "Directory watches") ----

class WatchStream:
    """A WatchDir stream read as it comes (http.client takes the chunks apart)."""

    def __init__(self, gw, m, path, recursive=False, headers=None):
        self.c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
        self.c.request("POST", "/e2b/sbx/filesystem.Filesystem/WatchDir",
                       body=envelope({"path": path, "recursive": recursive}),
                       headers={**sbx_headers(m), "Content-Type": "application/connect+json",
                                **(headers or {})})
        self.r = self.c.getresponse()
        assert self.r.status == 200 and \
            self.r.headers["Content-Type"] == "application/connect+json"
        self.events = []

    def next(self):
        """(flags, message) of the next envelope; None at the end of the answer."""
        head = self.r.read(5)
        if len(head) < 5:
            return None
        n = int.from_bytes(head[1:5], "big")
        return head[0], json.loads(self.r.read(n))

    def first(self):
        return self.next()

    def wait(self, name, etype, timeout=30):
        """Reads until the event (name, EVENT_TYPE_etype) came; the events read so far."""
        deadline = time.monotonic() + timeout
        want = {"name": name, "type": "EVENT_TYPE_" + etype}
        while want not in self.events:
            assert time.monotonic() < deadline, (want, self.events)
            got = self.next()
            assert got is not None and got[0] == 0, (got, self.events)
            if "filesystem" in got[1]:
                self.events.append(got[1]["filesystem"])
        return self.events

    def end(self):
        """The end-of-stream message after what is left."""
        while True:
            got = self.next()
            assert got is not None, self.events
            if got[0] & 2:
                return got[1]
            if "filesystem" in got[1]:
                self.events.append(got[1]["filesystem"])

    def close(self):
        self.c.close()


def rpc(gw, m, method, body):
    return request(gw, "POST", f"/e2b/sbx/filesystem.Filesystem/{method}", body,
                   {**sbx_headers(m), "Content-Type": "application/json"})


def run_code(gw, m, code):
    status, raw, _ = request(gw, "POST", "/e2b/sbx/execute", {"code": code},
                             {**sbx_headers(m), "Content-Type": "application/json"})
    assert status == 200, raw
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    assert not [x for x in lines if x["type"] == "error"], lines
    return lines


def upload(gw, m, path, data):
    boundary = "kgwtestboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"{path}\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode() \
        + data + f"\r\n--{boundary}--\r\n".encode()
    status, res, _ = request(gw, "POST", "/e2b/sbx/files", body,
                             {**sbx_headers(m),
                              "Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert status == 200, res
    return res


def new_sandbox(gw, key, timeout=300):
    status, m, _ = create(gw, key, {"templateID": "base", "timeout": timeout})
    assert status == 201, m
    return m


def kill(gw, key, m):
    request(gw, "DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}", headers={"X-API-KEY": key})


def test_watch_stream(gw2):
    """WatchDir: the start message, then envd's events (names relative to the watched
    directory) of files written through /files and by the kernel, recursive watches of
    directories made later (what they held before their watch counts as created), a
    non-recursive watch blind below its directory, and its end when the sandbox is killed.
    Refusals: a file, a missing directory, a path outside /home/user, a symbolic link (never
    followed), includeEntry."""
    gw, keys = gw2
    m = new_sandbox(gw, keys["alice"])
    try:
        run_code(gw, m, "import os\nos.makedirs('/home/user/w/old', exist_ok=True)\n"
                        "os.symlink('/etc', '/home/user/w/etc')")
        flat = WatchStream(gw, m, "/home/user/w")
        deep = WatchStream(gw, m, "w", recursive=True)
        for st in (flat, deep):
            assert st.first() == (0, {"start": {}})
        upload(gw, m, "/home/user/w/a.txt", b"one")
        flat.wait("a.txt", "CREATE")
        flat.wait("a.txt", "WRITE")
        deep.wait("a.txt", "WRITE")
        run_code(gw, m, "open('/home/user/w/old/k.txt', 'w').write('by the kernel')")
        deep.wait("old/k.txt", "CREATE")
        deep.wait("old/k.txt", "WRITE")
        # a directory made later is watched; what it held before its watch is told as created
        run_code(gw, m, "os.makedirs('/home/user/w/new/x/y')\n"
                        "open('/home/user/w/new/x/y/z.txt', 'w').write('z')")
        deep.wait("new/x/y/z.txt", "CREATE")
        upload(gw, m, "/home/user/w/new/x/y/z.txt", b"again")
        deep.wait("new/x/y/z.txt", "WRITE")
        run_code(gw, m, "os.chmod('/home/user/w/a.txt', 0o600)\n"
                        "os.rename('/home/user/w/a.txt', '/home/user/w/b.txt')\n"
                        "os.remove('/home/user/w/b.txt')")
        for name, etype in (("a.txt", "CHMOD"), ("a.txt", "RENAME"), ("b.txt", "CREATE"),
                            ("b.txt", "REMOVE")):
            flat.wait(name, etype)
        # a directory moved within the watch: watched under its new name only
        run_code(gw, m, "os.rename('/home/user/w/new', '/home/user/w/moved')\n"
                        "open('/home/user/w/moved/x/after.txt', 'w').write('m')")
        deep.wait("moved/x/after.txt", "CREATE")
        assert not [e for e in deep.events if e["name"].startswith("new/x/after")], deep.events
        # the flat watch saw its own directory's names only
        assert all("/" not in e["name"] for e in flat.events), flat.events
        # the symbolic link was never followed (nothing of /etc is watched)
        assert not [e for e in deep.events if e["name"].startswith("etc/")], deep.events

        # refusals: at once, an end-of-stream error
        for path, codes in (("/home/user/w/old/k.txt", {"invalid_argument"}),
                            ("/home/user/none", {"not_found"}), ("/etc", {"permission_denied"}),
                            ("/home/user/w/etc", {"invalid_argument", "failed_precondition"})):
            st = WatchStream(gw, m, path)
            flags, msg = st.first()
            assert flags == 2 and msg["error"]["code"] in codes, (path, msg)
            st.close()
        c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
        c.request("POST", "/e2b/sbx/filesystem.Filesystem/WatchDir",
                  body=envelope({"path": "/home/user", "includeEntry": True}),
                  headers={**sbx_headers(m), "Content-Type": "application/connect+json"})
        raw = c.getresponse().read()
        assert raw[0] == 2 and json.loads(raw[5:])["error"]["code"] == "unimplemented", raw
        c.close()

        # the sandbox killed: the stream's connection is dropped (as its other streams')
        kill(gw, keys["alice"], m)
        t0 = time.monotonic()
        with pytest.raises((http.client.IncompleteRead, ConnectionError, AssertionError)):
            while True:
                got = deep.next()
                assert got is not None and not got[0] & 2, got
        assert time.monotonic() - t0 < 30
        flat.close()
        deep.close()
    finally:
        kill(gw, keys["alice"], m)


def test_watch_ends_with_its_directory(gw2):
    """A watched directory removed: the stream ends (no error) after the events before it."""
    gw, keys = gw2
    m = new_sandbox(gw, keys["alice"])
    try:
        rpc(gw, m, "MakeDir", {"path": "/home/user/gone"})
        st = WatchStream(gw, m, "/home/user/gone")
        assert st.first() == (0, {"start": {}})
        upload(gw, m, "/home/user/gone/f", b"x")
        st.wait("f", "CREATE")
        assert rpc(gw, m, "Remove", {"path": "/home/user/gone"})[0] == 200
        assert st.end() == {}
        st.wait("f", "REMOVE")
        assert st.next() is None
        st.close()
    finally:
        kill(gw, keys["alice"], m)


def test_watchers(gw2):
    """CreateWatcher, GetWatcherEvents, RemoveWatcher (the Python SDK's synchronous
    watch_dir): events drained by each poll; a watcher is its sandbox's alone; at most 16
    watches per sandbox; a watcher not polled stops at 4096 waiting events and says so; the
    sandbox's end takes its watchers with it."""
    gw, keys = gw2
    m = new_sandbox(gw, keys["alice"])
    other = new_sandbox(gw, keys["alice"])
    try:
        rpc(gw, m, "MakeDir", {"path": "/home/user/p/q"})
        status, body, _ = rpc(gw, m, "CreateWatcher", {"path": "/home/user/p", "recursive": True})
        assert status == 200, body
        wid = body["watcherId"]
        upload(gw, m, "/home/user/p/q/one.txt", b"1")
        deadline, seen = time.monotonic() + 30, []
        while {"name": "q/one.txt", "type": "EVENT_TYPE_WRITE"} not in seen:
            assert time.monotonic() < deadline, seen
            status, body, _ = rpc(gw, m, "GetWatcherEvents", {"watcherId": wid})
            assert status == 200, body
            seen += body["events"]
            time.sleep(0.1)
        assert rpc(gw, m, "GetWatcherEvents", {"watcherId": wid})[1] == {"events": []}
        # another sandbox's token does not find it
        status, body, _ = rpc(gw, other, "GetWatcherEvents", {"watcherId": wid})
        assert status == 404 and body["code"] == "not_found", body
        assert rpc(gw, m, "RemoveWatcher", {"watcherId": wid})[0] == 200
        status, body, _ = rpc(gw, m, "GetWatcherEvents", {"watcherId": wid})
        assert status == 404, body
        assert rpc(gw, m, "CreateWatcher", {"path": "/home/user/p/q/one.txt"})[0] == 400

        # 16 watches per sandbox
        ids = []
        for _ in range(16):
            status, body, _ = rpc(gw, m, "CreateWatcher", {"path": "/home/user/p"})
            assert status == 200, body
            ids.append(body["watcherId"])
        status, body, _ = rpc(gw, m, "CreateWatcher", {"path": "/home/user/p"})
        assert status == 429 and body["code"] == "resource_exhausted", body
        st = WatchStream(gw, m, "/home/user/p")
        flags, msg = st.first()
        assert flags == 2 and msg["error"]["code"] == "resource_exhausted", msg
        st.close()
        # (the other sandbox has its own)
        assert rpc(gw, other, "CreateWatcher", {"path": "/home/user"})[0] == 200
        # not polled: it stops past 4096 events, and says so (two names in turn: inotify
        # merges an event with the same one queued right before it)
        run_code(gw, m, "import os\nfor n in 'ab':\n    open('/home/user/p/' + n, 'w').close()\n"
                        "for i in range(2500):\n"
                        "    os.utime('/home/user/p/a')\n"
                        "    os.utime('/home/user/p/b')\n")
        deadline = time.monotonic() + 30
        while True:
            status, body, _ = rpc(gw, m, "GetWatcherEvents", {"watcherId": ids[0]})
            if status != 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == 429 and body["code"] == "resource_exhausted", body
        assert "4096" in body["message"]
        for wid in ids[1:]:
            assert rpc(gw, m, "RemoveWatcher", {"watcherId": wid})[0] == 200
        # killed: its watchers go with it (and the token is refused anyway)
        kill(gw, keys["alice"], m)
        assert rpc(gw, m, "GetWatcherEvents", {"watcherId": ids[0]})[0] == 502
    finally:
        kill(gw, keys["alice"], m)
        kill(gw, keys["alice"], other)


def test_watch_slow_reader_stops():
    """A stream whose client takes nothing while its events pile up stops at 1 MiB waiting
    (resource_exhausted at the end of what it holds), instead of the gateway holding them."""
    from conftest import start_gateway, stop_gateway
    gw = start_gateway(["--pool", "python3=0"])
    try:
        m = new_sandbox(gw, gw.token)
        st = WatchStream(gw, m, "/home/user")
        assert st.first() == (0, {"start": {}})
        # ~75 bytes an event, 300 000 of them (22 MB): far more than the socket buffers and the
        # 1 MiB together; two names in turn (inotify merges an event with the same one queued
        # right before it), paced (25 000 a second) so that the gateway takes them all from
        # inotify, whose queue would overflow otherwise (that ends the watch with data_loss)
        run_code(gw, m, "import os, time\nfor n in 'ab':\n    open('/home/user/' + n, 'w').close()\n"
                        "for i in range(300):\n"
                        "    for j in range(500):\n"
                        "        os.utime('/home/user/a')\n"
                        "        os.utime('/home/user/b')\n"
                        "    time.sleep(0.04)\n")
        end = st.end()
        assert end["error"]["code"] == "resource_exhausted", end
        assert "1 MiB" in end["error"]["message"]
        assert len(st.events) < 300000
        st.close()
        assert gw.alive()
    finally:
        stop_gateway(gw)


def test_watch_bounds(tmp_path):
    """--e2b-max-watch-dirs bounds the directories a sandbox's watches hold, and
    --e2b-tenant-max-watch-dirs those of all of a tenant's sandboxes; another tenant is not
    held back. A recursive watch that grows past the bound stops with resource_exhausted."""
    from conftest import start_gateway, stop_gateway
    path, keys = key_file(["alice", "bob"], directory=str(tmp_path))
    gw = start_gateway(["--key-file", path, "--pool", "python3=0",
                        "--e2b-max-watch-dirs", "8", "--e2b-tenant-max-watch-dirs", "12"])
    made = []

    def sandbox(tenant, ndirs):
        m = new_sandbox(gw, keys[tenant])
        made.append((keys[tenant], m))
        run_code(gw, m, f"import os\nfor i in range({ndirs - 1}):\n"
                        f"    os.makedirs(f'/home/user/t/d{{i}}')\n")
        return m

    try:
        a = sandbox("alice", 6)           # /home/user/t and 5 below it
        wa = WatchStream(gw, a, "/home/user/t", recursive=True)
        assert wa.first() == (0, {"start": {}})
        b = sandbox("alice", 7)
        st = WatchStream(gw, b, "/home/user/t", recursive=True)   # 6 + 7 > 12: the tenant's
        flags, msg = st.first()
        assert flags == 2 and msg["error"]["code"] == "resource_exhausted", msg
        assert "--e2b-tenant-max-watch-dirs" in msg["error"]["message"]
        st.close()
        status, body, _ = rpc(gw, b, "CreateWatcher", {"path": "/home/user/t",
                                                        "recursive": True})
        assert status == 429, body
        wb = WatchStream(gw, b, "/home/user/t/d0")                 # 6 + 1
        assert wb.first() == (0, {"start": {}})
        # another tenant: its own count (8 is the sandbox's bound, 9 is past it)
        c = sandbox("bob", 9)
        st = WatchStream(gw, c, "/home/user/t", recursive=True)
        flags, msg = st.first()
        assert flags == 2 and msg["error"]["code"] == "resource_exhausted", msg
        st.close()
        run_code(gw, c, "import shutil; shutil.rmtree('/home/user/t/d7')")
        wc = WatchStream(gw, c, "/home/user/t", recursive=True)    # 8
        assert wc.first() == (0, {"start": {}})
        # growing past the sandbox's bound: the watch stops and says why
        run_code(gw, c, "os.makedirs('/home/user/t/d7')")
        end = wc.end()
        assert end["error"]["code"] == "resource_exhausted", end
        assert {"name": "d7", "type": "EVENT_TYPE_CREATE"} in wc.events
        # ... and lets its directories go: a watch of 8 fits again
        wc2 = WatchStream(gw, c, "/home/user/t", recursive=True)
        flags, msg = wc2.first()
        assert flags == 2 and "resource_exhausted" in json.dumps(msg), msg   # 9 now
        wc3 = WatchStream(gw, c, "/home/user/t/d0", recursive=True)
        assert wc3.first() == (0, {"start": {}})
        # a stream's end lets go of its directories: alice's second sandbox fits now
        wa.close()
        deadline = time.monotonic() + 10
        while True:
            st = WatchStream(gw, b, "/home/user/t", recursive=True)   # 1 + 7 <= 8, 12
            got = st.first()
            if got == (0, {"start": {}}) or time.monotonic() > deadline:
                break
            st.close()
            time.sleep(0.2)
        assert got == (0, {"start": {}}), got
        for x in (st, wb, wc, wc2, wc3):
            x.close()
        assert gw.alive()
    finally:
        for key, m in made:
            kill(gw, key, m)
        stop_gateway(gw)


# ---- signed file URLs (docs/e2b.md, "Signed file URLs") ----

def signature(path, op, token, user="", expiration=None):
    raw = f"{path}:{op}:{user}:{token}" + (f":{expiration}" if expiration is not None else "")
    return "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")


def signed_url(m, path, op, user="", expiration=None, prefix=""):
    """The URL as the SDKs build it: /files at the root, the query in URLSearchParams' form."""
    q = {}
    if user:
        q["username"] = user
    if path:
        q["path"] = path
    q["signature"] = signature(path, op, m["envdAccessToken"], user, expiration)
    if expiration is not None:
        q["signature_expiration"] = str(expiration)
    return prefix + "/files?" + urllib.parse.urlencode(q)


def test_signed_urls(gw2):
    """A download and an upload through signed URLs at the root (no key, no sandbox headers);
    a wrong, another sandbox's or expired signature is refused with 401 as envd refuses it;
    kgw's own GET /files without a signature still wants a key; the URLs die with the
    sandbox."""
    gw, keys = gw2
    m = new_sandbox(gw, keys["alice"])
    m2 = new_sandbox(gw, keys["bob"])
    try:
        upload(gw, m, "/home/user/s/a b+c.txt", b"signed bytes")
        later = int(time.time()) + 600
        for path in ("/home/user/s/a b+c.txt", "s/a b+c.txt"):
            for exp in (later, None):
                status, body, hdrs = request(gw, "GET", signed_url(m, path, "read", expiration=exp))
                assert status == 200 and body == b"signed bytes", (path, exp, status, body)
        # a user name is part of what is signed
        status, body, _ = request(gw, "GET", signed_url(m, "s/a b+c.txt", "read", user="user"))
        assert status == 200 and body == b"signed bytes"
        # the sandbox plane's own prefix takes them too
        status, body, _ = request(gw, "GET", signed_url(m, "s/a b+c.txt", "read",
                                                        prefix="/e2b/sbx"))
        assert status == 200 and body == b"signed bytes"
        # upload: multipart, the path of the URL
        boundary = "sgnd"
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"x\"\r\n\r\nuploaded\r\n--{boundary}--\r\n").encode()
        ctype = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        status, body, _ = request(gw, "POST", signed_url(m, "/home/user/up.txt", "write",
                                                         expiration=later), form, ctype)
        assert status == 200, body
        assert body == [{"name": "up.txt", "type": "file", "path": "/home/user/up.txt"}]
        status, body, _ = request(gw, "GET", "/e2b/sbx/files?path=up.txt", headers=sbx_headers(m))
        assert body == b"uploaded"
        # refusals: envd's 401s
        expired = signed_url(m, "up.txt", "read", expiration=int(time.time()) - 10)
        status, body, _ = request(gw, "GET", expired)
        assert status == 401 and body["message"] == "signature is already expired", body
        good = signed_url(m, "up.txt", "read", expiration=later)
        for bad in (good.replace("signature=v1_", "signature=v1_A"),
                    good.replace(f"signature_expiration={later}",
                                 f"signature_expiration={later + 1}"),
                    signed_url(m, "up.txt", "write", expiration=later),     # read with write's
                    signed_url(m, "other.txt", "read").replace("other.txt", "up.txt"),
                    "/files?path=up.txt&signature="):
            status, body, _ = request(gw, "GET", bad)
            assert status == 401 and body["message"] == "invalid signature", (bad, body)
        status, body, _ = request(gw, "POST", signed_url(m, "up.txt", "read"), form, ctype)
        assert status == 401, body
        # another sandbox's URL is that sandbox's: it does not reach this one's files
        status, body, _ = request(gw, "GET", signed_url(m2, "up.txt", "read"))
        assert status == 404, body
        status, body, _ = request(gw, "GET", good.replace(str(later), "soon"))
        assert status == 400, body
        # kgw's own GET /files (no signature) is unchanged: the key's
        assert request(gw, "GET", "/files?workspace=x")[0] == 401
        status, body, _ = request(gw, "GET", "/files",
                                  headers={"Authorization": f"token {keys['alice']}"})
        assert status == 400 and "workspace" in body["message"], body
        # the signature does not take a path out of the workspace
        status, body, _ = request(gw, "GET", signed_url(m, "/etc/passwd", "read"))
        assert status == 400, body
        # killed: its URLs die with it
        kill(gw, keys["alice"], m)
        status, body, _ = request(gw, "GET", good)
        assert status == 401, body
    finally:
        kill(gw, keys["alice"], m)
        kill(gw, keys["bob"], m2)
