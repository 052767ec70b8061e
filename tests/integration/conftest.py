"""Shared fixtures: start the real kgw (or, for reference runs, jupyter_server) on a free port.

Environment:
  KGW_BIN        path to the kgw executable (default: <repo>/build/kgw)
  KGW_WRAPPER    command prefix for kgw, e.g. "valgrind --error-exitcode=99 --leak-check=full"
  KGW_EXTRA_ARGS extra kgw arguments for every server, e.g. "--no-sandbox" under valgrind (which
                 cannot run seccomp or namespaces); sandbox tests then skip
  KGW_REFERENCE  set to "jupyter_server" to run the same tests against Debian's jupyter_server
                 (used to check that a test encodes jupyter_server's behaviour, not ours)
"""
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGW_BIN = os.environ.get("KGW_BIN", os.path.join(REPO, "build", "kgw"))
REFERENCE = os.environ.get("KGW_REFERENCE", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(tenant):
    """`kgw keygen --tenant TENANT`: (the key, its key-file line)."""
    p = subprocess.run([KGW_BIN, "keygen", "--tenant", tenant], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 0, p.stderr
    key, line = p.stdout.splitlines()
    return key, line


def key_file(tenants, directory=None):
    """A --key-file with one new key per tenant: (its path, {tenant: key}). The caller removes
    it (or gives a directory that goes away)."""
    lines, keys = [], {}
    for t in tenants:
        keys[t], line = keygen(t)
        lines.append(line)
    with tempfile.NamedTemporaryFile("w", prefix="kgw-keys-", dir=directory, delete=False) as f:
        f.write("\n".join(lines) + "\n")
    return f.name, keys


class Gateway:
    """A running server: base URLs, the API key and helpers for authenticated REST calls."""

    def __init__(self, proc, port, token, log_path):
        self.proc = proc
        self.port = port
        self.token = token
        self.url = f"http://127.0.0.1:{port}"
        self.ws_url = f"ws://127.0.0.1:{port}"
        self.log_path = log_path

    def headers(self, extra=None):
        h = {"Authorization": f"token {self.token}", "Content-Type": "application/json"}
        if extra:
            h.update(extra)
        return h

    def request(self, method, path, body=None, headers=None, auth=True, raw_body=None):
        """Returns (status, parsed JSON or None, response headers)."""
        data = raw_body
        if body is not None:
            data = json.dumps(body).encode()
        h = self.headers(headers) if auth else dict(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                payload = r.read()
                status, hdrs = r.status, r.headers
        except urllib.error.HTTPError as e:
            payload, status, hdrs = e.read(), e.code, e.headers
        parsed = None
        if payload:
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = payload
        return status, parsed, hdrs

    def start_kernel(self, name=None, env=None):
        body = {}
        if name:
            body["name"] = name
        if env:
            body["env"] = env
        status, model, _ = self.request("POST", "/api/kernels", body)
        assert status == 201, (status, model)
        return model

    def delete_kernel(self, kid):
        return self.request("DELETE", f"/api/kernels/{kid}")[0]

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def alive(self):
        return self.proc.poll() is None


def _wait_ready(gw, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not gw.alive():
            raise RuntimeError("server exited early:\n" + gw.log())
        try:
            status, _, _ = gw.request("GET", "/api")
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("server did not become ready:\n" + gw.log())


def start_gateway(extra_args=(), env=None, prefix=()):
    """prefix: a command kgw (and KGW_WRAPPER) runs under, e.g. prlimit."""
    port = free_port()
    token = secrets.token_hex(16)
    log = tempfile.NamedTemporaryFile(prefix="kgw-test-", suffix=".log", delete=False)
    penv = dict(os.environ)
    penv.pop("KGW_API_KEY", None)
    if env:
        penv.update(env)
    if REFERENCE == "jupyter_server":
        argv = ["/usr/bin/python3", "-m", "jupyter_server", "--no-browser",
                f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                f"--ServerApp.token={token}", "--ServerApp.ip=127.0.0.1"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            argv.append("--allow-root")
    else:
        # Test modules share a gateway and many of them present wrong keys on purpose: the
        # failed-login and request-rate limits are off unless a test asks for them.
        argv = [*prefix, *shlex.split(os.environ.get("KGW_WRAPPER", "")), KGW_BIN,
                "--ip", "127.0.0.1",
                "--port", str(port), "--api-key", token, "--log-level", "debug",
                "--auth-fail-limit=0", "--rate-limit=0",
                *shlex.split(os.environ.get("KGW_EXTRA_ARGS", "")), *extra_args]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=penv,
                            start_new_session=True)
    gw = Gateway(proc, port, token, log.name)
    try:
        _wait_ready(gw)
    except Exception:
        stop_gateway(gw)
        raise
    return gw


def stop_gateway(gw):
    if gw.proc.poll() is None:
        # kgw: SIGINT closes and shuts down at once; SIGTERM would first drain, waiting for
        # executions a test left running (test_drain.py)
        gw.proc.send_signal(signal.SIGTERM if REFERENCE else signal.SIGINT)
        try:
            gw.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            gw.proc.kill()
            gw.proc.wait()
    rc = gw.proc.returncode
    if REFERENCE != "jupyter_server" and rc not in (0, -signal.SIGTERM):
        sys.stderr.write(gw.log())
        raise AssertionError(f"kgw exited with {rc}")


def _own_cgroup_dirs():
    """This process's cgroup directories (v1 memory/pids/cpu, and v2)."""
    dirs = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctls, path = line.rstrip("\n").split(":", 2)
                for ctl in ("memory", "pids", "cpu"):
                    if ctl in ctls.split(","):
                        dirs.append(f"/sys/fs/cgroup/{ctl}{path.rstrip('/')}")
                if ctls == "":
                    dirs.append(f"/sys/fs/cgroup{path.rstrip('/')}")
    except OSError:
        pass
    return dirs


def _instance_alive(inst):
    """True while the gateway instance `inst` (gw-XXXXXX) runs: it holds the lock of its runtime
    directory (kernelmgr/kmgr.c), possibly another test run's gateway on this machine."""
    import fcntl
    dirs = [os.path.join(os.environ.get("XDG_RUNTIME_DIR", ""), "kgw"), "/run/kgw",
            f"/tmp/kgw-{os.geteuid()}"]
    for d in dirs:
        try:
            fd = os.open(os.path.join(d, inst, ".lock"), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except OSError:
            return True
        finally:
            os.close(fd)
    return False


@pytest.fixture(scope="session", autouse=True)
def no_cgroups_left_behind():
    """A gateway killed outright leaves its (empty) kernel cgroups under ours; the next gateway
    sweeps them, but after the last test nobody would: remove the empty ones (rmdir only) of
    instances that are gone (a running one, of another test run, keeps its empty cgroups: its
    fork server prepares the next kernel's ahead)."""
    yield
    for base in _own_cgroup_dirs():
        try:
            names = [n for n in os.listdir(base) if n.startswith("kgw-gw-")
                     and not _instance_alive(n[len("kgw-"):].split("-gateway")[0])]
        except OSError:
            continue
        for name in names:
            top = os.path.join(base, name)
            for sub in sorted(os.listdir(top)) if os.path.isdir(top) else []:
                if os.path.isdir(os.path.join(top, sub)):
                    try:
                        os.rmdir(os.path.join(top, sub))
                    except OSError:
                        pass
            try:
                os.rmdir(top)
            except OSError:
                pass


@pytest.fixture(scope="module")
def gateway():
    """One kgw per test module (kernels are cheap to create; the server is shared)."""
    gw = start_gateway()
    yield gw
    stop_gateway(gw)


@pytest.fixture
def gateway_factory():
    """Start extra servers with custom flags; all are stopped at the end of the test."""
    started = []

    def make(*args, env=None, prefix=()):
        gw = start_gateway(args, env=env, prefix=prefix)
        started.append(gw)
        return gw

    yield make
    for gw in started:
        stop_gateway(gw)


@pytest.fixture
def kernel(gateway):
    """A fresh python3 kernel, deleted afterwards."""
    model = gateway.start_kernel()
    yield model
    gateway.delete_kernel(model["id"])


SANDBOX_MODULES = ("test_escape.py", "test_sandbox_work.py", "test_files.py", "test_workspace.py")


def pytest_collection_modifyitems(config, items):
    """Tests marked kgw_only check kgw behaviour that jupyter_server does not have; the sandbox
    suites need kgw's sandbox (not available under --no-sandbox, e.g. with valgrind)."""
    no_sandbox = "--no-sandbox" in os.environ.get("KGW_EXTRA_ARGS", "")
    skip_ref = pytest.mark.skip(reason="kgw-specific behaviour (KGW_REFERENCE=jupyter_server)")
    skip_sbx = pytest.mark.skip(reason="needs kgw's sandbox (KGW_EXTRA_ARGS has --no-sandbox)")
    for item in items:
        if REFERENCE == "jupyter_server" and item.get_closest_marker("kgw_only"):
            item.add_marker(skip_ref)
        if (REFERENCE == "jupyter_server" or no_sandbox) and \
                (os.path.basename(str(item.fspath)) in SANDBOX_MODULES or
                 item.get_closest_marker("needs_sandbox")):
            item.add_marker(skip_sbx)
