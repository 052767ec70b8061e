#!/usr/bin/python3
"""Noisy neighbours (docs/operations.md "Noisy neighbours"), in runs against its own kgw on a
free loopback port: tenant B's `1+1` websocket round trip measured quiet, then while tenant A's
16 kernels run hostile code (messages over the gateway's limit, output floods, fork and memory
bombs, stderr floods, a restart loop). Prints per run and as medians over the runs: B's p50 and
p99 quiet and under attack and their ratios (the floor is B's own quiet round trip in the same
run), the gateway's CPU share during the attack and its peak RSS.

The scenario is the integration test's (tests/integration/test_noisy.py), which asserts the
bounds; this prints the numbers. Standard library plus python3-websockets, run as root (the
kernels are sandboxed) with /usr/bin/python3. Everything it starts is stopped by PID.
"""
import argparse
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kgw", default=os.path.join(REPO, "build", "kgw"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=25, help="attack length per run")
    args = ap.parse_args()
    os.environ["KGW_BIN"] = os.path.abspath(args.kgw)   # read by conftest at import
    sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
    import test_noisy as N
    from conftest import key_file, start_gateway, stop_gateway

    rows = []
    for i in range(args.runs):
        path, keys = key_file(("hostile", "steady"))
        gw = start_gateway([f"--key-file={path}", *N.gateway_args()])
        try:
            res = N.scenario(gw, keys, attack_seconds=args.seconds)
        finally:
            stop_gateway(gw)
            os.unlink(path)
        q50, q99 = statistics.median(res["quiet"]), N.p99(res["quiet"])
        l50, l99 = statistics.median(res["loud"]), N.p99(res["loud"])
        rows.append((q50, q99, l50, l99, res["gateway_cpu"], res["peak_rss_mib"]))
        print(f"run {i + 1}: " + N.describe(res).replace("\n", "\n       "))
        if res["wrong"] or res["problems"] or res["stuck"]:
            print(f"       B wrong: {len(res['wrong'])}, A without outcome: "
                  f"{len(res['problems'])}, attackers stuck: {res['stuck']}")
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"median of {args.runs} runs: B p50 {med[0] * 1e3:.1f} ms quiet, {med[2] * 1e3:.1f} ms "
          f"under attack ({med[2] / med[0]:.2f}x); B p99 {med[1] * 1e3:.1f} ms quiet, "
          f"{med[3] * 1e3:.1f} ms under attack ({med[3] / med[1]:.2f}x); gateway "
          f"{med[4]:.0%} CPU, peak RSS {med[5]:.0f} MiB (bound {N.RSS_BOUND_MIB} MiB)")


if __name__ == "__main__":
    main()
