"""kgw as installed: where a kgw outside its build tree finds its helpers (meson's libexecdir/kgw
and datadir/kgw/python, or the options that relocate them), the man page generated from the
option table, and the service manager's readiness protocol (sd_notify)."""
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import KGW_BIN, free_port

pytestmark = [pytest.mark.kgw_only, pytest.mark.needs_sandbox]

BUILD = os.path.dirname(os.path.abspath(KGW_BIN))


def installed_dirs():
    """The installed helper directories kgw was configured with, from its --help text."""
    text = subprocess.run([KGW_BIN, "--help"], capture_output=True, text=True, check=True).stdout
    libexec = re.search(r"default: (/\S+)/kgw-sandbox-init", text).group(1)
    python = re.search(r"kgw_tools.py, importable in every kernel \(default: (/\S+),", text)
    return libexec, python.group(1)


def run_until(argv, pred, tmp_path, timeout=60, env=None):
    """Starts argv with --port on a free port, waits until pred(log) or its exit; returns (log,
    exit status, None if it was still running). A port taken meanwhile by another process is
    tried again."""
    log_path = tmp_path / "kgw.log"
    for _ in range(5):
        with open(log_path, "wb") as out:
            proc = subprocess.Popen([*argv, "--port", str(free_port())], stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while not (pred(log_path.read_text(errors="replace")) or proc.poll() is not None or
                       time.monotonic() > deadline):
                time.sleep(0.05)
            rc = proc.poll()
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        log = log_path.read_text(errors="replace")
        if "Address already in use" not in log:
            break
    return log, rc


def test_outside_the_build_tree_helpers_come_from_the_installed_dirs(tmp_path):
    libexec, _ = installed_dirs()
    if os.path.exists(os.path.join(libexec, "kgw-sandbox-init")):
        pytest.skip(f"kgw is installed in {libexec} on this machine")
    exe = tmp_path / "kgw"
    shutil.copy(KGW_BIN, exe)
    log, rc = run_until([str(exe), "--api-key", "k", "--pool", "python3=0"],
                        lambda s: "listening" in s, tmp_path)
    assert rc not in (None, 0), log
    assert f"cannot open {libexec}/kgw-sandbox-init: No such file or directory" in log, log


def test_relocated_helpers_by_option(tmp_path):
    """A copy of kgw away from its build tree runs with every helper given by an option, as an
    install unpacked elsewhere than its prefix does."""
    exe = tmp_path / "bin" / "kgw"
    exe.parent.mkdir()
    shutil.copy(KGW_BIN, exe)
    env = dict(os.environ, KGW_SANDBOX_INIT=os.path.join(BUILD, "kgw-sandbox-init"),
               KGW_PYTHON_PATH=os.path.join(BUILD, "python"))
    env.pop("KGW_API_KEY", None)
    argv = [str(exe), "--api-key", "k", "--pool", "python3=0",
            "--fork-server-exe", os.path.join(BUILD, "kgw-zygote")]
    log, rc = run_until(argv, lambda s: "fork server: ready" in s, tmp_path,
                        env=env)
    assert rc is None and "fork server: ready" in log, log
    assert "cannot open" not in log and "sandbox: enabled" in log, log


def test_man_page_is_the_option_table():
    """kgw.1 (built by kgw --help-man) documents exactly the options --help lists, each with its
    environment variable, and the build's copy is current."""
    help_text = subprocess.run([KGW_BIN, "--help"], capture_output=True, text=True,
                               check=True).stdout
    man = subprocess.run([KGW_BIN, "--help-man"], capture_output=True, text=True,
                         check=True).stdout
    flags = set(re.findall(r"^  --([a-z0-9-]+)", help_text, re.M)) - {"help", "version"}
    man_flags = {m.replace("\\-", "-") for m in
                 re.findall(r"^\\fB\\-\\-((?:[a-z0-9]|\\-)+)\\fR", man, re.M)}
    assert flags and flags == man_flags - {"help", "version"}, flags ^ man_flags
    for f in flags:
        env = "KGW_" + f.upper().replace("-", "_")
        assert f"Environment: \\fB{env}\\fR" in man, env
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "SIGNALS",
                    "ENVIRONMENT", "FILES", "SEE ALSO"):
        assert f"\n.SH {section}\n" in man, section
    assert "help-man" not in help_text
    with open(os.path.join(BUILD, "kgw.1")) as f:
        assert f.read() == man
    if shutil.which("man"):  # what lintian checks: groff has nothing to warn about
        r = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z",
                            os.path.join(BUILD, "kgw.1")], capture_output=True, text=True,
                           env=dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80"))
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_sd_notify_ready_and_stopping(tmp_path):
    """As a systemd Type=notify service: READY=1 once kgw listens (its pool filling), STOPPING=1
    at SIGTERM. A kgw built without libsystemd sends nothing (the unit then says Type=exec)."""
    import signal
    import socket
    linked = "libsystemd" in subprocess.run(["ldd", KGW_BIN], capture_output=True,
                                            text=True).stdout
    # CI installs libsystemd-dev: there, a build without it is a regression, not a variant
    assert linked or not os.environ.get("KGW_REQUIRE_SYSTEMD"), "kgw is not linked with libsystemd"
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30 if linked else 3)
    log_path = tmp_path / "kgw.log"
    env = dict(os.environ, NOTIFY_SOCKET=path)
    env.pop("KGW_API_KEY", None)
    for _ in range(5):  # a port taken meanwhile by another process is tried again
        port = free_port()
        with open(log_path, "wb") as out:
            proc = subprocess.Popen([KGW_BIN, "--port", str(port), "--api-key", "k"],
                                    stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        while proc.poll() is None and "listening on" not in log_path.read_text(errors="replace"):
            time.sleep(0.05)
        if "Address already in use" not in log_path.read_text(errors="replace"):
            break
    try:
        if not linked:
            with pytest.raises(socket.timeout):
                sock.recv(4096)
            return
        ready = sock.recv(4096).decode()
        assert ready.split("\n")[0] == "READY=1", ready
        assert f"STATUS=listening on 127.0.0.1 port {port}" in ready, ready
        log = log_path.read_text(errors="replace")
        assert "listening on" in log and "pool: 2 warm python3 kernels" in log, log
        proc.send_signal(signal.SIGTERM)
        stopping = sock.recv(4096).decode()
        assert stopping.split("\n")[0] == "STOPPING=1", stopping
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
