"""API security: keys and tenants, failed-login and rate limits, X-Forwarded-For, key reload,
TLS, the audit log, security headers and slow clients."""
import asyncio
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import websockets

import jclient as J
from conftest import KGW_BIN, REPO, free_port, keygen, start_gateway, stop_gateway
from jclient import run

sys.path.insert(0, os.path.join(REPO, "examples"))
from channel_client import Channel, RemoteError  # noqa: E402

SECURITY_HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY",
                    "cache-control": "no-store"}


def req(gw, method, path, key=None, body=None, headers=None, port=None):
    h = dict(headers or {})
    if key:
        h["Authorization"] = f"token {key}"
    c = http.client.HTTPConnection("127.0.0.1", port or gw.port, timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, (json.loads(data) if data else None), {k.lower(): v for k, v in
                                                            r.getheaders()}


@pytest.fixture(scope="module")
def tenants():
    """A key file with tenants alice and bob; yields (path, {tenant: key})."""
    keys = {}
    with tempfile.NamedTemporaryFile("w", prefix="kgw-keys-", delete=False) as f:
        f.write("# test key file\n\n")
        for t in ("alice", "bob"):
            key, line = keygen(t)
            keys[t] = key
            f.write(line + "\n")
    yield f.name, keys
    os.unlink(f.name)


@pytest.fixture(scope="module")
def tgw(tenants):
    path, keys = tenants
    gw = start_gateway([f"--key-file={path}"])
    gw.keys = keys
    yield gw
    stop_gateway(gw)


def test_keygen_prints_a_key_and_its_hash_line():
    key, line = keygen("team-1")
    assert len(key) == 64 and all(c in "0123456789abcdef" for c in key)
    tenant, h = line.split()
    assert tenant == "team-1" and h.startswith("blake2b:") and key not in line
    p = subprocess.run([KGW_BIN, "keygen", "--tenant", "../x"], capture_output=True, timeout=10)
    assert p.returncode == 2


def test_bad_key_file_refuses_to_start(tmp_path):
    f = tmp_path / "keys"
    f.write_text("alice 0123456789abcdef\n")  # a key in clear, not a hash
    p = subprocess.run([KGW_BIN, "--key-file", str(f), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "keys:1" in p.stderr, p.stderr


def test_each_tenant_sees_only_its_own(tgw):
    alice, bob = tgw.keys["alice"], tgw.keys["bob"]
    status, a, _ = req(tgw, "POST", "/api/kernels", alice, {})
    assert status == 201, a
    try:
        kid = a["id"]
        status, lst, _ = req(tgw, "GET", "/api/kernels", bob)
        assert status == 200 and kid not in [k["id"] for k in lst]
        status, lst, _ = req(tgw, "GET", "/api/kernels", alice)
        assert kid in [k["id"] for k in lst]
        # every kernel route: another tenant gets exactly what a missing kernel gets
        missing = "00000000-0000-0000-0000-000000000000"
        for method, path in [("GET", "/api/kernels/{}"), ("DELETE", "/api/kernels/{}"),
                             ("POST", "/api/kernels/{}/interrupt"),
                             ("POST", "/api/kernels/{}/restart")]:
            s1, b1, _ = req(tgw, method, path.format(kid), bob)
            s2, b2, _ = req(tgw, method, path.format(missing), bob)
            assert s1 == s2 == 404, (method, path, s1, b1)
        # sharing another tenant's workspace is refused as if it did not exist
        status, body, _ = req(tgw, "POST", "/api/kernels", bob, {"workspace": a["workspace"]})
        assert status == 404, body
        # sessions on another tenant's kernel
        status, body, _ = req(tgw, "POST", "/api/sessions", bob,
                              {"path": "x.ipynb", "type": "notebook", "kernel": {"id": kid}})
        assert status == 404, body
        # websocket on another tenant's kernel
        gwb = type("G", (), {"ws_url": tgw.ws_url, "port": tgw.port, "token": bob})()
        assert J.handshake_status(gwb, kid) == 404
        gwa = type("G", (), {"ws_url": tgw.ws_url, "port": tgw.port, "token": alice})()
        assert J.handshake_status(gwa, kid) == 101
        # still alive for alice
        status, model, _ = req(tgw, "GET", f"/api/kernels/{kid}", alice)
        assert status == 200
    finally:
        req(tgw, "DELETE", f"/api/kernels/{a['id']}", alice)


def test_rpc_is_scoped_by_tenant(tgw):
    async def go():
        a = await Channel.connect(tgw.ws_url, tgw.keys["alice"])
        b = await Channel.connect(tgw.ws_url, tgw.keys["bob"])
        try:
            kid = await a.mkm.start_kernel()
            assert kid in await a.mkm.list_kernel_ids()
            assert kid not in await b.mkm.list_kernel_ids()
            for method in ("get_kernel", "interrupt_kernel", "restart_kernel", "shutdown_kernel"):
                with pytest.raises(RemoteError) as e1:
                    await b.call("multi_kernel_manager", "", method, kid)
                with pytest.raises(RemoteError) as e2:
                    await b.call("multi_kernel_manager", "", method,
                                 "00000000-0000-0000-0000-000000000000")
                assert e1.value.type == e2.value.type == "KeyError", method
            km = await a.mkm.get_kernel(kid)
            with pytest.raises(RemoteError) as ei:
                await b.call("kernel_manager", km.id, "is_alive")
            assert ei.value.type == "KeyError"
            await a.mkm.shutdown_kernel(kid)
        finally:
            await a.close()
            await b.close()
    run(go(), timeout=120)


def test_eleventh_failed_login_gets_429_even_with_the_right_key(gateway_factory):
    gw = gateway_factory("--auth-fail-limit=10", "--auth-fail-window=3600")
    for i in range(10):
        status, body, h = req(gw, "GET", "/api/kernels", "wrong-key")
        assert status == 401, (i, status)
    status, body, h = req(gw, "GET", "/api/kernels", "wrong-key")
    assert status == 429 and body["message"]
    assert 3500 <= int(h["retry-after"]) <= 3600
    status, body, h = req(gw, "GET", "/api/kernels", gw.token)
    assert status == 429 and "retry-after" in h
    assert J.handshake_status(gw, "x", path="/channel") == 429
    # the unauthenticated version endpoint still answers
    assert req(gw, "GET", "/api")[0] == 200


def test_forwarded_for_is_trusted_only_from_configured_proxies(gateway_factory):
    gw = gateway_factory("--auth-fail-limit=3", "--trusted-proxies=127.0.0.1")
    for _ in range(3):
        assert req(gw, "GET", "/api/kernels", "bad",
                   headers={"X-Forwarded-For": "203.0.113.7"})[0] == 401
    assert req(gw, "GET", "/api/kernels", gw.token,
               headers={"X-Forwarded-For": "203.0.113.7"})[0] == 429
    # another client behind the same proxy is not affected
    assert req(gw, "GET", "/api/kernels", gw.token,
               headers={"X-Forwarded-For": "203.0.113.8"})[0] == 200
    # a client cannot launder its address through a header the proxy passed on
    assert req(gw, "GET", "/api/kernels", gw.token,
               headers={"X-Forwarded-For": "198.51.100.1, 203.0.113.7"})[0] == 429

    untrusted = gateway_factory("--auth-fail-limit=3")
    for i in range(3):
        assert req(untrusted, "GET", "/api/kernels", "bad",
                   headers={"X-Forwarded-For": f"203.0.113.{i}"})[0] == 401
    assert req(untrusted, "GET", "/api/kernels", untrusted.token,
               headers={"X-Forwarded-For": "203.0.113.99"})[0] == 429


def test_request_rate_per_tenant(gateway_factory):
    gw = gateway_factory("--rate-limit=5", "--rate-burst=5")
    statuses = []
    for _ in range(15):
        status, body, h = req(gw, "GET", "/api/kernels", gw.token)
        statuses.append(status)
        if status == 429:
            assert int(h["retry-after"]) >= 1
    assert statuses[:5] == [200] * 5 and 429 in statuses
    time.sleep(1.2)
    assert req(gw, "GET", "/api/kernels", gw.token)[0] == 200


def test_sighup_reloads_keys_without_dropping_connections(tmp_path):
    k1, l1 = keygen("one")
    k2, l2 = keygen("two")
    f = tmp_path / "keys"
    f.write_text(l1 + "\n")
    gw = start_gateway([f"--key-file={f}"])
    try:
        gw.token = k1
        assert req(gw, "GET", "/api/kernels", k1)[0] == 200
        assert req(gw, "GET", "/api/kernels", k2)[0] == 401

        async def go():
            ch = await Channel.connect(gw.ws_url, k1)
            try:
                assert await ch.mkm.list_kernel_ids() == []
                f.write_text(l2 + "\n")
                gw.proc.send_signal(signal.SIGHUP)
                for _ in range(50):
                    if req(gw, "GET", "/api/kernels", k2)[0] == 200:
                        break
                    await asyncio.sleep(0.1)
                assert req(gw, "GET", "/api/kernels", k2)[0] == 200
                assert req(gw, "GET", "/api/kernels", k1)[0] == 401
                # the open connection stays
                assert await ch.mkm.list_kernel_ids() == []
                # a broken key file keeps the old keys
                f.write_text("garbage\n")
                gw.proc.send_signal(signal.SIGHUP)
                await asyncio.sleep(0.5)
                assert req(gw, "GET", "/api/kernels", k2)[0] == 200
            finally:
                await ch.close()
        run(go())
        assert "key file not reloaded" in gw.log()
    finally:
        stop_gateway(gw)


def test_tls_round_trip(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    port = free_port()
    token = "tls-test-key"
    log = open(tmp_path / "kgw.log", "w")
    proc = subprocess.Popen([KGW_BIN, "--port", str(port), "--api-key", token, "--certfile",
                             str(cert), "--keyfile", str(key), "--auth-fail-limit=0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 20
        while True:
            try:
                c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                c.request("GET", "/api/kernels", headers={"Authorization": f"token {token}"})
                r = c.getresponse()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert r.status == 200 and json.loads(r.read()) == []
        assert "max-age" in (r.getheader("Strict-Transport-Security") or "")
        # plain HTTP on the TLS port does not get an answer
        with pytest.raises((http.client.HTTPException, OSError)):
            p = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            p.request("GET", "/api")
            if p.getresponse().status == 200:
                raise AssertionError("plain HTTP answered on the TLS port")

        async def go():
            ws = await websockets.connect(f"wss://127.0.0.1:{port}/channel", ssl=ctx,
                                          extra_headers={"Authorization": f"token {token}"})
            ch = Channel(ws)
            try:
                kid = await ch.mkm.start_kernel()
                km = await ch.mkm.get_kernel(kid)
                client = await km.client()
                await client.wait_for_ready(timeout=30)
                msg_id = await client.execute("print('over tls')")
                text = ""
                while True:
                    m = await client.get_iopub_msg(timeout=30)
                    if m["parent_header"].get("msg_id") != msg_id:
                        continue
                    if m["msg_type"] == "stream":
                        text += m["content"]["text"]
                    if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                        break
                await ch.mkm.shutdown_kernel(kid)
                return text
            finally:
                await ch.close()
        assert run(go(), timeout=120) == "over tls\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def test_audit_log(tmp_path, gateway_factory):
    path = tmp_path / "audit.jsonl"
    gw = gateway_factory(f"--audit-log={path}")
    assert req(gw, "GET", "/api/kernels", "not-the-key-at-all")[0] == 401
    status, k, _ = req(gw, "POST", "/api/kernels", gw.token, {})
    assert status == 201

    async def go():
        ch = await Channel.connect(gw.ws_url, gw.token)
        try:
            km = await ch.mkm.get_kernel(k["id"])
            client = await km.client()
            await client.wait_for_ready(timeout=30)
            msg_id = await client.execute("secret_value = 6 * 7")
            while True:
                m = await client.get_iopub_msg(timeout=30)
                if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                        and m["content"]["execution_state"] == "idle"):
                    break
            with pytest.raises(RemoteError):
                await ch.mkm.set_trait("kernel_manager_class", "payload.X")
        finally:
            await ch.close()
    run(go())
    assert req(gw, "DELETE", f"/api/kernels/{k['id']}", gw.token)[0] == 204
    time.sleep(0.5)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    by = {}
    for e in events:  # docs/audit.md: UTC, ISO 8601 with microseconds
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e["ts"]), e["ts"]
        assert e["event"]
        by.setdefault(e["event"], []).append(e)
    text = path.read_text()
    assert gw.token not in text and "not-the-key-at-all" not in text
    fail = by["auth_failure"][0]
    assert fail["addr"] == "127.0.0.1" and fail["key_prefix"] == "not-"
    assert any(e["tenant"] == "default" for e in by["auth_success"])
    assert by["kernel_start"][0]["kernel"] == k["id"] and by["kernel_start"][0]["result"] == "ok"
    import hashlib
    ex = [e for e in by["execution"] if e["kernel"] == k["id"]]
    assert ex and ex[-1]["code_sha256"] == hashlib.sha256(b"secret_value = 6 * 7").hexdigest()
    assert ex[-1]["status"] == "ok" and ex[-1]["duration_ms"] >= 0
    assert "secret_value" not in text
    assert by["rpc_refused"][0]["error"] == "AttributeError"
    assert any(e["kernel"] == k["id"] for e in by["kernel_stopped"])


def test_security_headers_on_every_response(gateway):
    cases = [("GET", "/api", None, None), ("GET", "/api/kernels", gateway.token, None),
             ("GET", "/api/kernels", None, None), ("GET", "/nope", gateway.token, None),
             ("PUT", "/api/kernels", gateway.token, None),
             ("GET", "/api/kernels/00000000-0000-0000-0000-000000000000", gateway.token, None),
             ("POST", "/api/kernels", gateway.token, "not json")]
    for method, path, key, raw in cases:
        h = {"Authorization": f"token {key}"} if key else {}
        c = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        c.request(method, path, body=raw, headers=h)
        r = c.getresponse()
        r.read()
        headers = {k.lower(): v for k, v in r.getheaders()}
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (method, path, r.status, name)
        assert "default-src 'none'" in headers.get("content-security-policy", "")
        assert headers.get("referrer-policy")
        c.close()


def test_slowloris_is_cut_off_while_others_are_served(gateway_factory):
    gw = gateway_factory("--header-timeout=3")
    slow = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        s.sendall(b"GET /api/kernels HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
        slow.append(s)
    t0 = time.monotonic()
    # others are served meanwhile
    for _ in range(5):
        assert req(gw, "GET", "/api/kernels", gw.token)[0] == 200
    closed = 0
    for s in slow:
        try:
            while True:
                s.sendall(b"X-a: b\r\n")  # trickle
                time.sleep(0.2)
                if time.monotonic() - t0 > 15:
                    break
        except OSError:
            closed += 1
        finally:
            s.close()
        if time.monotonic() - t0 > 15:
            break
    assert closed == len(slow), f"only {closed} of {len(slow)} slow clients were cut off"
    assert time.monotonic() - t0 < 15
    assert req(gw, "GET", "/api/kernels", gw.token)[0] == 200


def test_websocket_messages_over_the_rate_are_slowed_not_lost(gateway_factory):
    gw = gateway_factory("--rate-limit=20", "--rate-burst=20")

    async def go():
        ch = await Channel.connect(gw.ws_url, gw.token)
        try:
            t0 = time.monotonic()
            results = await asyncio.gather(*[ch.mkm.list_kernel_ids() for _ in range(60)])
            return results, time.monotonic() - t0
        finally:
            await ch.close()
    results, took = run(go())
    assert results == [[]] * 60  # every call answered
    assert took >= 1.5, took     # 40 over the burst at 20/s


def test_connections_per_address_are_capped_and_released(gateway_factory):
    gw = gateway_factory("--max-connections-per-address=5")
    held = [socket.create_connection(("127.0.0.1", gw.port), timeout=10) for _ in range(5)]
    try:
        extra = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        try:  # hung up at once: the send or the read sees it
            extra.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
            data = extra.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        assert data == b"", data  # hung up at once
        extra.close()
    finally:
        for s in held:
            s.close()
    # closed connections are released (as soon as the gateway has seen the closes): four
    # held connections and a request fit again
    deadline = time.monotonic() + 20
    while True:
        held = []
        try:
            held = [socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                    for _ in range(4)]
            if req(gw, "GET", "/api/kernels", gw.token)[0] == 200:
                break
        except OSError:
            pass
        finally:
            for s in held:
                s.close()
        assert time.monotonic() < deadline, "closed connections were not released"
        time.sleep(0.2)


# ---- cross-tenant access, generated from the route table and the RPC allowlist ----

@pytest.mark.needs_sandbox
def test_every_route_refuses_another_tenants_objects(tgw):
    """Every operation of /openapi.json (kept equal to the route table by test_openapi) is
    called by bob with alice's ids: each answers as for an object that does not exist, and
    alice's objects stay untouched and unlisted."""
    alice, bob = tgw.keys["alice"], tgw.keys["bob"]
    status, spec, _ = req(tgw, "GET", "/openapi.json", alice)
    assert status == 200
    status, k, _ = req(tgw, "POST", "/api/kernels", alice, {})
    assert status == 201
    kid, ws = k["id"], k["workspace"]
    c = http.client.HTTPConnection("127.0.0.1", tgw.port, timeout=60)
    c.request("PUT", f"/upload/secret.txt?workspace={ws}", body=b"alice's secret",
              headers={"Authorization": f"token {alice}"})
    assert c.getresponse().status == 201
    c.close()
    status, sess, _ = req(tgw, "POST", "/api/sessions", alice,
                          {"path": "a.ipynb", "type": "notebook", "kernel": {"id": kid}})
    assert status == 201, sess
    ids = {"id": kid, "path": "secret.txt", "name": "python3", "file": "kernel.json"}
    checked = 0
    try:
        for path, ops in spec["paths"].items():
            for method, op in ops.items():
                if method not in ("get", "post", "put", "delete", "patch"):
                    continue
                if op.get("security") == [] or "websocket" in json.dumps(op).lower():
                    continue  # public, or a websocket (checked below)
                if path.startswith("/e2b/") and "{path}" in path:
                    continue  # the E2B face's catch-alls (501 / its sandbox plane): no object
                params = [p["name"] for p in ops.get("parameters", []) + op.get("parameters", [])]
                url = path
                for name, value in ids.items():
                    if name == "id" and path.startswith("/api/sessions/"):
                        value = sess["id"]
                    url = url.replace("{" + name + "}", value)
                if "workspace" in params:
                    url += f"?workspace={ws}"
                body = {} if method in ("post", "patch") else None
                raw = None
                # the E2B control plane takes the key as X-API-KEY (docs/e2b.md)
                h = {"X-API-KEY": bob} if path.startswith("/e2b/") else \
                    {"Authorization": f"token {bob}"}
                kinds = op.get("requestBody", {}).get("content", {})
                if "multipart/form-data" in kinds:
                    raw = (b"--XyZ\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n"
                           b"secret.txt\r\n--XyZ\r\nContent-Disposition: form-data; "
                           b"name=\"file\"; filename=\"s\"\r\n\r\nby bob\r\n--XyZ--\r\n")
                    h["Content-Type"] = "multipart/form-data; boundary=XyZ"
                elif method == "put":
                    raw = b"overwritten by bob"
                conn = http.client.HTTPConnection("127.0.0.1", tgw.port, timeout=60)
                conn.request(method.upper(), url, headers=h,
                             body=raw if raw is not None else
                             (json.dumps(body) if body is not None else None))
                r = conn.getresponse()
                payload = r.read().decode(errors="replace")
                conn.close()
                owns = any("{" + n + "}" in path for n in ("id", "path")) or "workspace" in params
                if owns:
                    assert r.status == 404, (method, url, r.status, payload)
                else:
                    assert kid not in payload and ws not in payload and sess["id"] not in payload, \
                        (method, url, payload)
                checked += 1
        assert checked >= 20
        # websockets
        gwb = type("G", (), {"ws_url": tgw.ws_url, "port": tgw.port, "token": bob})()
        assert J.handshake_status(gwb, kid) == 404
        # alice's things are intact
        assert req(tgw, "GET", f"/api/kernels/{kid}", alice)[0] == 200
        assert req(tgw, "GET", f"/api/sessions/{sess['id']}", alice)[0] == 200
        conn = http.client.HTTPConnection("127.0.0.1", tgw.port, timeout=60)
        conn.request("GET", f"/download/secret.txt?workspace={ws}",
                     headers={"Authorization": f"token {alice}"})
        r = conn.getresponse()
        assert r.status == 200 and r.read() == b"alice's secret"
        conn.close()
    finally:
        req(tgw, "DELETE", f"/api/kernels/{kid}", alice)


def rpc_allowlist():
    """(object, method) rows of the allowlist, printed by the unit test binary from the table."""
    exe = os.path.join(os.path.dirname(os.path.abspath(KGW_BIN)), "tests", "test_rpc")
    p = subprocess.run([exe, "--doc-table"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    rows = []
    for line in p.stdout.splitlines():
        cells = [c.strip(" `") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] in ("multi_kernel_manager", "kernel_manager", "client"):
            name, _, sig = cells[1].partition("(")
            rows.append((cells[0], name, required_args(sig.rsplit(")", 1)[0])))
    assert len(rows) >= 20, p.stdout
    return rows


def required_args(sig):
    """Sample values for the required parameters of a doc-table signature."""
    samples = {"str": "x", "int": 1, "number": 1.0, "bool": True, "dict": {}}
    out, depth, cur = [], 0, ""
    for ch in sig + ",":
        if ch == "," and depth == 0:
            cur = cur.strip()
            if cur and cur != "*" and " = " not in cur:
                kind = cur.partition(":")[2].strip().split("(")[0]
                out.append(samples.get(kind, "x"))
            cur = ""
            continue
        depth += ch in "({[" and 1 or 0
        depth -= ch in ")}]" and 1 or 0
        cur += ch
    return out


def test_every_rpc_method_refuses_another_tenants_objects(tgw):
    alice, bob = tgw.keys["alice"], tgw.keys["bob"]
    rows = rpc_allowlist()

    async def go():
        a = await Channel.connect(tgw.ws_url, alice)
        b = await Channel.connect(tgw.ws_url, bob)
        try:
            kid = await a.mkm.start_kernel()
            km = await a.mkm.get_kernel(kid)
            client = await km.client()
            refs = {"kernel_manager": km.id, "client": client.id}
            for i, (obj, method, args) in enumerate(rows):
                if i % 5 == 0:  # unknown references count as refusals: ten close a connection
                    await b.close()
                    b = await Channel.connect(tgw.ws_url, bob)
                if obj == "multi_kernel_manager":
                    if method in ("list_kernel_ids",):
                        assert kid not in await b.mkm.list_kernel_ids()
                        continue
                    if method == "start_kernel":
                        status, model, _ = req(tgw, "GET", f"/api/kernels/{kid}", alice)
                        with pytest.raises(RemoteError) as ei:
                            await b.mkm.start_kernel(workspace=model["workspace"])
                        assert ei.value.type == "KeyError", method
                        continue
                    with pytest.raises(RemoteError) as ei:
                        await b.call(obj, "", method, kid)
                else:
                    with pytest.raises(RemoteError) as ei:
                        await b.call(obj, refs[obj], method, *args)
                assert ei.value.type == "KeyError", (obj, method, ei.value)
            assert await km.is_alive() is True
            await a.mkm.shutdown_kernel(kid)
        finally:
            await a.close()
            await b.close()
    run(go(), timeout=120)


def test_tenant_quotas(tenants):
    path, keys = tenants
    gw = start_gateway([f"--key-file={path}", "--tenant-max-kernels=2",
                        "--tenant-max-workspaces=3", "--workspace-grace=600"])
    alice, bob = keys["alice"], keys["bob"]
    made = []
    try:
        for _ in range(2):
            status, k, _ = req(gw, "POST", "/api/kernels", alice, {})
            assert status == 201, k
            made.append((alice, k["id"]))
        status, body, _ = req(gw, "POST", "/api/kernels", alice, {})
        assert status == 403 and "quota" in body["message"], body
        # another tenant is not affected
        status, k, _ = req(gw, "POST", "/api/kernels", bob, {})
        assert status == 201, k
        made.append((bob, k["id"]))
        # a deleted kernel's workspace still counts while it is kept for downloads
        status, first, _ = req(gw, "GET", f"/api/kernels/{made[0][1]}", alice)
        assert req(gw, "DELETE", f"/api/kernels/{made[0][1]}", alice)[0] == 204
        made.pop(0)
        status, k, _ = req(gw, "POST", "/api/kernels", alice, {})
        assert status == 201, k  # 2 kernels, 3 workspaces
        made.append((alice, k["id"]))
        second = k
        assert req(gw, "DELETE", f"/api/kernels/{k['id']}", alice)[0] == 204
        made.pop()
        # a download uses the first: the second is now the least recently used
        assert req(gw, "GET", f"/files?workspace={first['workspace']}", alice)[0] == 200
        # 1 kernel and 3 workspaces: the oldest kept only for downloads makes room
        status, k, _ = req(gw, "POST", "/api/kernels", alice, {})
        assert status == 201, k
        made.append((alice, k["id"]))
        assert req(gw, "GET", f"/files?workspace={second['workspace']}", alice)[0] == 404
        assert req(gw, "GET", f"/files?workspace={first['workspace']}", alice)[0] == 200
        assert "its tenant needs room for a new workspace" in gw.log()
        assert req(gw, "DELETE", f"/api/kernels/{made.pop()[1]}", alice)[0] == 204
        # sharing a workspace needs no new one
        status, model, _ = req(gw, "GET", f"/api/kernels/{made[0][1]}", alice)
        status, k, _ = req(gw, "POST", "/api/kernels", alice, {"workspace": model["workspace"]})
        assert status == 201, k
        made.append((alice, k["id"]))
        # ... and evicts nothing
        assert req(gw, "GET", f"/files?workspace={first['workspace']}", alice)[0] == 200
    finally:
        for key, kid in made:
            req(gw, "DELETE", f"/api/kernels/{kid}", key)
        stop_gateway(gw)
