"""Network egress through each kernel's proxy (docs/security.md, "Network egress").

"The internet" is played only by servers this module starts on loopback addresses of the host
(127.0.0.2-127.0.0.4 and localhost); no test contacts any other address. Loopback addresses
are refused by the proxy unless a policy names them, which is what these policies do (IP
literals, and "+localhost:PORT" for a name); "localhost:PORT" without "+" plays the name that
resolves to a private address (DNS rebinding). Kernels run real code: urllib, pip, sockets.
"""
import copy
import hashlib
import http.server
import json
import os
import secrets
import socket
import ssl
import subprocess
import threading
import time

import pytest

import conftest
import sbxutil as S

pytestmark = pytest.mark.needs_sandbox

A_HOST, B_HOST, TLS_HOST = "127.0.0.2", "127.0.0.3", "127.0.0.4"
BIG = 1 << 20


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", srv.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/big"):
            body = b"x" * BIG
        elif self.path.startswith("/hold"):
            body = b"held"
            srv.hold.wait(20)
        elif self.path.startswith("/simple/kgwdemo"):
            body = (f'<html><body><a href="/files/{WHEEL}#sha256={srv.wheel_sha}">{WHEEL}</a>'
                    "</body></html>").encode()
        elif self.path.startswith("/files/" + WHEEL):
            body = srv.wheel
        else:
            body = f"hello from {srv.name} {self.path} host={self.headers.get('Host')}".encode()
        self.send_response(200)
        if self.path.startswith("/simple/"):
            self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


WHEEL = "kgwdemo-1.0-py3-none-any.whl"


def make_wheel(tmp):
    import zipfile
    p = os.path.join(tmp, WHEEL)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("kgwdemo/__init__.py", "X = 1\n")
        z.writestr("kgwdemo-1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: kgwdemo\nVersion: 1.0\n")
        z.writestr("kgwdemo-1.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("kgwdemo-1.0.dist-info/RECORD", "")
    with open(p, "rb") as f:
        return f.read()


def serve(host, name, tmp, tls=None):
    srv = http.server.ThreadingHTTPServer((host, 0), Handler)
    srv.daemon_threads = True
    srv.handle_error = lambda *a: None  # a client the proxy cut off: expected here
    srv.name = name
    srv.redirect_to = ""
    srv.hold = threading.Event()
    srv.wheel = make_wheel(tmp)
    srv.wheel_sha = hashlib.sha256(srv.wheel).hexdigest()
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("egress"))
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=egress-test", "-addext", f"subjectAltName=IP:{TLS_HOST}",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    a, b = serve(A_HOST, "A", tmp), serve(B_HOST, "B", tmp)
    tls = serve(TLS_HOST, "TLS", tmp, tls=(cert, key))
    lh = serve("127.0.0.1", "LOCALHOST", tmp)
    n = {"a": a.server_address[1], "b": b.server_address[1], "tls": tls.server_address[1],
         "lh": lh.server_address[1], "cert": open(cert).read(), "servers": (a, b, tls, lh)}
    a.redirect_to = f"http://{B_HOST}:{n['b']}/"
    yield n
    for s in n["servers"]:
        s.hold.set()
        s.shutdown()
        s.server_close()


@pytest.fixture(scope="module")
def egw(net, tmp_path_factory):
    """A gateway whose key file gives tenant 'egt' a policy; the default tenant has none."""
    tmp = tmp_path_factory.mktemp("egw")
    key = secrets.token_hex(16)
    h = hashlib.blake2b(key.encode(), digest_size=32).hexdigest()
    policy = (f"{A_HOST}:{net['a']},{B_HOST}:{net['b']},{TLS_HOST}:{net['tls']},"
              f"+localhost:{net['lh']},localhost:{net['a']}")
    kf = tmp / "keys"
    kf.write_text(f"egt blake2b:{h} egress={policy}\n")
    audit = tmp / "audit.jsonl"
    gw = S.start_sandboxed(f"--key-file={kf}", f"--audit-log={audit}",
                           "--egress-max-connections=3", f"--egress-max-bytes={BIG // 4}",
                           "--egress-idle-timeout=5")  # the warm pool on: kernels with a
    # policy must not come from it, the default tenant's do
    gw.audit = audit
    t = copy.copy(gw)
    t.token = key
    gw.tenant = t
    yield gw
    conftest.stop_gateway(gw)


