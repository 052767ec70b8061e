#!/usr/bin/python3
"""Where an idle checkpoint's own pages come from (docs/checkpoints.md, "Measured"): which
pages of a new checkpoint process are its alone, and who wrote them after the fork: the
checkpoint process itself (its page differs from the one the live kernel had before), or the
live kernel (which got a copy; the checkpoint keeps the original). From the page frame
numbers in /proc/<pid>/pagemap (root), for a sandboxed kernel holding numpy, pandas and a 100
MB array that already has its keeper (a first checkpoint), a second checkpoint taken while it
is idle, --idle-seconds after.

Standard library plus python3-psutil: run with /usr/bin/python3 as root. Everything it starts
is stopped by PID at the end. Loopback only.
"""
import argparse
import os
import struct
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench as B  # noqa: E402
import ckpt as C  # noqa: E402  (SETUP, execute)

PAGE = os.sysconf("SC_PAGE_SIZE")


def writable_maps(pid):
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            p = line.split()
            lo, hi = (int(x, 16) for x in p[0].split("-"))
            if "w" in p[1]:
                out.append((lo, hi, p[5] if len(p) > 5 else "[anonymous]"))
    return out


def frames(pid):
    """{virtual page: (page frame number, mapping)} of pid's present writable pages."""
    res = {}
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        for lo, hi, name in writable_maps(pid):
            f.seek(lo // PAGE * 8)
            data = f.read((hi - lo) // PAGE * 8)
            for i in range(len(data) // 8):
                v = struct.unpack_from("<Q", data, i * 8)[0]
                if v >> 63:  # present
                    res[lo + i * PAGE] = (v & ((1 << 55) - 1), name)
    return res


def kernels(gw):
    out = []
    for p in psutil.Process(gw.pid).children(recursive=True):
        try:
            if p.cmdline()[1:3] == ["-m", "ipykernel_launcher"]:
                out.append(p)
        except psutil.Error:
            pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgw", default=os.path.join(B.REPO, "build", "kgw"))
    ap.add_argument("--idle-seconds", type=float, default=1.0)
    args = ap.parse_args()
    reaper = B.Reaper()
    workdir = tempfile.mkdtemp(prefix="kgw-bench-pages-")
    os.chmod(workdir, 0o711)
    gw = None
    try:
        gw = B.Gateway(args.kgw, workdir, reaper, ["--pool", "python3=0", "--mem-limit",
                                                   "1073741824"])
        kid = gw.start_kernel()
        C.execute(gw, kid, C.SETUP)
        st, _ = gw.request("POST", f"/api/kernels/{kid}/checkpoints", {"files": False})
        if st != 201:
            raise B.BenchError(f"first checkpoint: {st}")
        time.sleep(args.idle_seconds)
        # the live kernel: the newest big interpreter (the keeper is small)
        big = [p for p in kernels(gw) if p.memory_info().rss > 100 << 20]
        live = max(big, key=lambda p: p.create_time()).pid
        before = {p.pid for p in kernels(gw)}
        live0 = frames(live)
        st, cp = gw.request("POST", f"/api/kernels/{kid}/checkpoints", {"files": False})
        if st != 201:
            raise B.BenchError(f"second checkpoint: {st}")
        time.sleep(args.idle_seconds)
        new = [p.pid for p in kernels(gw) if p.pid not in before]
        if len(new) != 1:
            raise B.BenchError(f"cannot tell the checkpoint's process: {new}")
        ck = frames(new[0])
        shared = {f for pid in before for f, _ in frames(pid).values()}
        by = {}
        for addr, (pfn, name) in ck.items():
            if pfn in shared:
                continue
            old = live0.get(addr)
            who = "the live kernel" if old and old[0] == pfn else "the checkpoint"
            by[(who, name)] = by.get((who, name), 0) + PAGE
        total = {}
        for (who, _), n in by.items():
            total[who] = total.get(who, 0) + n
        print(f"kgw {args.kgw}; kernel: numpy, pandas, a 100 MB array; a second checkpoint, "
              f"{args.idle_seconds} s idle")
        print(f"pages only the checkpoint holds: {sum(total.values()) / 1048576:.2f} MiB")
        for who, n in sorted(total.items()):
            print(f"  written after the fork by {who}: {n / 1048576:.2f} MiB")
        for (who, name), n in sorted(by.items(), key=lambda x: -x[1])[:10]:
            print(f"    {n / 1024:8.0f} KiB  {who:16s} {name}")
        return 0
    finally:
        if gw:
            gw.stop()
        for pid, label in reaper.kill_all():
            print(f"killed leftover {label} pid {pid}")


if __name__ == "__main__":
    sys.exit(main())
