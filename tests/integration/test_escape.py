"""Sandbox escape tests: attack code runs inside real sandboxed kernels, each test asserts the
safe outcome.

Safety (the development machine is shared): every cell of attack code starts with a
containment check (sbxutil.GUARD: uid 1000, pid 1 is our init, hostname "sandbox") and the test
fails without attacking when it does not hold; nothing here signals, mounts or writes outside
the test's own temporary files from the host side; fork and memory bombs run only on dedicated
gateways with small --pids-limit / --mem-limit; every wait has a timeout.
"""
import asyncio
import errno
import json
import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import conftest
import jclient as J
from jclient import run
import sbxutil as S
from sbxutil import kcall, kexec

HOST_SECRET = "kgw-host-secret-" + secrets.token_hex(8)
ENV_KEY = "kgw-env-key-" + secrets.token_hex(12)   # an API key that reaches kgw via the env only

MiB = 1 << 20
LIMITED = ("--mem-limit", str(256 * MiB), "--pids-limit", "64", "--tmp-size", str(16 * MiB),
           "--workspace-size", str(16 * MiB), "--shutdown-grace-ms", "500", "--max-restarts", "3")


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def gw():
    """The shared sandboxed gateway; its environment carries secrets that must not leak."""
    env = {
        "KGW_API_KEY": ENV_KEY,                        # --api-key (the fixture's token) wins
        "KGW_HOST_SECRET": HOST_SECRET,
        "HOST_SECRET_VAR": HOST_SECRET,
        "PATH": "/root/.pyenv/bin:/root/.pyenv/shims:/root/.cargo/bin:" +
                os.environ.get("PATH", "/usr/bin:/bin"),
    }
    g = S.start_sandboxed(env=env)
    yield g
    conftest.stop_gateway(g)


@pytest.fixture(scope="module")
def ka(gw):
    kid = S.new_kernel(gw)
    yield kid
    gw.delete_kernel(kid)


@pytest.fixture(scope="module")
def kb(gw):
    kid = S.new_kernel(gw)
    yield kid
    gw.delete_kernel(kid)


@pytest.fixture(scope="module")
def a_state(gw, ka):
    """Kernel A leaves traces everywhere it can write and runs a marked sleeper process."""
    marker = "kgw-marker-" + secrets.token_hex(8)
    content = "kgw-content-" + secrets.token_hex(16)
    r = kcall(gw, ka, f"""
import subprocess, sys
M, C = {marker!r}, {content!r}
for d in ("/mnt/data", "/tmp", "/dev/shm", "/home/sandbox", "/run/kernel"):
    with open(d + "/" + M, "w") as f:
        f.write(C)
R["key"] = __import__("json").load(open("/run/kernel/connection.json"))["key"]
_kgw_sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", M])
R["pid_inside"] = _kgw_sleeper.pid
""")
    # the host sees the sleeper under its host pid (read-only scan of /proc)
    host_pid = S.wait_for(lambda: find_host_pid(marker), 10, what="A's sleeper on the host")
    yield {"marker": marker, "content": content, "key": r["key"], "host_pid": host_pid,
           "pid_inside": r["pid_inside"]}
    kexec(gw, ka, f"""
_kgw_sleeper.kill(); _kgw_sleeper.wait()
import os
for d in ("/mnt/data", "/tmp", "/dev/shm", "/home/sandbox", "/run/kernel"):
    os.unlink(d + "/" + {marker!r})
""")


def find_host_pid(marker):
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        return int(p)
            except OSError:
                pass
    return None


def gw_runtime_dir(gw, kid):
    """The kernel's runtime directory (its path in the gateway's mount namespace)."""
    root = f"/proc/{gw.proc.pid}/root"
    for base in ("/run/kgw", f"/tmp/kgw-{os.geteuid()}"):
        try:
            for d in os.listdir(root + base):
                if d.startswith("gw-") and os.path.isdir(f"{root}{base}/{d}/{kid}"):
                    return f"{base}/{d}/{kid}"
        except OSError:
            pass
    return None


# ------------------------------------------------------------------ 1. privilege

def test_identity_capabilities_rlimits(gw, ka):
    r = kcall(gw, ka, """
import os, resource
R["resuid"], R["resgid"], R["groups"] = os.getresuid(), os.getresgid(), os.getgroups()
R["pid"] = os.getpid()
R["status"] = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
R["uid_map"] = open("/proc/self/uid_map").read()
R["gid_map"] = open("/proc/self/gid_map").read()
R["rl"] = {n: resource.getrlimit(getattr(resource, n)) for n in
           ("RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_NOFILE")}
R["raise_limits"] = {}
for n in ("RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE"):
    soft, hard = resource.getrlimit(getattr(resource, n))
    try:
        resource.setrlimit(getattr(resource, n), (hard + 1 if hard >= 0 else hard, hard + 1))
        R["raise_limits"][n] = "RAISED"
    except (OSError, ValueError) as e:
        R["raise_limits"][n] = type(e).__name__
R["setuid0"] = None
try:
    os.setuid(0)
    R["setuid0"] = "succeeded"
except OSError as e:
    R["setuid0"] = e.errno
""")
    assert r["pid"] == 2
    assert r["resuid"] == [1000] * 3 and r["resgid"] == [1000] * 3, r
    assert r["groups"] == [], r["groups"]
    st = {k: v.strip() for k, v in r["status"].items()}
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[cap], 16) == 0, (cap, st[cap])
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2" and int(st["Seccomp_filters"]) >= 1, st
    assert r["setuid0"] == errno.EPERM
    # host root is not mapped into the sandbox at all; inside 1000 is an unprivileged host uid
    for name in ("uid_map", "gid_map"):
        rows = [tuple(map(int, l.split())) for l in r[name].strip().splitlines()]
        for inside, outside, count in rows:
            assert not (outside <= 0 < outside + count), f"{name} maps host root: {r[name]}"
        assert any(inside == 1000 and outside >= 1000 for inside, outside, _ in rows), r[name]
    assert r["rl"]["RLIMIT_CORE"] == [0, 0]
    assert r["rl"]["RLIMIT_FSIZE"] == [1 << 30, 1 << 30]        # --fsize-limit default
    assert r["rl"]["RLIMIT_NOFILE"] == [1024, 1024]             # --nofile-limit default
    assert "RAISED" not in r["raise_limits"].values(), r["raise_limits"]


def test_setuid_binaries_do_not_grant_root(gw, ka):
    r = kcall(gw, ka, r"""
import os, stat, subprocess, time
R["present"], R["runs"] = [], {}
for b in ("/usr/bin/su", "/usr/bin/passwd", "/usr/bin/mount", "/usr/bin/umount", "/usr/bin/newgrp",
          "/usr/bin/chsh", "/usr/bin/chfn", "/usr/bin/gpasswd"):
    try:
        st = os.stat(b)
    except OSError:
        continue
    if st.st_mode & stat.S_ISUID:
        R["present"].append(b)
R["usr_nosuid"] = bool(os.statvfs("/usr").f_flag & os.ST_NOSUID)
def attempt(argv):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = set()
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < 3:   # watch its effective uid while it runs
        try:
            for l in open(f"/proc/{p.pid}/status"):
                if l.startswith("Uid:"):
                    seen.add(int(l.split()[2]))
        except OSError:
            pass
        time.sleep(0.002)
    try:
        out = p.communicate(b"\n\n", timeout=10)[0]
    except subprocess.TimeoutExpired:
        p.kill(); out = p.communicate()[0]
    return {"rc": p.returncode, "out": out.decode(errors="replace")[-400:], "euids": sorted(seen)}
R["runs"]["su"] = attempt(["/usr/bin/su", "-c", "id -u"])
R["runs"]["mount"] = attempt(["/usr/bin/mount", "-t", "tmpfs", "none", "/mnt/data"])
R["runs"]["passwd"] = attempt(["/usr/bin/passwd", "-d", "root"])
R["runs"]["newgrp"] = attempt(["/usr/bin/newgrp", "root"])
""")
    assert "/usr/bin/su" in r["present"], "no setuid su to try (the host's /usr lacks it?)"
    assert r["usr_nosuid"], "/usr is not mounted nosuid"
    for name, run_ in r["runs"].items():
        assert run_["rc"] != 0, (name, run_)
        assert all(e == 1000 for e in run_["euids"]), (name, run_)
    assert r["runs"]["su"]["out"].strip() != "0", r["runs"]["su"]


def test_cannot_write_system_paths(gw, ka):
    r = kcall(gw, ka, r"""
import os, errno
created = ["/usr/kgw-probe", "/usr/bin/kgw-probe", "/usr/lib/python3/dist-packages/kgw_probe.py",
           "/etc/kgw-probe", "/etc/ssl/certs/kgw-probe.pem", "/kgw-probe", "/root/kgw-probe",
           "/run/kgw-probe", "/home/kgw-probe", "/mnt/kgw-probe", "/dev/kgw-probe", "/bin/kgw-probe",
           "/proc/kgw-probe"]
existing = ["/etc/passwd", "/etc/hosts", "/etc/hostname", "/etc/ld.so.cache", "/usr/bin/python3",
            "/etc/ssl/openssl.cnf", "/proc/sys/kernel/hostname", "/proc/sys/kernel/core_pattern",
            "/proc/sys/kernel/modprobe", "/proc/sys/vm/overcommit_memory",
            "/proc/sys/net/ipv4/ip_forward", "/proc/sys/kernel/ns_last_pid"]
R["created"], R["opened"], R["meta"] = {}, {}, {}
for p in created:
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd); os.unlink(p)
        R["created"][p] = "SUCCEEDED"
    except OSError as e:
        R["created"][p] = errno.errorcode[e.errno]
for p in existing:      # open for writing only: nothing is written or truncated
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.close(fd)
        R["opened"][p] = "SUCCEEDED"
    except OSError as e:
        R["opened"][p] = errno.errorcode[e.errno]
for name, f in [("chmod python3", lambda: os.chmod("/usr/bin/python3", 0o4755)),
                ("chown passwd", lambda: os.chown("/etc/passwd", 1000, 1000)),
                ("rename hosts", lambda: os.rename("/etc/hosts", "/etc/hosts.kgw")),
                ("utime ld.so.cache", lambda: os.utime("/etc/ld.so.cache")),
                ("symlink in /usr/bin", lambda: os.symlink("/tmp", "/usr/bin/kgw-link")),
                ("mkdir /usr/kgw", lambda: os.mkdir("/usr/kgw")),
                ("rmdir /root", lambda: os.rmdir("/root"))]:
    try:
        f()
        R["meta"][name] = "SUCCEEDED"
    except OSError as e:
        R["meta"][name] = errno.errorcode[e.errno]
""")
    ok = {"EROFS", "EACCES", "EPERM"}
    for group in ("created", "opened", "meta"):
        # ENOENT only for /proc entries this host kernel does not have (e.g. kernel/modprobe)
        bad = {p: e for p, e in r[group].items()
               if e not in ok and not (e == "ENOENT" and p.startswith("/proc/"))}
        assert not bad, f"{group}: {bad}"
    for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/etc/passwd",
              "/usr/bin/python3"):
        assert r["opened"][p] in ok, (p, r["opened"][p])


