"""GET /metrics: the Prometheus text format, checked by Debian's promtool and scraped by a real
Prometheus server (both from the `prometheus` package; those tests skip without it); the
API key on the main listener and none on --metrics-port, which serves nothing else; counters
that follow what the tests do; labels of bounded values only.

Everything listens on 127.0.0.1; the Prometheus server is stopped by its PID at the end.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

import jclient
from conftest import free_port

pytestmark = pytest.mark.kgw_only

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                     r"[0-9a-fA-F]{12}")
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')
# every label kgw uses, and the values of those with a fixed set
LABELS = {
    "version": None, "kernelspec": None, "le": None,
    # the operator's secret names (--secrets-file; at most 64, then ""): with none, only ""
    "secret": {""},
    "state": {"starting", "running", "restarting", "terminating", "dead", "ready"},
    "path": {"pool", "fork", "exec"},
    "reason": {"sandbox", "timeout", "died", "spawn", "limit", "quota", "auth", "lockout",
               "rate_limit", "connection_cap", "bad_input", "kernel_limit"},
    "cause": {"exit", "signal", "oom", "pids", "timeout", "heartbeat", "sandbox", "auto",
              "requested"},
    "status": {"ok", "error", "aborted", "timeout", "killed", "cancelled", "output_limit",
               "kernel_died", "out_of_memory"},
    "face": {"channels", "channel"},
    "direction": {"to_kernel", "to_client", "to_host"},
    "result": {"allowed", "denied"},
}


def get(url, headers=None, method="GET"):
    """(status, body bytes, headers)"""
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def parse(text):
    """{(name, frozenset of (label, value)): float}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples, name, **labels):
    """The sum of the samples of name whose labels include these."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


class MGateway:
    """kgw with a metrics listener: scrape() reads it, without a key."""

    def __init__(self, gw, mport):
        self.gw, self.mport = gw, mport
        self.murl = f"http://127.0.0.1:{mport}"

    def text(self):
        st, body, hdrs = get(self.murl + "/metrics")
        assert st == 200, (st, body[:300])
        assert hdrs["Content-Type"] == CONTENT_TYPE
        return body.decode()

    def scrape(self):
        return parse(self.text())


@pytest.fixture(scope="module")
def mgw(gateway_module_factory):
    return gateway_module_factory()


@pytest.fixture(scope="module")
def gateway_module_factory():
    from conftest import start_gateway, stop_gateway
    started = []

    def make(*args):
        mport = free_port()
        gw = start_gateway(["--pool", "python3=0", "--metrics-port", str(mport), *args])
        started.append(gw)
        return MGateway(gw, mport)

    yield make
    for gw in started:
        stop_gateway(gw)


async def _executions(gw, kid):
    c = await jclient.connect(gw, kid)
    try:
        await c.wait_ready()
        ok = await c.execute("1+1")
        assert ok.status == "ok"
        bad = await c.execute("1/0")
        assert bad.status == "error"
    finally:
        await c.close()


def wait_for(pred, timeout=20, every=0.1):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(every)


# ------------------------------------------------------------------ access

def test_main_listener_needs_the_key(mgw):
    url = mgw.gw.url + "/metrics"
    st, body, _ = get(url)
    assert st == 401, (st, body)
    st, body, _ = get(url, {"Authorization": "token wrong-key"})
    assert st == 401
    st, body, hdrs = get(url, mgw.gw.headers())
    assert st == 200, (st, body[:300])
    assert hdrs["Content-Type"] == CONTENT_TYPE
    assert b"# TYPE kgw_build_info gauge" in body


def test_metrics_listener_serves_only_metrics(mgw):
    st, body, _ = get(mgw.murl + "/metrics")
    assert st == 200 and b"kgw_kernels" in body
    st, _, _ = get(mgw.murl + "/metrics/")  # the route's optional trailing slash
    assert st == 200
    for path in ("/", "/api", "/api/kernels", "/api/status", "/openapi.json", "/check_liveness",
                 "/self_identify", "/metricsx", "/metrics/x"):
        for headers in ({}, mgw.gw.headers()):  # a key changes nothing there
            st, body, _ = get(mgw.murl + path, headers)
            assert st == 404, (path, st, body[:200])
    st, _, _ = get(mgw.murl + "/metrics", method="POST")
    assert st == 405
    # no websocket there either
    with socket.create_connection(("127.0.0.1", mgw.mport), timeout=10) as s:
        s.sendall(b"GET /api/kernels/" + str(uuid.uuid4()).encode() + b"/channels HTTP/1.1\r\n"
                  b"Host: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                  b"Authorization: token " + mgw.gw.token.encode() + b"\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 404 ")


def test_metrics_port_options(tmp_path):
    from conftest import KGW_BIN, free_port
    p = str(free_port())  # were the check to regress, kgw would listen there (loopback only)
    r = subprocess.run([KGW_BIN, "--ip", "127.0.0.1", "--port", p, "--metrics-port", p],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--metrics-port must differ from --port" in r.stderr
    r = subprocess.run([KGW_BIN, "--help"], capture_output=True, text=True, timeout=30)
    assert "--metrics-port" in r.stdout and "--metrics-ip" in r.stdout


def test_metrics_listener_is_plain_http_beside_tls(tmp_path):
    """With --certfile the main listener speaks TLS; the metrics listener stays plain HTTP."""
    import ssl
    from conftest import KGW_BIN
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    port, mport = free_port(), free_port()
    log = open(tmp_path / "kgw.log", "w")
    proc = subprocess.Popen([KGW_BIN, "--ip", "127.0.0.1", "--port", str(port), "--api-key", "k",
                             "--certfile", str(cert), "--keyfile", str(key), "--metrics-port",
                             str(mport), "--pool", "python3=0", "--no-fork-server"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_for(lambda: _status(f"http://127.0.0.1:{mport}/metrics") == 200), \
            (tmp_path / "kgw.log").read_text()
        ctx = ssl.create_default_context(cafile=str(cert))
        req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": "token k"})
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            assert r.status == 200 and b"kgw_build_info" in r.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        finally:
            log.close()
    assert rc == 0


def _status(url):
    try:
        return get(url)[0]
    except OSError:
        return None


# ------------------------------------------------------------------ the numbers

def test_counters_follow_what_happens(mgw):
    gw = mgw.gw
    before = mgw.scrape()
    model = gw.start_kernel()
    kid = model["id"]
    try:
        after_start = mgw.scrape()
        assert value(after_start, "kgw_kernel_starts_total") == \
            value(before, "kgw_kernel_starts_total") + 1
        assert value(after_start, "kgw_kernel_start_seconds_count") == \
            value(before, "kgw_kernel_start_seconds_count") + 1
        assert value(after_start, "kgw_kernels", state="running", kernelspec="python3") == \
            value(before, "kgw_kernels", state="running", kernelspec="python3") + 1

        async def work():
            c = await jclient.connect(gw, kid)
            try:
                await c.wait_ready()
                connected = mgw.scrape()
                assert value(connected, "kgw_websocket_connections", face="channels") == 1
                assert value(connected, "kgw_websocket_connections", face="channel") == 0
                assert (await c.execute("1+1")).status == "ok"
                assert (await c.execute("1/0")).status == "error"
            finally:
                await c.close()
        jclient.run(work())
        got = mgw.scrape()
        assert value(got, "kgw_executions_total", status="ok") == \
            value(before, "kgw_executions_total", status="ok") + 1
        assert value(got, "kgw_executions_total", status="error") == \
            value(before, "kgw_executions_total", status="error") + 1
        assert value(got, "kgw_execution_seconds_count") == \
            value(before, "kgw_execution_seconds_count") + 2
        for d in ("to_kernel", "to_client"):
            assert value(got, "kgw_messages_total", direction=d) > \
                value(before, "kgw_messages_total", direction=d)
            assert value(got, "kgw_message_bytes_total", direction=d) > \
                value(before, "kgw_message_bytes_total", direction=d)
        assert wait_for(lambda: value(mgw.scrape(), "kgw_websocket_connections") == 0, 10)

        # refusals: a missing key, a malformed body
        refused = value(got, "kgw_requests_refused_total", reason="auth")
        assert gw.request("GET", "/api/kernels", auth=False)[0] == 401
        assert gw.request("POST", "/api/kernels", raw_body=b"[1,2")[0] == 400
        got = mgw.scrape()
        assert value(got, "kgw_requests_refused_total", reason="auth") == refused + 1
        assert value(got, "kgw_requests_refused_total", reason="bad_input") >= 1

        # a death (restarted automatically) and a requested restart
        async def die():
            c = await jclient.connect(gw, kid)
            try:
                await c.wait_ready()
                # the busy status reaches the gateway well before the process ends
                await c.request("execute_request", {
                    "code": "import os, time; time.sleep(0.5); os._exit(3)", "silent": False})
                await c.recv(lambda m: m["channel"] == "iopub" and
                             m["header"]["msg_type"] == "status" and
                             m["content"]["execution_state"] == "restarting", timeout=20)
            finally:
                await c.close()
        jclient.run(die())
        got = mgw.scrape()
        assert value(got, "kgw_kernel_deaths_total", cause="exit") == \
            value(before, "kgw_kernel_deaths_total", cause="exit") + 1
        assert value(got, "kgw_kernel_restarts_total", cause="auto") == \
            value(before, "kgw_kernel_restarts_total", cause="auto") + 1
        assert value(got, "kgw_executions_total", status="aborted") == \
            value(before, "kgw_executions_total", status="aborted") + 1
        # once the automatic restart is over (a restart request meanwhile waits for it)
        assert wait_for(lambda: value(mgw.scrape(), "kgw_kernels", state="running") ==
                        value(before, "kgw_kernels", state="running") + 1)
        st, body, _ = gw.request("POST", f"/api/kernels/{kid}/restart")
        assert st == 200, (st, body)
        got = mgw.scrape()
        assert value(got, "kgw_kernel_restarts_total", cause="requested") == \
            value(before, "kgw_kernel_restarts_total", cause="requested") + 1
        assert value(got, "kgw_kernel_deaths_total") == value(before, "kgw_kernel_deaths_total") + 1
    finally:
        assert gw.delete_kernel(kid) == 204
    got = mgw.scrape()
    assert value(got, "kgw_kernels") == value(before, "kgw_kernels")
    assert value(got, "kgw_kernel_starts_total") == value(before, "kgw_kernel_starts_total") + 1


def test_kernel_limit(gateway_module_factory):
    m = gateway_module_factory("--max-kernels", "1")
    k = m.gw.start_kernel()
    try:
        st, body, _ = m.gw.request("POST", "/api/kernels", {})
        assert st == 503, (st, body)
        got = m.scrape()
        assert value(got, "kgw_requests_refused_total", reason="kernel_limit") == 1
        assert value(got, "kgw_kernel_start_failures_total", reason="limit") == 1
        assert value(got, "kgw_kernel_start_failures_total") == 1
        assert value(got, "kgw_kernel_starts_total") == 1
    finally:
        m.gw.delete_kernel(k["id"])


def test_process_and_loop_metrics(mgw):
    from conftest import KGW_BIN
    got = mgw.scrape()
    version = subprocess.run([KGW_BIN, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.split()[-1]
    assert [dict(ls) for (n, ls) in got if n == "kgw_build_info"] == [{"version": version}]
    assert value(got, "kgw_build_info") == 1
    assert value(got, "kgw_resident_memory_bytes") > 1 << 20
    assert 10 < value(got, "kgw_open_fds") < 100000
    # the loop's tick, every second
    assert wait_for(lambda: value(mgw.scrape(), "kgw_loop_lag_seconds_count") >= 2, 5)
    sandboxed = "--no-sandbox" not in os.environ.get("KGW_EXTRA_ARGS", "")
    assert (("kgw_kernels_memory_bytes", frozenset()) in got) == sandboxed


def test_labels_are_bounded(mgw):
    """No label value is a kernel id, a session, a tenant, an address or a key: each label
    is one of kgw's, with a value from its fixed set (kernelspec and version aside)."""
    gw = mgw.gw
    model = gw.start_kernel()
    try:
        jclient.run(_executions(gw, model["id"]))
        gw.request("GET", "/api/kernels", headers={"Authorization": "token nope"}, auth=False)
        text = mgw.text()
    finally:
        gw.delete_kernel(model["id"])
    samples = parse(text)
    for (name, labels) in samples:
        assert name.startswith("kgw_"), name
        for k, v in labels:
            assert k in LABELS, (name, k, v)
            assert LABELS[k] is None or v in LABELS[k], (name, k, v)
            assert not UUID_RE.search(v), (name, k, v)
    for secret in (model["id"], model["workspace"], gw.token, "127.0.0.1", "default"):
        assert secret not in text
    assert not UUID_RE.search(text)
    # bounded: a scrape stays small (it does not grow with kernels or clients)
    assert len(samples) < 400


