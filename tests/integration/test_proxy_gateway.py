"""Real-client test: Debian's jupyter_server in gateway mode, proxying to the server under test.

This is the path JupyterLab / Notebook take when a user runs
``jupyter lab --gateway-url=http://kgw:8888``: the browser talks to a local jupyter_server,
whose GatewayClient forwards /api/kernelspecs, /api/kernels[/...], /kernelspecs/<name>/<file>
and the kernel websocket to the gateway.  What jupyter_server 1.23.3 sends upstream (recorded
with a logging reverse proxy in between):

  * every HTTP request: ``Authorization: token <GatewayClient.auth_token>``,
    ``Connection: close``, ``Accept-Encoding: gzip``, ``User-Agent: Tornado/6.2``;
    GET/DELETE have no Content-Type;
  * POST /api/kernels (proxy's POST /api/kernels): ``{"name": "python3", "env":
    {"KERNEL_LAUNCH_TIMEOUT": "40", <other KERNEL_* vars of the proxy's environment>}}``;
  * POST /api/kernels for a new *session* (POST /api/sessions with a kernel name): "env" is the
    proxy's ENTIRE os.environ (PATH, HOME, ...) plus ``JPY_SESSION_NAME=<notebook path>`` and
    ``KERNEL_WORKING_DIR=<absolute dir on the proxy's host>``;
  * interrupt / restart: POST with ``Content-Type: application/json`` and body ``{}``;
  * the websocket: ``GET <ws_url>/api/kernels/<id>/channels`` with NO query string (no
    session_id, no token), the Authorization header, no Origin, no subprotocol (so the legacy
    JSON text-frame protocol) and no permessage-deflate; it is opened when the browser's
    websocket opens and frames the browser sends before it is up are dropped (hence the
    kernel_info retry below);
  * GET /api/kernels/<id> when a browser websocket opens; GET /api/kernels when the proxy lists
    kernels (it shows only kernels it started itself).

Works against kgw and against a plain jupyter_server upstream (KGW_REFERENCE=jupyter_server).
"""
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import pytest

from conftest import REPO

try:
    import websockets
except ImportError:  # pragma: no cover - Debian python3-websockets is a test dependency
    websockets = None

sys.path.insert(0, os.path.join(REPO, "examples"))
import kgwclient as K  # noqa: E402  (messages and the legacy encoding; no websockets needed)

PYTHON = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(websockets is None, reason="python3-websockets is not installed")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# The proxy: jupyter_server --gateway-url=<gateway under test>
# --------------------------------------------------------------------------------------------
class Proxy:
    def __init__(self, proc, port, token, log_path):
        self.proc = proc
        self.port = port
        self.token = token
        self.url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}"
        self.log_path = log_path

    def request(self, method, path, body=None, timeout=45):
        data = json.dumps(body).encode() if body is not None else None
        h = {"Authorization": f"token {self.token}"}
        if data is not None:
            h["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, payload, hdrs = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            status, payload, hdrs = e.code, e.read(), e.headers
        parsed = None
        if payload:
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = payload
        return status, parsed, hdrs

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def _start_proxy(gateway, workdir):
    port = free_port()
    token = secrets.token_hex(16)
    root = os.path.join(workdir, "root")
    os.makedirs(root)
    # A minimal environment: the proxy forwards its whole environment to the gateway when a
    # session starts a kernel, and reads JUPYTER_GATEWAY_* / KERNEL_* variables itself.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
           if k in os.environ}
    env.update(KERNEL_KGW_PROXY_TEST="1",  # forwarded in every POST /api/kernels "env"
               JUPYTER_CONFIG_DIR=os.path.join(workdir, "config"),
               JUPYTER_DATA_DIR=os.path.join(workdir, "data"),
               JUPYTER_RUNTIME_DIR=os.path.join(workdir, "runtime"))
    argv = [PYTHON, "-m", "jupyter_server", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
            f"--gateway-url={gateway.url}", f"--GatewayClient.auth_token={gateway.token}",
            "--GatewayClient.request_timeout=30", "--log-level=DEBUG"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    log_path = os.path.join(workdir, "proxy.log")
    logf = open(log_path, "w")
    proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=root,
                            start_new_session=True)
    logf.close()
    p = Proxy(proc, port, token, log_path)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"proxy jupyter_server exited with {proc.returncode}:\n{p.log()}")
            try:
                if p.request("GET", "/api", timeout=5)[0] == 200:
                    return p
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("proxy jupyter_server did not become ready:\n" + p.log())
            time.sleep(0.1)
    except BaseException:
        _stop_proxy(p)
        raise


def _stop_proxy(p):
    if p.proc.poll() is None:
        p.proc.send_signal(signal.SIGTERM)
        try:
            p.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()


