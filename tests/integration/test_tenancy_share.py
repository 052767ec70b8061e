"""Issue 29: one tenant cannot evict, starve or stall another. Each test plays one attack by
tenant A against the gateway's shared tables and slots (docs/security.md, "Shares between
tenants"), with real kernels, and checks what tenant B still gets."""
import base64
import hashlib
import http.client
import http.server
import json
import os
import secrets
import socket
import threading
import time

import pytest

from conftest import key_file

pytestmark = pytest.mark.kgw_only


def conn(gw, timeout=60):
    return http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)


def hdrs(key, extra=None):
    h = {"Authorization": f"token {key}", "Content-Type": "application/json"}
    h.update(extra or {})
    return h


def call(gw, method, path, key, body=None, extra=None):
    c = conn(gw)
    c.request(method, path, body=None if body is None else json.dumps(body).encode(),
              headers=hdrs(key, extra))
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, (json.loads(data) if data else None), r.headers


def execute(gw, path, body, key, extra=None):
    """POSTs an execution and reads its whole NDJSON stream: (status, events or error, headers)."""
    c = conn(gw)
    c.request("POST", path, body=json.dumps(body).encode(), headers=hdrs(key, extra))
    r = c.getresponse()
    try:
        data = r.read()
        if r.status >= 300:
            return r.status, json.loads(data), r.headers
        return r.status, [json.loads(x) for x in data.splitlines() if x], r.headers
    finally:
        c.close()


def start_kernel(gw, key):
    status, model, _ = call(gw, "POST", "/api/kernels", key, {})
    assert status == 201, model
    return model["id"]


def queue_and_cancel(gw, kid, key, extra=None):
    """Queues {"code": "1"} behind the kernel's running execution and cancels it: one
    execution held, none run. Returns (status, headers)."""
    c = conn(gw)
    c.request("POST", f"/api/kernels/{kid}/execute", body=b'{"code": "1"}',
              headers=hdrs(key, extra))
    r = c.getresponse()
    if r.status != 201:
        r.read()
        c.close()
        return r.status, r.headers
    eid = json.loads(r.readline())["execution_id"]
    assert call(gw, "DELETE", f"/api/executions/{eid}", key)[0] == 200
    r.read()
    c.close()
    return 201, r.headers


def test_execution_flood_evicts_only_the_flooder(gateway_factory, tmp_path):
    """A queues and cancels executions far beyond the table (--max-executions); B's keyed
    execution stays found, and its retry does not run the code again. Fails on the old code
    (one table for all tenants, the oldest finished execution of anyone dropped first)."""
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}", "--max-executions=30",
                         "--max-executions-per-tenant=20", "--execution-retention=600")
    a, b = keys["alice"], keys["bob"]
    kb = start_kernel(gw, b)
    body = {"code": "with open('ran.txt', 'a') as f:\n    f.write('x')\nprint('ran')"}
    key = {"Idempotency-Key": "bob-once"}
    status, ev, h = execute(gw, f"/api/kernels/{kb}/execute", body, b, key)
    assert status == 201 and ev[-1]["status"] == "ok", ev
    eid = ev[0]["execution_id"]
    # B's other, unkeyed executions: the table holds them too
    for _ in range(5):
        assert execute(gw, f"/api/kernels/{kb}/execute", {"code": "2"}, b)[0] == 201

    ka = start_kernel(gw, a)
    c = conn(gw)  # keeps A's kernel busy: what A queues waits behind it
    c.request("POST", f"/api/kernels/{ka}/execute", body=b'{"code": "import time; '
              b'time.sleep(60)"}', headers=hdrs(a))
    busy = c.getresponse()
    busy_id = json.loads(busy.readline())["execution_id"]
    for i in range(60):
        status, _ = queue_and_cancel(gw, ka, a)
        assert status == 201, (i, status)
    # A's own cancelled executions went, none of B's
    assert call(gw, "GET", f"/api/executions/{eid}", b)[0] == 200
    status, ev2, h2 = execute(gw, f"/api/kernels/{kb}/execute", body, b, key)
    assert status == 200 and ev2 == ev and h2["Location"] == h["Location"], (status, ev2)
    status, ev3, _ = execute(gw, f"/api/kernels/{kb}/execute",
                             {"code": "print(open('ran.txt').read())"}, b)
    assert [e["text"] for e in ev3 if e["type"] == "stream"] == ["x\n"], ev3

    # A's keyed executions are held for their retention: at its share A is refused
    refused = None
    for i in range(25):
        status, hh = queue_and_cancel(gw, ka, a, {"Idempotency-Key": f"a-{i}"})
        if status != 201:
            refused = (i, status, hh)
            break
    assert refused and refused[1] == 429, refused
    assert 1 <= int(refused[2]["Retry-After"]) <= 600, refused
    # ... and B is not
    assert execute(gw, f"/api/kernels/{kb}/execute", {"code": "3"}, b)[0] == 201
    call(gw, "DELETE", f"/api/executions/{busy_id}", a)
    busy.read()
    c.close()