# ------------------------------------------------------------------ 2. filesystem

def test_host_files_absent(gw, ka, tmp_path):
    # a marker on the host in places a kernel might see if its root leaked
    host_marker = "kgw-hostfile-" + secrets.token_hex(8)
    markers = [tmp_path / host_marker]
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(d):
            markers.append(os.path.join(d, host_marker))
    for m in markers:
        with open(m, "w") as f:
            f.write(HOST_SECRET)
    try:
        r = kcall(gw, ka, f"""
import os
M, SECRET = {host_marker!r}, {HOST_SECRET[::-1]!r}[::-1].encode()
R["root"] = sorted(os.listdir("/"))
R["etc"] = sorted(os.listdir("/etc"))
R["etc_ssl"] = sorted(os.listdir("/etc/ssl"))
R["home"] = sorted(os.listdir("/home"))
R["rootdir"] = sorted(os.listdir("/root"))
R["run"] = sorted(os.listdir("/run"))
R["mnt"] = sorted(os.listdir("/mnt"))
R["opt"] = sorted(os.listdir("/opt")) if os.path.isdir("/opt") else None
R["opt_kgw"] = sorted(os.listdir("/opt/kgw")) if os.path.isdir("/opt/kgw") else None
R["opt_kgw_python"] = sorted(os.listdir("/opt/kgw/python")) if R["opt_kgw"] else None
R["passwd_users"] = [l.split(":")[0] for l in open("/etc/passwd").read().splitlines()]
R["exists"] = {{p: os.path.lexists(p) for p in [
    "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/etc/ssl/private", "/etc/machine-id",
    "/etc/pam.d", "/etc/crontab", "/root/.ssh", "/root/.bash_history", "/root/.pyenv", "/work", "/sys",
    "/var", "/boot", "/srv", "/media", "/lost+found", "/run/kgw", "/run/dbus", "/run/systemd",
    "/var/run/docker.sock", "/dev/vda", "/dev/sda", "/dev/mem", "/dev/kmsg", "/dev/tty", "/dev/console",
    "/dev/vsock", "/dev/kvm", "/dev/fuse", "/dev/net/tun", "/proc/sysrq-trigger"]}}
found_names, found_content = [], []
for top in ("/", ):
    for dp, dns, fns in os.walk(top):
        if dp == "/":
            dns[:] = [d for d in dns if d not in ("proc", "usr")]
        for n in dns + fns:
            if M in n:
                found_names.append(os.path.join(dp, n))
        for n in fns:
            p = os.path.join(dp, n)
            try:
                if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < 4 << 20:
                    if SECRET in open(p, "rb").read():
                        found_content.append(p)
            except OSError:
                pass
R["found_names"], R["found_content"] = found_names, found_content
""", timeout=60)
    finally:
        for m in markers:
            os.unlink(m)
    assert sorted(set(r["root"]) - {"opt"}) == sorted(["bin", "dev", "etc", "home", "lib", "lib64",
                                                       "mnt", "proc", "root", "run", "sbin", "tmp",
                                                       "usr"]), r["root"]
    allowed_etc = {"ld.so.cache", "python3", "python3.11", "ssl", "fonts", "matplotlibrc",
                   "alternatives", "mime.types", "nsswitch.conf", "host.conf", "gai.conf",
                   "protocols", "services", "debian_version", "os-release", "localtime", "passwd",
                   "group", "hosts", "hostname", "resolv.conf"}
    assert set(r["etc"]) <= allowed_etc, set(r["etc"]) - allowed_etc
    assert set(r["etc_ssl"]) <= {"certs", "openssl.cnf"}, r["etc_ssl"]
    # /home/user: the workspace again, where E2B's SDKs name it (docs/e2b.md)
    assert r["home"] == ["sandbox", "user"] and r["rootdir"] == [] and r["mnt"] == ["data"], r
    assert r["run"] == ["kernel"], r["run"]
    # /opt is not the host's: only the gateway's python directory (bound read-only), when it
    # has it: kgw_tools, the kernel side of checkpoints (with its keeper and frames), E2B's
    # charts and dataframes, and the egress CA bundle for kernels with secrets
    assert r["opt"] in (None, ["kgw"]) and r["opt_kgw"] in (None, ["python"]), r
    assert r["opt_kgw_python"] is None or \
        set(r["opt_kgw_python"]) <= {"kgw_tools.py", "kgw_ckpt.py", "kgw_keeper.py",
                                     "kgw_frame.py", "kgw_e2b.py", "kgw-ca-bundle.pem"}, \
        r["opt_kgw_python"]
    assert r["passwd_users"] == ["root", "sandbox", "nobody"], r["passwd_users"]
    leaked = [p for p, there in r["exists"].items() if there]
    assert not leaked, f"host paths visible in the sandbox: {leaked}"
    assert not r["found_names"], r["found_names"]
    assert not r["found_content"], r["found_content"]


def test_init_proc_entries(gw, ka):
    """pid 1 shows nothing of the host; entries gated by ptrace access may also be closed
    (EACCES) once init is non-dumpable, which is as safe."""
    r = kcall(gw, ka, """
import os, errno
def rd(p):
    try:
        return open(p, "rb").read().decode("latin-1")
    except OSError as e:
        return "E" + errno.errorcode[e.errno]
def link(p):
    try:
        return os.readlink(p)
    except OSError as e:
        return "E" + errno.errorcode[e.errno]
R["environ"], R["cmdline"] = rd("/proc/1/environ"), rd("/proc/1/cmdline")
R["exe"], R["cwd"], R["root"] = link("/proc/1/exe"), link("/proc/1/cwd"), link("/proc/1/root")
R["status"] = dict(l.split(":", 1) for l in rd("/proc/1/status").splitlines())
try:
    R["fds"] = {fd: link("/proc/1/fd/" + fd) for fd in os.listdir("/proc/1/fd")}
except OSError as e:
    R["fds"] = "E" + errno.errorcode[e.errno]
""")
    assert r["environ"] in ("", "EEACCES"), r["environ"]
    assert r["cmdline"] == "init\0", r["cmdline"]
    assert r["exe"].startswith("/memfd:") or r["exe"] == "EEACCES", r["exe"]  # no host path
    st = {k: v.split() for k, v in r["status"].items()}
    assert st["Uid"] == ["1000"] * 4 and int(st["CapEff"][0], 16) == 0, st
    assert r["root"] in ("/", "EEACCES") and r["cwd"] in ("/", "EEACCES"), r
    if isinstance(r["fds"], dict):      # init holds nothing but /dev/null
        assert set(r["fds"].values()) <= {"/dev/null", "EEACCES"}, r["fds"]
    else:
        assert r["fds"] == "EEACCES", r["fds"]


def test_init_memory_not_accessible(gw, ka):
    """ptrace and process_vm_* are denied; /proc/1/mem gives the same power over pid 1 and must
    be closed too (init should be non-dumpable)."""
    r = kcall(gw, ka, """
import errno
R["read"] = R["write"] = None
try:
    with open("/proc/1/mem", "rb") as f:
        start = int(open("/proc/1/maps").readline().split("-")[0], 16)
        f.seek(start)
        R["read"] = "read %r" % f.read(4)
except OSError as e:
    R["read"] = errno.errorcode[e.errno]
try:
    open("/proc/1/mem", "r+b").close()      # opened only: nothing is written
    R["write"] = "opened for writing"
except OSError as e:
    R["write"] = errno.errorcode[e.errno]
""")
    assert r["read"] in ("EACCES", "EPERM"), f"kernel reads init's memory: {r['read']}"
    assert r["write"] in ("EACCES", "EPERM"), f"kernel can write init's memory: {r['write']}"


def parse_mountinfo(text):
    mounts = []
    for line in text.strip().splitlines():
        left, right = line.split(" - ", 1)
        f = left.split()
        fstype, source, superopts = (right.split() + ["", "", ""])[:3]
        mounts.append({"root": f[3], "point": f[4], "opts": f[5], "fstype": fstype,
                       "source": source, "superopts": superopts, "line": line})
    return mounts