@pytest.fixture
def proxy(gateway):
    workdir = tempfile.mkdtemp(prefix="kgw-proxy-")
    p = None
    try:
        p = _start_proxy(gateway, workdir)
        yield p
    finally:
        if p is not None:
            _stop_proxy(p)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def report(proxy, gateway):
    """Dump the proxy's and the upstream's logs (pytest shows them only for failed tests)."""
    yield
    print("----- proxy jupyter_server log (tail) -----\n" + proxy.log()[-20000:])
    print("----- upstream log (tail) -----\n" + gateway.log()[-20000:])


# --------------------------------------------------------------------------------------------
# Minimal legacy-protocol kernel websocket client
# --------------------------------------------------------------------------------------------
def _msg(msg_type, content, channel="shell", session="kgw-proxy-test"):
    return K.make_msg(msg_type, content, session=session, channel=channel)


class KernelWS:
    """Legacy (JSON text frames with a "channel" key) connection through the proxy."""

    def __init__(self, ws):
        self.ws = ws
        self.session = uuid.uuid4().hex

    @classmethod
    async def open(cls, proxy, kernel_id):
        url = (f"{proxy.ws_url}/api/kernels/{kernel_id}/channels"
               f"?session_id={uuid.uuid4().hex}&token={proxy.token}")
        ws = await websockets.connect(url, max_size=None, open_timeout=15, ping_interval=None,
                                      close_timeout=2)
        assert ws.subprotocol is None, ws.subprotocol
        return cls(ws)

    async def close(self):
        await self.ws.close()

    async def send(self, msg):
        await self.ws.send(K.encode_legacy(msg))

    async def recv(self, timeout):
        raw = await asyncio.wait_for(self.ws.recv(), timeout)
        assert isinstance(raw, str), f"legacy protocol expects text frames, got {type(raw)}"
        return K.decode_legacy(raw)          # ValueError unless it has a channel

    async def kernel_info(self, attempts=15, per_try=2.0):
        """Send kernel_info_request until a reply arrives.

        jupyter_server 1.23's gateway proxy drops frames sent before its upstream websocket is
        connected, so a single request right after open may be lost (this is what JupyterLab
        works around by re-requesting kernel info)."""
        sent = set()
        for _ in range(attempts):
            m = _msg("kernel_info_request", {}, session=self.session)
            sent.add(m["header"]["msg_id"])
            await self.send(m)
            deadline = time.monotonic() + per_try
            while time.monotonic() < deadline:
                try:
                    r = await self.recv(max(0.01, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                if r["header"]["msg_type"] == "kernel_info_reply" \
                        and r["parent_header"].get("msg_id") in sent:
                    assert r["channel"] == "shell", r
                    return r
        raise AssertionError(f"no kernel_info_reply after {attempts} kernel_info_requests")

    async def execute(self, code, timeout=20, on_iopub=None, stop_on_error=True):
        """Returns (execute_reply, stdout, iopub messages for this request)."""
        m = _msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                     "user_expressions": {}, "allow_stdin": False,
                                     "stop_on_error": stop_on_error}, session=self.session)
        mid = m["header"]["msg_id"]
        await self.send(m)
        reply, stdout, iopub, idle = None, "", [], False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timeout executing {code!r}: reply={reply} idle={idle} "
                                     f"iopub={[x['header']['msg_type'] for x in iopub]}")
            try:
                r = await self.recv(left)
            except asyncio.TimeoutError:
                continue
            if r["parent_header"].get("msg_id") != mid:
                continue
            mt = r["header"]["msg_type"]
            if r["channel"] == "shell" and mt == "execute_reply":
                reply = r
            elif r["channel"] == "iopub":
                iopub.append(r)
                if on_iopub:
                    await on_iopub(r)
                if mt == "stream" and r["content"]["name"] == "stdout":
                    stdout += r["content"]["text"]
                if mt == "status" and r["content"]["execution_state"] == "idle":
                    idle = True
        return reply, stdout, iopub


def run(coro, timeout=35):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _upstream_kernel_ids(gateway):
    status, body, _ = gateway.request("GET", "/api/kernels")
    assert status == 200, (status, body)
    return {k["id"] for k in body}


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------
def test_kernelspecs_through_proxy(proxy, gateway, report):
    status, body, _ = proxy.request("GET", "/api/kernelspecs")
    assert status == 200, (status, body)
    assert "python3" in body["kernelspecs"], body
    assert body["default"] in body["kernelspecs"], body
    spec = body["kernelspecs"]["python3"]
    assert spec["name"] == "python3"
    assert spec["spec"]["language"] == "python", spec
    # The upstream's view must be what the proxy passed through.
    ustatus, ubody, _ = gateway.request("GET", "/api/kernelspecs")
    assert ustatus == 200
    assert ubody["default"] == body["default"]
    assert set(ubody["kernelspecs"]) == set(body["kernelspecs"])

    status, one, _ = proxy.request("GET", "/api/kernelspecs/python3")
    assert status == 200, (status, one)
    assert one["name"] == "python3" and one["spec"]["language"] == "python", one

    status, missing, _ = proxy.request("GET", "/api/kernelspecs/no-such-kernel")
    assert status == 404, (status, missing)


