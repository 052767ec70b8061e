"""Normal work keeps working inside the sandbox: the scientific stack, inline plots,
subprocesses, multiprocessing, shell escapes, interrupts, restarts and files."""
import asyncio
import base64
import struct
import time

import pytest

import jclient as J
from jclient import run
import sbxutil as S
from sbxutil import kcall, kexec


@pytest.fixture(scope="module")
def gw(gateway):
    """conftest's module gateway, which must run kernels sandboxed for this suite."""
    S.assert_sandboxed_gateway(gateway)
    return gateway


@pytest.fixture(scope="module")
def wk(gw):
    """A kernel shared by the tests that only compute."""
    kid = S.new_kernel(gw)
    yield kid
    gw.delete_kernel(kid)


@pytest.fixture
def fresh(gw, kernel):
    return kernel["id"]


def result_text(ex):
    assert ex.status == "ok", S.errors_of(ex)
    return ex.of_type("execute_result")[0]["content"]["data"]["text/plain"]


def test_runs_in_the_sandbox(gw, wk):
    r = kcall(gw, wk, "import os\nR['cwd'], R['pid'] = os.getcwd(), os.getpid()")
    assert r == {"cwd": "/mnt/data", "pid": 2}


def test_numpy(gw, wk):
    ex = kexec(gw, wk, """
import numpy as np
a = np.arange(1_000_000, dtype=np.float64)
m = np.linalg.inv(np.diag([2.0, 4.0, 8.0]))
rng = np.random.default_rng(0)
x = rng.standard_normal((200, 200))
(float(a.sum()), float(m.trace()), bool(np.allclose(x @ np.linalg.inv(x), np.eye(200), atol=1e-6)))
""")
    assert result_text(ex) == "(499999500000.0, 0.875, True)"


def test_pandas_dataframe(gw, wk):
    r = kcall(gw, wk, """
import pandas as pd
df = pd.DataFrame({"team": ["a", "b", "a", "c", "b", "a"], "score": [1, 2, 3, 4, 5, 6]})
g = df.groupby("team")["score"].agg(["sum", "mean"]).reset_index()
merged = g.merge(pd.DataFrame({"team": ["a", "b"], "name": ["Ann", "Bob"]}), how="left")
df.to_csv("/mnt/data/scores.csv", index=False)
back = pd.read_csv("/mnt/data/scores.csv")
R["g"] = g.round(3).to_dict("list")
R["names"] = merged["name"].fillna("-").tolist()
R["roundtrip"] = bool(back.equals(df))
R["pivot"] = df.pivot_table(index="team", values="score", aggfunc="max")["score"].tolist()
R["dates"] = str(pd.date_range("2024-01-30", periods=3, freq="D")[-1].date())
""")
    assert r == {"g": {"team": ["a", "b", "c"], "sum": [10, 7, 4], "mean": [3.333, 3.5, 4.0]},
                 "names": ["Ann", "Bob", "-"], "roundtrip": True, "pivot": [6, 5, 4],
                 "dates": "2024-02-01"}


def test_kgw_tools_callbacks(gw, wk):
    """kgw_tools is importable in every kernel and reaches the gateway through the kernel's
    private callback socket. A websocket on /api/kernels/{id}/channels takes no callbacks, so
    an allowed call fails with RuntimeError; a name off the allowlist never leaves the gateway;
    the dataframe's CSV is written before the call."""
    r = kcall(gw, wk, """
import os, kgw_tools, pandas as pd
R["file"] = kgw_tools.__file__
R["socket"] = os.path.exists("/run/kernel/callback")
def err(f, *a):
    try:
        f(*a)
    except Exception as e:
        return [type(e).__name__, str(e)]
R["allowed"] = err(kgw_tools.call_function, "display_chart_to_user", ["p"], {"title": "t"})
R["denied"] = err(kgw_tools.call_function, "set_trait", ["kernel_manager_class", "x.Y"])
R["big"] = err(kgw_tools.call_function, "display_chart_to_user", ["x" * (5 << 20)])
R["df"] = err(kgw_tools.display_dataframe_to_user, "My table", pd.DataFrame({"a": [1, 2]}))
R["csv"] = open("/mnt/data/My_table.csv").read()
""")
    assert r["file"] == "/opt/kgw/python/kgw_tools.py" and r["socket"], r
    assert r["allowed"][0] == "RuntimeError" and "client" in r["allowed"][1], r["allowed"]
    assert r["denied"][0] == "PermissionError" and "'set_trait' is not allowed" in r["denied"][1]
    assert r["big"][0] == "ValueError" and "over the gateway's limit" in r["big"][1], r["big"]
    assert r["df"][0] == "RuntimeError", r["df"]
    assert r["csv"] == "a\n1\n2\n", r["csv"]


