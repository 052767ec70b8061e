"""examples/kernel_client.py (and execute.py), run as a subprocess against the gateway in both
websocket encodings: output, errors and exit status, PNG display data, stdin, interrupt, clean-up."""
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO

CLIENT = os.path.join(REPO, "examples", "kernel_client.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(params=["legacy", "v1"])
def proto(request):
    return request.param


def kernel_ids(gateway):
    status, kernels, _ = gateway.request("GET", "/api/kernels")
    assert status == 200, kernels
    return {k["id"] for k in kernels}


def run_client(gateway, proto, *args, stdin="", token_in_env=False):
    """Run the example; returns CompletedProcess. Checks that it left no kernel behind
    (unless --keep)."""
    before = kernel_ids(gateway)
    argv = [sys.executable, CLIENT, "--url", gateway.url, "--protocol", proto,
            "--timeout", "60", *args]
    env = {k: v for k, v in os.environ.items() if k != "KGW_API_KEY"}
    if token_in_env:
        env["KGW_API_KEY"] = gateway.token
    else:
        argv[2:2] = ["--token", gateway.token]
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=90, env=env)
    if "--keep" not in args:
        assert kernel_ids(gateway) <= before, "the example left its kernel running"
    return p


def test_print(gateway, proto):
    p = run_client(gateway, proto, "print(6*7)", "'x' * 3", token_in_env=proto == "v1")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "42\n'xxx'\n", p.stdout


@pytest.mark.kgw_only          # jupyter_server ignores "env" and "limits" in POST /api/kernels
def test_env_and_limits(gateway, proto):
    if "--no-sandbox" in os.environ.get("KGW_EXTRA_ARGS", ""):
        pytest.skip("the workspace size limit needs the sandbox")
    p = run_client(gateway, proto, "--env", "KERNEL_GREETING=hi", "--limit", "workspace=8M",
                   "--limit", "memory=256M", "--limit", "pids=64",
                   "import os; print(os.environ['KERNEL_GREETING'])",
                   "s = os.statvfs('/mnt/data'); print(s.f_blocks * s.f_frsize)")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"hi\n{8 << 20}\n", p.stdout
    p = run_client(gateway, proto, "--limit", "memory=1T", "1")      # above the gateway's cap
    assert p.returncode == 2 and "HTTP 400" in p.stderr, p.stderr


def test_error_exit_status(gateway, proto):
    p = run_client(gateway, proto, "1/0", "print('next cell runs')")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "ZeroDivisionError" in p.stderr and "division by zero" in p.stderr, p.stderr
    assert "\x1b[" not in p.stderr                          # colours stripped when not a tty
    assert p.stdout == "next cell runs\n", p.stdout


def test_stop_on_error(gateway, proto):
    p = run_client(gateway, proto, "--stop-on-error", "print(1)", "1/0", "print('skipped')")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stdout == "1\n", p.stdout
    assert "skipping 1 cell(s)" in p.stderr, p.stderr


def test_matplotlib_png_saved(gateway, proto, tmp_path):
    p = run_client(gateway, proto, "--save-dir", str(tmp_path),
                   "import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()")
    assert p.returncode == 0, p.stderr
    pngs = sorted(tmp_path.glob("*.png"))
    assert len(pngs) == 1, (p.stdout, list(tmp_path.iterdir()))
    assert pngs[0].read_bytes()[:8] == PNG_MAGIC
    assert str(pngs[0]) in p.stdout, p.stdout


def test_stdin(gateway, proto):
    p = run_client(gateway, proto, "--allow-stdin",
                   "x = input('name? '); print('hello', x)", "print(input() * 2)",
                   stdin="forty two\nab\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "name? hello forty two\nabab\n", p.stdout


def test_stdin_not_allowed(gateway, proto):
    p = run_client(gateway, proto, "input()")
    assert p.returncode == 1
    assert "StdinNotImplementedError" in p.stderr, p.stderr


def test_interrupt_after(gateway, proto):
    p = run_client(gateway, proto, "--interrupt-after", "0.5", "import time; time.sleep(60)",
                   "print('after')")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "KeyboardInterrupt" in p.stderr, p.stderr
    assert p.stdout == "after\n", p.stdout


def test_keep(gateway, proto):
    p = run_client(gateway, proto, "--keep", "k = 5")
    assert p.returncode == 0, p.stderr
    m = re.search(r"kept kernel ([0-9a-f-]{36})", p.stderr)
    assert m, p.stderr
    assert m.group(1) in kernel_ids(gateway)
    assert gateway.delete_kernel(m.group(1)) == 204


def test_bad_token(gateway):
    p = subprocess.run([sys.executable, CLIENT, "--url", gateway.url, "--token", "wrong", "1"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert re.search(r"HTTP 40[13]", p.stderr), p.stderr     # jupyter_server: 403 (xsrf)


EXECUTE = os.path.join(REPO, "examples", "execute.py")


@pytest.mark.kgw_only          # the execute API is kgw's own
def test_execute_example(gateway, tmp_path):
    """examples/execute.py: one-shot with a file, output and result streamed, the end on
    stderr, exit status 0; an error: its traceback, exit status 1; no kernel left behind."""
    before = kernel_ids(gateway)
    data = tmp_path / "in.txt"
    data.write_text("from a file")
    base = [sys.executable, EXECUTE, "--url", gateway.url, "--token", gateway.token]
    p = subprocess.run([*base, "--file", str(data), "print(open('in.txt').read())",
                        "open('out.txt', 'w').write('x')", "6 * 7"],
                       capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "from a file\n42\n", p.stdout
    assert p.stderr.startswith("[ok;") and "created ['out.txt']" in p.stderr, p.stderr
    p = subprocess.run([*base, "1/0"], capture_output=True, text=True, timeout=90)
    assert p.returncode == 1 and "ZeroDivisionError" in p.stderr, p.stderr
    kid = gateway.start_kernel()["id"]
    try:
        p = subprocess.run([*base, "--kernel", kid, "--exec-timeout", "1",
                            "import time; time.sleep(100)"],
                           capture_output=True, text=True, timeout=90)
        assert p.returncode == 1 and "[timeout:" in p.stderr, p.stderr
    finally:
        gateway.delete_kernel(kid)
    deadline = time.monotonic() + 10
    while kernel_ids(gateway) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kernel_ids(gateway) <= before, "the one-shot kernels were not deleted"