def start(gw, egress=None, expect=201):
    body = {} if egress is None else {"egress": egress}
    status, model, _ = gw.request("POST", "/api/kernels", body)
    assert status == expect, (status, model)
    return model


def audit_events(gw, event="egress"):  # noqa: D103
    out = []
    with open(gw.audit) as f:
        for line in f:
            e = json.loads(line)
            if e["event"] == event:
                out.append(e)
    return out


def wait_audit(gw, pred, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in audit_events(gw) if pred(e)]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("no such audit event; egress events: %r" % audit_events(gw))


FETCH = r'''
import urllib.request, urllib.error, ssl, os
def fetch(url, ctx=None, timeout=15):
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return {"status": r.status, "body": r.read().decode(errors="replace")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "reason": str(e.reason), "body": e.read().decode(errors="replace")}
    except Exception as e:
        return {"error": repr(e)}
'''


def kfetch(gw, kid, urls, extra=""):
    code = FETCH + extra + "\n" + "\n".join(f"R[{i}] = fetch({u})" for i, u in enumerate(urls))
    r = S.kcall(gw, kid, code, timeout=60)
    return [r[str(i)] for i in range(len(urls))]


@pytest.fixture(scope="module")
def kern(egw):
    """A kernel of tenant egt with the tenant's whole policy."""
    return start(egw.tenant)["id"]


def test_allowed_plain_http_and_env(egw, net, kern):
    r = S.kcall(egw.tenant, kern, FETCH + f'''
R["env"] = {{k: os.environ.get(k) for k in
            ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY")}}
R["a"] = fetch("http://{A_HOST}:{net['a']}/path?q=1")
R["lh"] = fetch("http://localhost:{net['lh']}/")
''')
    assert r["env"] == {"HTTP_PROXY": "http://127.0.0.1:3128", "HTTPS_PROXY": "http://127.0.0.1:3128",
                        "http_proxy": "http://127.0.0.1:3128",
                        "https_proxy": "http://127.0.0.1:3128", "NO_PROXY": ""}
    assert r["a"]["status"] == 200 and r["a"]["body"].startswith("hello from A /path?q=1"), r
    assert r["lh"]["status"] == 200 and r["lh"]["body"].startswith("hello from LOCALHOST"), r
    e = wait_audit(egw, lambda e: e["kernel"] == kern and e["port"] == net["a"] and
                   e["result"] == "allowed")[0]
    assert e["tenant"] == "egt" and e["host"] == A_HOST and e["address"] == A_HOST
    assert e["method"] == "forward" and e["bytes_in"] > 20 and e["bytes_out"] > 20
    # the execution's own audit event lists the hosts it reached
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ex = [x for x in audit_events(egw, "execution") if x["kernel"] == kern and
              x.get("egress_hosts")]
        if ex:
            break
        time.sleep(0.1)
    assert ex and sorted(ex[-1]["egress_hosts"]) == sorted(
        [f"{A_HOST}:{net['a']}", f"localhost:{net['lh']}"]), ex


def test_allowed_https_connect(egw, net, kern):
    extra = f"open('/tmp/ca.pem', 'w').write({net['cert']!r})\nCTX = ssl.create_default_context(cafile='/tmp/ca.pem')"
    [r] = kfetch(egw.tenant, kern, [f"'https://{TLS_HOST}:{net['tls']}/secure', CTX"], extra)
    assert r["status"] == 200 and r["body"].startswith("hello from TLS /secure"), r
    e = wait_audit(egw, lambda e: e["kernel"] == kern and e["port"] == net["tls"])[0]
    assert e["method"] == "CONNECT" and e["result"] == "allowed" and e["bytes_in"] > 500


