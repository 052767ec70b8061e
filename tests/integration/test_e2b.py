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
    env = json.dumps({"process": {"cmd": "/bin/true"}}).encode()
    t0 = time.monotonic()
    status, raw, hdrs = request(gw, "POST", "/e2b/sbx/filesystem.Filesystem/WatchDir",
                                bytes([0]) + len(env).to_bytes(4, "big") + env,
                                {**sbx_headers(m), "Content-Type": "application/connect+json"})
    assert time.monotonic() - t0 < 30
    assert status == 200 and hdrs["Content-Type"] == "application/connect+json"
    assert raw[0] == 2 and int.from_bytes(raw[1:5], "big") == len(raw) - 5
    assert json.loads(raw[5:])["error"]["code"] == "unimplemented"
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
