#!/usr/bin/python3
"""kgw's CPU time per MiB of kernel output relayed by the execute API and MCP.

One kgw (its own free loopback port, random key) and one kernel; each run is an execution that
floods stdout, read to its end by a client in this process, while kgw's CPU time (all its threads,
/proc/PID/task/*/schedstat) is read before and after. Prints, per face and workload,
every run's kgw CPU ms per MiB of output and the median.

  faces      execute: POST /api/kernels/{id}/execute, NDJSON read to the end event
             mcp: an MCP session's tools/call execute_code (SSE, with a progress token)
  workloads  lines: sys.stdout.write('x'*1000 + '\\n') N times
             print: print(i) for i in range(N)

  /usr/bin/python3 bench/xflood.py --kgw /tmp/xfast-rel/kgw --runs 5

kgw is started and stopped (by PID) as bench/execute.py does; run with /usr/bin/python3.
"""
import argparse
import json
import os
import statistics
import sys
import time

from execute import Kgw

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKLOADS = {
    # name: (code, bytes of stdout it writes)
    "lines": (lambda n: (f"import sys\nfor _ in range({n}):\n"
                         "    sys.stdout.write('x' * 1000 + '\\n')\n"),
              lambda n: n * 1001),
    "print": (lambda n: f"for i in range({n}):\n    print(i)\n",
              lambda n: sum(len(str(i)) + 1 for i in range(n))),
}


def cpu_s(pid):
    """CPU time of all of pid's threads: schedstat's on-CPU ns (stat's utime + stime count
    10 ms ticks, too coarse for one run)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # the thread ended
            pass
    return total / 1e9


def run_execute(kgw, kid, code):
    """stdout bytes received."""
    c, r = kgw.call("POST", f"/api/kernels/{kid}/execute", {"code": code})
    assert r.status == 201, (r.status, r.read()[:300])
    out, end = 0, None
    for line in r:
        ev = json.loads(line)
        if ev["type"] == "stream":
            out += len(ev["text"].encode())
        elif ev["type"] == "end":
            end = ev
    c.close()
    assert end and end["status"] == "ok", end
    return out


def mcp_session(kgw):
    h = {"Accept": "application/json, text/event-stream"}
    c, r = kgw.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": {"protocolVersion": "2025-06-18",
                                                "capabilities": {},
                                                "clientInfo": {"name": "xflood", "version": "1"}}},
                    h)
    assert r.status == 200, r.status
    sid = r.getheader("Mcp-Session-Id")
    r.read()
    c.close()
    h["Mcp-Session-Id"] = sid
    c, r = kgw.call("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, h)
    r.read()
    c.close()
    return h


def run_mcp(kgw, h, code, n=[10]):
    """stdout bytes in the tool result."""
    n[0] += 1
    c, r = kgw.call("POST", "/mcp", {"jsonrpc": "2.0", "id": n[0], "method": "tools/call",
                                     "params": {"name": "execute_code", "arguments": {"code": code},
                                                "_meta": {"progressToken": n[0]}}}, h)
    assert r.status == 200, r.status
    result, progress = None, 0
    for line in r:
        if not line.startswith(b"data: "):
            continue
        msg = json.loads(line[6:])
        if msg.get("method") == "notifications/progress":
            progress += 1
        elif msg.get("id") == n[0]:
            result = msg["result"]
    c.close()
    assert result and not result.get("isError"), str(result)[:300]
    # (the last text item is the structured content's JSON text)
    return sum(len(i["text"].encode()) for i in result["content"]
               if i["type"] == "text" and not i["text"].startswith('{"status":'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kgw", default=os.path.join(REPO, "build", "kgw"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--faces", default="execute,mcp")
    ap.add_argument("--workloads", default="lines,print")
    ap.add_argument("--lines", type=int, default=6000, help="N of the lines workload (x 1001 B)")
    ap.add_argument("--prints", type=int, default=600000, help="N of the print workload")
    ap.add_argument("--kgw-arg", action="append", default=[])
    a = ap.parse_args()
    kgw = Kgw(a.kgw, a.kgw_arg)
    try:
        c, r = kgw.call("POST", "/api/kernels", {"name": "python3"})
        assert r.status == 201, r.status
        kid = json.loads(r.read())["id"]
        c.close()
        h = mcp_session(kgw) if "mcp" in a.faces else None
        sizes = {"lines": a.lines, "print": a.prints}
        for face in a.faces.split(","):
            for wl in a.workloads.split(","):
                code, expect = WORKLOADS[wl][0](sizes[wl]), WORKLOADS[wl][1](sizes[wl])
                per = []
                for i in range(a.runs + 1):  # the first run warms up
                    c0 = cpu_s(kgw.proc.pid)
                    t0 = time.monotonic()
                    got = run_execute(kgw, kid, code) if face == "execute" else run_mcp(kgw, h,
                                                                                        code)
                    wall = time.monotonic() - t0
                    cpu = cpu_s(kgw.proc.pid) - c0
                    assert got == expect, (face, wl, got, expect)
                    if i:
                        per.append(cpu * 1000 / (got / 2**20))
                        print(f"  {face:8} {wl:6} run {i}: {got / 2**20:.2f} MiB in {wall:.2f} s,"
                              f" kgw {cpu * 1000:.0f} ms CPU = {per[-1]:.1f} ms/MiB", flush=True)
                print(f"{face:8} {wl:6} median kgw CPU {statistics.median(per):.1f} ms/MiB "
                      f"(runs: {', '.join(f'{p:.1f}' for p in per)})", flush=True)
    finally:
        kgw.stop()


if __name__ == "__main__":
    sys.exit(main())
