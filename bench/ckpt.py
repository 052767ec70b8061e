#!/usr/bin/python3
"""Checkpoints, rollbacks and forks of a kernel that holds numpy, pandas and a 100 MB array
(docs/checkpoints.md; issue 26's targets), against one kgw on a free loopback port.

  checkpoint  POST /api/kernels/{id}/checkpoints {"files": false} to its 201 (no cell
              running); the checkpoint is dropped after each (not timed)
  rollback    POST /api/kernels/{id}/rollback to its answer, which kgw gives once the revived
              process has answered kernel_info (and its iopub reached the gateway); the old
              state is then checked (not timed)
  fork        POST /api/kernels/{id}/fork to its 201, which kgw gives once the new kernel has
              answered kernel_info; its state is checked and it is deleted (not timed)
  pss         what an idle checkpoint adds to the PSS of the kernel's processes (summed over
              every process under kgw, --idle-seconds before and after it is taken, the kernel
              not written meanwhile): the pages only it holds; its own pss_bytes (the gateway's
              figure, after the rollbacks below) also counts its share of the pages it shares
  cgroup      what taking that checkpoint adds to the kernel's cgroup (kgw_kernels_memory_bytes)
  leak        --cycles checkpoint + rollback + drop cycles: the processes under kgw, kgw's
              descriptors and the cgroups of kgw's instance, before and after (the first cycle
              runs before "before": the first rollback leaves the kernel's keeper for good)

Targets (issue 26, this host): checkpoint p50 <= 10 ms, rollback p50 <= 50 ms, fork p50 <= 60
ms, idle checkpoint <= 2 MiB PSS, nothing left after the cycles. The machine is shared: a
short run (--reps, --cycles) and the other processes' CPU share are printed with the figures.

Standard library plus python3-psutil (Debian): run with /usr/bin/python3. Everything it
starts is stopped by PID at the end (SIGTERM to kgw, then SIGKILL to anything of its own
left). Loopback only.
"""
import argparse
import os
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench as B  # noqa: E402  (Gateway, Reaper, pct, Contention)

now = time.perf_counter
SETUP = """
import numpy as np, pandas as pd
a = np.ones(100 * 1024 * 1024 // 8)          # 100 MB
df = pd.DataFrame({"k": np.arange(1000), "v": np.arange(1000) * 2.0})
marker = "v0"
"""


def timed(gw, method, path, body, want):
    t0 = now()
    st, ans = gw.request(method, path, body)
    dt = now() - t0
    if st != want:
        raise B.BenchError(f"{method} {path} -> {st} {ans}")
    return dt, ans


