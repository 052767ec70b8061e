#!/usr/bin/python3
"""Fork-server start latency of two kgw builds, interleaved.

This machine's speed drifts by tens of percent within an hour, so two bench.py runs made at
different times cannot tell a change of a few milliseconds from the drift. This script runs
both builds at once (each its own kgw, --pool python3=0, fork server on) and alternates
between them: per round, a block of back-to-back starts (POST -> websocket -> kernel_info_reply,
then DELETE at once, as bench.py's pool section does) on one build, then on the other. Both see
the same minutes of the machine; the ratio B/A is the change.

    /usr/bin/python3 bench/ab_start.py OLD/kgw NEW/kgw [--rounds 10] [--block 5] [--preload M,..]

Uses bench.py's gateway, client and cleanup (only 127.0.0.1; every process it started is
stopped by PID at the end).
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kgw_a")
    ap.add_argument("kgw_b")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--block", type=int, default=5, help="back-to-back starts per build per round")
    ap.add_argument("--preload", default="numpy,pandas,matplotlib.pyplot",
                    help="--fork-server-preload of both (\"\": none)")
    args = ap.parse_args()
    extra = ["--pool", "python3=0", "--fork-server"]
    if args.preload:
        extra += ["--fork-server-preload", args.preload]
    reaper = bench.Reaper()
    gws, dirs = [], []
    try:
        for i, path in enumerate((args.kgw_a, args.kgw_b)):
            wd = tempfile.mkdtemp(prefix="kgw-ab-")
            dirs.append(wd)
            os.chmod(wd, 0o755)
            gws.append(bench.Gateway(path, wd, reaper, extra, name="kgw-" + "ab"[i]))
        for gw in gws:
            if not bench.wait_log(gw, "fork server: ready"):
                raise bench.BenchError("the fork server did not become ready:\n" + gw.log_tail())
        res = [[], []]
        for _ in range(args.rounds):
            for i, gw in enumerate(gws):
                for _ in range(args.block):
                    kid, t, _ = bench.ready_kernel(gw)
                    res[i].append(t * 1000)
                    gw.delete_kernel(kid)
            time.sleep(0.3)
        for name, path, rs in zip("AB", (args.kgw_a, args.kgw_b), res):
            rs.sort()
            print(f"{name} {path}: start p50 {statistics.median(rs):.1f} ms, "
                  f"p90 {rs[int(len(rs) * 0.9)]:.1f} ms, min {rs[0]:.1f} ms ({len(rs)} starts)")
        print(f"B/A p50: {statistics.median(res[1]) / statistics.median(res[0]):.2f}x")
    finally:
        for gw in gws:
            gw.stop()
        reaper.kill_all()
        for wd in dirs:
            shutil.rmtree(wd, ignore_errors=True)


if __name__ == "__main__":
    main()
