"""Secrets kernels use but never see (docs/security.md, "Secrets"): placeholders in kernels'
environments, values put in by the egress proxy, for HTTPS too.

"The internet" is played by servers on loopback addresses of the host (127.0.0.2-127.0.0.6),
with their own CA made here with the `openssl` CLI; the gateway verifies hosts against it
(--egress-ca-file). The servers record what they were sent, so a test sees what reached the
host; kernels run real urllib and requests (pip's copy) code.
"""
import hashlib
import http.client
import http.server
import json
import os
import secrets
import signal
import ssl
import subprocess
import threading
import time
import urllib.request

import pytest

import conftest
import sbxutil as S

pytestmark = pytest.mark.needs_sandbox

A_HOST, B_HOST, TLS_HOST, TUN_HOST, BAD_HOST = (
    "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6")
VALUE = "sk-test-" + secrets.token_hex(12)
OTHER_VALUE = "ot-test-" + secrets.token_hex(12)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        srv.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                         "x": self.headers.get("X-Api-Key"), "host": self.headers.get("Host")})
        body = f"hello from {srv.name} {len(srv.seen)}".encode()  # never echoes what it got
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


def serve(host, name, tls=None):
    srv = http.server.ThreadingHTTPServer((host, 0), Handler)
    srv.daemon_threads = True
    srv.handle_error = lambda *a: None
    srv.name, srv.seen = name, []
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_cert(tmp, name, ip, ca=None):
    """A certificate for IP signed by ca (its (cert, key) paths), or self-signed."""
    cert, key = os.path.join(tmp, name + ".pem"), os.path.join(tmp, name + ".key")
    if ca is None:
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-days", "1", "-subj", f"/CN={name}", "-addext", f"subjectAltName=IP:{ip}",
                "-keyout", key, "-out", cert)
        return cert, key
    csr = os.path.join(tmp, name + ".csr")
    ext = os.path.join(tmp, name + ".ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", f"/CN={name}", "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
            "-days", "1", "-extfile", ext, "-out", cert)
    return cert, key


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("secnet"))
    ca = (os.path.join(tmp, "ca.pem"), os.path.join(tmp, "ca.key"))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-days", "2", "-subj", "/CN=test internet CA", "-addext",
            "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
            "-keyout", ca[1], "-out", ca[0])
    n = {"ca": ca[0], "ca_pem": open(ca[0]).read()}
    n["a"] = serve(A_HOST, "A")
    n["b"] = serve(B_HOST, "B")
    n["tls"] = serve(TLS_HOST, "TLS", make_cert(tmp, "tls", TLS_HOST, ca))
    tun = make_cert(tmp, "tun", TUN_HOST, ca)
    n["tun"] = serve(TUN_HOST, "TUN", tun)
    n["tun_der"] = ssl.PEM_cert_to_DER_cert(open(tun[0]).read())
    n["bad"] = serve(BAD_HOST, "BAD", make_cert(tmp, "bad", BAD_HOST))  # not the CA's
    for k in ("a", "b", "tls", "tun", "bad"):
        n["p" + k] = n[k].server_address[1]
    yield n
    for k in ("a", "b", "tls", "tun", "bad"):
        n[k].shutdown()
        n[k].server_close()


def secrets_text(net, value=VALUE):
    return (f"# tenant NAME hosts value\n"
            f"sec API_TOKEN {A_HOST}:{net['pa']},{TLS_HOST}:{net['ptls']} Bearer {value}\n"
            f"sec BAD_TOKEN {BAD_HOST}:{net['pbad']} {value}-bad\n"
            f"sec QUERY_KEY {A_HOST}:{net['pa']} {value}-q\n"
            f"other OTHER_TOKEN {A_HOST}:{net['pa']} {OTHER_VALUE}\n")