def execute(gw, kid, code):
    """Runs code through the execute API: its stdout (an error is a BenchError)."""
    import json
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{gw.port}/api/kernels/{kid}/execute",
                                 data=json.dumps({"code": code}).encode(), method="POST",
                                 headers={"Authorization": f"token {gw.token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        events = [json.loads(x) for x in r.read().splitlines() if x]
    if events[-1]["status"] != "ok":
        raise B.BenchError(f"execution failed: {events}")
    return "".join(e.get("text", "") for e in events if e["type"] == "stream")


def cgroups_of(pid, instance):
    """How many cgroups are under kgw's instance cgroups (kgw-<instance>, one per hierarchy)."""
    n = 0
    roots = set()
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            for base in (["/sys/fs/cgroup"] if ctrl == "" else
                         [f"/sys/fs/cgroup/{c}" for c in ctrl.split(",")] +
                         [f"/sys/fs/cgroup/{ctrl}"]):
                d = base + path
                if not os.path.isdir(d) or d in roots:
                    continue
                roots.add(d)
                for sub in os.listdir(d):
                    if sub == "kgw-" + instance and os.path.isdir(os.path.join(d, sub)):
                        n += sum(len(ds) for _, ds, _ in os.walk(os.path.join(d, sub)))
    return n


def counts(gw):
    procs = len(psutil.Process(gw.pid).children(recursive=True))
    fds = len(os.listdir(f"/proc/{gw.pid}/fd"))
    # the instance's cgroups are named after its private directory in --runtime-dir
    instance = [n for n in os.listdir(gw.runtime_dir) if n.startswith("gw-")][0]
    return {"processes": procs, "kgw fds": fds, "cgroups": cgroups_of(gw.pid, instance)}


def pss_total(gw):
    """The PSS of every process under kgw, summed (bytes): each page counted once."""
    total = 0
    for p in psutil.Process(gw.pid).children(recursive=True):
        try:
            with open(f"/proc/{p.pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def kernels_memory(gw):
    """kgw_kernels_memory_bytes from GET /metrics: the memory charged to the kernels' cgroups
    (here one kernel, --pool python3=0), or None."""
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{gw.port}/metrics",
                                 headers={"Authorization": f"token {gw.token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("kgw_kernels_memory_bytes"):
                return float(line.split()[-1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgw", default=os.path.join(B.REPO, "build", "kgw"))
    ap.add_argument("--kgw-arg", action="append", default=[])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--idle-seconds", type=float, default=1.0)
    args = ap.parse_args()
    reaper = B.Reaper()
    workdir = tempfile.mkdtemp(prefix="kgw-bench-ckpt-")
    os.chmod(workdir, 0o711)  # sandboxed kernels (other uids) pass through to the runtime dir
    gw = None
    busy = B.Contention()
    try:
        gw = B.Gateway(args.kgw, workdir, reaper,
                       ["--pool", "python3=0", "--mem-limit", "1073741824",
                        "--max-checkpoints", "16", *args.kgw_arg])
        kid = gw.start_kernel()
        execute(gw, kid, SETUP)
        base = f"/api/kernels/{kid}"
        res = {"checkpoint": [], "rollback": [], "fork": []}

        for _ in range(args.reps):
            dt, cp = timed(gw, "POST", base + "/checkpoints", {"files": False}, 201)
            res["checkpoint"].append(dt)
            timed(gw, "DELETE", f"{base}/checkpoints/{cp['id']}", None, 204)

        # what taking one adds to the kernel's cgroup (what it holds, honestly: PSS divides the
        # shared pages between the two processes)
        time.sleep(args.idle_seconds)
        mem0, pss0 = kernels_memory(gw), pss_total(gw)
        _, cp = timed(gw, "POST", base + "/checkpoints", {"files": False}, 201)
        time.sleep(args.idle_seconds)
        mem1, pss1 = kernels_memory(gw), pss_total(gw)
        for i in range(args.reps):
            execute(gw, kid, f"marker = 'changed {i}'; a[0] = {i + 2}")
            dt, _ = timed(gw, "POST", base + "/rollback", {"checkpoint": cp["id"]}, 200)
            res["rollback"].append(dt)
            got = execute(gw, kid, "print(marker, a[0])").split()
            if got != ["v0", "1.0"]:
                raise B.BenchError(f"rollback did not restore the state: {got}")

        time.sleep(args.idle_seconds)
        st, lst = gw.request("GET", base + "/checkpoints")
        mine = [c for c in lst if c["id"] == cp["id"]] if st == 200 else []
        pss = [c.get("pss_bytes") for c in mine]
        private = [c.get("private_bytes") for c in mine]

        for _ in range(args.reps):
            dt, model = timed(gw, "POST", base + "/fork", {}, 201)
            res["fork"].append(dt)
            got = execute(gw, model["id"], "print(marker, int(a.sum()), len(df))").split()
            if got != ["v0", str(100 * 1024 * 1024 // 8), "1000"]:
                raise B.BenchError(f"the fork does not hold the state: {got}")
            gw.delete_kernel(model["id"])
        timed(gw, "DELETE", f"{base}/checkpoints/{cp['id']}", None, 204)

        # leak check
        def cycle():
            _, c = timed(gw, "POST", base + "/checkpoints", {"files": False}, 201)
            timed(gw, "POST", base + "/rollback", {"checkpoint": c["id"]}, 200)
            timed(gw, "DELETE", f"{base}/checkpoints/{c['id']}", None, 204)
        def kernel_fds():
            return int(execute(gw, kid, "import os; print(len(os.listdir('/proc/self/fd')))"))
        cycle()
        time.sleep(0.5)
        before = counts(gw)
        fds0 = kernel_fds()
        t0 = now()
        failed = None
        for i in range(args.cycles):
            try:
                cycle()
            except B.BenchError as e:
                failed = f"cycle {i + 1} failed: {e}"
                break
        cyc_s = now() - t0
        time.sleep(1.0)
        after = counts(gw)
        fds1 = None if failed else kernel_fds()

        print(f"kgw {args.kgw} {' '.join(args.kgw_arg)}; kernel: numpy, pandas, a 100 MB array")
        for name, target in (("checkpoint", 10), ("rollback", 50), ("fork", 60)):
            xs = res[name]
            p50 = B.pct(xs, 50) * 1000
            print(f"{name:10s} p50 {p50:7.1f} ms  p90 {B.pct(xs, 90) * 1000:7.1f} ms  "
                  f"max {max(xs) * 1000:7.1f} ms  (n={len(xs)}; target <= {target} ms: "
                  f"{'met' if p50 <= target else 'MISSED'})")
        added = pss1 - pss0
        print(f"idle checkpoint: the kernel's processes' PSS {pss0 / 1048576:.1f} MiB before it, "
              f"{pss1 / 1048576:.1f} MiB {args.idle_seconds} s after: +{added / 1048576:.2f} MiB "
              f"(target <= 2 MiB: {'met' if added <= 2 << 20 else 'MISSED'})")
        if pss and pss[0] is not None:
            print(f"the same checkpoint after {args.reps} rollbacks to it: pss_bytes "
                  f"{pss[0] / 1048576:.2f} MiB (its share of the pages it shares with the kernel "
                  f"included), private {(private[0] or 0) / 1048576:.2f} MiB (the pages the "
                  f"revived kernels rewrote)")
        else:
            print(f"idle checkpoint PSS: not reported ({lst})")
        if mem0 is not None and mem1 is not None:
            print(f"the kernel's cgroup: {mem0 / 1048576:.1f} MiB before the checkpoint, "
                  f"{mem1 / 1048576:.1f} MiB {args.idle_seconds} s after: "
                  f"+{(mem1 - mem0) / 1048576:.2f} MiB for one idle checkpoint")
        same = before == after and not failed and fds0 == fds1
        print(f"{args.cycles} checkpoint+rollback+drop cycles in {cyc_s:.1f} s: before {before}, "
              f"after {after}; the kernel's own descriptors {fds0} -> {fds1}: "
              f"{'nothing left behind' if same else 'LEFT SOMETHING BEHIND'}")
        if failed:
            print(failed)
        print(f"other processes' CPU during the run: {busy.others():.0%} of the machine")
        if not failed:
            gw.delete_kernel(kid)
        return 0 if same else 3
    finally:
        if gw:
            gw.stop()
        for pid, label in reaper.kill_all():
            print(f"killed leftover {label} pid {pid}")


if __name__ == "__main__":
    sys.exit(main())
