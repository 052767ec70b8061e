"""A slow-header flood (slowloris) from a few addresses: a connection still sending its request
headers counts against its address's share of the header phase (--max-header-connections-per-
address, 32 by default; more are refused at accept) and is answered 408 and closed at
--header-timeout, so everyone else is served at once and the gateway's memory comes back.

Loopback only: 127.0.0.0/8 is all local, so the flood binds its sockets to 127.0.0.2-34 before
connecting to the gateway on 127.0.0.1."""
import heapq
import http.client
import json
import os
import resource
import selectors
import socket
import threading
import time

import pytest

from conftest import KGW_BIN, start_gateway, stop_gateway

pytestmark = pytest.mark.kgw_only

HEADER_TIMEOUT = 2          # seconds (--header-timeout)
HEADER_SHARE = 32           # --max-header-connections-per-address (the default)
FLOOD = [("127.0.0.2", 1000)] + [(f"127.0.0.{i}", 32) for i in range(3, 35)]
PROBES = 200                # GET /api from 127.0.0.1 during the flood
SLOW_REQUEST = b"GET /api HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 64


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def probe(port):
    """One GET /api on a new connection from 127.0.0.1: its latency in seconds (inf: failed)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        c.request("GET", "/api")
        r = c.getresponse()
        r.read()
        ok = r.status == 200
    except OSError:
        ok = False
    finally:
        c.close()
    return time.monotonic() - t0 if ok else float("inf")


class Flood:
    """The slow clients, on one thread: each connects from its address and sends a byte of its
    request headers about every second, spread over the second, until the gateway closes it
    (or the test gives up). Records when each was closed after connecting and what it got."""

    def __init__(self, port):
        self.port = port
        self.socks = {}          # socket -> state
        self.due = []            # (when, n, socket): the next byte of each
        self.sel = selectors.DefaultSelector()
        self.connected = threading.Event()
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        assert self.connected.wait(60), "the flood did not connect"
        if self.error:
            raise self.error

    def _connect(self):
        for i, (src, count) in enumerate(FLOOD):
            for j in range(count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    s.bind((src, 0))
                    s.settimeout(10)
                    s.connect(("127.0.0.1", self.port))
                    s.setblocking(False)
                except OSError:
                    s.close()
                    raise
                now = time.monotonic()
                st = {"src": src, "t0": now, "closed": None, "data": b"", "sent": 0}
                self.socks[s] = st
                self.sel.register(s, selectors.EVENT_READ, st)
                # the first byte at once, the next ones in phases spread over the second
                heapq.heappush(self.due, (now, len(self.due), s))

    def _closed(self, s, st):
        st["closed"] = time.monotonic() - st["t0"]
        self.sel.unregister(s)
        s.close()

    def _run(self):
        try:
            self._connect()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self.error = e
            self.connected.set()
            return
        self.connected.set()
        while not self.stop.is_set() and self.sel.get_map():
            now = time.monotonic()
            while self.due and self.due[0][0] <= now:
                _, n, s = heapq.heappop(self.due)
                st = self.socks[s]
                if st["closed"] is not None:
                    continue
                try:
                    s.send(SLOW_REQUEST[st["sent"] % len(SLOW_REQUEST):][:1])
                    st["sent"] += 1
                except OSError:
                    pass  # reset: the read below sees it
                phase = (n % 20) / 20 if st["sent"] == 1 else 0
                heapq.heappush(self.due, (now + 1.0 + phase, n, s))
            wait = min(0.05, max(0.0, self.due[0][0] - now)) if self.due else 0.05
            for key, _ in self.sel.select(timeout=wait):
                s, st = key.fileobj, key.data
                try:
                    d = s.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    d = b""
                except BlockingIOError:
                    continue
                if d:
                    st["data"] += d
                else:
                    self._closed(s, st)

    def finish(self, timeout):
        self.thread.join(timeout)
        self.stop.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()  # a second close does nothing
        if not self.thread.is_alive():
            self.sel.close()


def check_408(data):
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 408 Request Timeout", lines[0]
    hdrs = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    assert hdrs.get("connection") == "close", hdrs
    assert hdrs.get("content-type") == "application/json", hdrs
    assert int(hdrs["content-length"]) == len(body), (hdrs, body)
    doc = json.loads(body)
    assert doc["reason"] == "Request Timeout" and doc["message"], doc


def _sanitized(path):
    """True for a kgw built with AddressSanitizer (its runtime holds freed memory back)."""
    try:
        with open(path, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


SANITIZED = _sanitized(KGW_BIN)


@pytest.mark.skipif(bool(os.environ.get("KGW_WRAPPER")),
                    reason="latency and resident memory under a wrapper (valgrind) say nothing")
def test_slow_header_flood_is_cut_off_while_others_are_served():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = sum(n for _, n in FLOOD) + 512
    if soft < want:
        if hard < want:
            pytest.skip(f"needs {want} open files (hard limit {hard})")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    gw = flood = None
    try:
        # no warm pool: the gateway's memory is then only its own and its clients'
        gw = start_gateway([f"--header-timeout={HEADER_TIMEOUT}", "--pool", "python3=0"])
        for _ in range(50):  # warm: allocator arenas, lws tables
            assert probe(gw.port) < 3
        rss_before = rss_kib(gw.proc.pid)

        flood = Flood(gw.port)
        t_flood = time.monotonic()
        flood.start()
        # the probes cover the flood from its start to past its cut-off
        lat = []
        rss_peak = rss_before
        period = (HEADER_TIMEOUT + 0.5) / PROBES
        while len(lat) < PROBES and time.monotonic() - t_flood < 30:
            t = time.monotonic()
            lat.append(probe(gw.port))
            rss_peak = max(rss_peak, rss_kib(gw.proc.pid))
            time.sleep(max(0.0, period - (time.monotonic() - t)))
        flood.finish(timeout=max(0.0, t_flood + HEADER_TIMEOUT + 8 - time.monotonic()))

        lat.sort()
        assert len(lat) == PROBES, f"only {len(lat)} probes in 30 s (the slowest {lat[-1]:.1f} s)"
        p99 = lat[int(PROBES * 0.99) - 1]
        assert p99 < 0.1, f"p99 {p99 * 1000:.0f} ms, p50 {lat[PROBES // 2] * 1000:.1f} ms"

        states = list(flood.socks.values())
        open_ = [st for st in states if st["closed"] is None]
        assert not open_, f"{len(open_)} slow connections still open after " \
                          f"{HEADER_TIMEOUT + 8} s (from {sorted({st['src'] for st in open_})})"
        # refused at accept: closed at once, unanswered; the rest held until the timeout
        refused = [st for st in states if st["closed"] < HEADER_TIMEOUT / 2]
        held = [st for st in states if st["closed"] >= HEADER_TIMEOUT / 2]
        assert all(st["data"] == b"" for st in refused)
        by_src = {}
        for st in held:
            by_src[st["src"]] = by_src.get(st["src"], 0) + 1
        assert by_src == {src: min(n, HEADER_SHARE) for src, n in FLOOD}, by_src
        late = [st["closed"] for st in held]
        assert min(late) > HEADER_TIMEOUT - 0.1, min(late)
        assert max(late) < HEADER_TIMEOUT + 1.0, max(late)
        answered = [st for st in held if st["data"]]
        for st in answered:
            check_408(st["data"])
        assert len(answered) >= 0.9 * len(held), f"{len(answered)} of {len(held)} got a 408"

        # the header tables are given back and the memory returned
        deadline = time.monotonic() + 10
        while True:
            rss = rss_kib(gw.proc.pid)
            if rss <= rss_before * 1.1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not SANITIZED:  # a sanitizer runtime keeps freed memory in quarantine
            assert rss <= rss_before * 1.1, f"VmRSS {rss} KiB, {rss_before} KiB before the flood"
        print(f"probes: p50 {lat[PROBES // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; "
              f"{len(refused)} refused, {len(held)} held, closed {min(late):.3f}-{max(late):.3f} "
              f"s after connecting, {len(answered)} answered 408; VmRSS {rss_before} KiB "
              f"before, {rss_peak} KiB during, {rss} KiB after")
        assert probe(gw.port) < 1
        assert "no complete request headers within 2 s" in gw.log()
        assert "connection from 127.0.0.2 refused" in gw.log()
    finally:
        if flood:
            flood.stop.set()
            flood.finish(timeout=0)
        if gw:
            stop_gateway(gw)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def connect_from(src, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((src, 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    return s


def read_response(s):
    """(status line, body) of one response on a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        assert d, data
        data += d
    head, _, body = data.partition(b"\r\n\r\n")
    length = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
              if l.lower().startswith(b"content-length:")][0]
    while len(body) < length:
        d = s.recv(65536)
        assert d, body
        body += d
    return head.split(b"\r\n")[0].decode(), body


