#!/usr/bin/python3
"""What a fresh kernel's first executions cost: on N kernels taken from a warm pool (fork
server), three `1+1`s each over the Jupyter websocket, one at a time; for each rank (1st, 2nd,
3rd) the median round trip (execute_request sent to its status idle), the median time
inside the kernel (the dates of its status busy and status idle: microsecond resolution, the
kernel's own clock), and the CPU time and minor page faults of the kernel's sandbox processes
over the execution (/proc, read before it and 50 ms after its idle). It says so when a
kernel's execution counts are not 1, 2, 3. `--warm`: a silent execution first, not counted.

  /usr/bin/python3 bench/firstexec.py [--n 15] [--kgw build/kgw] [--kgw-arg=...] [--warm]

Standard library plus python3-websockets and python3-psutil (Debian); reuses bench/execute.py's
Kgw.
"""
import argparse
import asyncio
import datetime
import glob
import json
import os
import re
import statistics
import sys
import time
import uuid

import psutil
import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from execute import REPO, Kgw, new_header  # noqa: E402


def cpu_ns(pid):
    """The CPU time the threads of a kernel's sandbox have had, ns: the process the gateway
    logs (the sandbox's first process) and its descendants (/proc/PID/task/*/schedstat)."""
    t = 0
    try:
        pids = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0
    for f in [f for p in pids for f in glob.glob(f"/proc/{p}/task/*/schedstat")]:
        try:
            with open(f) as fh:
                t += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return t


def minflt(pid):
    """The minor page faults of a kernel's sandbox processes (/proc/PID/stat, field 10)."""
    n = 0
    try:
        pids = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                n += int(fh.read().rsplit(")", 1)[1].split()[7])
        except (OSError, ValueError, IndexError):
            pass
    return n


def date(h):
    return datetime.datetime.fromisoformat(h["date"].replace("Z", "+00:00")).timestamp()


async def three(kgw, kid, warm=False, pid=None):
    session = uuid.uuid4().hex
    url = f"ws://127.0.0.1:{kgw.port}/api/kernels/{kid}/channels?session_id={session}"
    out = []
    async with websockets.connect(url, extra_headers=kgw.headers(), max_size=None) as ws:
        for i in range(4 if warm else 3):
            h = new_header("execute_request", session)
            quiet = warm and i == 0
            msg = {"header": h, "parent_header": {}, "metadata": {}, "channel": "shell",
                   "content": {"code": "1+1", "silent": quiet, "store_history": not quiet,
                               "user_expressions": {}, "allow_stdin": False,
                               "stop_on_error": True}}
            c0, f0 = (cpu_ns(pid), minflt(pid)) if pid else (0, 0)
            t0 = time.perf_counter()
            await ws.send(json.dumps(msg))
            busy = count = rt = None
            while rt is None or count is None:
                m = json.loads(await ws.recv())
                if m.get("parent_header", {}).get("msg_id") != h["msg_id"]:
                    continue
                if m["header"]["msg_type"] == "execute_reply":
                    count = m["content"]["execution_count"]
                if m["header"]["msg_type"] == "status":
                    if m["content"]["execution_state"] == "busy":
                        busy = date(m["header"])
                    else:
                        rt = time.perf_counter() - t0
                        inside = date(m["header"]) - busy
            await asyncio.sleep(0.05)  # what the kernel's threads do after its idle
            out.append((rt, inside, count, (cpu_ns(pid) - c0) * 1e-9 if pid else 0,
                        minflt(pid) - f0 if pid else 0))
    return out[1:] if warm else out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kgw", default=os.path.join(REPO, "build", "kgw"))
    ap.add_argument("--kgw-arg", action="append", default=[])
    ap.add_argument("--n", type=int, default=15)
    ap.add_argument("--warm", action="store_true",
                    help="a silent execution first (not counted): what it saves the next")
    args = ap.parse_args()
    kgw = Kgw(args.kgw, ["--pool", "python3=2", "--log-level", "info", *args.kgw_arg])
    ranks = [[], [], []]
    try:
        for _ in range(args.n):
            while kgw.get("/api/status")["pool"]["python3"]["ready"] < 2:
                time.sleep(0.05)
            time.sleep(0.2)
            status, model = kgw.request("POST", "/api/kernels", {})
            with open(kgw.log.name) as f:
                pid = re.search(rf"kernel={model['id']}: ready \(pid (\d+)", f.read())
            res = asyncio.run(three(kgw, model["id"], args.warm, pid and int(pid.group(1))))
            kgw.request("DELETE", f"/api/kernels/{model['id']}")
            for r, x in zip(ranks, res):
                r.append(x)
            if [x[2] for x in res] != [1, 2, 3]:  # the silent one does not count
                print("execution counts", [c for _, _, c in res])
    finally:
        kgw.stop()
    for i, r in enumerate(ranks):
        print(f"execution {i + 1}: round trip p50 {statistics.median(x[0] for x in r) * 1e3:.2f}"
              f" ms, in the kernel p50 {statistics.median(x[1] for x in r) * 1e3:.2f} ms, "
              f"the kernel's CPU p50 {statistics.median(x[3] for x in r) * 1e3:.2f} ms, "
              f"minor faults p50 {statistics.median(x[4] for x in r):.0f}")


if __name__ == "__main__":
    main()
