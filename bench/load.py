#!/usr/bin/python3
"""kgw load test: bounded, loopback only, stops by itself.

    /usr/bin/python3 bench/load.py [--seconds 60] [--clients 200] [--kernels 20]

Starts its own kgw (build/kgw) on a free 127.0.0.1 port, then:
  rest        wrk (Debian package `wrk`) against GET /api/kernels, GET /api/status and
              GET /api/kernelspecs for --rest-seconds each: requests/s, p99 latency, errors
  websocket   --clients websocket clients spread over --kernels kernels for --seconds: each
              sends `execute_request`s one after another (legacy protocol) and waits for the
              execute_reply and the iopub idle of each; requests/s, p50/p99 round trip,
              replies lost (sent but never answered), connection errors
  rss         the gateway's RSS before the load, at its peak, and 5 s after the load ended
              (with the kernels still running): growth after the load means a leak

Kernels are started and deleted by this script; everything it started is killed at the end,
also on errors or Ctrl-C. The gateway runs with --rate-limit=0 (the default per-tenant rate
would throttle a single-key load generator, which is what it is for). Only the standard
library, python3-websockets, python3-psutil and wrk are used.
"""
import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (Gateway, Reaper, pct, proc_status)
from bench import K  # noqa: E402  (examples/kgwclient.py: messages and their encoding)


LINGER_S = 10  # --session-linger of the gateway under test


def wrk(gw, path, seconds, connections=50, threads=2):
    script = f"wrk.headers['Authorization'] = 'token {gw.token}'\n"
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        p = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections), "-d",
                            f"{seconds}s", "--latency", "-s", f.name,
                            f"http://127.0.0.1:{gw.port}{path}"],
                           capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(f.name)
    out = p.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    p99 = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)] if m else None
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    total = int(re.search(r"(\d+) requests in", out).group(1))
    return {"path": path, "rps": rps, "p99_ms": p99, "errors": errors, "requests": total}


