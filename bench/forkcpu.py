#!/usr/bin/python3
"""What a forked kernel pays for Python against a cold (exec) one (bench/README.md): two kgw
instances, one with --no-fork-server and one with the fork server (no pool either), one
kernel each; the same execution alternately on each, N times: a pure-Python loop and 200,000
print()s, timed inside the kernel with time.process_time() (the kernel's CPU, all threads), so
the gateway and the client are not in the figure. Prints the medians and their ratio.

    /usr/bin/python3 bench/forkcpu.py [N]          # KGW_BIN picks the kgw (build/kgw)
"""
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from conftest import start_gateway, stop_gateway  # noqa: E402

CODE = ("import time\nt = time.process_time()\nx = 0\nfor i in range(1000000): x += i * i\n"
        "a = time.process_time() - t\nt = time.process_time()\n"
        "for i in range(200000): print(i)\nb = time.process_time() - t\n(a, b)")


def run(gw, kid):
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=300)
    c.request("POST", f"/api/kernels/{kid}/execute", body=json.dumps({"code": CODE}),
              headers={"Authorization": f"token {gw.token}"})
    res = None
    for line in c.getresponse():
        e = json.loads(line)
        if e["type"] == "result":
            res = tuple(float(v) for v in e["data"]["text/plain"].strip("()").split(","))
    c.close()
    return res


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    gws = {}
    try:
        gws["cold"] = start_gateway(["--pool", "python3=0", "--no-fork-server"])
        gws["fork"] = start_gateway(["--pool", "python3=0", "--fork-server"])
        time.sleep(3)
        kids = {name: gw.start_kernel()["id"] for name, gw in gws.items()}
        res = {name: [] for name in gws}
        for i in range(n):
            for name in (["cold", "fork"] if i % 2 == 0 else ["fork", "cold"]):
                res[name].append(run(gws[name], kids[name]))
        med = {name: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v))
               for name, v in res.items()}
        for name, (a, b) in med.items():
            print(f"{name}: Python loop {a * 1000:.1f} ms, 200k prints {b * 1000:.1f} ms "
                  f"(medians of {n}, kernel CPU)")
        print(f"fork/cold: loop {med['fork'][0] / med['cold'][0]:.2f}x, "
              f"prints {med['fork'][1] / med['cold'][1]:.2f}x")
    finally:
        for gw in gws.values():
            stop_gateway(gw)


if __name__ == "__main__":
    main()