@pytest.fixture(scope="module")
def sgw(net, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secgw")
    policy = ",".join(f"{h}:{net['p' + k]}" for h, k in
                      ((A_HOST, "a"), (B_HOST, "b"), (TLS_HOST, "tls"), (TUN_HOST, "tun"),
                       (BAD_HOST, "bad")))
    keys = {}
    lines = []
    for t in ("sec", "other"):
        keys[t] = secrets.token_hex(16)
        h = hashlib.blake2b(keys[t].encode(), digest_size=32).hexdigest()
        lines.append(f"{t} blake2b:{h} egress={policy}")
    kf = tmp / "keys"
    kf.write_text("\n".join(lines) + "\n")
    sf = tmp / "secrets"
    sf.write_text(secrets_text(net))
    os.chmod(sf, 0o600)
    audit = tmp / "audit.jsonl"
    gw = S.start_sandboxed(f"--key-file={kf}", f"--secrets-file={sf}",
                           f"--egress-ca-file={net['ca']}", f"--audit-log={audit}")
    gw.audit, gw.secrets_file = audit, sf
    gw.t = {}
    for t in ("sec", "other"):
        c = conftest.Gateway(gw.proc, gw.port, keys[t], gw.log_path)
        gw.t[t] = c
    yield gw
    conftest.stop_gateway(gw)


def start(c, body=None, expect=201):
    status, model, _ = c.request("POST", "/api/kernels", body or {})
    assert status == expect, (status, model)
    return model


def audit_events(gw, event="egress"):
    with open(gw.audit) as f:
        return [e for e in map(json.loads, f) if e["event"] == event]


def wait_audit(gw, pred, event="egress", timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in audit_events(gw, event) if pred(e)]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no such {event} event: {audit_events(gw, event)!r}")


FETCH = r'''
import os, ssl, urllib.request, urllib.error
def fetch(url, headers=None, ctx=None, timeout=20):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return {"status": r.status, "body": r.read().decode(errors="replace")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "reason": str(e.reason), "body": e.read().decode(errors="replace")}
    except Exception as e:
        return {"error": repr(e)}
TOK = os.environ.get("API_TOKEN", "")
'''


@pytest.fixture(scope="module")
def kern(sgw):
    return start(sgw.t["sec"])["id"]


def test_kernel_sees_only_a_placeholder(sgw, net, kern):
    kid2 = start(sgw.t["sec"], {"secrets": ["API_TOKEN"]})["id"]
    code = r'''
import os
R["env"] = {k: v for k, v in os.environ.items() if v.startswith("kgw-secret-")}
R["ca"] = [os.environ.get(k) for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")]
blobs = [open("/proc/self/environ", "rb").read()]
for top in ("/run", "/opt", "/tmp", "/mnt", os.path.expanduser("~")):
    for d, _, fs in os.walk(top):
        for f in fs:
            try:
                with open(os.path.join(d, f), "rb") as fh:
                    blobs.append(fh.read(1 << 20))
            except OSError:
                pass
R["blobs"] = len(blobs)
NEEDLE = PART1 + PART2  # never whole in the code (the kernel's history keeps the code)
R["found"] = [i for i, b in enumerate(blobs) if NEEDLE in b]
try:
    open(os.environ["SSL_CERT_FILE"], "a").close()
    R["ca_writable"] = True
except OSError:
    R["ca_writable"] = False
'''.replace("PART1", repr(VALUE[:10].encode())).replace("PART2", repr(VALUE[10:].encode()))
    r = S.kcall(sgw.t["sec"], kern, code)
    assert set(r["env"]) == {"API_TOKEN", "BAD_TOKEN", "QUERY_KEY"}, r
    assert all(v.startswith("kgw-secret-") and len(v) == 43 for v in r["env"].values()), r
    assert r["found"] == [] and r["blobs"] > 3, r  # the kernel wrote none either
    assert r["ca"] == ["/opt/kgw/python/kgw-ca-bundle.pem"] * 3 and not r["ca_writable"], r
    r2 = S.kcall(sgw.t["sec"], kid2, code)
    assert set(r2["env"]) == {"API_TOKEN"}, r2  # the subset asked for
    assert r2["env"]["API_TOKEN"] != r["env"]["API_TOKEN"]  # per kernel
    # asking for one the tenant lacks: 403 naming it
    status, body, _ = sgw.t["sec"].request("POST", "/api/kernels", {"secrets": ["OTHER_TOKEN"]})
    assert status == 403 and "OTHER_TOKEN" in body["message"], body
    sgw.t["sec"].delete_kernel(kid2)
    # nor does the gateway print it: its log, the audit log
    for path in (sgw.log_path, sgw.audit):
        assert VALUE not in open(path, errors="replace").read(), path


def test_plain_http_injected_only_where_allowed(sgw, net, kern):
    net["a"].seen.clear()
    r = S.kcall(sgw.t["sec"], kern, FETCH + f'''
R["a"] = fetch("http://{A_HOST}:{net['pa']}/q?key=" + os.environ["QUERY_KEY"],
              {{"Authorization": TOK}})
R["b"] = fetch("http://{B_HOST}:{net['pb']}/", {{"Authorization": TOK}})
R["b_plain"] = fetch("http://{B_HOST}:{net['pb']}/")
R["nowhere"] = fetch("http://127.0.0.9:{net['pa']}/", {{"Authorization": TOK}})
R["vhost"] = fetch("http://{A_HOST}:{net['pa']}/", {{"Authorization": TOK, "Host": "evil.example"}})
R["target_space"] = fetch("http://{A_HOST}:{net['pa']}/q?k=" + TOK)  # "Bearer ...": a space
R["forged"] = fetch("http://{A_HOST}:{net['pa']}/", {{"Authorization": "kgw-secret-" + "0" * 32}})
''')
    assert r["a"]["status"] == 200 and VALUE not in json.dumps(r), r
    seen = net["a"].seen
    assert len(seen) == 1 and seen[0]["auth"] == "Bearer " + VALUE, seen
    assert seen[0]["path"] == f"/q?key={VALUE}-q", seen
    assert r["b"]["status"] == 403 and "secret API_TOKEN may not be sent to" in r["b"]["reason"], r
    assert r["b_plain"]["status"] == 200, r
    assert r["nowhere"]["status"] == 403, r
    assert r["forged"]["status"] == 403 and "not this kernel's" in r["forged"]["reason"], r
    assert r["vhost"]["status"] == 403 and "Host header" in r["vhost"]["reason"], r
    assert r["target_space"]["status"] == 400 and "space" in r["target_space"]["reason"], r
    assert not net["b"].seen or all(s["auth"] is None for s in net["b"].seen)
    e = wait_audit(sgw, lambda e: e["kernel"] == kern and e["host"] == B_HOST and
                   e["result"] == "denied")[0]
    assert e["secrets"] == ["API_TOKEN"] and "API_TOKEN" in e["reason"], e
    e = wait_audit(sgw, lambda e: e["kernel"] == kern and e["host"] == A_HOST and
                   e["result"] == "allowed")[0]
    assert sorted(e["secrets"]) == ["API_TOKEN", "QUERY_KEY"], e


def test_https_injected_urllib_and_requests(sgw, net, kern):
    net["tls"].seen.clear()
    url = f"https://{TLS_HOST}:{net['ptls']}/tls"
    r = S.kcall(sgw.t["sec"], kern, FETCH + f'''
R["urllib"] = fetch("{url}?via=urllib", {{"Authorization": TOK}})
from pip._vendor import requests
resp = requests.get("{url}?via=requests", headers={{"X-Api-Key": TOK}}, timeout=20)
R["requests"] = {{"status": resp.status_code, "body": resp.text}}
R["vhost"] = fetch("{url}?via=vhost", {{"Authorization": TOK, "Host": "evil.example"}})
''', timeout=60)
    assert r["urllib"]["status"] == 200 and r["urllib"]["body"].startswith("hello from TLS"), r
    assert r["requests"]["status"] == 200, r
    assert r["vhost"]["status"] == 403 and "Host header" in r["vhost"]["reason"], r
    assert VALUE not in json.dumps(r)
    seen = {s["path"]: s for s in net["tls"].seen}
    assert seen["/tls?via=urllib"]["auth"] == "Bearer " + VALUE, seen
    assert seen["/tls?via=requests"]["x"] == "Bearer " + VALUE, seen
    e = wait_audit(sgw, lambda e: e["kernel"] == kern and e["host"] == TLS_HOST and
                   e["result"] == "allowed")[0]
    assert e["method"] == "CONNECT" and e["secrets"] == ["API_TOKEN"], e


def test_secret_free_host_stays_a_tunnel(sgw, net, kern):
    """The host's own certificate reaches the kernel: the gateway did not end that TLS."""
    r = S.kcall(sgw.t["sec"], kern, f'''
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT {TUN_HOST}:{net['ptun']} HTTP/1.1\\r\\n\\r\\n")
R["answer"] = s.recv(4096).decode()
ctx = ssl.create_default_context(cadata={net['ca_pem']!r})
t = ctx.wrap_socket(s, server_hostname="{TUN_HOST}")
R["der"] = t.getpeercert(binary_form=True).hex()
t.close()
''')
    assert r["answer"].startswith("HTTP/1.1 200"), r
    assert bytes.fromhex(r["der"]) == net["tun_der"]


def test_bad_upstream_certificate_is_502(sgw, net, kern):
    net["bad"].seen.clear()
    r = S.kcall(sgw.t["sec"], kern, FETCH + f'''
R["bad"] = fetch("https://{BAD_HOST}:{net['pbad']}/", {{"Authorization": os.environ["BAD_TOKEN"]}})
''')
    assert r["bad"]["status"] == 502 and "certificate failed verification" in r["bad"]["reason"], r
    assert net["bad"].seen == []
    e = wait_audit(sgw, lambda e: e["kernel"] == kern and e["host"] == BAD_HOST)[0]
    assert e["result"] == "denied" and "verification" in e["reason"], e


def test_rotation_without_restart(sgw, net, kern):
    new = "sk-rotated-" + secrets.token_hex(8)
    try:
        sgw.secrets_file.write_text(secrets_text(net, new))
        sgw.proc.send_signal(signal.SIGHUP)
        wait_audit(sgw, lambda e: True, event="secrets_reloaded")
        net["a"].seen.clear()
        r = S.kcall(sgw.t["sec"], kern, FETCH + f'''
R["a"] = fetch("http://{A_HOST}:{net['pa']}/", {{"Authorization": TOK}})
''')
        assert r["a"]["status"] == 200, r
        assert net["a"].seen[-1]["auth"] == "Bearer " + new
    finally:
        sgw.secrets_file.write_text(secrets_text(net))
        sgw.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while len(audit_events(sgw, "secrets_reloaded")) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)


