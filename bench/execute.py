#!/usr/bin/python3
"""The execute API's latency and throughput (docs/execute.md), in one run against its own kgw
(warm pool, fork server) on a free loopback port:

  oneshot     POST /api/execute {"code": "1+1"} to its end event, one at a time: p50/p90
              (target p50 under 10 ms)
  sustained   one-shot executions from CONCURRENCY clients for SECONDS: ends per second
              (target at least 20/s on 2 cores), every execution exactly one end, and kgw's
              RSS before and after
  existing    on one kernel, alternating: POST /api/kernels/{id}/execute to its end, and a
              websocket execute_request to its idle (the Jupyter round trip, same run): p50
              each (target: the API within 0.3 ms of the websocket at p50)

Standard library plus python3-websockets and python3-psutil (Debian), run with
/usr/bin/python3. Everything it starts is stopped by PID at the end.
"""
import argparse
import asyncio
import concurrent.futures
import http.client
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

import psutil
import websockets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Kgw:
    def __init__(self, binary, args):
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.log = tempfile.NamedTemporaryFile(prefix="kgw-bench-exec-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(
            [binary, "--ip", "127.0.0.1", "--port", str(self.port), "--api-key", self.token,
             "--auth-fail-limit=0", "--rate-limit=0", "--log-level", "warn", *args],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                pool = self.get("/api/status")["pool"]
                if all(p["ready"] >= p["size"] for p in pool.values()):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("kgw did not become ready; see " + self.log.name)

    def headers(self):
        return {"Authorization": f"token {self.token}", "Content-Type": "application/json"}

    def get(self, path):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     headers=self.headers())
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def call(self, method, path, body=None, headers=None, timeout=120):
        """A request on a connection of its own: (connection, response), the body unread (for
        streamed answers); the caller closes the connection."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                  headers={**self.headers(), **(headers or {})})
        return c, c.getresponse()

    def request(self, method, path, body=None):
        c, r = self.call(method, path, body, timeout=60)
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None

    def rss(self):
        return psutil.Process(self.proc.pid).memory_info().rss

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_execution(conn, kgw, path, body):
    """One execution on a kept-alive connection: (seconds to the end, events)."""
    t0 = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body).encode(), headers=kgw.headers())
    r = conn.getresponse()
    if r.status != 201:
        raise RuntimeError(f"{path}: {r.status} {r.read()[:200]}")
    events = []
    for line in r:
        events.append(json.loads(line))
        if events[-1]["type"] == "end":
            took = time.perf_counter() - t0
    r.read()
    return took, events


def oneshot(kgw, n):
    conn = http.client.HTTPConnection("127.0.0.1", kgw.port, timeout=60)
    lat = []
    for _ in range(n):
        took, ev = run_execution(conn, kgw, "/api/execute", {"code": "1+1"})
        assert ev[-1]["status"] == "ok", ev
        lat.append(took)
        time.sleep(0.05)  # the pool refills between requests, as with a user
    conn.close()
    return lat


def sustained(kgw, clients, seconds):
    stop = time.monotonic() + seconds
    ends, ids, lock = [0], set(), threading.Lock()
    problems = []

    def client():
        # generous: under many clients a one-shot waits for a kernel (warm pool, then fork
        # server), and a slow one is measured, not lost
        conn = http.client.HTTPConnection("127.0.0.1", kgw.port, timeout=300)
        while time.monotonic() < stop:
            _, ev = run_execution(conn, kgw, "/api/execute", {"code": "1+1"})
            n_end = sum(1 for e in ev if e["type"] == "end")
            with lock:
                if n_end != 1 or ev[0]["execution_id"] in ids or ev[-1]["status"] != "ok":
                    problems.append(ev[-1])
                ids.add(ev[0]["execution_id"])
                ends[0] += n_end
        conn.close()

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        for f in [ex.submit(client) for _ in range(clients)]:
            f.result()
    return ends[0], time.monotonic() - t0, problems


def new_header(msg_type, session):
    return {"msg_id": uuid.uuid4().hex, "username": "bench", "session": session,
            "msg_type": msg_type, "version": "5.3",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}


async def existing(kgw, n):
    status, model = kgw.request("POST", "/api/kernels", {})
    kid = model["id"]
    session = uuid.uuid4().hex
    api, ws_lat = [], []
    conn = http.client.HTTPConnection("127.0.0.1", kgw.port, timeout=60)
    url = f"ws://127.0.0.1:{kgw.port}/api/kernels/{kid}/channels?session_id={session}"
    async with websockets.connect(url, extra_headers=kgw.headers(), max_size=None) as ws:
        for i in range(n):
            h = new_header("execute_request", session)
            msg = {"header": h, "parent_header": {}, "metadata": {}, "channel": "shell",
                   "content": {"code": "1+1", "silent": False, "store_history": True,
                               "user_expressions": {}, "allow_stdin": False,
                               "stop_on_error": True}}
            t0 = time.perf_counter()
            await ws.send(json.dumps(msg))
            while True:
                m = json.loads(await ws.recv())
                if (m.get("parent_header", {}).get("msg_id") == h["msg_id"] and
                        m["header"]["msg_type"] == "status" and
                        m["content"]["execution_state"] == "idle"):
                    break
            ws_lat.append(time.perf_counter() - t0)
            took, ev = run_execution(conn, kgw, f"/api/kernels/{kid}/execute", {"code": "1+1"})
            assert ev[-1]["status"] == "ok"
            api.append(took)
    conn.close()
    kgw.request("DELETE", f"/api/kernels/{kid}")
    return api, ws_lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kgw", default=os.path.join(REPO, "build", "kgw"))
    ap.add_argument("--kgw-arg", action="append", default=[])
    ap.add_argument("--n", type=int, default=100, help="one-shot and existing-kernel samples")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    kgw = Kgw(args.kgw, ["--pool", "python3=8", *args.kgw_arg])
    try:
        lat = oneshot(kgw, args.n)
        p50, p90 = pct(lat, 50) * 1e3, pct(lat, 90) * 1e3
        print(f"oneshot   1+1, POST to end, {len(lat)} sequential: p50 {p50:.2f} ms, "
              f"p90 {p90:.2f} ms (target p50 < 10 ms: {'met' if p50 < 10 else 'MISSED'})")
        rss0 = kgw.rss()
        ends, took, problems = sustained(kgw, args.clients, args.seconds)
        time.sleep(2)
        rss1 = kgw.rss()
        rate = ends / took
        print(f"sustained {args.clients} clients, {took:.1f} s: {ends} one-shot executions, "
              f"{rate:.1f}/s (target >= 20/s: {'met' if rate >= 20 else 'MISSED'}); "
              f"{len(problems)} missing, duplicate or failed ends; kgw RSS {rss0 >> 20} -> "
              f"{rss1 >> 20} MiB")
        for p in problems[:5]:
            print(f"          {json.dumps(p)[:300]}")
        api, wsl = asyncio.run(existing(kgw, args.n))
        a50, w50 = pct(api, 50) * 1e3, pct(wsl, 50) * 1e3
        print(f"existing  1+1 on one kernel, {len(api)} each: execute API p50 {a50:.2f} ms, "
              f"websocket p50 {w50:.2f} ms, difference {a50 - w50:+.2f} ms (target <= 0.3 ms: "
              f"{'met' if a50 - w50 <= 0.3 else 'MISSED'})")
        return 1 if problems else 0
    finally:
        kgw.stop()


if __name__ == "__main__":
    sys.exit(main())