def test_mountinfo_shows_no_host_paths(gw, ka, kb):
    r = kcall(gw, ka, """
R["mi"] = open("/proc/self/mountinfo").read()
try:
    R["mi1"] = open("/proc/1/mountinfo").read()
except PermissionError:
    R["mi1"] = None
R["key"] = __import__("json").load(open("/run/kernel/connection.json"))["key"]
""")
    mounts = parse_mountinfo(r["mi"])
    etc_ok = {"/etc/" + n for n in ("ld.so.cache", "python3", "python3.11", "ssl/certs",
                                     "ssl/openssl.cnf", "fonts", "matplotlibrc", "alternatives",
                                     "mime.types", "nsswitch.conf", "host.conf", "gai.conf",
                                     "protocols", "services", "debian_version", "os-release")}
    allowed = {"/", "/usr", "/proc", "/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus",
               "/proc/fs", "/dev", "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
               "/dev/urandom", "/dev/shm", "/dev/pts", "/tmp", "/home/sandbox", "/mnt/data",
               "/home/user", "/run/kernel", "/opt/kgw/python"} | etc_ok
    points = [m["point"] for m in mounts]
    assert set(points) <= allowed, f"unexpected mounts: {set(points) - allowed}"
    for p in ("/", "/usr", "/proc", "/dev", "/tmp", "/home/sandbox", "/mnt/data", "/home/user",
              "/run/kernel"):
        assert p in points, p
    runtime = [m for m in mounts if m["point"] == "/run/kernel"][0]
    print(f"/run/kernel mount: root={runtime['root']!r} fstype={runtime['fstype']!r} "
          f"source={runtime['source']!r} superopts={runtime['superopts']!r}")
    forbidden = ["/work", "/root", "/tmp/kgw", "/run/kgw", "gw-", "/var/lib", "/home/",
                 gw.token, ENV_KEY, r["key"], kb, ka]
    for m in mounts:
        for field in ("root", "source", "superopts"):
            for bad in forbidden:
                assert bad not in m[field], f"{field} of {m['point']} shows {bad!r}: {m['line']}"
        if m["point"] not in ("/home/sandbox", "/home/user"):
            assert "/home/" not in m["point"], m["line"]
    # read-only where it must be
    by_point = {m["point"]: m for m in mounts}
    # /home/user (where E2B's SDKs name the workspace) is the workspace's mount again
    ws, home = by_point["/mnt/data"], by_point["/home/user"]
    assert (home["root"], home["source"], home["fstype"]) == \
        (ws["root"], ws["source"], ws["fstype"]), (home["line"], ws["line"])
    for p in ["/", "/usr", "/proc/sys"] + sorted(etc_ok & set(points)):
        assert "ro" in by_point[p]["opts"].split(","), by_point[p]["line"]
    if "/opt/kgw/python" in by_point:  # kgw_tools, when the gateway found it
        opts = by_point["/opt/kgw/python"]["opts"].split(",")
        assert {"ro", "nosuid", "nodev", "noexec"} <= set(opts), by_point["/opt/kgw/python"]["line"]
    for p in ("/", "/usr", "/tmp", "/home/sandbox", "/mnt/data", "/home/user", "/dev/shm",
              "/run/kernel", "/proc"):
        assert "nosuid" in by_point[p]["opts"].split(","), by_point[p]["line"]
    assert r["mi1"] in (None, r["mi"]), "init and the kernel are in different mount namespaces"


def test_other_kernel_invisible(gw, ka, kb, a_state):
    """Kernel B finds neither A's files nor A's key nor A's processes anywhere it can look."""
    M, C, KEY = a_state["marker"], a_state["content"], a_state["key"]
    r = kcall(gw, kb, f"""
import os, json
M = {M!r}
NEEDLES = [{C[::-1]!r}[::-1].encode(), {KEY[::-1]!r}[::-1].encode()]
R["own_key_differs"] = json.load(open("/run/kernel/connection.json"))["key"] != NEEDLES[1].decode()
R["run_kernel"] = sorted(os.listdir("/run/kernel"))
names, hits, scanned = [], [], 0
def scan(p):
    global scanned
    try:
        with open(p, "rb") as f:
            data = f.read(4 << 20)
        scanned += 1
        for n in NEEDLES:
            if n in data:
                hits.append(p)
    except OSError:
        pass
for dp, dns, fns in os.walk("/"):
    if dp == "/":
        dns[:] = [d for d in dns if d not in ("proc", "usr")]
    for n in dns + fns:
        if M in n:
            names.append(os.path.join(dp, n))
    for n in fns:
        p = os.path.join(dp, n)
        if os.path.isfile(p) and not os.path.islink(p) and not p.startswith("/home/sandbox/.ipython"):
            scan(p)
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
for p in pids:
    for f in ("cmdline", "environ"):
        scan(f"/proc/{{p}}/{{f}}")
        try:
            if M.encode() in open(f"/proc/{{p}}/{{f}}", "rb").read():
                names.append(f"/proc/{{p}}/{{f}}")
        except OSError:
            pass
R["names"], R["hits"], R["scanned"], R["pids"] = names, hits, scanned, pids
""", timeout=60)
    assert r["own_key_differs"]
    assert set(r["run_kernel"]) <= {"connection.json", "callback", "k-1", "k-2", "k-3", "k-4",
                                    "k-5"}, \
        r["run_kernel"]
    assert r["scanned"] > 20, r["scanned"]                  # the scan did look at files
    assert not r["names"], f"B sees A's files or processes: {r['names']}"
    assert not r["hits"], f"B can read A's data or key in: {r['hits']}"


def test_link_tricks_gain_nothing(gw, ka):
    r = kcall(gw, ka, r"""
import os, errno, shutil
def listing(p):
    try:
        return sorted(os.listdir(p))
    except OSError as e:
        return "E" + errno.errorcode[e.errno]     # EACCES: pid 1 is closed to us, as safe
R["root_listing"] = sorted(os.listdir("/"))
d = "/mnt/data/kgw-links"
shutil.rmtree(d, ignore_errors=True)
os.mkdir(d)
os.symlink("/proc/1/root", d + "/init-root")
os.symlink("/proc/self/root/../../../..", d + "/up")
os.symlink("/proc/2/root/../..", d + "/kernel-root")
R["via_init_root"] = listing(d + "/init-root")
R["via_up"] = listing(d + "/up")
R["via_kernel_root"] = listing(d + "/kernel-root")
R["dotdot"] = listing("/proc/1/root/../../..")
R["same_passwd"] = os.path.samefile(d + "/up/etc/passwd", "/etc/passwd")
R["shadow"] = [os.path.lexists(p + "/etc/shadow") for p in (d + "/up", d + "/kernel-root")]
R["links"] = {}
for src, dst in [("/usr/bin/python3", d + "/py"), ("/etc/passwd", "/tmp/kgw-pw"),
                 ("/run/kernel/connection.json", d + "/conn"), ("/etc/ld.so.cache", "/dev/shm/x")]:
    try:
        os.link(src, dst)
        R["links"][src] = "SUCCEEDED"
        os.unlink(dst)
    except OSError as e:
        R["links"][src] = errno.errorcode[e.errno]
# a hard link through /proc/self/fd (linkat AT_SYMLINK_FOLLOW) to a file opened elsewhere
fd = os.open("/etc/hosts", os.O_RDONLY)
try:
    os.link(f"/proc/self/fd/{fd}", d + "/hosts", follow_symlinks=True)
    R["links"]["/proc/self/fd -> /etc/hosts"] = "SUCCEEDED"
except OSError as e:
    R["links"]["/proc/self/fd -> /etc/hosts"] = errno.errorcode[e.errno]
os.close(fd)
shutil.rmtree(d, ignore_errors=True)
""")
    assert r["via_up"] == r["via_kernel_root"] == r["root_listing"], r
    for k in ("via_init_root", "dotdot"):
        assert r[k] in (r["root_listing"], "EEACCES"), (k, r[k])
    assert r["same_passwd"] and r["shadow"] == [False, False], r
    bad = {k: v for k, v in r["links"].items() if v not in ("EXDEV", "EPERM", "EACCES", "ENOENT")}
    assert not bad, f"hard links across the sandbox's mounts: {bad}"


def test_device_nodes(gw, ka):
    # a pseudo-terminal of the host's: the sandbox's /dev/pts (if any) must not show it
    host_master, host_slave = os.openpty()
    host_pty = os.path.basename(os.ttyname(host_slave))
    host_pts_dev = os.stat("/dev/pts").st_dev
    try:
        r = kcall(gw, ka, r"""
import os, stat, errno, fcntl, termios
R["dev"] = sorted(os.listdir("/dev"))
R["nodes"], R["links"] = {}, {}
for n in R["dev"]:
    st = os.lstat("/dev/" + n)
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        R["nodes"][n] = ["c" if stat.S_ISCHR(st.st_mode) else "b", os.major(st.st_rdev),
                         os.minor(st.st_rdev)]
    elif stat.S_ISLNK(st.st_mode):
        R["links"][n] = os.readlink("/dev/" + n)
R["pts"] = sorted(os.listdir("/dev/pts")) if os.path.isdir("/dev/pts") else None
R["pts_dev"] = os.stat("/dev/pts").st_dev if os.path.isdir("/dev/pts") else None
R["mknod"] = {}
for name, path, mode, dev in [
        ("null in /tmp", "/tmp/kgw-null", stat.S_IFCHR | 0o666, os.makedev(1, 3)),
        ("mem in /mnt/data", "/mnt/data/kgw-mem", stat.S_IFCHR | 0o666, os.makedev(1, 1)),
        ("disk in /tmp", "/tmp/kgw-disk", stat.S_IFBLK | 0o666, os.makedev(8, 0)),
        ("kmsg in /dev/shm", "/dev/shm/kgw-kmsg", stat.S_IFCHR | 0o666, os.makedev(1, 11)),
        ("host ptmx in /tmp", "/tmp/kgw-ptmx", stat.S_IFCHR | 0o666, os.makedev(5, 2)),
        ("null in /dev", "/dev/kgw-null", stat.S_IFCHR | 0o666, os.makedev(1, 3))]:
    try:
        os.mknod(path, mode, dev)
        R["mknod"][name] = "SUCCEEDED"
        os.unlink(path)
    except OSError as e:
        R["mknod"][name] = errno.errorcode[e.errno]
os.mkfifo("/tmp/kgw-fifo")          # control: the call itself works for a FIFO
R["fifo_ok"] = stat.S_ISFIFO(os.stat("/tmp/kgw-fifo").st_mode)
os.unlink("/tmp/kgw-fifo")
R["pty"] = None
if R["pts"] is not None:            # its own pseudo-terminals work; faking input is refused
    m, sl = os.openpty()
    R["pty"] = os.ttyname(sl)
    try:
        fcntl.ioctl(sl, termios.TIOCSTI, b"x")
        R["tiocsti"] = "INJECTED"
    except OSError as e:
        R["tiocsti"] = errno.errorcode[e.errno]
    os.close(m); os.close(sl)
""")
    finally:
        os.close(host_master)
        os.close(host_slave)
    base = ["null", "zero", "full", "random", "urandom", "shm", "fd", "stdin", "stdout", "stderr"]
    assert r["dev"] in (sorted(base), sorted(base + ["pts", "ptmx"])), r["dev"]
    assert r["nodes"] == {"null": ["c", 1, 3], "zero": ["c", 1, 5], "full": ["c", 1, 7],
                          "random": ["c", 1, 8], "urandom": ["c", 1, 9]}, r["nodes"]
    assert r["fifo_ok"]
    bad = {k: v for k, v in r["mknod"].items() if v not in ("EPERM", "EACCES", "EROFS")}
    assert not bad, f"device nodes could be created: {bad}"
    if r["pts"] is not None:        # a devpts instance of its own, not the host's
        assert r["links"].get("ptmx") == "pts/ptmx", r["links"]
        assert r["pts_dev"] != host_pts_dev, "the sandbox shares the host's devpts instance"
        assert host_pty not in r["pts"], (host_pty, r["pts"])
        assert r["pty"].startswith("/dev/pts/"), r["pty"]
        assert r["tiocsti"] == "EPERM", r["tiocsti"]