def test_key_is_bound_to_its_route(gateway):
    """A key reused by the same tenant on another kernel, or on a one-shot, is 422 and runs
    nothing. Fails on the old code (it answered the first kernel's execution)."""
    gw, tok = gateway, gateway.token
    k1, k2 = start_kernel(gw, tok), start_kernel(gw, tok)
    try:
        body = {"code": "print('once')"}
        key = {"Idempotency-Key": "route-bound"}
        status, ev, _ = execute(gw, f"/api/kernels/{k1}/execute", body, tok, key)
        assert status == 201, ev
        for path in (f"/api/kernels/{k2}/execute", "/api/execute"):
            status, err, _ = execute(gw, path, body, tok, key)
            assert status == 422 and "route" in err["message"], (path, status, err)
        # the same route still answers the first one
        status, ev2, _ = execute(gw, f"/api/kernels/{k1}/execute", body, tok, key)
        assert status == 200 and ev2 == ev
    finally:
        call(gw, "DELETE", f"/api/kernels/{k1}", tok)
        call(gw, "DELETE", f"/api/kernels/{k2}", tok)


# ---- name lookups: "the internet" is a name server on loopback that never answers ----

SLOW_DNS = "127.0.0.77"


class Origin(http.server.BaseHTTPRequestHandler):
    """Tenant B's allowed host (localhost:PORT, a name the hosts file answers)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = b"hello from the origin"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def slow_dns(tmp_path_factory):
    """A resolv.conf naming a server on loopback that takes queries and never answers, and an
    origin server on localhost. The gateway runs in its own mount namespace with that
    resolv.conf bound over /etc/resolv.conf: its lookups of names not in /etc/hosts hang
    until the resolver's timeout (4 s)."""
    tmp = tmp_path_factory.mktemp("dns")
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind((SLOW_DNS, 53))  # bound, never read: queries are taken and dropped
    conf = tmp / "resolv.conf"
    conf.write_text(f"nameserver {SLOW_DNS}\noptions timeout:4 attempts:1\n")
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    origin.daemon_threads = True
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    prefix = ("unshare", "-m", "--propagation", "private", "sh", "-c",
              'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(conf))
    yield {"prefix": prefix, "origin": origin.server_address[1]}
    origin.shutdown()
    origin.server_close()
    dns.close()


def egress_keys(tmp_path, policies):
    """A key file giving each tenant its egress policy: (path, {tenant: key})."""
    lines, keys = [], {}
    for tenant, policy in policies.items():
        k = secrets.token_hex(16)
        h = hashlib.blake2b(k.encode(), digest_size=32).hexdigest()
        lines.append(f"{tenant} blake2b:{h} egress={policy}")
        keys[tenant] = k
    kf = tmp_path / "keys"
    kf.write_text("\n".join(lines) + "\n")
    return kf, keys


# Starts n threads in the kernel, each fetching an unanswerable name through the proxy, and
# returns at once (the threads go on).
FLOOD_LOOKUPS = r'''
import threading, urllib.request
def _f(u):
    try:
        urllib.request.urlopen(u, timeout=60).read()
    except Exception:
        pass
for _i in range({n}):
    threading.Thread(target=_f, args=("http://n%d-{tag}.slow.test/" % _i,), daemon=True).start()
print("started")
'''

FETCH_ORIGIN = r'''
import urllib.request, urllib.error
try:
    with urllib.request.urlopen("http://localhost:{port}/", timeout=30) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.reason)
'''


def stream_text(ev):
    return "".join(e["text"] for e in ev if e["type"] == "stream")


def flood_lookups(gw, key, kernels, n, tag):
    for i, kid in enumerate(kernels):
        status, ev, _ = execute(gw, f"/api/kernels/{kid}/execute",
                                {"code": FLOOD_LOOKUPS.format(n=n, tag=f"{tag}{i}")}, key)
        assert status == 201 and stream_text(ev) == "started\n", ev


@pytest.mark.needs_sandbox
def test_unanswerable_lookups_leave_other_tenants_their_share(gateway_factory, tmp_path,
                                                              slow_dns):
    """A's five kernels (a wildcard policy) keep 80 lookups of names nobody answers in flight;
    B's lookup of its allowed name still goes through. Fails on the old code (64 lookups for
    the whole gateway: B got 503 "too many name lookups in progress")."""
    kf, keys = egress_keys(tmp_path, {"alice": "*:80",
                                      "bob": f"+localhost:{slow_dns['origin']}"})
    gw = gateway_factory(f"--key-file={kf}", "--egress-connect-timeout=3",
                         prefix=slow_dns["prefix"])
    a, b = keys["alice"], keys["bob"]
    kb = start_kernel(gw, b)
    kas = [start_kernel(gw, a) for _ in range(5)]
    flood_lookups(gw, a, kas, 16, "t")
    time.sleep(1)  # A's lookups are in flight (they end after 3 s at the earliest)
    status, ev, _ = execute(gw, f"/api/kernels/{kb}/execute",
                            {"code": FETCH_ORIGIN.format(port=slow_dns["origin"])}, b)
    assert status == 201 and stream_text(ev) == "200 hello from the origin\n", ev
    log = gw.log()
    # each of A's kernels had its share waiting; the rest were refused at once
    assert "too many name lookups in progress for this kernel" in log, log[-3000:]


# ---- availability: B's requests while A attacks ----

class Poller(threading.Thread):
    """Tenant B's GET /api/kernels, one after another on a kept-alive connection: the time
    each took."""

    def __init__(self, gw, key):
        super().__init__(daemon=True)
        self.gw, self.key = gw, key
        self.times, self.errors = [], []
        self.stop = threading.Event()

    def run(self):
        c = conn(self.gw, timeout=30)
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                c.request("GET", "/api/kernels", headers=hdrs(self.key))
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    self.errors.append(r.status)
            except OSError as e:
                self.errors.append(repr(e))
                c.close()
                c = conn(self.gw, timeout=30)
            self.times.append(time.monotonic() - t0)
            time.sleep(0.01)
        c.close()

    def p99(self):
        t = sorted(self.times)
        return t[min(len(t) - 1, int(len(t) * 0.99))]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def oneshot_many_files(gw, key, n_files, out):
    files = [{"path": f"d/f{i}.txt", "content": "x"} for i in range(n_files)]
    status, ev, _ = execute(gw, "/api/execute",
                            {"code": "import os; print(len(os.listdir('/mnt/data/d')))",
                             "files": files}, key)
    out.append((status, stream_text(ev) if status == 201 else ev))


@pytest.mark.needs_sandbox
def test_two_tenants_availability(gateway_factory, tmp_path, slow_dns):
    """While tenant A floods the execution table, posts one-shots of 256 files each, and
    keeps unanswerable lookups in flight from four kernels, tenant B's GET /api/kernels stays
    fast (p99 under 100 ms), B's own work goes on, and the gateway's memory stays within its
    budgets."""
    budget = 8 << 20
    kf, keys = egress_keys(tmp_path, {"alice": "*:80",
                                      "bob": f"+localhost:{slow_dns['origin']}"})
    gw = gateway_factory(f"--key-file={kf}", "--egress-connect-timeout=3",
                         "--max-executions=300", "--max-executions-per-tenant=150",
                         f"--execution-budget-bytes={budget}", "--max-body-bytes=1048576",
                         prefix=slow_dns["prefix"])
    a, b = keys["alice"], keys["bob"]
    kb = start_kernel(gw, b)
    busy_k = start_kernel(gw, a)
    look_ks = [start_kernel(gw, a) for _ in range(4)]
    body = {"code": "print('b ran')"}
    status, ev_b, _ = execute(gw, f"/api/kernels/{kb}/execute", body, b,
                              {"Idempotency-Key": "b-1"})
    assert status == 201 and stream_text(ev_b) == "b ran\n", ev_b
    rss0 = rss_bytes(gw.proc.pid)

    poll = Poller(gw, b)
    poll.start()
    try:
        # 1. the execution table: A's kernel busy, 400 executions queued and cancelled
        c = conn(gw)
        c.request("POST", f"/api/kernels/{busy_k}/execute",
                  body=b'{"code": "import time; time.sleep(120)"}', headers=hdrs(a))
        busy = c.getresponse()
        busy_id = json.loads(busy.readline())["execution_id"]
        for i in range(400):
            status, _ = queue_and_cancel(gw, busy_k, a)
            assert status == 201, (i, status)
        # 2. six one-shots of 256 one-byte files each, at once
        out, ts = [], []
        for _ in range(6):
            t = threading.Thread(target=oneshot_many_files, args=(gw, a, 256, out))
            t.start()
            ts.append(t)
        # 3. unanswerable lookups from four kernels
        flood_lookups(gw, a, look_ks, 16, "av")
        for t in ts:
            t.join(120)
        assert out == [(201, "256\n")] * 6, out
        time.sleep(1)  # the lookups still in flight
        # B's own work meanwhile: its retry is not run again; its egress goes through
        status, ev2, _ = execute(gw, f"/api/kernels/{kb}/execute", body, b,
                                 {"Idempotency-Key": "b-1"})
        assert status == 200 and ev2 == ev_b, (status, ev2)
        status, ev, _ = execute(gw, f"/api/kernels/{kb}/execute",
                                {"code": FETCH_ORIGIN.format(port=slow_dns["origin"])}, b)
        assert status == 201 and stream_text(ev) == "200 hello from the origin\n", ev
    finally:
        poll.stop.set()
        poll.join(30)
    rss1 = rss_bytes(gw.proc.pid)
    call(gw, "DELETE", f"/api/executions/{busy_id}", a)
    busy.read()
    c.close()
    print(f"B: {len(poll.times)} GET /api/kernels, p99 {poll.p99() * 1000:.1f} ms, max "
          f"{max(poll.times) * 1000:.1f} ms; gateway RSS {rss0 >> 20} -> {rss1 >> 20} MiB")
    assert not poll.errors, poll.errors
    assert len(poll.times) >= 50, len(poll.times)
    assert poll.p99() < 0.100, (f"B's GET /api/kernels p99 {poll.p99() * 1000:.0f} ms over "
                                f"{len(poll.times)} requests; max {max(poll.times) * 1000:.0f}")
    # what A made the gateway hold: within the execution budgets of the two tenants, plus
    # the one-shots' request bodies and kernels' bookkeeping (not under AddressSanitizer,
    # whose quarantine keeps freed memory)
    with open(f"/proc/{gw.proc.pid}/maps") as f:
        sanitized = "libasan" in f.read()
    if not sanitized:
        assert rss1 - rss0 < 2 * budget + (32 << 20), (rss0, rss1)


def test_sessions_table_share(gateway_factory, tmp_path):
    """A fills its share of the sessions table (256, all on one kernel) and is refused with
    429; B still gets sessions. Fails on the old code (one table of 4096 for all tenants: A got
    201 until it was full, then everyone 503)."""
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}")
    a, b = keys["alice"], keys["bob"]
    ka = start_kernel(gw, a)
    c = conn(gw)
    statuses = []
    for i in range(257):
        c.request("POST", "/api/sessions", headers=hdrs(a), body=json.dumps(
            {"path": f"nb{i}.ipynb", "type": "notebook", "kernel": {"id": ka}}).encode())
        r = c.getresponse()
        body = json.loads(r.read())
        statuses.append(r.status)
    c.close()
    assert statuses[:256] == [201] * 256, statuses
    assert statuses[256] == 429 and "share" in body["message"], (statuses[256], body)
    kb = start_kernel(gw, b)
    status, model, _ = call(gw, "POST", "/api/sessions", b,
                            {"path": "b.ipynb", "type": "notebook", "kernel": {"id": kb}})
    assert status == 201, model


