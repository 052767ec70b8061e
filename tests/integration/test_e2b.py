"""The E2B-compatible API (docs/e2b.md): the real E2B SDKs from npm against a real gateway.

tests/e2b/e2b_client.mjs runs @e2b/code-interpreter 2.8.0, e2b 2.51.0 and e2b 2.50.0 (an npm
alias) with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set: create, runCode (state,
streamed stdout, an error, a matplotlib PNG), files, contexts, commands.run and kill
(process.Start, SendSignal), setTimeout,
connect, kill, tenancy and expiry. The wire details the SDKs depend on (chunked request bodies,
Connect's unimplemented, tokens) are also checked here with raw HTTP.

Needs `node` (>= 20) and `npm ci` run in tests/e2b (scripts/test.sh does that) for the SDK run;
the raw checks always run.
"""
import http.client
import json
import os
import shutil
import signal
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
    status, body, _ = request(gw, "POST", "/e2b/sbx/process.Process/List", {},
                              {**sbx_headers(m), "Content-Type": "application/json"})
    assert status == 501 and body["code"] == "unimplemented", body
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
    assert any(l.get("text") == "'after'" for l in lines), lines
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