# ------------------------------------------------------------------ 3. network

class HostListeners:
    """TCP and UDP on all host addresses, a unix socket in the host's /tmp and an abstract unix
    socket; records every connection that arrives."""

    def __init__(self):
        self.hits = []
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("0.0.0.0", 0))
        self.tcp.listen(16)
        self.port = self.tcp.getsockname()[1]
        self.path = os.path.join(tempfile.gettempdir(), f"kgw-escape-{secrets.token_hex(6)}.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.path)
        self.unix.listen(16)
        self.abstract_name = f"kgw-escape-{secrets.token_hex(8)}"
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen(16)
        self.stop = False
        self.threads = [threading.Thread(target=self._accept, args=(s, n), daemon=True)
                        for s, n in ((self.tcp, "tcp"), (self.unix, "unix"),
                                     (self.abstract, "abstract"))]
        for t in self.threads:
            t.start()

    def _accept(self, s, name):
        s.settimeout(0.2)
        while not self.stop:
            try:
                c, addr = s.accept()
                self.hits.append((name, addr))
                c.close()
            except (socket.timeout, OSError):
                continue

    def close(self):
        self.stop = True
        for t in self.threads:
            t.join(2)
        for s in (self.tcp, self.unix, self.abstract):
            s.close()
        os.unlink(self.path)


@pytest.fixture(scope="module")
def listeners():
    h = HostListeners()
    yield h
    h.close()


def host_addresses():
    """The host's own non-loopback IPv4 addresses and its default gateway (read-only)."""
    addrs = set()
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                             timeout=5).stdout
        addrs |= set(re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out))
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for line in open("/proc/net/route").read().splitlines()[1:]:
            f = line.split()
            if f[1] == "00000000" and f[2] != "00000000":
                addrs.add(socket.inet_ntoa(bytes.fromhex(f[2])[::-1]))
    except OSError:
        pass
    addrs.discard("127.0.0.1")
    return sorted(addrs)


def test_no_network_beyond_loopback(gw, ka, listeners):
    before = len(listeners.hits)
    hosts = host_addresses()
    targets = [("1.1.1.1", 80), ("8.8.8.8", 53), ("169.254.169.254", 80),
               ("2606:4700:4700::1111", 80), ("127.0.0.1", gw.port), ("::1", gw.port),
               ("127.0.0.1", listeners.port)] + [(h, listeners.port) for h in hosts] + \
              [(h, gw.port) for h in hosts]
    r = kcall(gw, ka, f"""
import socket, errno, time
R["tcp"], R["udp"] = {{}}, {{}}
for host, port in {targets!r}:
    t0 = time.time()
    try:
        socket.create_connection((host, port), timeout=3).close()
        R["tcp"][f"{{host}}:{{port}}"] = "CONNECTED"
    except OSError as e:
        R["tcp"][f"{{host}}:{{port}}"] = errno.errorcode.get(e.errno, str(e))
for host in ("1.1.1.1", "8.8.8.8", "169.254.169.254"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", (host, 53))
        R["udp"][host] = "SENT"
    except OSError as e:
        R["udp"][host] = errno.errorcode.get(e.errno, str(e))
    s.close()
R["dns"] = {{}}
for name in ("example.com", "pypi.org", "metadata.google.internal"):
    try:
        R["dns"][name] = socket.getaddrinfo(name, 80)[0][4][0]
    except socket.gaierror as e:
        R["dns"][name] = "gaierror %s" % e.errno
R["localhost"] = socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4][0]
R["resolv"] = open("/etc/resolv.conf").read()
""", timeout=90)
    loopback = {f"127.0.0.1:{gw.port}", f"::1:{gw.port}", f"127.0.0.1:{listeners.port}"}
    for dest, res in r["tcp"].items():
        if dest in loopback:
            assert res == "ECONNREFUSED", (dest, res)       # its own, empty loopback
        else:
            assert res in ("ENETUNREACH", "EHOSTUNREACH"), (dest, res)   # no route at all
    assert all(v in ("ENETUNREACH", "EHOSTUNREACH") for v in r["udp"].values()), r["udp"]
    assert all(str(v).startswith("gaierror") for v in r["dns"].values()), r["dns"]
    assert r["localhost"] == "127.0.0.1" and r["resolv"] == ""
    assert listeners.hits[before:] == [], f"the host received connections: {listeners.hits}"


def test_host_unix_sockets_unreachable(gw, ka, listeners):
    host_candidates = ["/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket",
                       "/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
                       "/run/systemd/private", "/run/systemd/journal/socket", "/dev/log",
                       "/run/user/0/bus", listeners.path]
    before = len(listeners.hits)
    on_host = [p for p in host_candidates if os.path.exists(p)]
    assert listeners.path in on_host
    r = kcall(gw, ka, f"""
import socket, errno, os
R["paths"] = {{}}
for p in {host_candidates!r}:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p)
        R["paths"][p] = "CONNECTED"
    except OSError as e:
        R["paths"][p] = errno.errorcode[e.errno]
    s.close()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\\0" + {listeners.abstract_name!r})
    R["abstract"] = "CONNECTED"
except OSError as e:
    R["abstract"] = errno.errorcode[e.errno]
s.close()
R["proc_net_unix_has_host_name"] = {listeners.abstract_name!r} in open("/proc/net/unix").read()
# control: an abstract socket of its own works
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("\\0kgw-own-" + str(os.getpid())); srv.listen(1)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect("\\0kgw-own-" + str(os.getpid()))
R["own_abstract_ok"] = True
c.close(); srv.close()
""")
    print("host sockets tried:", on_host)
    assert all(v == "ENOENT" for v in r["paths"].values()), r["paths"]
    assert r["abstract"] == "ECONNREFUSED", r["abstract"]
    assert not r["proc_net_unix_has_host_name"]
    assert r["own_abstract_ok"]
    assert listeners.hits[before:] == [], listeners.hits


def test_raw_packet_and_exotic_sockets(gw, ka):
    r = kcall(gw, ka, r"""
import socket, errno, ctypes
R["socket"], R["socketpair"], R["ok"] = {}, {}, {}
def attempt(fam, typ, proto):
    try:
        socket.socket(fam, typ, proto).close()
        return "CREATED"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
cases = {
    "packet raw": (17, socket.SOCK_RAW, 0x0300), "packet dgram": (17, socket.SOCK_DGRAM, 0x0300),
    "inet raw icmp": (2, socket.SOCK_RAW, 1), "inet raw tcp": (2, socket.SOCK_RAW, 6),
    "inet6 raw icmpv6": (10, socket.SOCK_RAW, 58), "inet ping": (2, socket.SOCK_DGRAM, 1),
    "inet6 ping": (10, socket.SOCK_DGRAM, 58),
    "netlink sock_diag": (16, socket.SOCK_RAW, 4), "netlink xfrm": (16, socket.SOCK_RAW, 6),
    "netlink audit": (16, socket.SOCK_RAW, 9), "netlink netfilter": (16, socket.SOCK_RAW, 12),
    "netlink uevent": (16, socket.SOCK_RAW, 15), "netlink generic": (16, socket.SOCK_RAW, 16),
    "netlink selinux": (16, socket.SOCK_RAW, 7), "vsock stream": (40, socket.SOCK_STREAM, 0),
    "vsock dgram": (40, socket.SOCK_DGRAM, 0), "alg": (38, socket.SOCK_SEQPACKET, 0),
    "key": (15, socket.SOCK_RAW, 2), "bluetooth": (31, socket.SOCK_RAW, 0),
    "can": (29, socket.SOCK_RAW, 1), "xdp": (44, socket.SOCK_RAW, 0), "tipc": (30, socket.SOCK_RDM, 0),
    "rds": (21, socket.SOCK_SEQPACKET, 0), "llc": (26, socket.SOCK_DGRAM, 0),
    "qipcrtr": (42, socket.SOCK_DGRAM, 0), "smc": (43, socket.SOCK_STREAM, 0),
    "mctp": (45, socket.SOCK_DGRAM, 0), "appletalk": (5, socket.SOCK_DGRAM, 0),
    "ax25": (3, socket.SOCK_SEQPACKET, 0), "x25": (9, socket.SOCK_SEQPACKET, 0),
}
for name, args in cases.items():
    R["socket"][name] = attempt(*args)
for name in ("vsock stream", "packet raw", "netlink audit", "alg", "tipc", "xdp"):
    fam, typ, proto = cases[name]
    try:
        a, b = socket.socketpair(fam, typ, proto)
        a.close(); b.close()
        R["socketpair"][name] = "CREATED"
    except OSError as e:
        R["socketpair"][name] = errno.errorcode.get(e.errno, str(e.errno))
# the family and protocol arguments are ints to the kernel: high bits must not slip past the filter
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def raw_socket(fam, typ, proto):
    r = libc.syscall(ctypes.c_long(41), ctypes.c_long(fam), ctypes.c_long(typ), ctypes.c_long(proto))
    if r >= 0:
        libc.close(ctypes.c_int(r)); return "CREATED"
    return errno.errorcode[ctypes.get_errno()]
R["socket"]["packet with high bits"] = raw_socket((1 << 32) | 17, 3, 0)
R["socket"]["netlink audit with high bits"] = raw_socket(16, 3, (1 << 32) | 9)
R["socket"]["netlink route with high bits"] = raw_socket(16, 3, 1 << 32)
# controls: what a kernel needs keeps working
R["ok"]["unix"] = attempt(1, socket.SOCK_STREAM, 0)
R["ok"]["tcp"] = attempt(2, socket.SOCK_STREAM, 0)
R["ok"]["udp6"] = attempt(10, socket.SOCK_DGRAM, 0)
R["ok"]["netlink route"] = attempt(16, socket.SOCK_RAW, 0)
""")
    bad = {k: v for k, v in r["socket"].items() if v not in ("EPERM", "EACCES")}
    assert not bad, f"socket families or types that should be refused: {bad}"
    bad = {k: v for k, v in r["socketpair"].items() if v == "CREATED"}
    assert not bad, f"socketpair created refused families: {bad}"
    assert set(r["ok"].values()) == {"CREATED"}, r["ok"]


