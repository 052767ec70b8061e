#!/usr/bin/python3
"""What the router costs: kernel creation rate and `1+1` round trip through HAProxy against
straight to a shard, in one run (docs/scale-out.md, "Measured").

Starts three kgw shards on 127.0.0.2-4 and HAProxy on 127.0.0.1 with the configuration
rendered from deploy/haproxy (as tests/integration/test_scaleout.py does), then alternates
router and direct in blocks so both see the same machine:

- creates: POST /api/kernels until the kernel is started (201), then DELETE; no warm pool
  (--pool python3=0), so every create starts a kernel through the fork server;
- 1+1: execute_request to execute_reply and idle, over one open websocket per path, on one
  kernel of shard kgw-0 (reached through the router or directly).

Reports medians (and p90) per path and the router's added latency. Loopback only, bounded
(--time-limit), and it stops every process it started.

  /usr/bin/python3 bench/scaleout.py [--creates 20] [--rtts 200] [--kgw build/kgw]
"""
import argparse
import asyncio
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import websockets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RENDER = os.path.join(REPO, "deploy", "haproxy", "render.py")
IPS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
NAMES = [f"kgw-{i}" for i in range(3)]


def port_free_on_all(ips):
    for _ in range(50):
        with socket.socket() as s:
            s.bind((ips[0], 0))
            port = s.getsockname()[1]
        try:
            for ip in ips[1:]:
                with socket.socket() as s:
                    s.bind((ip, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port")


def request(host, port, token, method, path, body=None):
    c = http.client.HTTPConnection(host, port, timeout=60)
    h = {"Authorization": f"token {token}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, (json.loads(payload) if payload else None), r.headers


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out: {what}")


def msg(msg_type, content, session):
    return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "bench",
                       "session": session, "date": "2026-01-01T00:00:00.000000Z",
                       "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "channel": "shell",
            "buffers": []}


async def rtt_samples(url, token, n):
    """n round trips of 1+1 on one websocket (legacy protocol): seconds each."""
    session = uuid.uuid4().hex
    async with websockets.connect(f"{url}?session_id={session}", max_size=None,
                                  extra_headers={"Authorization": f"token {token}"},
                                  ping_interval=None) as ws:
        out = []
        for i in range(n + 5):  # 5 warm-up round trips
            m = msg("execute_request", {"code": "1+1", "silent": False, "store_history": False,
                                        "user_expressions": {}, "allow_stdin": False}, session)
            t0 = time.perf_counter()
            await ws.send(json.dumps(m))
            reply = idle = False
            while not (reply and idle):
                r = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if r["parent_header"].get("msg_id") != m["header"]["msg_id"]:
                    continue
                t = r["header"]["msg_type"]
                reply |= t == "execute_reply"
                idle |= t == "status" and r["content"]["execution_state"] == "idle"
            if i >= 5:
                out.append(time.perf_counter() - t0)
        return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgw", default=os.path.join(REPO, "build", "kgw"))
    ap.add_argument("--creates", type=int, default=20, help="kernels created per path")
    ap.add_argument("--rtts", type=int, default=200, help="1+1 round trips per path")
    ap.add_argument("--kgw-arg", action="append", default=[])
    ap.add_argument("--time-limit", type=float, default=300)
    args = ap.parse_args()
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("time limit")))
    signal.alarm(int(args.time_limit))
    token = os.urandom(16).hex()
    work = tempfile.mkdtemp(prefix="kgw-bench-scaleout-")
    procs = []
    try:
        port = port_free_on_all(IPS)
        for ip, name in zip(IPS, NAMES):
            log = open(os.path.join(work, f"{name}.log"), "w")
            procs.append(subprocess.Popen(
                [args.kgw, "--ip", ip, "--port", str(port), "--api-key", token,
                 "--instance-id", name, "--trusted-proxies", "127.0.0.1", "--pool", "python3=0",
                 "--rate-limit=0", "--log-level", "warn", *args.kgw_arg],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
        for ip in IPS:
            wait(lambda ip=ip: request(ip, port, token, "GET", "/check_ready")[0] == 200, 30,
                 f"shard {ip}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            rport = s.getsockname()[1]
        subprocess.run([sys.executable, RENDER, "--out", os.path.join(work, "router"), "--bind",
                        f"127.0.0.1:{rport}",
                        *[f"--shard={n}={ip}:{port}" for n, ip in zip(NAMES, IPS)]], check=True)
        log = open(os.path.join(work, "haproxy.log"), "w")
        procs.append(subprocess.Popen([haproxy, "-db", "-f",
                                       os.path.join(work, "router", "haproxy.cfg")],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
        log.close()
        wait(lambda: len({request("127.0.0.1", rport, token, "GET", "/check_ready")[2]
                          ["X-KGW-Shard"] for _ in range(6)}) == 3, 20, "router")

        # one kernel per shard first: a shard's first start also waits for its fork server
        for ip in IPS:
            st, model, _ = request(ip, port, token, "POST", "/api/kernels", {"name": "python3"})
            assert st == 201, (st, model)
            request(ip, port, token, "DELETE", f"/api/kernels/{model['id']}")
        paths = {"router": ("127.0.0.1", rport), "direct": (IPS[0], port)}
        creates = {p: [] for p in paths}
        t_total = {p: 0.0 for p in paths}
        for i in range(args.creates):
            for p in (("router", "direct") if i % 2 == 0 else ("direct", "router")):
                host, hp = paths[p]
                t0 = time.perf_counter()
                st, model, _ = request(host, hp, token, "POST", "/api/kernels",
                                       {"name": "python3"})
                dt = time.perf_counter() - t0
                assert st == 201, (st, model)
                creates[p].append(dt)
                t_total[p] += dt
                request(host, hp, token, "DELETE", f"/api/kernels/{model['id']}")

        st, model, _ = request(IPS[0], port, token, "POST", "/api/kernels", {"name": "python3"})
        assert st == 201
        kid = model["id"]
        rtts = {p: [] for p in paths}

        async def rtt_run():
            block = max(1, args.rtts // 4)
            for _ in range(4):
                for p, (host, hp) in paths.items():
                    rtts[p] += await rtt_samples(f"ws://{host}:{hp}/api/kernels/{kid}/channels",
                                                 token, block)
        asyncio.run(rtt_run())
        request(IPS[0], port, token, "DELETE", f"/api/kernels/{kid}")

        ms = lambda x: f"{x * 1000:.2f} ms"  # noqa: E731
        print(f"kgw scale-out bench: 3 shards, HAProxy {haproxy}, {args.creates} creates and "
              f"{len(rtts['router'])} round trips per path, loopback, {os.cpu_count()} cores")
        print(f"{'':8} {'create p50':>12} {'create p90':>12} {'creates/s':>10} "
              f"{'1+1 p50':>10} {'1+1 p90':>10}")
        for p in paths:
            print(f"{p:8} {ms(statistics.median(creates[p])):>12} {ms(pct(creates[p], 0.9)):>12} "
                  f"{len(creates[p]) / t_total[p]:>10.1f} {ms(statistics.median(rtts[p])):>10} "
                  f"{ms(pct(rtts[p], 0.9)):>10}")
        print("slowest create: " + ", ".join(f"{p} {ms(max(creates[p]))}" for p in paths))
        print(f"router adds: create {ms(statistics.median(creates['router']) - statistics.median(creates['direct']))}, "
              f"1+1 {ms(statistics.median(rtts['router']) - statistics.median(rtts['direct']))} (medians)")
        return 0
    finally:
        signal.alarm(0)
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGINT if p is not procs[-1] else signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