def hung_up(s, wait):
    """When the gateway closed s (EOF or reset) within wait seconds: what it sent first (b""
    for nothing); None while it is open."""
    data = b""
    s.settimeout(wait)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return data
            data += d
    except socket.timeout:
        return None
    except ConnectionResetError:
        return data


def test_finished_connections_do_not_count_and_kept_alive_ones_are_timed(gateway_factory):
    gw = gateway_factory(f"--header-timeout={HEADER_TIMEOUT}",
                         "--max-header-connections-per-address=2", "--pool", "python3=0")
    socks = []

    def conn(src):
        socks.append(connect_from(src, gw.port))
        return socks[-1]

    try:
        # two connections that finished a request (kept alive, idle) do not count ...
        done = [conn("127.0.0.50") for _ in range(2)]
        for s in done:
            s.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(s)[0] == "HTTP/1.1 200 OK"
        # ... two still sending their headers do, and a third is refused at accept
        slow = [conn("127.0.0.50") for _ in range(2)]
        for s in slow:
            s.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        assert hung_up(conn("127.0.0.50"), 1) == b""
        # other addresses have their own share
        other = conn("127.0.0.51")
        other.sendall(b"GET /api HTTP/1.1\r\n")
        assert hung_up(other, 0.2) is None
        # a kept-alive connection serves the next request, and is timed when that request's
        # headers come slowly (by lws's own timer: closed without an answer)
        done[0].sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(done[0])[0] == "HTTP/1.1 200 OK"
        done[1].sendall(b"GET /api HTTP/1.1\r\n")
        t1 = time.monotonic()
        # the slow ones are answered 408 and closed at the timeout, and room is made
        for s in slow + [other]:
            data = hung_up(s, HEADER_TIMEOUT + 1)
            assert data is not None, "not closed at the header timeout"
            check_408(data)
        assert HEADER_TIMEOUT - 0.1 < time.monotonic() - t0 < HEADER_TIMEOUT + 1
        data = hung_up(done[1], HEADER_TIMEOUT + 1)
        assert data is not None, "a kept-alive connection's slow request was not timed"
        assert data == b"", data  # lws's own timer: closed without an answer (conns.c)
        assert HEADER_TIMEOUT - 0.1 < time.monotonic() - t1 < HEADER_TIMEOUT + 1
        again = conn("127.0.0.50")
        again.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n")
        assert hung_up(again, 0.3) is None
        again.sendall(b"\r\n")
        assert read_response(again)[0] == "HTTP/1.1 200 OK"
    finally:
        for s in socks:
            s.close()