def test_kernelspec_resources_through_proxy(proxy, report):
    """JupyterLab's launcher shows kernelspec["resources"]["logo-64x64"], fetched from the proxy,
    which forwards GET /kernelspecs/<name>/<file> upstream.  (The proxy turns an upstream 404
    into a 200 with an empty body, so check the bytes.)"""
    status, body, _ = proxy.request("GET", "/api/kernelspecs")
    assert status == 200, (status, body)
    resources = body["kernelspecs"]["python3"].get("resources") or {}
    if "logo-64x64" not in resources:
        pytest.skip(f"python3 kernelspec has no logo-64x64 resource: {resources}")
    url = resources["logo-64x64"]
    assert url.endswith("/kernelspecs/python3/logo-64x64.png"), url
    status, png, _ = proxy.request("GET", "/kernelspecs/python3/logo-64x64.png")
    assert status == 200, (status, png)
    assert isinstance(png, bytes) and png.startswith(b"\x89PNG\r\n\x1a\n"), (png[:40] if png else png)
    # (jupyter_server 1.23's proxy answers with Content-Type: application/json whatever the
    # upstream sent, so the header is not checked.)


def test_kernel_lifecycle_through_proxy(proxy, gateway, report):
    # --- create a kernel through the proxy (POST /api/kernels) ---------------------------------
    status, kernel, _ = proxy.request("POST", "/api/kernels", {"name": "python3"})
    assert status == 201, (status, kernel)
    kid = kernel["id"]
    assert kernel["name"] == "python3"
    session_id = None
    try:
        # The proxy does not invent ids: the kernel exists upstream under the same id.
        assert kid in _upstream_kernel_ids(gateway)
        status, listed, _ = proxy.request("GET", "/api/kernels")
        assert status == 200 and kid in {k["id"] for k in listed}, (status, listed)
        status, model, _ = proxy.request("GET", f"/api/kernels/{kid}")
        assert status == 200 and model["id"] == kid, (status, model)

        # --- a session bound to it (what opening a notebook does) --------------------------
        status, sess, _ = proxy.request("POST", "/api/sessions", {
            "path": "proxy-test.ipynb", "name": "proxy-test.ipynb", "type": "notebook",
            "kernel": {"id": kid}})
        assert status == 201, (status, sess)
        session_id = sess["id"]
        assert sess["kernel"]["id"] == kid, sess
        assert sess["path"] == "proxy-test.ipynb", sess
        status, sessions, _ = proxy.request("GET", "/api/sessions")
        assert status == 200 and session_id in {s["id"] for s in sessions}, sessions

        async def channel_work():
            kws = await KernelWS.open(proxy, kid)
            try:
                info = await kws.kernel_info()
                assert info["content"]["status"] == "ok", info["content"]
                assert info["content"]["language_info"]["name"] == "python"

                # --- execute ------------------------------------------------------------
                reply, out, iopub = await kws.execute("print(6*7)")
                assert reply["content"]["status"] == "ok", reply["content"]
                assert out == "42\n", (out, iopub)
                types = [m["header"]["msg_type"] for m in iopub]
                assert "execute_input" in types and "stream" in types, types

                await kws.execute("x = 1")

                # --- interrupt through the proxy's REST API ----------------------------
                started = asyncio.Event()

                async def on_iopub(m):
                    if m["header"]["msg_type"] == "execute_input":
                        started.set()

                async def interrupter():
                    await asyncio.wait_for(started.wait(), 10)
                    await asyncio.sleep(0.3)
                    st, body, _ = await asyncio.to_thread(
                        proxy.request, "POST", f"/api/kernels/{kid}/interrupt")
                    assert st == 204, (st, body)

                t0 = time.monotonic()
                task = asyncio.create_task(interrupter())
                reply, out, iopub = await kws.execute(
                    "import time\ntime.sleep(30)\nprint('not interrupted')", timeout=20,
                    on_iopub=on_iopub, stop_on_error=False)  # no abort window afterwards
                await task
                elapsed = time.monotonic() - t0
                assert reply["content"]["status"] == "error", reply["content"]
                assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
                assert "not interrupted" not in out
                assert elapsed < 15, elapsed
                errs = [m for m in iopub if m["header"]["msg_type"] == "error"]
                assert errs and errs[0]["content"]["ename"] == "KeyboardInterrupt", iopub

                reply, out, _ = await kws.execute("print('after interrupt', x)")
                assert reply["content"]["status"] == "ok" and out == "after interrupt 1\n", (reply, out)
            finally:
                await kws.close()

        run(channel_work())

        # --- restart through the proxy's REST API ------------------------------------------
        status, body, _ = proxy.request("POST", f"/api/kernels/{kid}/restart")
        assert status == 200, (status, body)
        assert body["id"] == kid, body

        async def after_restart():
            # A client reconnects after a restart (JupyterLab does); the state must be fresh.
            kws = await KernelWS.open(proxy, kid)
            try:
                await kws.kernel_info()
                reply, out, _ = await kws.execute("print(6*7)")
                assert reply["content"]["status"] == "ok" and out == "42\n", (reply, out)
                reply, _, _ = await kws.execute("x")
                assert reply["content"]["status"] == "error", reply["content"]
                assert reply["content"]["ename"] == "NameError", reply["content"]
            finally:
                await kws.close()

        run(after_restart())
        assert kid in _upstream_kernel_ids(gateway)

        # --- delete ------------------------------------------------------------------------
        status, body, _ = proxy.request("DELETE", f"/api/sessions/{session_id}")
        assert status == 204, (status, body)
        session_id = None
        # Deleting a session shuts its kernel down, through the proxy.
        deadline = time.monotonic() + 10
        while kid in _upstream_kernel_ids(gateway) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert kid not in _upstream_kernel_ids(gateway)
        status, body, _ = proxy.request("GET", f"/api/kernels/{kid}")
        assert status == 404, (status, body)
        kid = None
    finally:
        if session_id is not None:
            proxy.request("DELETE", f"/api/sessions/{session_id}")
        if kid is not None:
            proxy.request("DELETE", f"/api/kernels/{kid}")
            gateway.delete_kernel(kid)