def test_only_loopback_interface(gw, ka):
    r = kcall(gw, ka, """
import socket
R["ifs"] = socket.if_nameindex()
R["dev"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
R["routes"] = open("/proc/net/route").read().splitlines()[1:]
srv = socket.create_server(("127.0.0.1", 0))
c = socket.create_connection(srv.getsockname(), timeout=3)   # lo is up
R["lo_up"] = True
c.close(); srv.close()
""")
    assert r["ifs"] == [[1, "lo"]], r["ifs"]
    assert r["dev"] == ["lo"], r["dev"]
    assert r["routes"] == [], r["routes"]
    assert r["lo_up"]


# ------------------------------------------------------------------ 4. east-west

def test_cannot_see_or_signal_other_kernel(gw, ka, kb, a_state):
    hp = a_state["host_pid"]
    r = kcall(gw, kb, f"""
import os, errno, ctypes
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
R["pids"] = pids
R["cmdlines"] = {{}}
for p in pids:
    try:
        R["cmdlines"][p] = open(f"/proc/{{p}}/cmdline", "rb").read().decode("latin-1")
    except OSError:
        pass
R["kill0"] = {{}}
for target in ({hp}, {hp} + 1, {hp} - 1):
    if target in pids:
        R["kill0"][target] = "own pid"
        continue
    try:
        os.kill(target, 0)          # signal 0: existence and permission check only
        R["kill0"][target] = "EXISTS"
    except OSError as e:
        R["kill0"][target] = errno.errorcode[e.errno]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
fd = libc.syscall(ctypes.c_long(434), ctypes.c_long({hp}), ctypes.c_long(0))   # pidfd_open
R["pidfd_open"] = "OPENED" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
""")
    assert r["pids"][:2] == [1, 2] and len(r["pids"]) < 16, r["pids"]
    assert r["cmdlines"]["1"] == "init\0"
    assert not any(a_state["marker"] in c for c in r["cmdlines"].values()), r["cmdlines"]
    assert str(hp) not in r["kill0"] or r["kill0"][str(hp)] in ("ESRCH", "own pid"), r["kill0"]
    assert all(v in ("ESRCH", "own pid") for v in r["kill0"].values()), r["kill0"]
    if str(hp) not in map(str, r["pids"]):
        assert r["pidfd_open"] == "ESRCH", r["pidfd_open"]
    assert os.path.exists(f"/proc/{hp}"), "A's process died"


def test_cannot_reach_other_kernels_sockets(gw, ka, kb, a_state):
    a_dir = gw_runtime_dir(gw, ka)
    assert a_dir, "cannot locate kernel A's runtime directory from the host"
    r = kcall(gw, kb, f"""
import socket, errno, os, glob
R["a_dir_exists"] = os.path.lexists({a_dir!r})
R["connect"] = {{}}
for n in range(1, 6):
    for path in ({a_dir!r} + f"/k-{{n}}", f"/run/kgw/k-{{n}}"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            R["connect"][path] = "CONNECTED"
        except OSError as e:
            R["connect"][path] = errno.errorcode[e.errno]
        s.close()
R["sockets_visible"] = sorted(p for p in glob.glob("/run/**", recursive=True) + glob.glob("/tmp/**", recursive=True)
                              if os.path.exists(p) and __import__("stat").S_ISSOCK(os.stat(p).st_mode))
""")
    assert not r["a_dir_exists"]
    assert all(v == "ENOENT" for v in r["connect"].values()), r["connect"]
    assert set(r["sockets_visible"]) <= ({f"/run/kernel/k-{n}" for n in range(1, 6)} |
                                         {"/run/kernel/callback"}), \
        r["sockets_visible"]


def test_gateway_does_not_follow_kernel_symlinks(gw, listeners):
    """The kernel owns its runtime directory; the gateway (root, host filesystem) connects to
    ipc://<that dir>/k-N and reconnects whenever a connection drops. A kernel that replaces
    its sockets with symlinks to a host socket and exits must not make the gateway connect
    there (here: the test's own listener in the host's /tmp)."""
    kid = S.new_kernel(gw)
    before = len(listeners.hits)
    try:
        async def go():
            c = await J.connect(gw, kid)
            msg_id = await S.launch(c, f"""
import os
for n in range(1, 6):
    os.unlink(f"/run/kernel/k-{{n}}")
    os.symlink({listeners.path!r}, f"/run/kernel/k-{{n}}")
os._exit(0)          # the gateway reconnects its sockets while it restarts the kernel
""")
            await S.await_status_or_reply(c, msg_id, "restarting", 20)
            await c.wait_ready(timeout=30)
            await asyncio.sleep(1)
            await c.close()
        run(go(), 60)
    finally:
        gw.delete_kernel(kid)
    hits = [h for h in listeners.hits[before:] if h[0] == "unix"]
    assert len(hits) == 0, (f"the gateway connected {len(hits)} times to a host socket a "
                            f"kernel pointed it at ({listeners.path})")


def test_cannot_sniff_other_kernels_iopub(gw, ka, kb):
    """B subscribes to every unix socket it can find (its own iopub included, as a control)
    while A prints a marker; B must see its own marker and never A's."""
    ma, mb = "kgw-a-" + secrets.token_hex(6), "kgw-b-" + secrets.token_hex(6)
    kexec(gw, kb, r"""
import os, stat, threading, time, zmq
_kgw_sniffed = []
def _kgw_sniff():
    ctx = zmq.Context.instance()
    socks = []
    for dp, dns, fns in os.walk("/"):
        if dp == "/":
            dns[:] = [d for d in dns if d not in ("proc", "usr")]
        for n in fns:
            p = os.path.join(dp, n)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    s = ctx.socket(zmq.SUB); s.setsockopt(zmq.SUBSCRIBE, b""); s.connect("ipc://" + p)
                    socks.append(s)
            except OSError:
                pass
    _kgw_sniffed.append(("sockets", len(socks)))
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    end = time.time() + 6
    while time.time() < end:
        for s, _ in poller.poll(100):
            _kgw_sniffed.append(b"".join(s.recv_multipart()))
    for s in socks:
        s.close(0)
_kgw_t = threading.Thread(target=_kgw_sniff, daemon=True)
_kgw_t.start()
time.sleep(1)
""")
    for _ in range(3):
        kexec(gw, ka, f"print({ma!r})", guard=False)
        kexec(gw, kb, f"print({mb!r})", guard=False)
    r = kcall(gw, kb, """
_kgw_t.join(10)
R["n_sockets"] = [x for x in _kgw_sniffed if isinstance(x, tuple)]
data = b"".join(x for x in _kgw_sniffed if isinstance(x, bytes))
R["saw_a"] = %r[::-1].encode() in data     # reversed: this cell's own execute_input
R["saw_b"] = %r[::-1].encode() in data     # (published while the sniffer runs) must not match
""" % (ma[::-1], mb[::-1]))
    assert r["saw_b"], f"control failed: the sniffer did not even see its own iopub ({r})"
    assert not r["saw_a"], "B captured A's iopub output"


# ------------------------------------------------------------------ 5. information leaks