# ------------------------------------------------------------------ Debian's tools

@pytest.mark.skipif(not PROMTOOL, reason="promtool is not installed (Debian package prometheus)")
def test_promtool_accepts_a_scrape(mgw):
    gw = mgw.gw
    model = gw.start_kernel()
    try:
        jclient.run(_executions(gw, model["id"]))
        assert gw.request("GET", "/api/status", auth=False)[0] == 401
        text = mgw.text()
    finally:
        gw.delete_kernel(model["id"])
    samples = parse(text)
    assert value(samples, "kgw_executions_total", status="ok") >= 1
    assert value(samples, "kgw_requests_refused_total", reason="auth") >= 1
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), \
        (r.returncode, r.stdout, r.stderr)


def _prom_query(port, q):
    st, body, _ = get(f"http://127.0.0.1:{port}/api/v1/query?" +
                      urllib.parse.urlencode({"query": q}))
    if st != 200:
        return None
    res = json.loads(body)["data"]["result"]
    return float(res[0]["value"][1]) if res else None


@pytest.mark.skipif(not PROMETHEUS, reason="prometheus is not installed (Debian package "
                                           "prometheus)")
def test_prometheus_scrapes_it(gateway_module_factory, tmp_path):
    m = gateway_module_factory()
    pport = free_port()
    (tmp_path / "data").mkdir()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                   "scrape_configs:\n  - job_name: kgw\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{m.mport}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=tmp_path, start_new_session=True)
    try:
        kernels = [m.gw.start_kernel()["id"] for _ in range(2)]
        want = {'sum(kgw_kernels{state="running"})': 2.0,
                'sum(kgw_kernels)': 2.0,
                'sum(kgw_kernel_starts_total)': 2.0,
                'sum(kgw_kernel_start_seconds_count)': 2.0,
                'kgw_kernels{state="running",kernelspec="python3"}': 2.0,
                'up{job="kgw"}': 1.0}
        got = {}

        def settled():
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            for q in want:
                got[q] = _prom_query(pport, q)
            return got == want
        ok = wait_for(settled, timeout=60, every=0.5)
        assert ok, (got, want, (tmp_path / "prometheus.log").read_text()[-2000:])
        # the histogram as Prometheus sees it: every start under the +Inf bucket
        assert _prom_query(pport, 'sum(kgw_kernel_start_seconds_bucket{le="+Inf"})') == 2.0
        for kid in kernels:
            assert m.gw.delete_kernel(kid) == 204
        assert wait_for(lambda: _prom_query(pport, "sum(kgw_kernels)") == 0.0, 30, 0.5)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
