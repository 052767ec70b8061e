#!/usr/bin/python3
"""What a secret costs on HTTPS (docs/security.md, "Secrets"): the latency kgw's egress proxy
adds to an HTTPS request whose secret it puts in (TLS ended and opened again by the proxy)
against a plain CONNECT tunnel to a host without secrets, same run, same kernel, alternating.

Two loopback HTTPS servers (127.0.0.2 with a secret, 127.0.0.3 without) with a CA this script
makes with the `openssl` CLI (kgw verifies hosts against it: --egress-ca-file); a sandboxed
kernel (root needed) fetches each N times, a new connection each time (the proxy reads one
request per intercepted connection), timing each fetch inside the kernel. Prints the median
and p90 of each and the median difference.

  /usr/bin/python3 bench/egress_secrets.py [--kgw build/kgw] [-n 200]

Everything it starts is stopped by PID at the end.
"""
import argparse
import hashlib
import http.server
import json
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from execute import REPO, Kgw, pct  # noqa: E402

SECRET_HOST, PLAIN_HOST = "127.0.0.2", "127.0.0.3"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = b"ok" if self.headers.get("Authorization", "").startswith("Bearer sk-") else b"no"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def serve(tmp, host, ca):
    cert, key, csr = (os.path.join(tmp, host + s) for s in (".pem", ".key", ".csr"))
    ext = os.path.join(tmp, host + ".ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName=IP:{host}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", f"/CN={host}", "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
            "-days", "1", "-extfile", ext, "-out", cert)
    srv = http.server.ThreadingHTTPServer((host, 0), Handler)
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


CELL = r'''
import json, ssl, time, urllib.request
ctx = ssl.create_default_context()          # the system's CAs and kgw's egress CA
ctx.load_verify_locations(cadata=CA)        # and the bench's, for the tunneled host
def get(url, auth):
    t0 = time.perf_counter()
    req = urllib.request.Request(url, headers={"Authorization": auth})
    with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
        body = r.read()
    return time.perf_counter() - t0, body
res = {"secret": [], "tunnel": [], "bodies": set()}
for i in range(N + 5):
    for kind, url, auth in (("secret", SECRET_URL, "Bearer " + __import__("os").environ["BENCH_TOKEN"]),
                            ("tunnel", PLAIN_URL, "Bearer sk-plain")):
        dt, body = get(url, auth)
        if i >= 5:                          # the first ones warm caches (leaf certificate)
            res[kind].append(dt)
            res["bodies"].add(body.decode())
        time.sleep(0.01)                    # the proxy's TLS bucket: 20 a second
res["bodies"] = sorted(res["bodies"])
print(json.dumps(res))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgw", default=os.path.join(REPO, "build", "kgw"))
    ap.add_argument("-n", type=int, default=200)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kgw-bench-secrets-")
    ca = (os.path.join(tmp, "ca.pem"), os.path.join(tmp, "ca.key"))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-days", "1", "-subj", "/CN=bench CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign", "-keyout", ca[1], "-out", ca[0])
    s1, s2 = serve(tmp, SECRET_HOST, ca), serve(tmp, PLAIN_HOST, ca)
    p1, p2 = s1.server_address[1], s2.server_address[1]
    key = secrets.token_hex(16)
    kf, sf = os.path.join(tmp, "keys"), os.path.join(tmp, "secrets")
    with open(kf, "w") as f:
        f.write(f"bench blake2b:{hashlib.blake2b(key.encode(), digest_size=32).hexdigest()} "
                f"egress={SECRET_HOST}:{p1},{PLAIN_HOST}:{p2}\n")
    with open(os.open(sf, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(f"bench BENCH_TOKEN {SECRET_HOST}:{p1} Bearer sk-{secrets.token_hex(12)}\n")
    kgw = Kgw(a.kgw, [f"--key-file={kf}", f"--secrets-file={sf}", f"--egress-ca-file={ca[0]}"])
    try:
        kgw.token = key  # the tenant with the policy and the secret
        st, model = kgw.request("POST", "/api/kernels", {})
        assert st == 201, (st, model)
        code = (f"CA = {open(ca[0]).read()!r}\nN = {a.n}\n"
                f"SECRET_URL = 'https://{SECRET_HOST}:{p1}/'\nPLAIN_URL = 'https://{PLAIN_HOST}:{p2}/'\n"
                + CELL)
        c, r = kgw.call("POST", f"/api/kernels/{model['id']}/execute", {"code": code},
                        timeout=600)
        events = [json.loads(line) for line in r.read().splitlines() if line.strip()]
        c.close()
        out = "".join(e.get("text", "") for e in events if e["type"] == "stream")
        if events[-1].get("status") != "ok":
            raise RuntimeError(json.dumps(events[-3:])[:2000])
        res = json.loads(out.strip().splitlines()[-1])
        assert res["bodies"] == ["no", "ok"], res["bodies"]  # the value reached its host only
        ms = {k: sorted(x * 1000 for x in res[k]) for k in ("secret", "tunnel")}
        for k in ("tunnel", "secret"):
            print(f"{k:7s} n={len(ms[k])} median={pct(ms[k], 50):.2f} ms p90={pct(ms[k], 90):.2f} ms")
        print(f"added by the secret's TLS interception (median): "
              f"{pct(ms['secret'], 50) - pct(ms['tunnel'], 50):.2f} ms")
        kgw.request("DELETE", f"/api/kernels/{model['id']}")
    finally:
        kgw.stop()
        s1.shutdown()
        s2.shutdown()


if __name__ == "__main__":
    main()