def test_environment_clean(gw):
    kid = S.new_kernel(gw, env={"KERNEL_USERNAME": "alice", "SECRET_VAR": HOST_SECRET,
                                "KGW_API_KEY": "from-the-request", "PATH": "/evil"})
    try:
        spec = gw.request("GET", "/api/kernelspecs/python3")[1]["spec"]
        r = kcall(gw, kid, """
import os
R["initial"] = open("/proc/self/environ", "rb").read().decode("latin-1")
R["now"] = dict(os.environ)
try:
    R["init"] = open("/proc/1/environ", "rb").read().decode("latin-1")
except PermissionError:
    R["init"] = "EACCES"     # non-dumpable init: closed, as safe
""")
    finally:
        gw.delete_kernel(kid)
    initial = dict(kv.split("=", 1) for kv in r["initial"].split("\0") if kv)
    expected = {"PATH", "LANG", "HOME", "KERNEL_USERNAME"} | set(spec.get("env", {}))
    # kgw_tools (PYTHONPATH is there whenever the gateway found the module)
    expected |= {"PYTHONPATH"} & set(initial)
    # a kernel from the warm pool was started before the request: it gets the request's
    # KERNEL_* variables in os.environ (and so in subprocesses), not in its initial block
    assert {"PATH", "LANG", "HOME"} <= set(initial) <= expected, \
        f"unexpected variables: {set(initial) - expected}"
    assert initial.get("PYTHONPATH", "/opt/kgw/python") == "/opt/kgw/python"
    assert initial["HOME"] == "/home/sandbox" and initial.get("KERNEL_USERNAME", "alice") == "alice"
    assert r["now"]["KERNEL_USERNAME"] == "alice"
    assert initial["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for env in (initial, r["now"]):
        assert not [k for k in env if k.startswith("KGW_")], env
        blob = "\n".join(f"{k}={v}" for k, v in env.items())
        for secret in (gw.token, ENV_KEY, HOST_SECRET, "/root", ".pyenv", ".cargo", "/evil"):
            assert secret not in blob, f"{secret!r} reached the kernel's environment"
    assert r["init"] in ("", "EACCES"), r["init"]


def test_api_key_not_readable(gw, ka):
    """Neither the gateway's API key nor an API key from its environment is in any file the
    kernel can read under /proc/1, /proc/2, /run/kernel, /etc and its writable places."""
    needles = [gw.token, ENV_KEY, HOST_SECRET]
    r = kcall(gw, ka, f"""
import os
NEEDLES = [s[::-1].encode() for s in {[n[::-1] for n in needles]!r}]
SKIP = {{"mem", "pagemap", "kcore", "clear_refs", "kmsg", "attr", "task", "map_files", "ns", "net"}}
hits, scanned = [], 0
def scan(p):
    global scanned
    try:
        with open(p, "rb") as f:
            data = f.read(4 << 20)
    except OSError:
        return
    scanned += 1
    for i, n in enumerate(NEEDLES):
        if n in data:
            hits.append((p, i))
for top in ("/proc/1", "/proc/2"):
    for n in os.listdir(top):
        if n not in SKIP and not os.path.isdir(os.path.join(top, n)):
            scan(os.path.join(top, n))
for n in os.listdir("/proc/self/fd"):       # regular files only: a pipe could block
    try:
        if os.readlink("/proc/self/fd/" + n).startswith("/") and \
                __import__("stat").S_ISREG(os.stat("/proc/self/fd/" + n).st_mode):
            scan("/proc/self/fd/" + n)
    except OSError:
        pass
for top in ("/run/kernel", "/etc", "/tmp", "/home/sandbox", "/mnt/data", "/dev/shm"):
    for dp, dns, fns in os.walk(top):
        for n in fns:
            p = os.path.join(dp, n)
            if not p.startswith("/home/sandbox/.ipython"):   # holds this very cell (reversed)
                scan(p)
R["hits"], R["scanned"] = hits, scanned
""", timeout=60)
    assert r["scanned"] > 40, r["scanned"]
    assert not r["hits"], f"secrets readable by the kernel: {r['hits']}"


def start_gateway_like_a_service():
    """kgw started the way an operator would: generated API key, stdout and stderr appended to a
    world-readable log file (`kgw >>kgw.log 2>&1` under umask 022)."""
    port = conftest.free_port()
    log_path = os.path.join(tempfile.gettempdir(), f"kgw-escape-{secrets.token_hex(6)}.log")
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.chmod(log_path, 0o644)
    penv = dict(os.environ)
    penv.pop("KGW_API_KEY", None)
    argv = [conftest.KGW_BIN, "--ip", "127.0.0.1", "--port", str(port), "--log-level", "info",
            *shlex.split(os.environ.get("KGW_EXTRA_ARGS", ""))]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=penv,
                            start_new_session=True)
    os.close(fd)
    g = conftest.Gateway(proc, port, "", log_path)
    conftest._wait_ready(g)
    key = S.wait_for(lambda: re.search(r"API key \(generated[^)]*\): (\w+)", g.log()), 10,
                     what="the generated API key in the log")
    g.token = key.group(1)
    S.assert_sandboxed_gateway(g)
    return g


def test_gateway_log_and_stderr_not_exposed():
    """A kernel must not reach the gateway's own log: no descriptor of the host's (no host
    path behind any of its fds), nothing readable from it, no way to truncate it."""
    g = start_gateway_like_a_service()
    try:
        kid = S.new_kernel(g)
        before = g.log()
        assert g.token in before
        r = kcall(g, kid, r"""
import os, stat, errno
R["fds"], R["host_paths"], R["read"], R["truncate"] = {}, [], {}, {}
for fd in sorted(int(x) for x in os.listdir("/proc/self/fd")):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        st = os.fstat(fd)
    except OSError:
        continue
    R["fds"][fd] = target
    if not target.startswith("/"):
        continue                    # pipes, sockets, anon inodes
    try:
        visible = os.path.samestat(os.stat(target), st)
    except OSError:
        visible = False
    if visible:
        continue
    R["host_paths"].append(target)
    data = b""
    if stat.S_ISREG(st.st_mode):
        try:
            data = os.pread(fd, 1 << 20, 0)
        except OSError as e:
            pass
        try:                        # reopen through the magic link for reading
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                data += f.read(1 << 20)
        except OSError as e:
            pass
        R["read"][target] = data.decode("latin-1")
        try:
            os.ftruncate(fd, 0)
            R["truncate"][target] = "TRUNCATED"
        except OSError as e:
            R["truncate"][target] = errno.errorcode[e.errno]
""")
        after = g.log()
    finally:
        conftest.stop_gateway(g)
        os.unlink(g.log_path)
    leaked = [t for t, data in r["read"].items() if g.token in data]
    problems = []
    if r["host_paths"]:
        problems.append(f"descriptors on host files: {r['host_paths']}")
    if leaked:
        problems.append(f"the gateway's API key was read from {leaked}")
    if any(v == "TRUNCATED" for v in r["truncate"].values()) or \
            not after.startswith(before[:200]):
        problems.append(f"the gateway's log was truncated: {r['truncate']}")
    assert not problems, "; ".join(problems) + f"\nall fds: {r['fds']}"


# ------------------------------------------------------------------ 6. resource exhaustion

def test_fork_bomb_contained(gateway_factory):
    g = gateway_factory(*LIMITED)
    S.assert_sandboxed_gateway(g)
    k1, k2 = S.new_kernel(g), S.new_kernel(g)
    bomb = r'''
import os, time, json, errno
fails, n, t0 = [], 0, time.time()
while len(fails) < 40 and time.time() - t0 < 8:
    try:
        pid = os.fork()
    except OSError as e:
        fails.append(e.errno)
        time.sleep(0.02)
        continue
    if pid == 0:
        try:                        # every child tries once more, then holds its slot
            if os.fork() == 0:
                time.sleep(3); os._exit(0)
        except OSError:
            pass
        time.sleep(3); os._exit(0)
    n += 1
print(json.dumps({"forked": n, "fails": sorted(set(fails)), "nfails": len(fails)}))
'''
    attack = S.Background(lambda: kcall(g, k1, f"""
import subprocess, sys, json
p = subprocess.run([sys.executable, "-c", {bomb!r}], capture_output=True, timeout=40)
R["rc"], R["err"] = p.returncode, p.stderr.decode()[-1000:]
R["res"] = json.loads(p.stdout) if p.stdout.strip() else None
""", timeout=60))
    attack.start()
    time.sleep(0.5)
    other = S.Background(lambda: kexec(g, k2, "1+1", guard=False, timeout=20))
    other.start()
    lat = S.api_latencies(g, attack, 60)
    r = attack.value(60)
    ex = other.value(30)
    assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "2"
    assert r["res"], r
    assert r["res"]["nfails"] > 0 and r["res"]["fails"] == [errno.EAGAIN], r
    assert r["res"]["forked"] < 64, r
    print("GET /api during the fork bomb:", S.describe(lat))
    assert lat and max(lat) < 0.1, f"GET /api during the fork bomb: {S.describe(lat)}"
    # the attacker's kernel is usable again (it survived, or kgw restarted it)
    async def after():
        c = await J.connect(g, k1)
        await c.wait_ready(timeout=30)
        ex = await c.execute("1+1", timeout=20)
        await c.close()
        return ex
    ex = run(after(), 60)
    assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "2"


def test_memory_bomb_oom_restart(gateway_factory):
    g = gateway_factory(*LIMITED)
    S.assert_sandboxed_gateway(g)
    kid = S.new_kernel(g)

    async def go():
        c = await J.connect(g, kid)
        await S.aexec(c, "kgw_state = 42")
        msg_id = await S.launch(c, "_kgw_hog = []\nwhile True:\n"
                                   "    _kgw_hog.append(b'x' * (8 << 20))")
        restarting = await S.await_status_or_reply(c, msg_id, "restarting", 60)
        await c.wait_ready(timeout=60)
        ex = await c.execute("'kgw_state' in globals(), 1+1", timeout=20)
        await c.close()
        return restarting, ex

    restarting, ex = run(go(), 150)
    assert restarting
    assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "(False, 2)"
    S.wait_for(lambda: re.search(r"out of memory \(\d+ OOM kills?\)", g.log()), 10,
               what="'out of memory' in the gateway log")
    assert g.request("GET", f"/api/kernels/{kid}")[0] == 200


def test_disk_fill_bounded(gateway_factory):
    g = gateway_factory(*LIMITED)
    S.assert_sandboxed_gateway(g)
    kid = S.new_kernel(g)
    r = kcall(g, kid, r"""
import os, errno
chunk = b"\xa5" * (1 << 20)
for d in ("/tmp", "/mnt/data", "/home/sandbox", "/dev/shm", "/run/kernel"):
    p, total, err = d + "/kgw-fill", 0, None
    try:
        with open(p, "wb", buffering=0) as f:
            for _ in range(64):         # at most 64 MiB per place
                total += f.write(chunk)
    except OSError as e:
        err = errno.errorcode[e.errno]
    R[d] = {"bytes": os.path.getsize(p), "err": err}
    os.unlink(p)
""", timeout=60)
    for d in ("/tmp", "/mnt/data", "/home/sandbox", "/dev/shm"):
        assert r[d]["err"] == "ENOSPC", (d, r[d])
        assert 15 * MiB <= r[d]["bytes"] <= 16 * MiB, (d, r[d])
    assert r["/run/kernel"]["err"] == "ENOSPC" and r["/run/kernel"]["bytes"] <= 1 * MiB, r
    ex = kexec(g, kid, "1+1", guard=False)
    assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "2"