def test_cross_tenant(sgw, net, kern):
    ko = start(sgw.t["other"])["id"]
    sec_tok = S.kcall(sgw.t["sec"], kern, "import os\nR['t'] = os.environ['API_TOKEN']")["t"]
    net["a"].seen.clear()
    r = S.kcall(sgw.t["other"], ko, FETCH + f'''
R["env"] = sorted(k for k in os.environ if k.endswith("_TOKEN"))
R["own"] = fetch("http://{A_HOST}:{net['pa']}/", {{"Authorization": os.environ["OTHER_TOKEN"]}})
R["theirs"] = fetch("http://{A_HOST}:{net['pa']}/", {{"Authorization": {sec_tok!r}}})
''')
    assert r["env"] == ["OTHER_TOKEN"], r
    assert r["own"]["status"] == 200 and r["theirs"]["status"] == 403, r
    assert [s["auth"] for s in net["a"].seen] == [OTHER_VALUE]
    status, body, _ = sgw.t["other"].request("POST", "/api/kernels", {"secrets": ["API_TOKEN"]})
    assert status == 403 and "API_TOKEN" in body["message"], body
    sgw.t["other"].delete_kernel(ko)


def test_receipts_and_metrics(sgw, net, kern):
    # the execute API's end: hosts with bytes each way, secrets by name
    code = FETCH + f'''
print(fetch("http://{A_HOST}:{net['pa']}/receipt", {{"Authorization": TOK}})["status"])
print(fetch("https://{TLS_HOST}:{net['ptls']}/receipt", {{"Authorization": TOK}})["status"])
print(fetch("http://{B_HOST}:{net['pb']}/plain")["status"])
'''
    c = http.client.HTTPConnection("127.0.0.1", sgw.port, timeout=60)
    c.request("POST", f"/api/kernels/{kern}/execute", body=json.dumps({"code": code}),
              headers={"Authorization": "token " + sgw.t["sec"].token,
                       "Content-Type": "application/json"})
    events = [json.loads(line) for line in c.getresponse().read().splitlines() if line.strip()]
    c.close()
    out = "".join(e.get("text", "") for e in events if e["type"] == "stream")
    assert out.split() == ["200", "200", "200"], events
    end = events[-1]
    assert end["type"] == "end" and end["egress"]["secrets"] == ["API_TOKEN"], end
    hosts = {h["host"]: h for h in end["egress"]["hosts"]}
    assert set(hosts) == {f"{A_HOST}:{net['pa']}", f"{TLS_HOST}:{net['ptls']}",
                          f"{B_HOST}:{net['pb']}"}, end
    assert all(h["bytes_out"] > 50 and h["bytes_in"] > 50 for h in hosts.values()), end
    assert VALUE not in json.dumps(events)

    ex = wait_audit(sgw, lambda e: e["kernel"] == kern and e.get("egress_secrets"),
                    event="execution")
    assert ex[-1]["egress_secrets"] == ["API_TOKEN"], ex[-1]
    with urllib.request.urlopen(urllib.request.Request(
            sgw.url + "/metrics", headers={"Authorization": "token " + sgw.token})) as m:
        text = m.read().decode()
    assert 'kgw_egress_secret_injections_total{secret="API_TOKEN"}' in text, text[-3000:]
    assert 'kgw_egress_secret_refusals_total{secret="API_TOKEN"}' in text
    assert VALUE not in text


