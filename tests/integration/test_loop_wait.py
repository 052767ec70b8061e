"""Kernel starts and deletions never make the gateway's loop wait for cgroup work, nor for
the unmount of a kernel's runtime directory (docs/architecture.md, "Never a wait on the loop").

A mkdir, rmdir or rename of a cgroup, and a write to a cgroup.procs, take the kernel's global
cgroup_mutex (a move into a v1 cgroup waits for an RCU grace period besides): milliseconds
each, tens of them under load. The loop thread is traced (strace, on the gateway's main thread
only) while kernels with an egress policy start and are deleted at once: none of those calls
may show up there. Not a timing test: the calls are counted, not timed.
"""
import copy
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import threading
import time

import pytest

import conftest
import sbxutil as S

N = 6
SPARES = 16  # empty cgroups the worker keeps ready (sandbox/cgroup.c)
CGROUP_CALLS = ("mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2")


@pytest.fixture(scope="module")
def lgw(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lgw")
    key = secrets.token_hex(16)
    h = hashlib.blake2b(key.encode(), digest_size=32).hexdigest()
    kf = tmp / "keys"
    kf.write_text(f"egt blake2b:{h} egress=127.0.0.1:9\n")
    gw = S.start_sandboxed(f"--key-file={kf}")
    t = copy.copy(gw)
    t.token = key
    gw.tenant = t
    yield gw
    conftest.stop_gateway(gw)


def traced(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"TracerPid:\s+(\d+)", f.read()).group(1)) != 0


def run_all(fns):
    ts = [S.Background(fn) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    errors = [t.error for t in ts if t.error]
    assert not errors, errors
    return [t.result for t in ts]


def start_and_delete(gw):
    def start():
        st, model, _ = gw.tenant.request("POST", "/api/kernels", {"egress": "127.0.0.1:9"})
        assert st == 201, (st, model)
        return model["id"]
    ids = run_all([start] * N)
    run_all([lambda k=k: gw.tenant.delete_kernel(k) for k in ids])
    return ids


def cgroup_parent_dirs(gw):
    """The gateway's kgw-<instance> cgroup directories."""
    return cgroup_parent_dirs_of(gw)


def cgroup_parent_dirs_of(gw, inst=None):
    inst = inst or instance(gw)
    return [d for d in conftest._own_cgroup_dirs() + ["/sys/fs/cgroup"]
            if os.path.isdir(os.path.join(d, "kgw-" + inst))
            for d in [os.path.join(d, "kgw-" + inst)]]


def instance(gw):
    """The gateway's instance name: its runtime directory's, which it holds open (its lock)."""
    fds = f"/proc/{gw.proc.pid}/fd"
    for fd in os.listdir(fds):
        try:
            m = re.search(r"/(gw-[A-Za-z0-9]+)(/|$)", os.readlink(os.path.join(fds, fd)))
        except OSError:
            continue
        if m:
            return m.group(1)
    raise AssertionError("no runtime directory open in the gateway")


def empty(dirs):
    """Cgroups without a process (pooled kernels and the fork server have one), on average
    over the hierarchies."""
    n = 0
    for d in dirs:
        for e in os.scandir(d):
            try:
                n += e.is_dir() and not open(os.path.join(e.path, "cgroup.procs")).read()
            except OSError:  # removed meanwhile
                pass
    return n / len(dirs)


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_no_cgroup_work_on_the_loop(lgw, tmp_path):
    start_and_delete(lgw)  # warm: kernelspec caches, the fork server's first placement
    dirs = cgroup_parent_dirs(lgw)
    deadline = time.monotonic() + 60  # the worker has made its spares again (a loaded host)
    while empty(dirs) < SPARES and time.monotonic() < deadline:
        time.sleep(0.1)
    out = tmp_path / "loop.trace"
    pid = lgw.proc.pid  # the loop runs on the main thread: its tid is the pid
    tr = subprocess.Popen(["strace", "-qq", "-o", str(out), "-e",
                           "trace=" + ",".join(CGROUP_CALLS) + ",openat,umount2", "-p", str(pid)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not traced(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert traced(pid), "strace did not attach"
        ids = start_and_delete(lgw)
        time.sleep(0.5)
    finally:
        tr.terminate()
        tr.wait(10)
    lines = out.read_text().splitlines()
    # the trace saw the starts: each kernel's runtime directory is made on the loop
    assert sum(any(k in line for k in ids) for line in lines) >= N, lines[:20]
    bad = [line for line in lines
           if "/sys/fs/cgroup" in line and (line.split("(")[0] in CGROUP_CALLS or (
               "cgroup.procs" in line and ("O_WRONLY" in line or "O_RDWR" in line)))]
    assert not bad, "cgroup work on the loop:\n" + "\n".join(bad[:20])
    # nor the unmount of a kernel's runtime tmpfs (an RCU grace period too)
    bad = [line for line in lines if line.startswith("umount2(") and any(k in line for k in ids)]
    assert not bad, "unmounts on the loop:\n" + "\n".join(bad[:20])


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_exec_start_checks_no_cgroup_on_the_loop(tmp_path):
    """Without the fork server the proxy moves itself into its cgroup before its user
    namespace exists; the loop neither checks that (reading /proc/PID/cgroup takes the
    cgroup_mutex) nor moves it."""
    gw = S.start_sandboxed("--no-fork-server", "--pool", "python3=0")
    try:
        dirs = cgroup_parent_dirs_of(gw)
        deadline = time.monotonic() + 60
        while empty(dirs) < SPARES and time.monotonic() < deadline:
            time.sleep(0.1)
        out = tmp_path / "loop.trace"
        tr = subprocess.Popen(["strace", "-qq", "-o", str(out), "-e", "trace=openat", "-p",
                               str(gw.proc.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not traced(gw.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert traced(gw.proc.pid), "strace did not attach"
            ids = run_all([lambda: gw.start_kernel()["id"]] * 3)
        finally:
            tr.terminate()
            tr.wait(10)
        lines = out.read_text().splitlines()
        assert sum(any(k in line for k in ids) for line in lines) >= 3, lines[:20]
        bad = [line for line in lines if re.search(r'"/proc/\d+/cgroup"', line) or (
            "cgroup.procs" in line and ("O_WRONLY" in line or "O_RDWR" in line))]
        assert not bad, "\n".join(bad[:20])
        for k in ids:
            gw.delete_kernel(k)
    finally:
        conftest.stop_gateway(gw)


def test_deleted_kernels_cgroups_go(lgw):
    """Removals are handed to the cgroup worker: they still happen, the kernels' runtime
    directories (unmounted) too."""
    ids = start_and_delete(lgw)
    assert ids
    inst = instance(lgw)
    rundirs = [os.path.join(d, inst) for d in (
        os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/nonexistent"), "kgw"), "/run/kgw",
        f"/tmp/kgw-{os.geteuid()}") if os.path.isdir(os.path.join(d, inst))]
    assert len(rundirs) == 1, rundirs

    def left():
        return [n for n in os.listdir(rundirs[0]) if any(n.startswith(k) for k in ids)]
    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left()
    with open(f"/proc/{lgw.proc.pid}/mountinfo") as f:  # its runtime tmpfs, unmounted
        assert not [line for line in f if any(k in line for k in ids)]
    dirs = cgroup_parent_dirs(lgw)
    assert dirs

    # what stays empty: the spares the worker keeps ready, in every hierarchy
    deadline = time.monotonic() + 30
    while empty(dirs) > SPARES and time.monotonic() < deadline:
        time.sleep(0.1)
    assert empty(dirs) <= SPARES, [sorted(e.name for e in os.scandir(d)) for d in dirs]