def test_cpu_spin_does_not_starve_others(gateway_factory):
    g = gateway_factory("--cpu-limit", "250")
    S.assert_sandboxed_gateway(g)
    k1, k2 = S.new_kernel(g), S.new_kernel(g)
    spin = "import time\nt = time.time()\nwhile time.time() - t < 2.5: pass"
    attack = S.Background(lambda: kcall(g, k1, f"""
import subprocess, sys, time, resource
t0 = time.time()
procs = [subprocess.Popen([sys.executable, "-c", {spin!r}]) for _ in range(2)]
for p in procs:
    p.wait()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
R["cpu"], R["wall"] = ru.ru_utime + ru.ru_stime, time.time() - t0
""", timeout=60))
    attack.start()
    time.sleep(0.7)
    lat = []
    while attack.is_alive() and len(lat) < 10:
        t0 = time.monotonic()
        ex = kexec(g, k2, "1+1", guard=False, timeout=10)
        lat.append(time.monotonic() - t0)
        assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "2"
    r = attack.value(60)
    assert lat, "the spinner finished before the other kernel was tried"
    print("1+1 in the other kernel:", S.describe(lat), "spinners:", r)
    assert max(lat) < 1.0, f"the other kernel answered slowly: {S.describe(lat)}"
    # 2 spinners under a quarter-core quota get a quarter core, not two cores
    assert r["cpu"] / r["wall"] < 0.45, r


def test_output_flood_keeps_gateway_responsive(gateway_factory):
    g = gateway_factory("--output-cap", str(64 * MiB))
    S.assert_sandboxed_gateway(g)
    kid = S.new_kernel(g)

    def flood():
        async def go():
            c = await J.connect(g, kid)
            await S.aexec(c, "pass")                    # the containment check first
            msg_id = await c.request("execute_request", {
                # flushed line by line: a flood of messages, not a few huge ones
                "code": S.wrap("import time\nt = time.time()\nwhile time.time() - t < 2:\n"
                               "    print('x' * 1000, flush=True)"),
                "silent": False, "store_history": False, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True})
            nbytes, reply, idle = 0, None, False
            deadline = time.monotonic() + 60
            # the shell reply and the iopub idle travel on different sockets: either may
            # arrive first
            while time.monotonic() < deadline and not (reply and idle):
                m = await c._recv_frame(deadline - time.monotonic())
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                if m["header"]["msg_type"] == "stream":
                    nbytes += len(m["content"]["text"])
                if m["channel"] == "shell":
                    reply = m
                if S.status_of(m) == "idle":
                    idle = True
            await c.close()
            return nbytes, reply
        return run(go(), 90)

    t = S.Background(flood)
    t.start()
    lat = S.api_latencies(g, t, 60)
    nbytes, reply = t.value(90)
    assert reply and reply["content"]["status"] == "ok", reply
    assert nbytes > 1 * MiB, nbytes
    print("GET /api during the output flood:", S.describe(lat), f"{nbytes} bytes received")
    assert lat and max(lat) < 0.1, f"GET /api during the output flood: {S.describe(lat)}"


def gateway_memory_mib(gw):
    """(peak, current) resident memory of the gateway process in MiB (read-only, host side)."""
    st = open(f"/proc/{gw.proc.pid}/status").read()
    return tuple(int(re.search(rf"{k}:\s+(\d+) kB", st).group(1)) // 1024
                 for k in ("VmHWM", "VmRSS"))


BALLOON = """
k = get_ipython().kernel
big = b"\\xa5" * (128 << 20)
for i in range(4):
    k.session.send(k.iopub_socket, "display_data", {"data": {"text/plain": "x"}, "metadata": {}},
                   parent=k.get_parent("shell"), buffers=[big])
del big
"""


def back_after_restart(g, kid, timeout=60):
    """Waits until the kernel has been restarted and is idle (a request sent while the old
    process is still being stopped would end with the restart's outcome)."""
    deadline = time.monotonic() + timeout
    while g.request("GET", f"/api/kernels/{kid}")[1].get("execution_state") != "idle":
        assert time.monotonic() < deadline, "the kernel did not come back after its restart"
        time.sleep(0.2)


def test_kernel_cannot_balloon_gateway_memory(gateway_factory):
    """The gateway runs outside every kernel's cgroup. A kernel that sends huge iopub messages
    (whatever their signature) must not make it hold more than --max-kernel-message-bytes per
    message: here 4 messages of 128 MiB against a 32 MiB limit. libzmq refuses such a frame from
    its header and drops the connection; the gateway connects again, ends the execution with
    outcome output_limit naming the limit and restarts the kernel, so every request still gets
    its answer (the idle included) and the next cell runs. (Without a bound, the messages a
    kernel can send are limited only by its own --mem-limit, and a few kernels at once can
    exhaust the host through the gateway.)"""
    limit = 32 * MiB
    g = gateway_factory("--mem-limit", str(1024 * MiB), "--output-cap", str(16 * MiB),
                        "--max-kernel-message-bytes", str(limit))
    S.assert_sandboxed_gateway(g)
    kid = S.new_kernel(g)
    kexec(g, kid, "1+1", guard=False)
    _, before = gateway_memory_mib(g)

    async def on_websocket():
        c = await J.connect(g, kid)
        try:
            ex = await S.aexec(c, BALLOON, timeout=120)      # reply and iopub idle, or timeout
            await asyncio.get_running_loop().run_in_executor(None, back_after_restart, g, kid)
            await c.wait_ready(timeout=60)
            after = await c.execute("1+1", timeout=30)
            return ex, after
        finally:
            await c.close()

    ex, after = run(on_websocket(), 240)
    peak, _ = gateway_memory_mib(g)
    print(f"gateway resident memory: {before} MiB before, peak {peak} MiB")
    assert peak - before < limit // MiB, (f"one kernel grew the gateway's memory by "
                                          f"{peak - before} MiB (limit {limit // MiB} MiB)")
    errors = [m["content"] for m in ex.of_type("error")]
    assert [e["ename"] for e in errors] == ["OutputLimit"], S.errors_of(ex)
    assert f"{limit} bytes" in errors[0]["evalue"], errors[0]
    assert "--max-kernel-message-bytes" in errors[0]["evalue"], errors[0]
    # the kernel's own reply may have come before the gateway saw the drop; either way there
    # is one reply, and one idle (the gateway's: the kernel's was lost with the connection)
    assert ex.reply["content"]["status"] in ("ok", "error"), ex.reply["content"]
    assert ex.reply["content"].get("ename") in (None, "OutputLimit"), ex.reply["content"]
    assert [S.status_of(m) for m in ex.of_type("status")].count("idle") == 1, ex.types
    assert after.status == "ok", S.errors_of(after)
    assert after.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "2"

    # the execute API: its end event says the same, and the kernel works after it
    status, doc, _ = g.request("POST", f"/api/kernels/{kid}/execute",
                               body={"code": S.wrap(BALLOON)},
                               headers={"Accept": "application/json"})
    assert status in (200, 201), (status, doc)
    end = [e for e in doc["events"] if e["type"] == "end"]
    assert len(end) == 1 and end[0]["status"] == "output_limit", doc["events"][-3:]
    assert f"{limit} bytes" in end[0]["cause"], end[0]
    peak, _ = gateway_memory_mib(g)
    assert peak - before < limit // MiB, f"peak {peak} MiB, {before} MiB before"
    back_after_restart(g, kid)
    ex = kexec(g, kid, "1+1", guard=False)
    assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "2"


def test_interrupt_ignored_restart_still_works(gateway_factory):
    g = gateway_factory("--shutdown-grace-ms", "500")
    S.assert_sandboxed_gateway(g)
    kid = S.new_kernel(g)

    async def go():
        c = await J.connect(g, kid)
        await S.aexec(c, "kgw_state = 42")             # includes the containment check
        msg_id = await c.request("execute_request", {
            "code": S.wrap("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"),
            "silent": False, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})
        await c.recv(lambda m: m["channel"] == "iopub" and S.status_of(m) == "busy" and
                     m["parent_header"].get("msg_id") == msg_id, 10)
        await asyncio.sleep(0.5)
        assert g.request("POST", f"/api/kernels/{kid}/interrupt")[0] == 204
        with pytest.raises(asyncio.TimeoutError):       # the interrupt is ignored
            await c.reply(msg_id, timeout=2)
        t0 = time.monotonic()
        status, model, _ = await asyncio.get_running_loop().run_in_executor(
            None, lambda: g.request("POST", f"/api/kernels/{kid}/restart"))
        took = time.monotonic() - t0
        await c.wait_ready(timeout=30)
        ex = await c.execute("'kgw_state' in globals(), 1+1", timeout=20)
        await c.close()
        return status, took, ex

    status, took, ex = run(go(), 120)
    assert status == 200
    assert took < 15, f"restart took {took:.1f}s"
    assert ex.of_type("execute_result")[0]["content"]["data"]["text/plain"] == "(False, 2)"


# ------------------------------------------------------------------ 7. kernel attack surface