def open_ws(gw, key, path="/channel"):
    """A websocket upgrade by hand: (its HTTP status, the socket, kept open)."""
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
               f"{base64.b64encode(os.urandom(16)).decode()}\r\nAuthorization: token {key}\r\n"
               "\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), s


def test_websockets_share(gateway_factory, tmp_path):
    """A opens its share of websockets (a quarter of --max-connections) and the next is 429;
    B still opens one. Fails on the old code (A could take all of --max-connections; its
    17th websocket was 101)."""
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}", "--max-connections=64")
    a, b = keys["alice"], keys["bob"]
    held = []
    try:
        for _ in range(16):
            st, s = open_ws(gw, a)
            held.append(s)
            assert st == 101, st
        st, s = open_ws(gw, a)
        held.append(s)
        assert st == 429, st
        st, s = open_ws(gw, b)
        held.append(s)
        assert st == 101, st
        # one of A's closes: A may open one again
        held.pop(0).close()
        deadline = time.monotonic() + 10
        while True:
            st, s = open_ws(gw, a)
            held.append(s)
            if st == 101 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert st == 101, st
    finally:
        for s in held:
            s.close()


def test_replay_share(gateway_factory, tmp_path):
    """A's detached session would fill --max-replay-bytes; B's detached session still
    keeps its output and replays it on reconnect, since A holds at most a quarter. Fails on
    the old code (one total for every tenant: B's session stopped buffering and lost its
    output)."""
    import asyncio
    import copy
    import uuid
    import jclient as J
    kf, keys = key_file(("alice", "bob"), tmp_path)
    gw = gateway_factory(f"--key-file={kf}", "--max-replay-bytes=262144")
    ga, gb = copy.copy(gw), copy.copy(gw)
    ga.token, gb.token = keys["alice"], keys["bob"]
    ka, kb = start_kernel(gw, ga.token), start_kernel(gw, gb.token)

    async def go():
        cas = [await J.connect(ga, ka, "legacy", session_id=uuid.uuid4().hex)]
        sb = uuid.uuid4().hex
        cb = await J.connect(gb, kb, "legacy", session_id=sb)
        await cas[0].execute("1")
        await cb.execute("1")
        await cas[0].request("execute_request", {  # 250 KB while nobody listens
            "code": "import time; time.sleep(1); print('x' * 250000)", "silent": False})
        msg_b = await cb.request("execute_request", {
            "code": "import time; time.sleep(2.5); print('y' * 30000)", "silent": False})
        for c in cas:
            await c.close()
        await cb.close()
        await asyncio.sleep(4.5)
        cb2 = await J.connect(gb, kb, "legacy", session_id=sb)
        reply, iopub = await cb2.collect(msg_b, timeout=10)
        assert reply["content"]["status"] == "ok"
        texts = [m["content"]["text"] for m in iopub if m["header"]["msg_type"] == "stream"]
        assert "".join(texts) == "y" * 30000 + "\n", [len(t) for t in texts]
        await cb2.close()
    J.run(go())
    assert "not replaying it" in gw.log()  # A's session, over its share