def test_secrets_file_must_be_private(net, tmp_path):
    sf = tmp_path / "secrets"
    sf.write_text(secrets_text(net))
    os.chmod(sf, 0o644)
    p = subprocess.run([conftest.KGW_BIN, "--port", str(conftest.free_port()), "--api-key", "x" * 32,
                        f"--secrets-file={sf}"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "chmod 600" in p.stderr, p.stderr
    assert VALUE not in p.stderr + p.stdout


FLOOD = r'''
import json, os, socket, ssl, sys, threading, time
host, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ctx = ssl.create_default_context()  # SSL_CERT_FILE: the system's CAs and kgw's
counts = {"ok": 0, "429": 0, "other": 0}
lock = threading.Lock()
end = time.monotonic() + secs
def one():
    while time.monotonic() < end:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        try:
            s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
            ans = s.recv(4096).decode(errors="replace")
            if ans.startswith("HTTP/1.1 429"):
                k = "429"
            elif ans.startswith("HTTP/1.1 200"):
                t = ctx.wrap_socket(s, server_hostname=host)  # the whole handshake
                t.close()
                k = "ok"
            else:
                k = "other"
        except OSError:
            k = "other"
        finally:
            s.close()
        with lock:
            counts[k] += 1
ts = [threading.Thread(target=one) for _ in range(12)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(counts))
'''


def test_handshake_flood_is_refused_without_slowing_the_loop(sgw, net, kern):
    secs = 6
    attack = S.Background(lambda: S.kcall(sgw.t["sec"], kern, f'''
import subprocess, sys, json
p = subprocess.run([sys.executable, "-c", {FLOOD!r}, "{TLS_HOST}", "{net['ptls']}", "{secs}"],
                   capture_output=True, text=True, timeout=60)
R["counts"] = json.loads(p.stdout) if p.stdout.strip() else None
R["err"] = p.stderr[-2000:]
''', timeout=90))
    attack.start()
    time.sleep(0.3)
    lat = S.api_latencies(sgw, attack, 60)
    r = attack.value(60)
    print("GET /api during the handshake flood:", S.describe(lat), r["counts"])
    c = r["counts"]
    assert c, r
    assert c["429"] > 0, c  # over the bucket: refused before any TLS
    # at most the burst and the rate over the flood's time (and a little for the clock)
    assert 10 <= c["ok"] <= 40 + 20 * (secs + 2), c
    s = sorted(lat)
    assert s and s[len(s) // 2] < 0.05 and s[-1] < 0.5, S.describe(lat)
    # another kernel's handshakes are its own
    k2 = start(sgw.t["sec"], {"secrets": ["API_TOKEN"]})["id"]
    r2 = S.kcall(sgw.t["sec"], k2, FETCH + f'''
R["tls"] = fetch("https://{TLS_HOST}:{net['ptls']}/after", {{"Authorization": TOK}})
''')
    assert r2["tls"]["status"] == 200, r2
    sgw.t["sec"].delete_kernel(k2)


def test_secrets_outside_the_tenants_policy_are_refused(tmp_path):
    key = secrets.token_hex(16)
    kf = tmp_path / "keys"
    kf.write_text(f"sec blake2b:{hashlib.blake2b(key.encode(), digest_size=32).hexdigest()} "
                  f"egress={A_HOST}:80\n")
    sf = tmp_path / "secrets"
    sf.write_text(f"sec API_TOKEN {A_HOST}:80,{B_HOST}:80 {VALUE}\n")
    os.chmod(sf, 0o600)
    p = subprocess.run([conftest.KGW_BIN, "--port", str(conftest.free_port()),
                        f"--key-file={kf}", f"--secrets-file={sf}"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "API_TOKEN" in p.stderr and B_HOST in p.stderr, p.stderr
    assert VALUE not in p.stderr + p.stdout


def test_mcp_structured_content_has_the_receipt(sgw, net):
    """An MCP session's kernel (the tenant's whole policy and secrets): execute_code's
    structuredContent is the execution's end, with its egress receipt."""
    def mcp(body, sid=None):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": "Bearer " + sgw.t["sec"].token}
        if sid:
            h["Mcp-Session-Id"] = sid
        req = urllib.request.Request(sgw.url + "/mcp", data=json.dumps(body).encode(),
                                     method="POST", headers=h)
        with urllib.request.urlopen(req, timeout=120) as r:
            data = r.read()
            return (json.loads(data) if data else None), r.headers
    _, h = mcp({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}}})
    sid = h["Mcp-Session-Id"]
    mcp({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    code = FETCH + f'print(fetch("http://{A_HOST}:{net["pa"]}/mcp", {{"Authorization": TOK}})["status"])'
    body, _ = mcp({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "execute_code", "arguments": {"code": code}}}, sid)
    sc = body["result"]["structuredContent"]
    assert sc["status"] == "ok" and sc["egress"]["secrets"] == ["API_TOKEN"], body
    assert [h["host"] for h in sc["egress"]["hosts"]] == [f"{A_HOST}:{net['pa']}"], sc
    assert VALUE not in json.dumps(body)


def test_wildcard_secret_hosts_are_refused(tmp_path):
    """A secret never goes to every name under a domain (one the kernel's owner may hold)."""
    key = secrets.token_hex(16)
    kf = tmp_path / "keys"
    kf.write_text(f"sec blake2b:{hashlib.blake2b(key.encode(), digest_size=32).hexdigest()} "
                  f"egress=*.example.org:443\n")
    sf = tmp_path / "secrets"
    sf.write_text(f"sec API_TOKEN *.example.org:443 {VALUE}\n")
    os.chmod(sf, 0o600)
    p = subprocess.run([conftest.KGW_BIN, "--port", str(conftest.free_port()),
                        f"--key-file={kf}", f"--secrets-file={sf}"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "wildcard" in p.stderr, p.stderr
    assert VALUE not in p.stderr + p.stdout


def test_no_secret_in_plain_http_to_port_443(tmp_path):
    """`http://HOST:443/` with a placeholder: refused before anything is sent (the kernel chose
    to send in clear what the host takes over TLS); nothing listens there, nothing is needed."""
    key = secrets.token_hex(16)
    kf = tmp_path / "keys"
    kf.write_text(f"sec blake2b:{hashlib.blake2b(key.encode(), digest_size=32).hexdigest()} "
                  f"egress={A_HOST}:443\n")
    sf = tmp_path / "secrets"
    sf.write_text(f"sec API_TOKEN {A_HOST}:443 {VALUE}\n")
    os.chmod(sf, 0o600)
    gw = S.start_sandboxed(f"--key-file={kf}", f"--secrets-file={sf}")
    try:
        c = conftest.Gateway(gw.proc, gw.port, key, gw.log_path)
        kid = start(c)["id"]
        r = S.kcall(c, kid, FETCH + f'''
R["plain"] = fetch("http://{A_HOST}:443/", {{"Authorization": "Bearer " + TOK}})
''')
        assert r["plain"]["status"] == 403 and "port 443" in r["plain"]["reason"], r
        assert VALUE not in json.dumps(r)
    finally:
        conftest.stop_gateway(gw)