def test_pip_download_from_local_index(egw, net, kern):
    code = f'''
import subprocess, sys
p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                    "--disable-pip-version-check", "-d", "/tmp/dl",
                    "--index-url", "http://{A_HOST}:{net['a']}/simple/",
                    "--trusted-host", "{A_HOST}", "kgwdemo"],
                   capture_output=True, text=True, timeout=60)
import os
R["rc"] = p.returncode
R["out"] = (p.stdout + p.stderr)[-2000:]
R["files"] = sorted(os.listdir("/tmp/dl")) if os.path.isdir("/tmp/dl") else []
'''
    r = S.kcall(egw.tenant, kern, code, timeout=90)
    assert r["rc"] == 0 and r["files"] == [WHEEL], r


def test_refused_destinations(egw, net, kern):
    urls = [
        f"'http://{A_HOST}:{net['b']}/'",        # an allowed address, a port not in the policy
        f"'http://127.0.0.5:{net['a']}/'",      # a loopback address not named
        f"'http://{A_HOST}:{net['a']}/redirect'",  # a redirect to B ... which is allowed here
        f"'http://localhost:{net['a']}/'",      # a name resolving to loopback, not marked '+'
        "'http://169.254.169.254/latest/meta-data/'",  # metadata, not named (never contacted)
        "'http://pypi.org/'",                    # off the list (never resolved)
    ]
    r = kfetch(egw.tenant, kern, urls)
    assert r[0]["status"] == 403 and "not in the kernel's egress policy" in r[0]["reason"], r[0]
    assert r[1]["status"] == 403 and "not in the kernel's egress policy" in r[1]["reason"], r[1]
    assert r[2]["status"] == 200 and r[2]["body"].startswith("hello from B"), r[2]
    assert r[3]["status"] == 403 and "resolves to a loopback address" in r[3]["reason"], r[3]
    assert r[4]["status"] == 403, r[4]
    assert r[5]["status"] == 403, r[5]
    # a kernel that asks for less than its tenant has gets less; CONNECT by hand
    kid = start(egw.tenant, egress=[f"{A_HOST}:{net['a']}"])["id"]
    code = r'''
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254:80\r\n\r\n")
R["meta"] = s.recv(4096).decode(errors="replace")
s.close()
'''
    r2 = S.kcall(egw.tenant, kid, FETCH + code + f'''
R["redir"] = fetch("http://{A_HOST}:{net['a']}/redirect")
''')
    assert r2["meta"].startswith("HTTP/1.1 403 kgw egress: host and port are not in"), r2
    assert r2["redir"]["status"] == 403, r2  # the redirect's target is off this kernel's list
    for pred in (lambda e: e["kernel"] == kern and e["host"] == "localhost" and
                 "loopback" in (e["reason"] or ""),
                 lambda e: e["kernel"] == kid and e["host"] == "169.254.169.254",
                 lambda e: e["kernel"] == kid and e["host"] == B_HOST,
                 lambda e: e["kernel"] == kern and e["host"] == "pypi.org"):
        e = wait_audit(egw, pred)[0]
        assert e["result"] == "denied" and e["reason"], e
    egw.tenant.delete_kernel(kid)