async def ws_client(gw, kid, stop_at, stats):
    session = uuid.uuid4().hex
    try:
        # max_queue=None: at the end a client stops reading while other clients' output
        # still arrives; a bounded queue would stall its own closing handshake
        ws = await K.connect(f"ws://127.0.0.1:{gw.port}", gw.token, kid, "legacy", session,
                             max_queue=None)
    except Exception as e:  # counted, not fatal: the point is to see how many fail
        stats["connect_errors"] += 1
        stats["errors"].append(repr(e))
        return
    try:
        while time.monotonic() < stop_at:
            msg = K.make_msg("execute_request", {
                "code": "1+1", "silent": False, "store_history": False, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": False}, session=session, username="load")
            t0 = time.monotonic()
            await ws.send(K.encode_legacy(msg))
            stats["sent"] += 1
            got_reply = got_idle = False
            deadline = t0 + 60
            while not (got_reply and got_idle):
                left = deadline - time.monotonic()
                if left <= 0:
                    stats["lost"] += 1
                    return
                m = K.decode_legacy(await asyncio.wait_for(ws.recv(), left))
                if m["parent_header"].get("msg_id") != msg["msg_id"]:
                    continue
                if m["msg_type"] == "execute_reply":
                    got_reply = True
                elif (m["msg_type"] == "status"
                      and m["content"].get("execution_state") == "idle"):
                    got_idle = True
            stats["rtt"].append(time.monotonic() - t0)
            stats["done"] += 1
    except (websockets.ConnectionClosed, asyncio.TimeoutError, OSError) as e:
        stats["conn_errors"] += 1
        stats["errors"].append(repr(e))
    finally:
        stats["last_done"] = max(stats["last_done"], time.monotonic())
        await ws.close()


async def ws_load(gw, kids, clients, seconds):
    stats = {"sent": 0, "done": 0, "lost": 0, "rtt": [], "connect_errors": 0, "conn_errors": 0,
             "errors": [], "last_done": 0.0}
    stop_at = time.monotonic() + seconds
    t0 = time.monotonic()
    await asyncio.gather(*[ws_client(gw, kids[i % len(kids)], stop_at, stats)
                           for i in range(clients)])
    stats["elapsed"] = stats["last_done"] - t0  # the closing handshakes are not load
    stats["close_s"] = time.monotonic() - stats["last_done"]
    return stats


def rss_mb(gw):
    return round(B.proc_status(gw.pid)[0], 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kgw", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "build", "kgw"))
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rest-seconds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the websocket load: RSS that keeps growing from round to round "
                         "is a leak (the allocator keeps what a round needed)")
    ap.add_argument("--kgw-arg", action="append", default=[])
    a = ap.parse_args()
    if not (1 <= a.seconds <= 600 and 1 <= a.clients <= 2000 and 1 <= a.kernels <= 100 and
            1 <= a.rounds <= 5):
        ap.error("bounded by design: --seconds <= 600, --clients <= 2000, --kernels <= 100, "
                 "--rounds <= 5")
    reaper = B.Reaper()
    workdir = tempfile.mkdtemp(prefix="kgw-load-")
    os.chmod(workdir, 0o711)  # sandboxed kernels (other uids) traverse it to their runtime dir
    gw = None
    kids = []
    result = {}
    try:
        gw = B.Gateway(os.path.abspath(a.kgw), workdir, reaper,
                       ["--rate-limit=0", f"--max-kernels={a.kernels + 5}",
                        f"--max-connections={a.clients + 500}",
                        f"--session-linger={LINGER_S}", *a.kgw_arg])
        result["rss_idle_mb"] = rss_mb(gw)
        if shutil.which("wrk"):
            result["rest"] = [wrk(gw, p, a.rest_seconds) for p in
                              ("/api/kernels", "/api/status", "/api/kernelspecs")]
        else:
            result["rest"] = "skipped: wrk is not installed (apt-get install wrk)"
        print("starting kernels ...", file=sys.stderr)
        for _ in range(a.kernels):
            kids.append(gw.start_kernel())
        result["rss_before_mb"] = rss_mb(gw)
        peak = [0.0]

        async def sample():
            while True:
                r = rss_mb(gw) or 0
                peak[0] = max(peak[0], r)
                await asyncio.sleep(0.5)

        async def run():
            s = asyncio.ensure_future(sample())
            try:
                return await ws_load(gw, kids, a.clients, a.seconds)
            finally:
                s.cancel()
        result["rounds"] = []
        for rnd in range(a.rounds):
            print(f"{a.clients} websocket clients over {a.kernels} kernels for {a.seconds} s "
                  f"(round {rnd + 1} of {a.rounds}) ...", file=sys.stderr)
            peak[0] = 0.0
            st = asyncio.run(asyncio.wait_for(run(), a.seconds + 120))
            time.sleep(5)
            rtt = sorted(st["rtt"])
            result["rounds"].append({
                "clients": a.clients, "kernels": a.kernels, "seconds": round(st["elapsed"], 1),
                "executions": st["done"], "per_second": round(st["done"] / st["elapsed"], 1),
                "rtt_p50_ms": round(B.pct(rtt, 50) * 1000, 2) if rtt else None,
                "rtt_p99_ms": round(B.pct(rtt, 99) * 1000, 2) if rtt else None,
                "closing_s": round(st["close_s"], 1), "lost": st["lost"], "sent": st["sent"],
                "connect_errors": st["connect_errors"], "connection_errors": st["conn_errors"],
                "error_samples": st["errors"][:5], "rss_peak_mb": peak[0],
                "rss_5s_after_mb": rss_mb(gw)})
        # closed sessions linger (for reconnects) with their replay buffers; once they expired
        # and the gateway returned free memory (every 30 s), RSS should be back near the start
        time.sleep(LINGER_S + 32)
        result["rss_after_linger_mb"] = rss_mb(gw)
        result["gateway_alive"] = gw.alive()
    finally:
        for k in kids:
            try:
                gw.delete_kernel(k)
            except Exception:
                pass
        if gw:
            gw.stop()
        reaper.kill_all()
        if os.environ.get("KGW_LOAD_KEEP"):
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    ok = result.get("gateway_alive") and all(
        r["lost"] == 0 and r["connection_errors"] == 0 and r["connect_errors"] == 0
        for r in result.get("rounds", [{"lost": 1}]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
