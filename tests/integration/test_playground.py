"""The playground page (GET /, docs/playground.md): its headers, its markup and assets, its
routes under a shard prefix, and the page itself in headless Chromium (Debian's `chromium`,
driven by puppeteer-core from tests/playground/, `npm ci` there), over plain HTTP at the root
and over HTTPS under /s/<shard>/. The browser tests skip without node, chromium or
tests/playground/node_modules; the others always run.

Screenshots go to $KGW_ARTIFACTS/playground/<variant>/, default
build/meson-logs/playground/<variant>/ (not into the repository).
"""
import html.parser
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import KGW_BIN, REFERENCE, REPO, free_port

pytestmark = pytest.mark.skipif(REFERENCE == "jupyter_server",
                                reason="the playground is kgw's own page")

HERE = os.path.dirname(os.path.abspath(__file__))
PG_DIR = os.path.join(os.path.dirname(HERE), "playground")
DRIVER = os.path.join(PG_DIR, "playground.mjs")
NODE = shutil.which("node")
CHROMIUM = os.environ.get("KGW_CHROMIUM", "/usr/bin/chromium")
DRIVER_TIMEOUT_S = 420  # each browser step is given 120 s; a loaded machine starts kernels slowly

EXPECTED_CSP = {
    "default-src": ["'none'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["data:"],
    "connect-src": ["'self'"],
    "frame-src": ["blob:"],
    "base-uri": ["'none'"],
    "form-action": ["'none'"],
    "frame-ancestors": ["'none'"],
    "require-trusted-types-for": ["'script'"],
    "trusted-types": ["'none'"],
}


def _get(url, headers=None, method="GET", context=None):
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60, context=context) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def _csp(value):
    out = {}
    for part in value.split(";"):
        words = part.split()
        if words:
            assert words[0] not in out, f"directive {words[0]} twice: {value}"
            out[words[0]] = words[1:]
    return out


def _check_security_headers(h):
    assert h["X-Content-Type-Options"] == "nosniff"
    assert h["X-Frame-Options"] == "DENY"
    assert h["Referrer-Policy"] == "no-referrer"
    assert h["Cache-Control"] == "no-store"
    assert h["X-KGW-Self-Identify"]
    assert _csp(h["Content-Security-Policy"]) == EXPECTED_CSP, h["Content-Security-Policy"]


class _Markup(html.parser.HTMLParser):
    """What the page's markup loads and whether anything in it is inline code or style."""

    def __init__(self):
        super().__init__()
        self.urls, self.inline, self.scripts, self._in_script = [], [], [], False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on") or name == "style":
                self.inline.append(f"<{tag} {name}>")
            if name in ("src", "href", "action", "formaction") and value is not None:
                self.urls.append(value)
        if tag == "style":
            self.inline.append("<style>")
        if tag == "script":
            self.scripts.append(dict(attrs).get("src"))
            self._in_script = True

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script and data.strip():
            self.inline.append("<script> with a body")


def test_page_is_public_with_its_csp_and_the_security_headers(gateway):
    status, body, h = _get(gateway.url + "/")
    assert status == 200, body
    assert h["Content-Type"] == "text/html; charset=utf-8"
    _check_security_headers(h)
    page = _Markup()
    page.feed(body.decode())
    assert page.inline == [], page.inline
    assert page.scripts == ["playground/app.js"]
    for u in page.urls:  # relative, so the page works under any prefix; nothing from elsewhere
        parts = urllib.parse.urlsplit(u)
        assert u == "data:," or (not parts.scheme and not parts.netloc and
                                 not u.startswith("/")), u

    for name, ctype in (("app.js", "text/javascript; charset=utf-8"),
                        ("app.css", "text/css; charset=utf-8")):
        status, body, h = _get(gateway.url + "/playground/" + name)
        assert status == 200 and h["Content-Type"] == ctype and len(body) > 1000
        _check_security_headers(h)
    # the API's own answers keep the API's policy
    status, _, h = _get(gateway.url + "/api")
    assert status == 200 and h["Content-Security-Policy"] == \
        "default-src 'none'; frame-ancestors 'none'"


def test_script_has_no_markup_or_code_sinks(gateway):
    """The CSP forbids eval and (Trusted Types without a policy) markup sinks; the script does
    not even name them, so a regression fails here, not only in the browser."""
    _, js, _ = _get(gateway.url + "/playground/app.js")
    js = js.decode()
    with open(os.path.join(REPO, "gateway", "playground", "app.js"), encoding="utf-8") as f:
        assert f.read() == js, "the binary serves gateway/playground/app.js as built"
    code = "\n".join(re.sub(r"(^|\s)//.*$", "", line) for line in js.splitlines())
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "Function(", "setTimeout('", 'setTimeout("', "srcdoc", "localStorage",
                 "allow-same-origin", "allow-scripts", "http:", "https:"):
        assert sink not in code, sink
    assert "sessionStorage" in code and "'Bearer '" in code


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_page_is_get_only(gateway, method):
    status, body, _ = _get(gateway.url + "/", method=method)
    assert status == 405, body


