#!/usr/bin/python3
"""A/B of the one-shot execute API on two kgw builds in the same minutes: each build runs its
own kgw (warm pool of 8, fork server, as bench/execute.py), and one-shot `1+1`s (POST
/api/execute to its end event) alternate between them, one at a time, so both see the same
load. Prints each build's p50/p90 and the ratio of the medians.

  /usr/bin/python3 bench/ab_oneshot.py OLD/kgw NEW/kgw [--n 60] [--kgw-arg=...]

Standard library plus python3-psutil and python3-websockets (Debian; via bench/execute.py).
"""
import argparse
import http.client
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from execute import Kgw, pct, run_execution  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--n", type=int, default=60, help="one-shots per build")
    ap.add_argument("--kgw-arg", action="append", default=[])
    args = ap.parse_args()
    kgws = []
    try:
        for b in (args.old, args.new):
            kgws.append(Kgw(b, ["--pool", "python3=8", *args.kgw_arg]))
        conns = [http.client.HTTPConnection("127.0.0.1", k.port, timeout=60) for k in kgws]
        lat = [[], []]
        for i in range(2 * args.n):
            j = (i + i // 2) % 2  # old new new old old new ...: neither always goes first
            took, ev = run_execution(conns[j], kgws[j], "/api/execute", {"code": "1+1"})
            assert ev[-1]["status"] == "ok", ev
            lat[j].append(took)
            time.sleep(0.05)  # the pool refills between requests, as with a user
        for c in conns:
            c.close()
    finally:
        for k in kgws:
            k.stop()
    for name, b, xs in zip(("old", "new"), (args.old, args.new), lat):
        print(f"{name} {b}: one-shot 1+1 p50 {pct(xs, 50) * 1e3:.2f} ms, "
              f"p90 {pct(xs, 90) * 1e3:.2f} ms ({len(xs)})")
    print(f"new/old p50: {pct(lat[1], 50) / pct(lat[0], 50):.2f}")


if __name__ == "__main__":
    main()
