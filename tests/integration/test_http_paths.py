"""Request paths libwebsockets cannot decode, and pipelined requests, on raw sockets.

An encoded NUL (%00) anywhere in a path or query, or a '%' without two hex digits, gets a 400
with a JSON body on every route (websocket upgrades included), and the connection stays usable
for the next request. A client that pipelines gets its first answer, with Connection: close,
and the gateway stays responsive (it used to spin at 100% CPU on a pipelined request with a
body, and to lose answers)."""
import json
import os
import socket
import ssl
import subprocess
import time

import pytest

from conftest import KGW_BIN, free_port

pytestmark = pytest.mark.kgw_only

HERE = os.path.dirname(os.path.abspath(__file__))
OPENAPI = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "openapi.json")
BAD = ["x%00y", "x%zzy", "x%4", "%00x", "x%"]


def read_response(sock):
    """One HTTP/1.1 response: (status, headers, body); (None, {}, b"") when the server closed
    the connection without one."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, {}, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), lines[0]
    hdrs = {}
    for h in lines[1:]:
        k, _, v = h.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    n = int(hdrs.get("content-length", "0"))
    while len(body) < n:
        chunk = sock.recv(65536)
        assert chunk, "closed inside a body"
        body += chunk
    return int(lines[0].split()[1]), hdrs, body


def request(method, target, token, extra=""):
    body = "Content-Length: 0\r\n" if method in ("POST", "PUT", "PATCH") else ""
    return (f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: token {token}\r\n"
            f"{body}{extra}\r\n").encode()


def cases():
    """(method, target) with an undecodable escape, for every operation of the API."""
    with open(OPENAPI) as f:
        paths = json.load(f)["paths"]
    out = []
    for path, ops in paths.items():
        for method in ops:
            for bad in BAD:
                if "{" in path:
                    target = path
                    while "{" in target:
                        a = target.index("{")
                        target = target[:a] + bad + target[target.index("}", a) + 1:]
                else:
                    target = path + "/" + bad if path != "/api" else path + bad
                out.append((method.upper(), target))
        out.append((list(ops)[0].upper(), path.replace("{", "").replace("}", "") + "?q=%00"))
    return out


def test_undecodable_paths_get_400_and_keep_alive(gateway):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        for method, target in cases():
            s.sendall(request(method, target, gateway.token))
            status, hdrs, body = read_response(s)
            assert status == 400, (method, target, status, body)
            assert hdrs["content-type"] == "application/json"
            assert "undecodable" in json.loads(body)["message"], body
            # the same connection goes on
            s.sendall(request("GET", "/api", gateway.token))
            status, _, _ = read_response(s)
            assert status == 200, (method, target, "next request", status)


def test_undecodable_websocket_upgrade_gets_400(gateway):
    for target in ("/api/kernels/x%00y/channels", "/channel?session_id=%00", "/chan%zznel"):
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
            s.sendall(request("GET", target, gateway.token,
                              "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                              "Sec-WebSocket-Version: 13\r\n"
                              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"))
            status, hdrs, body = read_response(s)
            assert status == 400, (target, status, body)
            assert json.loads(body)["message"], body


def test_escapes_in_bodies_and_headers_are_left_alone(gateway):
    """Only request targets are looked at: a body or header with %00 is passed unchanged."""
    payload = json.dumps({"kernel": {"name": "python3%00"}, "path": "a%00", "type": "notebook",
                          "name": "x%zz"}).encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(b"POST /api/sessions HTTP/1.1\r\nHost: x\r\nX-Note: %00%zz\r\n"
                  + f"Authorization: token {gateway.token}\r\n".encode()
                  + f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
                  .encode() + payload)
        status, _, body = read_response(s)
        # the body reached the handler unchanged: it names a kernelspec that does not exist
        assert status == 404 and "python3%00" in json.loads(body)["message"], (status, body)
        s.sendall(request("GET", "/api", gateway.token))
        assert read_response(s)[0] == 200


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("second", ["get", "post-with-body", "bad-path"])
def test_pipelined_requests_get_the_first_answer_and_a_close(gateway, second):
    first = request("GET", "/api", gateway.token)
    nxt = {"get": request("GET", "/api/kernels", gateway.token),
           "post-with-body": (b"POST /api/kernels HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n"
                              + f"Authorization: token {gateway.token}\r\n\r\n".encode()
                              + b'{"x%00":1'),
           "bad-path": request("GET", "/api/x%00", gateway.token)}[second]
    before = cpu_seconds(gateway.proc.pid)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(first + nxt + first)
        status, hdrs, body = read_response(s)
        assert status == 200 and json.loads(body)["gateway"] == "kgw"
        assert hdrs.get("connection") == "close"
        assert read_response(s)[0] is None  # then the server closes
    # the gateway answers others at once and does not spin
    t0 = time.monotonic()
    assert gateway.request("GET", "/api")[0] == 200
    assert time.monotonic() - t0 < 1
    time.sleep(1)
    assert cpu_seconds(gateway.proc.pid) - before < 0.5


def test_tls_undecodable_path_and_keep_alive(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    port, token = free_port(), "tls-paths-key"
    log = open(tmp_path / "kgw.log", "w")
    proc = subprocess.Popen([KGW_BIN, "--port", str(port), "--api-key", token, "--certfile",
                             str(cert), "--keyfile", str(key), "--pool", "python3=0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 20
        while True:
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            for target in ("/download/x%00.txt", "/api/ker%zznels"):
                s.sendall(request("GET", target, token))
                status, _, body = read_response(s)
                assert status == 400, (target, status, body)
                s.sendall(request("GET", "/api", token))
                assert read_response(s)[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()
