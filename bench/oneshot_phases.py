#!/usr/bin/python3
"""Where a one-shot execution's time goes (bench/README.md): runs N sequential
POST /api/execute {"code": "1+1"} against its own kgw (warm pool of 2, fork server, debug log)
and prints, from the gateway's log timestamps (ms), the median time after the POST of: the
kernel taken from the pool, the pool's refill (its workspace, its spawn), the execute_request
sent, the kernel's exec_end and the end event; and the client's median to the end event. Also
times the first three executions on fresh pooled kernels (the first one after the fork is the
slow one).

    /usr/bin/python3 bench/oneshot_phases.py [N]     # KGW_BIN picks the kgw (build/kgw)
"""
import datetime
import http.client
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from conftest import start_gateway, stop_gateway  # noqa: E402


def ms(line):
    return datetime.datetime.fromisoformat(line[:23]).timestamp() * 1000


def phases(log):
    runs, cur = [], None
    marks = [("pool", r"taken from the pool"), ("refill workspace", r"workspace=\S+: created"),
             ("refill spawn", r"spawned pid"), ("sent", r"xexec: .*: sent$"),
             ("exec_end", r"xexec: .*: exec_end"), ("end", r"xexec: .*: ok$")]
    for line in log.splitlines():
        if 'POST "/api/execute"' in line:
            cur = {"post": ms(line)}
            runs.append(cur)
            continue
        for name, rx in marks if cur else ():
            if name not in cur and re.search(rx, line):
                cur[name] = ms(line)
    for name, _ in marks:
        v = [r[name] - r["post"] for r in runs[2:] if name in r]  # (the first two warm up)
        if v:
            print(f"  {name:17s} +{statistics.median(v):6.1f} ms after the POST (median of {len(v)})")


def execute(gw, path, code):
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    t = time.perf_counter()
    c.request("POST", path, body=json.dumps({"code": code}),
              headers={"Authorization": f"token {gw.token}"})
    c.getresponse().read()
    c.close()
    return (time.perf_counter() - t) * 1000


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    gw = start_gateway(["--pool", "python3=2"])
    try:
        time.sleep(6)
        ends = []
        for _ in range(n):
            ends.append(execute(gw, "/api/execute", "1+1"))
            time.sleep(0.5)  # the pool refills
        print(f"one-shot 1+1, POST to the end: p50 {statistics.median(ends):.1f} ms ({n})")
        phases(gw.log())
        firsts = []
        for _ in range(max(3, n // 2)):
            kid = gw.start_kernel()["id"]
            time.sleep(0.3)
            firsts.append([execute(gw, f"/api/kernels/{kid}/execute", "1+1") for _ in range(3)])
            gw.delete_kernel(kid)
            time.sleep(0.5)
        print("fresh pooled kernel, 1+1 to the end: " + ", ".join(
            f"execution {i + 1} p50 {statistics.median(f[i] for f in firsts):.1f} ms"
            for i in range(3)))
    finally:
        stop_gateway(gw)


if __name__ == "__main__":
    main()
