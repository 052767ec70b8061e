#!/usr/bin/python3
"""Restart and delete latency of exec'd kernels for two kgw builds, interleaved.

Each build gets its own kgw (--no-fork-server --pool python3=0: every kernel is exec'd, the
case where ipykernel's ZeroMQ linger used to hold a stop for up to a second). Per round and
build, a block of: POST /api/kernels, one execution over a websocket, then timed
POST /api/kernels/{id}/restart (the old process's stop plus a cold start) and timed
DELETE /api/kernels/{id} (the stop alone). Both builds see the same minutes of the machine.

    /usr/bin/python3 bench/ab_stop.py OLD/kgw NEW/kgw [--rounds 5] [--block 3]

Uses the integration tests' gateway fixture code (tests/integration/conftest.py: 127.0.0.1
only, each kgw stopped by PID at the end) and client (jclient.py).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import conftest  # noqa: E402
import jclient as J  # noqa: E402


def one(gw):
    kid = gw.start_kernel()["id"]

    async def go():
        c = await J.connect(gw, kid)
        try:
            await c.execute("print('hi')", timeout=60)
        finally:
            await c.close()
    J.run(go(), 90)
    t = time.monotonic()
    status = gw.request("POST", f"/api/kernels/{kid}/restart")[0]
    restart = time.monotonic() - t
    assert status == 200, status
    t = time.monotonic()
    assert gw.delete_kernel(kid) == 204
    return restart, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--block", type=int, default=3)
    a = ap.parse_args()
    gws, res = {}, {"old": ([], []), "new": ([], [])}
    try:
        for name, path in (("old", a.old), ("new", a.new)):
            conftest.KGW_BIN = os.path.abspath(path)
            gws[name] = conftest.start_gateway(["--no-fork-server", "--pool", "python3=0"])
        for _ in range(a.rounds):
            for name in ("old", "new"):
                for _ in range(a.block):
                    r, d = one(gws[name])
                    res[name][0].append(r)
                    res[name][1].append(d)
    finally:
        for gw in gws.values():
            conftest.stop_gateway(gw)
    for name, path in (("old", a.old), ("new", a.new)):
        r, d = res[name]
        print(f"{name} {path}: n={len(r)} restart median {statistics.median(r) * 1000:.0f} ms "
              f"(min {min(r) * 1000:.0f}, max {max(r) * 1000:.0f}); delete median "
              f"{statistics.median(d) * 1000:.0f} ms (min {min(d) * 1000:.0f}, "
              f"max {max(d) * 1000:.0f})")


if __name__ == "__main__":
    main()