@pytest.mark.parametrize("path", ["/playground/", "/playground/nope.js", "/playground/app.js/x",
                                  "/playground/APP.JS", "/index.html"])
def test_unknown_assets_are_404(gateway, path):
    status, body, h = _get(gateway.url + path)
    assert status == 404 and b'"reason"' in body, (path, status, body)
    assert h["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_page_needs_no_key_but_the_api_does(gateway):
    assert _get(gateway.url + "/")[0] == 200
    assert _get(gateway.url + "/api/kernels")[0] == 401
    assert _get(gateway.url + "/", headers={"Authorization": "Bearer wrong"})[0] == 200


def test_page_under_a_shard_prefix(gateway_factory):
    gw = gateway_factory("--instance-id", "pg-1")
    status, root, _ = _get(gw.url + "/")
    assert status == 200
    status, body, h = _get(gw.url + "/s/pg-1/")
    assert status == 200 and body == root
    _check_security_headers(h)
    base = gw.url + "/s/pg-1/"
    for rel in ("playground/app.js", "playground/app.css"):
        status, _, h = _get(urllib.parse.urljoin(base, rel))
        assert status == 200, rel
    # the page's API calls, resolved against the prefixed page, stay on the shard
    status, _, _ = _get(urllib.parse.urljoin(base, "api/kernels"),
                        headers={"Authorization": "Bearer " + gw.token})
    assert status == 200
    assert _get(gw.url + "/s/pg-2/")[0] == 404


# ---------------------------------------------------------------- the page in a browser

def _browser_skip_reason():
    if NODE is None:
        return "node is not on PATH"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (Debian's chromium: scripts/deps.sh --test)"
    if not os.path.isdir(os.path.join(PG_DIR, "node_modules", "puppeteer-core")):
        return f"tests/playground/node_modules missing: run `npm ci` in {PG_DIR}"
    return None


def _artifacts(variant):
    root = os.environ.get("KGW_ARTIFACTS") or os.path.join(REPO, "build", "meson-logs")
    d = os.path.join(root, "playground", variant)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def _run_driver(page_url, token, variant, insecure_tls=False):
    env = dict(os.environ, KGW_CHROMIUM=CHROMIUM, KGW_CLIENT_TIMEOUT_MS="120000")
    if insecure_tls:
        env["KGW_ACCEPT_INSECURE_CERTS"] = "1"
    proc = subprocess.Popen([NODE, DRIVER, page_url, token, _artifacts(variant)], cwd=PG_DIR,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out += f"\n[test] playground.mjs killed after {DRIVER_TIMEOUT_S}s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out


browser = pytest.mark.skipif(_browser_skip_reason() is not None,
                             reason=_browser_skip_reason() or "")


@browser
@pytest.mark.needs_sandbox  # the files panel needs the kernel's workspace
def test_playground_in_chromium(gateway):
    rc, out = _run_driver(gateway.url + "/", gateway.token, "http-root")
    print(out)
    assert rc == 0 and "PASS:" in out, out + "\n----- server log (tail) -----\n" + \
        gateway.log()[-15000:]
    status, kernels, _ = gateway.request("GET", "/api/kernels")
    assert status == 200 and kernels == [], (status, kernels)


@browser
@pytest.mark.needs_sandbox
def test_playground_in_chromium_over_https_under_a_shard_prefix(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    port, token = free_port(), "playground-tls-key"
    log_path = tmp_path / "kgw.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([KGW_BIN, "--ip", "127.0.0.1", "--port", str(port), "--api-key",
                             token, "--certfile", str(cert), "--keyfile", str(key),
                             "--instance-id", "pg-tls", "--auth-fail-limit=0",
                             "--rate-limit=0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ctx = ssl.create_default_context(cafile=str(cert))
    base = f"https://127.0.0.1:{port}/s/pg-tls/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _, h = _get(base, context=ctx)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        assert status == 200
        _check_security_headers(h)
        assert h["Strict-Transport-Security"] == "max-age=31536000"
        # HTTP/1.1 only: over h2, answers without a body and streams never ended (a browser
        # offers h2 first)
        alpn = ssl.create_default_context(cafile=str(cert))
        alpn.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
            with alpn.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.selected_alpn_protocol() in (None, "http/1.1")
        rc, out = _run_driver(base, token, "https-shard", insecure_tls=True)
        print(out)
        assert rc == 0 and "PASS:" in out, out + "\n----- server log (tail) -----\n" + \
            log_path.read_text()[-15000:]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