def test_matplotlib_inline_png(gw, wk):
    ex = kexec(gw, wk, """
%matplotlib inline
import matplotlib, matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot([1, 2, 3], [1, 4, 9], label="squares")
ax.legend()
plt.show()
print(matplotlib.get_backend())
""", timeout=60)
    assert ex.status == "ok", S.errors_of(ex)
    assert "inline" in ex.stdout, ex.stdout
    pngs = [m["content"]["data"]["image/png"] for m in ex.of_type("display_data")
            if "image/png" in m["content"]["data"]]
    assert len(pngs) == 1, ex.types
    png = base64.b64decode(pngs[0])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 100 and height > 50, (width, height)


def test_subprocess(gw, wk):
    r = kcall(gw, wk, """
import subprocess, sys
open("/mnt/data/listed.txt", "w").close()
p = subprocess.run(["ls"], capture_output=True, text=True, timeout=20)
R["ls"] = [p.returncode, p.stdout.split()]
p = subprocess.run(["ls", "/"], capture_output=True, text=True, timeout=20)
R["ls_root"] = p.stdout.split()
p = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, timeout=20)
R["py"] = p.stdout.strip()
p = subprocess.run("echo $HOME; id -un; uname -n", shell=True, capture_output=True, text=True, timeout=20)
R["sh"] = p.stdout.split()
""")
    assert r["ls"][0] == 0 and "listed.txt" in r["ls"][1], r["ls"]
    assert "usr" in r["ls_root"] and "mnt" in r["ls_root"], r["ls_root"]
    assert r["py"] == "42"
    assert r["sh"] == ["/home/sandbox", "sandbox", "sandbox"], r["sh"]


def test_multiprocessing_pool(gw, wk):
    ex = kexec(gw, wk, """
import multiprocessing, os
def square_and_pid(x):
    return x * x, os.getpid()
with multiprocessing.Pool(2) as pool:
    out = pool.map(square_and_pid, range(8))
lock = multiprocessing.Lock()     # a POSIX semaphore in /dev/shm
with lock:
    pass
([v for v, _ in out], len({p for _, p in out} - {os.getpid()}) >= 1)
""", timeout=60)
    assert result_text(ex) == "([0, 1, 4, 9, 16, 25, 36, 49], True)"


def test_shell_escape(gw, wk):
    """`!cmd` (IPython's system(): pexpect, which needs a pseudo-terminal)."""
    ex = kexec(gw, wk, "!echo hi\n!pwd")
    assert ex.status == "ok", S.errors_of(ex)[-1500:]
    assert ex.stdout.split() == ["hi", "/mnt/data"], ex.stdout


def test_shell_capture(gw, wk):
    """`x = !cmd` and %sx (IPython's getoutput(): plain pipes)."""
    ex = kexec(gw, wk, "files = !ls /\nwho = %sx id -un\nprint('usr' in files, who)")
    assert ex.status == "ok", S.errors_of(ex)[-1500:]
    assert ex.stdout.strip() == "True ['sandbox']", ex.stdout