def test_direct_sockets_bypassing_the_proxy_fail(egw, net, kern):
    code = f'''
import socket, errno
def tryconn(addr):
    try:
        socket.create_connection(addr, timeout=5).close()
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
R["a"] = tryconn(("{A_HOST}", {net['a']}))
R["doc"] = tryconn(("192.0.2.1", 80))   # TEST-NET-1: no route leaves the sandbox
R["v6"] = tryconn(("2001:db8::1", 80))
import signal  # a forked kernel too: a write to a reset socket raises, it does not kill
R["sigpipe"] = signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
try:
    socket.getaddrinfo("pypi.org", 443)
    R["dns"] = "resolved"
except OSError as e:
    R["dns"] = type(e).__name__
'''
    r = S.kcall(egw.tenant, kern, code)
    assert r["a"] == "ECONNREFUSED", r
    assert r["doc"] in ("ENETUNREACH", "EHOSTUNREACH"), r
    assert r["v6"] in ("ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"), r
    assert r["dns"] == "gaierror", r
    assert r["sigpipe"], r


def test_two_kernels_get_only_their_own(egw, net):
    ka = start(egw.tenant, egress=f"{A_HOST}:{net['a']}")["id"]
    kb = start(egw.tenant, egress=[f"{B_HOST}:{net['b']}"])["id"]
    ua, ub = f"'http://{A_HOST}:{net['a']}/'", f"'http://{B_HOST}:{net['b']}/'"
    ra, rb = kfetch(egw.tenant, ka, [ua, ub]), kfetch(egw.tenant, kb, [ua, ub])
    assert ra[0]["status"] == 200 and ra[1]["status"] == 403, ra
    assert rb[0]["status"] == 403 and rb[1]["status"] == 200, rb
    for k in (ka, kb):
        egw.tenant.delete_kernel(k)


def test_a_kernel_cannot_ask_for_more(egw, net):
    m = start(egw.tenant, egress="pypi.org:443", expect=403)
    assert "pypi.org:443" in m["message"], m
    start(egw.tenant, egress="no-port-here", expect=400)
    start(egw.tenant, egress=5, expect=400)
    # the default tenant has no policy: nothing to ask for, and no proxy in its kernels
    start(egw, egress=f"{A_HOST}:{net['a']}", expect=403)
    kid = start(egw)["id"]
    r = S.kcall(egw, kid, '''
import os, socket
R["env"] = [k for k in os.environ if k.lower().endswith("_proxy")]
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5).close()
    R["proxy"] = "listening"
except OSError as e:
    R["proxy"] = type(e).__name__
''')
    assert r == {"env": [], "proxy": "ConnectionRefusedError"}, r
    egw.delete_kernel(kid)