NOPID = 0x3ffffff0     # no such process anywhere
BAD = 1                # an invalid user pointer
# name: (x86_64 number, arguments that fail harmlessly) ; the comment is what an unprivileged
# process gets without the filter (checked on the development host), "same" when that is EPERM too
DENIED = {
    "ptrace": (101, 16, NOPID, 0, 0),                    # ESRCH
    "process_vm_readv": (310, NOPID, 0, 0, 0, 0, 1),     # EINVAL
    "process_vm_writev": (311, NOPID, 0, 0, 0, 0, 1),    # EINVAL
    "kcmp": (312, NOPID, NOPID, 0, 0, 0),                # ESRCH
    "mount": (165, BAD, BAD, BAD, 0, 0),                 # EFAULT
    "umount2": (166, BAD, 0xffffffff),                   # EINVAL
    "pivot_root": (155, BAD, BAD),                       # same
    "chroot": (161, BAD),                                # EFAULT
    "move_mount": (429, -1, BAD, -1, BAD, 0xffffffff),   # same
    "open_tree": (428, -1, BAD, 0xffffffff),             # EINVAL
    "fsopen": (430, BAD, 0xffffffff),                    # same
    "fsconfig": (431, -1, 0xffff, 0, 0, 0),              # EINVAL
    "fsmount": (432, -1, 0xffffffff, 0),                 # same
    "fspick": (433, -1, BAD, 0xffffffff),                # same
    "mount_setattr": (442, -1, BAD, 0xffffffff, 0, 0),   # EINVAL
    "setns": (308, -1, 0),                               # EBADF
    "unshare": (272, 0x1),                               # EINVAL
    "bpf": (321, 0xffff, 0, 0),                          # EINVAL
    "perf_event_open": (298, BAD, 0, -1, -1, 0),         # EFAULT
    "userfaultfd": (323, 0x3),                           # EINVAL
    "keyctl": (250, 0xffff, 0, 0, 0, 0),                 # EOPNOTSUPP
    "add_key": (248, BAD, BAD, 0, 0, 0),                 # EFAULT
    "request_key": (249, BAD, BAD, 0, 0),                # EFAULT
    "io_uring_setup": (425, 0, BAD),                     # EFAULT
    "io_uring_enter": (426, -1, 0, 0, 0, 0, 0),          # EBADF
    "io_uring_register": (427, -1, 0, 0, 0),             # EINVAL
    "fanotify_init": (300, 0xffffffff, 0),               # same
    "lookup_dcookie": (212, 0, 0, 0),                    # ENOSYS
    "init_module": (175, BAD, 0, BAD),                   # ENOSYS (no modules on the dev host)
    "finit_module": (313, -1, BAD, 0xffffffff),
    "delete_module": (176, BAD, 0),
    "kexec_load": (246, 0, 0, 0, 0xffffffff),
    "kexec_file_load": (320, -1, -1, 0, 0, 0xffffffff),
    "clock_settime": (227, 0, BAD),                      # EFAULT
    "clock_adjtime": (305, 0, BAD),                      # EFAULT
    "settimeofday": (164, BAD, 0),                       # EFAULT
    "adjtimex": (159, BAD),                              # EFAULT
    "open_by_handle_at": (304, -1, BAD, 0),              # EFAULT
    "name_to_handle_at": (303, -1, BAD, BAD, BAD, 0xffffffff),   # EINVAL
    "uselib": (134, BAD),
    "ustat": (136, 0, BAD),                              # EINVAL
    "sysfs": (139, 99, 0, 0),                            # EINVAL
    "_sysctl": (156, BAD),                               # ENOSYS
    "acct": (163, BAD),                                  # same
    "swapon": (167, BAD, 0),                             # same
    "swapoff": (168, BAD),                               # same
    "reboot": (169, 0, 0, 0, 0),                         # same
    "syslog": (103, 99, 0, 0),                           # same
    "quotactl": (179, 0, BAD, 0, 0),                     # EFAULT
    "quotactl_fd": (443, -1, 0, 0, 0),                   # EBADF
    "vhangup": (153,),                                   # same
    "iopl": (172, 4),
    "ioperm": (173, 0, 0, 0),
    "personality": (135, 0xffffffff),                    # 0 (a query)
    "nfsservctl": (180, 0, 0, 0),
    "create_module": (174, 0, 0),
    "get_kernel_syms": (177, 0),
    "query_module": (178, 0, 0, 0, 0, 0),
    "ioctl TIOCSTI": (16, 0, 0x5412, BAD),               # ENOTTY (fd 0 is /dev/null)
    "ioctl TIOCSTI, high bits": (16, 0, (1 << 32) | 0x5412, BAD),   # ENOTTY
    "clone CLONE_NEWNS|CLONE_FS": (56, 0x00020000 | 0x200, 0, 0, 0, 0),   # EINVAL
}
CONTROLS = {   # allowed calls with bad arguments: the errno method itself works
    "close(-1)": ((3, -1), "EBADF"),
    "read(-1)": ((0, -1, 0, 0), "EBADF"),
    "openat(bad pointer)": ((257, -100, BAD, 0), "EFAULT"),
    "mmap(length 0)": ((9, 0, 0, 3, 0x22, -1, 0), "EINVAL"),
    "ioctl(-1, TIOCGWINSZ)": ((16, -1, 0x5413, 0), "EBADF"),
}
SYSCALL_RUNNER = r'''
import ctypes, errno, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
for name, (nr, *args) in json.loads(sys.argv[1]).items():
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r == 0 and nr == 56:
        import os; os._exit(0)          # a child of an unexpectedly allowed clone
    out[name] = errno.errorcode.get(ctypes.get_errno(), "?") if r == -1 else "returned %d" % r
print(json.dumps(out))
'''


def run_in_subprocess_code(script, arg):
    return f"""
import subprocess, sys, json
p = subprocess.run([sys.executable, "-c", {script!r}, {arg!r}], capture_output=True, timeout=30)
R["rc"], R["err"] = p.returncode, p.stderr.decode()[-2000:]
R["out"] = json.loads(p.stdout) if p.stdout.strip() else None
"""


def test_denied_syscalls_return_eperm(gw, ka):
    calls = {n: list(v) for n, v in DENIED.items()}
    calls.update({n: list(v[0]) for n, v in CONTROLS.items()})
    calls["clone3"] = [435, 0, 0]
    r = kcall(gw, ka, run_in_subprocess_code(SYSCALL_RUNNER, json.dumps(calls)))
    assert r["rc"] == 0 and r["out"], r
    out = r["out"]
    for name, (_, expect) in CONTROLS.items():
        assert out[name] == expect, f"control {name}: {out[name]} (the errno method is broken)"
    assert out["clone3"] == "ENOSYS", out["clone3"]
    bad = {n: out[n] for n in DENIED if out[n] != "EPERM"}
    assert not bad, f"not refused with EPERM: {bad}"


NAMESPACE_RUNNER = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
for name, flags in [("unshare NEWUSER", 0x10000000), ("unshare NEWNS", 0x00020000),
                    ("unshare NEWNET", 0x40000000), ("unshare NEWPID", 0x20000000),
                    ("unshare NEWUSER|NEWNS", 0x10020000), ("unshare NEWTIME", 0x80)]:
    r = libc.unshare(ctypes.c_int(flags))
    out[name] = "SUCCEEDED" if r == 0 else errno.errorcode[ctypes.get_errno()]
    if r == 0:
        os._exit(3)                     # never keep going in a new namespace
for name, flags in [("clone NEWUSER", 0x10000000), ("clone NEWNS", 0x00020000),
                    ("clone NEWPID", 0x20000000), ("clone NEWNET", 0x40000000),
                    ("clone NEWIPC", 0x08000000), ("clone NEWUTS", 0x04000000),
                    ("clone NEWCGROUP", 0x02000000)]:
    r = libc.syscall(ctypes.c_long(56), ctypes.c_long(flags | 17), ctypes.c_long(0),
                     ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if r == 0:
        os._exit(0)                     # the child of an unexpectedly allowed clone
    if r > 0:
        os.waitpid(r, 0)
    out[name] = "CREATED pid %d" % r if r > 0 else errno.errorcode[ctypes.get_errno()]
r = libc.syscall(ctypes.c_long(435), ctypes.c_long(0), ctypes.c_long(0))
out["clone3"] = errno.errorcode[ctypes.get_errno()] if r == -1 else "returned %d" % r
pid = os.fork()                         # control: a plain fork still works (glibc falls back)
if pid == 0:
    os._exit(7)
out["fork"] = os.waitpid(pid, 0)[1] >> 8
print(json.dumps(out))
'''


def test_namespace_creation_denied(gw, ka):
    r = kcall(gw, ka, run_in_subprocess_code(NAMESPACE_RUNNER, "") + """
import shutil
R["unshare_cmd"] = None
if shutil.which("unshare"):
    p = subprocess.run(["unshare", "-U", "-r", "id", "-u"], capture_output=True, timeout=20)
    R["unshare_cmd"] = [p.returncode, p.stdout.decode(), p.stderr.decode()[-300:]]
""")
    assert r["rc"] == 0 and r["out"], r
    out = r["out"]
    assert out.pop("fork") == 7 and out.pop("clone3") == "ENOSYS", out
    bad = {k: v for k, v in out.items() if v != "EPERM"}
    assert not bad, f"namespaces could be created: {bad}"
    if r["unshare_cmd"] is not None:
        assert r["unshare_cmd"][0] != 0 and r["unshare_cmd"][1].strip() != "0", r["unshare_cmd"]


FOREIGN_ARCH = {
    "native getpid": r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
print(libc.syscall(ctypes.c_long(39)))
''',
    "x32 getpid": r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
print(libc.syscall(ctypes.c_long(39 | 0x40000000)))
''',
    "i386 int 0x80 getpid": r'''
import ctypes, mmap
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))   # mov eax, 20; int 0x80; ret
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print(fn())
''',
}


def test_foreign_architecture_syscalls_kill(gw, ka):
    r = kcall(gw, ka, f"""
import subprocess, sys, gzip
R["ia32"] = b"CONFIG_IA32_EMULATION=y" in gzip.open("/proc/config.gz").read() \
    if __import__("os").path.exists("/proc/config.gz") else None
for name, code in {FOREIGN_ARCH!r}.items():
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    R[name] = [p.returncode, p.stdout.decode().strip()]
""")
    assert r["native getpid"][0] == 0 and int(r["native getpid"][1]) > 2, r
    assert r["x32 getpid"][0] == -31, f"x32 syscall not killed with SIGSYS: {r['x32 getpid']}"
    if r["ia32"] is False:
        pytest.skip("host kernel without IA32 emulation")
    # the same code outside the sandbox: a host that has IA32 emulation built in but off at
    # boot (ia32_emulation=0) answers int 0x80 with SIGSEGV for everyone
    host = subprocess.run([sys.executable, "-c", FOREIGN_ARCH["i386 int 0x80 getpid"]],
                          capture_output=True, timeout=30)
    if host.returncode != 0:
        pytest.skip(f"int 0x80 does not run on this host outside the sandbox ({host.returncode})")
    assert r["i386 int 0x80 getpid"][0] == -31, r["i386 int 0x80 getpid"]