def test_session_starts_kernel_through_proxy(proxy, gateway, report):
    """POST /api/sessions with a kernel *name* (JupyterLab opening a notebook) starts the kernel
    upstream; DELETE /api/kernels/{id} through the proxy removes it upstream."""
    before = _upstream_kernel_ids(gateway)
    status, sess, _ = proxy.request("POST", "/api/sessions", {
        "path": "sub/new.ipynb", "name": "new.ipynb", "type": "notebook",
        "kernel": {"name": "python3"}})
    assert status == 201, (status, sess)
    kid = sess["kernel"]["id"]
    try:
        assert sess["kernel"]["name"] == "python3", sess
        assert kid not in before and kid in _upstream_kernel_ids(gateway)

        async def work():
            kws = await KernelWS.open(proxy, kid)
            try:
                await kws.kernel_info()
                reply, out, _ = await kws.execute("print(6*7)")
                assert reply["content"]["status"] == "ok" and out == "42\n", (reply, out)
            finally:
                await kws.close()

        run(work())

        status, body, _ = proxy.request("DELETE", f"/api/kernels/{kid}")
        assert status == 204, (status, body)
        assert kid not in _upstream_kernel_ids(gateway)
        # The proxy notices the kernel is gone from the session.
        status, sessions, _ = proxy.request("GET", "/api/sessions")
        assert status == 200
        assert sess["id"] not in {s["id"] for s in sessions}, sessions
        kid = None
    finally:
        proxy.request("DELETE", f"/api/sessions/{sess['id']}")
        if kid is not None:
            gateway.delete_kernel(kid)


NODE = shutil.which("node")
NODE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node")


@pytest.mark.skipif(NODE is None or not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@jupyterlab", "services")),
                    reason="node or tests/node/node_modules missing (run `npm ci` in tests/node)")
def test_jupyterlab_services_through_proxy(proxy, gateway, report):
    """The full JupyterLab stack: @jupyterlab/services -> jupyter_server --gateway-url -> gateway."""
    before = _upstream_kernel_ids(gateway)
    env = dict(os.environ, KGW_WS_PROTOCOL="auto", KGW_CLIENT_TIMEOUT_MS="35000")
    proc = subprocess.Popen([NODE, os.path.join(NODE_DIR, "services_client.mjs"), proxy.url, proxy.token],
                            cwd=NODE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0] + "\n[test] services_client.mjs killed after 40 s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(out)
    assert proc.returncode == 0 and "PASS:" in out, f"services_client.mjs via proxy exited {proc.returncode}:\n{out}"
    leaked = _upstream_kernel_ids(gateway) - before
    assert not leaked, f"kernels left running upstream: {leaked}"