def test_caps_cut_floods_and_garbage(egw, net):
    kid = start(egw.tenant, egress=f"{A_HOST}:{net['a']}")["id"]
    code = FETCH + f'''
import socket, time
# connections: the cap is 3 at once
held = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"GET http://{A_HOST}:{net['a']}/hold HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    held.append(s)
time.sleep(0.5)
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT {A_HOST}:{net['a']} HTTP/1.1\\r\\n\\r\\n")
R["fourth"] = s.recv(200).decode(errors="replace")
s.close()
for s in held:
    s.close()
time.sleep(0.3)
# garbage and an endless head get an error, and the proxy goes on serving
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"\\x16\\x03\\x01 garbage\\r\\n\\r\\n")
R["garbage"] = s.recv(200).decode(errors="replace")
s.close()
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
try:
    for i in range(100):
        s.sendall(b"X-Flood: " + b"a" * 1000 + b"\\r\\n")
    R["flood"] = s.recv(200).decode(errors="replace")
except OSError as e:
    R["flood"] = type(e).__name__
s.close()
# bytes: the cap (a quarter of the download) cuts it short
R["big"] = fetch("http://{A_HOST}:{net['a']}/big")
'''
    r = S.kcall(egw.tenant, kid, code, timeout=60)
    # the byte cap (BIG/4 per kernel process) cuts the 1 MiB download short
    assert "error" in r["big"] or len(r["big"].get("body", "")) < BIG, {k: str(v)[:200] for k, v in r["big"].items()}
    assert r["fourth"].startswith("HTTP/1.1 429"), r
    assert r["garbage"].startswith("HTTP/1.1 400"), r
    assert r["flood"].startswith("HTTP/1.1 431") or r["flood"] in (
        "ConnectionResetError", "BrokenPipeError"), r
    wait_audit(egw, lambda e: e["kernel"] == kid and e["reason"] == "request head too large")
    e = wait_audit(egw, lambda e: e["kernel"] == kid and e["reason"] == "byte cap reached")[0]
    assert e["result"] == "allowed" and e["bytes_in"] <= BIG // 4, e
    wait_audit(egw, lambda e: e["kernel"] == kid and e["result"] == "denied" and
               "too many connections" in e["reason"])
    # the proxy still serves: the byte cap is spent, so a new request is refused with 429
    [again] = kfetch(egw.tenant, kid, [f"'http://{A_HOST}:{net['a']}/'"])
    assert again["status"] == 429, again
    assert egw.alive()
    egw.tenant.delete_kernel(kid)
    status, text, _ = egw.request("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else str(text)
    counts = {l.split()[0]: float(l.split()[1]) for l in text.splitlines()
              if l.startswith("kgw_egress_")}
    assert counts['kgw_egress_connections_total{result="denied"}'] >= 3, counts
    assert counts['kgw_egress_connections_total{result="allowed"}'] >= 1, counts
    assert counts['kgw_egress_bytes_total{direction="to_kernel"}'] >= BIG // 4 - 16384, counts


def test_a_restarted_kernel_gets_a_new_proxy(egw, net):
    kid = start(egw.tenant, egress=f"{A_HOST}:{net['a']}")["id"]
    url = f"'http://{A_HOST}:{net['a']}/again'"
    assert kfetch(egw.tenant, kid, [url])[0]["status"] == 200
    status, _, _ = egw.tenant.request("POST", f"/api/kernels/{kid}/restart")
    assert status == 200, status
    [r] = kfetch(egw.tenant, kid, [url])  # a new process: a new namespace, a new listener
    assert r["status"] == 200 and r["body"].startswith("hello from A /again"), r
    egw.tenant.delete_kernel(kid)


def test_the_ceiling_bounds_every_tenant(net, tmp_path):
    key = secrets.token_hex(16)
    h = hashlib.blake2b(key.encode(), digest_size=32).hexdigest()
    kf = tmp_path / "keys"
    kf.write_text(f"egt blake2b:{h} egress={A_HOST}:{net['a']},{B_HOST}:{net['b']}\n")
    # the ceiling names A's address (IP literals only match IP entries) but not B's
    gw = S.start_sandboxed(f"--key-file={kf}", f"--egress-ceiling={A_HOST}:*",
                           "--pool=python3=0")
    try:
        t = copy.copy(gw)
        t.token = key
        m = start(t, egress=f"{B_HOST}:{net['b']}", expect=403)  # dropped from the tenant
        assert f"{B_HOST}:{net['b']}" in m["message"], m
        kid = start(t)["id"]
        ra = kfetch(t, kid, [f"'http://{A_HOST}:{net['a']}/'", f"'http://{B_HOST}:{net['b']}/'"])
        assert ra[0]["status"] == 200 and ra[1]["status"] == 403, ra
        assert "beyond --egress-ceiling" in gw.log()
        t.delete_kernel(kid)
    finally:
        conftest.stop_gateway(gw)
    # an invalid ceiling stops kgw at start
    p = subprocess.run([conftest.KGW_BIN, "--egress-ceiling=nonsense", "--port", "1"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--egress-ceiling" in p.stderr, (p.returncode, p.stderr)


def test_e2b_network_options(egw, net):
    """E2B's network options on kgw's egress policy: denying all traffic but allowOut hosts
    gives the sandbox the tenant's entries for those hosts only; allowInternetAccess false
    gives none (not the tenant's policy); a host beyond the tenant's policy is refused with
    the host named; what an allowlist cannot say (a denyOut list, CIDR ranges) is 400."""
    gw = egw.tenant
    hdr = {"X-API-KEY": gw.token}

    def e2b_kernel(body, expect=201):
        before = {k["id"] for k in gw.request("GET", "/api/kernels")[1]}
        status, m, _ = gw.request("POST", "/e2b/api/v2/sandboxes", body, headers=hdr)
        assert status == expect, (status, m)
        if expect != 201:
            return m, None
        after = [k["id"] for k in gw.request("GET", "/api/kernels")[1] if k["id"] not in before]
        assert len(after) == 1, after
        return m, after[0]

    urls = [f"'http://{A_HOST}:{net['a']}/x'", f"'http://{B_HOST}:{net['b']}/x'"]
    m, kid = e2b_kernel({"templateID": "base", "network": {
        "denyOut": ["0.0.0.0/0"], "allowOut": [A_HOST], "allowPublicTraffic": False}})
    try:
        a, b = kfetch(gw, kid, urls)
        assert a.get("status") == 200 and "hello from A" in a["body"], a
        assert b.get("status") != 200, b
    finally:
        gw.request("DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}", headers=hdr)
    m, kid = e2b_kernel({"templateID": "base", "allow_internet_access": False})
    try:
        a, = kfetch(gw, kid, urls[:1])
        assert a.get("status") != 200, a
    finally:
        gw.request("DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}", headers=hdr)
    # allow_internet_access true: the tenant's whole policy
    m, kid = e2b_kernel({"templateID": "base", "allow_internet_access": True})
    try:
        a, b = kfetch(gw, kid, urls)
        assert a.get("status") == 200 and b.get("status") == 200, (a, b)
    finally:
        gw.request("DELETE", f"/e2b/api/sandboxes/{m['sandboxID']}", headers=hdr)
    body, _ = e2b_kernel({"network": {"denyOut": ["0.0.0.0/0"], "allowOut": ["pypi.org"]}},
                         expect=403)
    assert "pypi.org" in body["message"], body
    for bad in ({"denyOut": ["1.2.3.4"]}, {"denyOut": ["0.0.0.0/0"], "allowOut": ["10.0.0.0/8"]},
                {"allowPublicTraffic": True}):
        body, _ = e2b_kernel({"network": bad}, expect=400)
        assert "network" in body["message"], body
    # the default tenant has no policy: internet access is refused with the reason
    status, body, _ = egw.request("POST", "/e2b/api/v2/sandboxes",
                                  {"allow_internet_access": True},
                                  headers={"X-API-KEY": egw.token})
    assert status == 400 and "egress policy" in body["message"], body


def test_restart_in_place_keeps_the_egress_proxy(egw, net):
    """SIGUSR2 (gateway/handover.h): the kernel goes over with its policy, and its proxy
    listens again in its network namespace (the one before went with the old image)."""
    import signal

    from test_restart import wait_for
    kid = start(egw.tenant, egress=f"{A_HOST}:{net['a']}")["id"]
    ok, no = f"'http://{A_HOST}:{net['a']}/kept'", f"'http://{B_HOST}:{net['b']}/'"
    assert kfetch(egw.tenant, kid, [ok])[0]["status"] == 200
    images = egw.log().count("listening on http")
    egw.proc.send_signal(signal.SIGUSR2)
    assert wait_for(lambda: egw.log().count("listening on http") > images, 60), egw.log()
    conftest._wait_ready(egw)
    assert f"kernel={kid}: restart: carried over" in egw.log(), egw.log()
    # the kernel counts as starting until it answers the new image; then its proxy listens
    assert wait_for(lambda: (egw.tenant.request("GET", f"/api/kernels/{kid}")[1] or {})
                    .get("execution_state") not in (None, "starting"), 60)
    a, b = kfetch(egw.tenant, kid, [ok, no])
    assert a["status"] == 200 and a["body"].startswith("hello from A /kept"), a
    assert b.get("status") != 200, b
    egw.tenant.delete_kernel(kid)