def test_files_in_workspace_tmp_and_home(gw, wk):
    kexec(gw, wk, """
with open("notes.txt", "w") as f:
    f.write("kept between cells")
open("/tmp/scratch.bin", "wb").write(b"\\0" * 4096)
import os
os.makedirs(os.path.expanduser("~/.config/tool"), exist_ok=True)
open(os.path.expanduser("~/.config/tool/settings"), "w").write("x=1")
""")
    r = kcall(gw, wk, """
import os, sqlite3
R["notes"] = open("/mnt/data/notes.txt").read()
R["tmp"] = os.path.getsize("/tmp/scratch.bin")
R["home"] = open("/home/sandbox/.config/tool/settings").read()
db = sqlite3.connect("/mnt/data/t.db")
db.execute("create table t (x)"); db.executemany("insert into t values (?)", [(i,) for i in range(100)])
db.commit()
R["sqlite"] = db.execute("select sum(x) from t").fetchone()[0]
db.close(); os.unlink("/mnt/data/t.db")
R["shm"] = os.statvfs("/dev/shm").f_bavail > 0
""")
    assert r == {"notes": "kept between cells", "tmp": 4096, "home": "x=1", "sqlite": 4950,
                 "shm": True}


def test_symlinks_and_venv_in_workspace(gw, wk):
    r = kcall(gw, wk, """
import os, subprocess, sys, shutil
shutil.rmtree("/mnt/data/venv", ignore_errors=True)
open("/mnt/data/data-v1.csv", "w").write("a,b\\n1,2\\n")
if os.path.lexists("/mnt/data/latest.csv"):
    os.unlink("/mnt/data/latest.csv")
os.symlink("data-v1.csv", "/mnt/data/latest.csv")
R["via_link"] = open("/mnt/data/latest.csv").read()
p = subprocess.run([sys.executable, "-m", "venv", "--without-pip", "/mnt/data/venv"],
                   capture_output=True, text=True, timeout=60)
R["venv"] = [p.returncode, p.stderr[-500:]]
p = subprocess.run(["/mnt/data/venv/bin/python", "-c", "import sys; print(sys.prefix)"],
                   capture_output=True, text=True, timeout=30)
R["venv_python"] = [p.returncode, p.stdout.strip(), p.stderr[-500:]]
shutil.rmtree("/mnt/data/venv")
""", timeout=90)
    assert r["via_link"] == "a,b\n1,2\n", r
    assert r["venv"][0] == 0, r["venv"]
    assert r["venv_python"][:2] == [0, "/mnt/data/venv"], r["venv_python"]


def test_loopback_networking(gw, wk):
    ex = kexec(gw, wk, """
import http.server, threading, urllib.request
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
body = urllib.request.urlopen(f"http://localhost:{srv.server_address[1]}/", timeout=10).read()
srv.shutdown(); srv.server_close()
import ssl
ctx = ssl.create_default_context()        # CA certificates are available
(b"Directory listing" in body, ctx.cert_store_stats()["x509_ca"] > 10)
""", timeout=60)
    assert result_text(ex) == "(True, True)"


def test_interrupt(gw, fresh):
    async def go():
        c = await J.connect(gw, fresh)
        msg_id = await c.request("execute_request", {
            "code": "import time\ntime.sleep(30)", "silent": False, "store_history": True,
            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        await c.recv(lambda m: m["channel"] == "iopub" and S.status_of(m) == "busy" and
                     m["parent_header"].get("msg_id") == msg_id, 10)
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        assert gw.request("POST", f"/api/kernels/{fresh}/interrupt")[0] == 204
        reply = await c.reply(msg_id, timeout=10)
        took = time.monotonic() - t0
        await asyncio.sleep(0.5)    # ipykernel aborts requests queued right after an error
        after = await c.execute("1+1")
        await c.close()
        return reply, took, after

    reply, took, after = run(go(), 60)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
    assert took < 5, took
    assert result_text(after) == "2"


def test_restart_clears_state(gw, fresh):
    async def go():
        c = await J.connect(gw, fresh)
        await c.execute("kept = 123")
        before = await c.execute("kept")
        status, _, _ = await asyncio.get_running_loop().run_in_executor(
            None, lambda: gw.request("POST", f"/api/kernels/{fresh}/restart"))
        await c.wait_ready(timeout=30)
        after = await c.execute("'kept' in globals(), __import__('os').getpid()")
        await c.close()
        return before, status, after

    before, status, after = run(go(), 90)
    assert result_text(before) == "123"
    assert status == 200
    assert result_text(after) == "(False, 2)"
