#!/usr/bin/python3
"""The cost of a GET /metrics scrape to the gateway's loop, with many kernels.

Starts kgw (sandboxed, fork server on, --pool python3=0, --metrics-port, --log-level debug so
that it logs the time it takes to render each scrape), starts --kernels kernels (64), then
alternates --scrapes (200) scrapes of the metrics listener with as many GET /api on the main
listener (the floor: the same HTTP round trip, an authenticated route with a tiny answer), in
blocks of 50, on one keep-alive connection each. Prints the medians of

  - render: the server's own time to produce the text (kgw's "metrics: N bytes rendered in X
    us" debug lines), the part a scrape adds to the loop beyond any request;
  - loop CPU per request: CPU time of kgw's main thread (the loop; schedstat) over the blocks
    of scrapes and over the blocks of floor requests, each read once the loop has gone back
    to sleep, divided by their number;
  - client latency of both, and their ratio.

    /usr/bin/python3 bench/scrape.py [--kernels 64] [--scrapes 200] [--kgw build/kgw]

Uses bench.py's gateway and cleanup: only 127.0.0.1; every process it started is stopped by
PID at the end.
"""
import argparse
import http.client
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

RENDER_RE = re.compile(r"metrics: (\d+) bytes rendered in (\d+) us")
BLOCK = 50


def loop_cpu(pid):
    """CPU seconds of kgw's main thread, the event loop, once it sleeps again (a running
    thread's figure is brought up to date when it stops)."""
    time.sleep(0.02)
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def timed_get(conn, path, headers):
    t0 = time.perf_counter()
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    body = r.read()
    t = time.perf_counter() - t0
    if r.status != 200:
        raise bench.BenchError(f"GET {path} -> {r.status} {body[:200]!r}")
    return t, body


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kgw", default=os.path.join(bench.REPO, "build", "kgw"))
    ap.add_argument("--kernels", type=int, default=64)
    ap.add_argument("--scrapes", type=int, default=200)
    args = ap.parse_args()
    reaper = bench.Reaper()
    wd = tempfile.mkdtemp(prefix="kgw-scrape-")
    os.chmod(wd, 0o755)
    mport = bench.free_port()
    gw = None
    try:
        gw = bench.Gateway(args.kgw, wd, reaper,
                           ["--pool", "python3=0", "--log-level", "debug",
                            "--max-kernels", str(max(64, args.kernels)),
                            "--metrics-port", str(mport)], name="kgw-scrape")
        if not bench.wait_log(gw, "fork server: ready"):
            print("the fork server is not ready: kernels start with exec (slower)")
        t0 = time.perf_counter()
        for _ in range(args.kernels):
            bench.post_kernel(gw)
        reaper.track_children(gw.pid, "kgw-kernel")
        print(f"{args.kernels} kernels started in {time.perf_counter() - t0:.1f} s")

        mconn = http.client.HTTPConnection("127.0.0.1", mport, timeout=30)
        aconn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        auth = {"Authorization": f"token {gw.token}"}
        _, body = timed_get(mconn, "/metrics", {})
        running = re.search(rb'^kgw_kernels\{state="running",kernelspec="python3"\} (\d+)$',
                            body, re.M)
        if not running or int(running.group(1)) != args.kernels:
            raise bench.BenchError(f"the scrape does not show {args.kernels} running kernels")
        for _ in range(20):  # warm-up
            timed_get(mconn, "/metrics", {})
            timed_get(aconn, "/api", auth)
        with open(gw.log_path, "rb") as f:
            log_start = f.seek(0, os.SEEK_END)

        scrape, floor, cpu_scrape, cpu_floor = [], [], 0.0, 0.0
        done = 0
        while done < args.scrapes:
            n = min(BLOCK, args.scrapes - done)
            c0 = loop_cpu(gw.pid)
            for _ in range(n):
                t, body = timed_get(mconn, "/metrics", {})
                scrape.append(t)
            c1 = loop_cpu(gw.pid)
            for _ in range(n):
                t, _ = timed_get(aconn, "/api", auth)
                floor.append(t)
            c2 = loop_cpu(gw.pid)
            cpu_scrape += c1 - c0
            cpu_floor += c2 - c1
            done += n
        time.sleep(0.2)
        with open(gw.log_path, "rb") as f:
            f.seek(log_start)
            renders = [(int(b), int(us)) for b, us in RENDER_RE.findall(f.read().decode(
                errors="replace"))]
        if len(renders) < args.scrapes:
            raise bench.BenchError(f"{len(renders)} render lines in kgw's log, "
                                   f"{args.scrapes} expected")
        us = sorted(u for _, u in renders)
        n = args.scrapes
        lines = body.count(b"\n")
        print(f"scrape of {len(body)} bytes ({lines} lines), {args.kernels} kernels, "
              f"{n} scrapes alternating with {n} GET /api in blocks of {BLOCK}")
        print(f"  render (kgw's own time)       median {statistics.median(us):7.0f} us   "
              f"p90 {us[int(len(us) * 0.9)]:6.0f} us   max {us[-1]:6.0f} us")
        print(f"  loop CPU per request          /metrics {cpu_scrape / n * 1e6:6.0f} us   "
              f"GET /api {cpu_floor / n * 1e6:6.0f} us   "
              f"difference {(cpu_scrape - cpu_floor) / n * 1e6:6.0f} us")
        ms, mf = statistics.median(scrape), statistics.median(floor)
        print(f"  client latency                /metrics {ms * 1e6:6.0f} us   "
              f"GET /api {mf * 1e6:6.0f} us   ratio {ms / mf:.2f}x")
        mconn.close()
        aconn.close()
    finally:
        if gw:
            rc, secs = gw.stop()
            print(f"kgw stopped in {secs:.1f} s (status {rc})")
        left = reaper.kill_all()
        if left:
            print(f"killed {len(left)} processes left behind: {left}")
        shutil.rmtree(wd, ignore_errors=True)


if __name__ == "__main__":
    main()
