"""A kernel's life seen from the gateway: many kernels deleted at once all end at their
shutdown_reply (none waits for the grace and its signals), a kernel that fails to start or dies
leaves its last stderr lines in the log and a short excerpt in its cause, a kernel flooding
stderr costs the gateway no memory, and an exec'd kernel's stop does not wait for ipykernel's
ZeroMQ linger. Real sandboxed ipykernels, real REST clients."""
import concurrent.futures as cf
import json
import os
import re
import tempfile
import threading
import time

import pytest

import sbxutil as S

pytestmark = [pytest.mark.kgw_only, pytest.mark.needs_sandbox]

GRACE_MS = 30000  # a kernel that ignored its shutdown_request would hold its DELETE this long


def kernelspecs(root, specs):
    """A JUPYTER_PATH directory with kernelspecs {name: argv}."""
    for name, argv in specs.items():
        d = os.path.join(root, "kernels", name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "kernel.json"), "w") as f:
            json.dump({"argv": argv, "display_name": name, "language": "python"}, f)
    return root


EXEC_SPEC = ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
SECRET = "kgw-s3cr3t-t0ken-4217"
# a kernel that fails to start: it says a secret from its environment, then an import fails
BROKEN_SPEC = ["/usr/bin/python3", "-c",
               "import os, sys; sys.stderr.write('token ' + os.environ.get('KERNEL_TOKEN', '') + "
               "'\\n'); import kgw_no_such_module", "{connection_file}"]
# a kernel that takes its time to start (deleted meanwhile)
SLOW_SPEC = ["/usr/bin/python3", "-c",
             "import runpy, sys, time; time.sleep(120); sys.argv = ['k', '-f', sys.argv[1]]; "
             "runpy.run_module('ipykernel_launcher', run_name='__main__')", "{connection_file}"]


def forced(gw):
    """Kernels the gateway had to signal after their grace (log lines of kernel.c)."""
    return [l for l in gw.log().splitlines() if "after shutdown_request" in l]


def metric(gw, name):
    status, body, _ = gw.request("GET", "/metrics")
    assert status == 200
    text = body.decode() if isinstance(body, bytes) else str(body)
    m = re.search(r"^%s(?:\{[^}]*\})? (\d+)" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else None


@pytest.fixture(scope="module")
def lgw():
    root = tempfile.mkdtemp(prefix="kgw-lifecycle-")
    kernelspecs(root, {"pyexec": EXEC_SPEC, "broken": BROKEN_SPEC, "slow": SLOW_SPEC})
    gw = S.start_sandboxed("--pool", "python3=4", "--max-kernels", "64",
                           "--shutdown-grace-ms", str(GRACE_MS), "--max-header-connections-per-address", "256",
                           "--e2b-templates", "base=,slow=slow", env={"JUPYTER_PATH": root})
    print("gateway log:", gw.log_path)
    yield gw
    S.conftest.stop_gateway(gw)


def test_mass_delete_ends_every_kernel_at_its_reply(lgw):
    """50 kernels -- from the warm pool, from the fork server and exec'd -- deleted at once,
    some in the middle of a restart, some right after their POST returned: every one ends at
    its shutdown_reply, none is signalled after the grace."""
    gw = lgw
    S.wait_for(lambda: (gw.request("GET", "/api/status")[1]["pool"].get("python3") or {})
               .get("ready", 0) >= 4, 120, what="4 pooled kernels")
    before = metric(gw, "kgw_kernel_shutdown_forced_total")
    assert before == 0, before
    specs = ["pyexec" if i % 5 == 0 else None for i in range(40)]
    with cf.ThreadPoolExecutor(8) as ex:
        ids = list(ex.map(lambda s: gw.start_kernel(name=s)["id"], specs))
    assert len(set(ids)) == 40
    log = gw.log()
    assert "taken from the pool" in log
    assert ", forked, " in log or "forked" in log
    assert ", exec, " in log

    results, errors = {}, []

    def delete(kid):
        t = time.monotonic()
        results[kid] = (gw.delete_kernel(kid), time.monotonic() - t)

    def restart_then_delete(kid):
        r = S.Background(lambda: gw.request("POST", f"/api/kernels/{kid}/restart")[0])
        r.start()
        time.sleep(0.05)
        delete(kid)
        r.value(60)

    def start_then_delete(name):
        kid = gw.start_kernel(name=name)["id"]  # deleted the moment its POST returns
        delete(kid)

    t0 = time.monotonic()
    threads = [threading.Thread(target=restart_then_delete, args=(k,)) for k in ids[:10]]
    threads += [threading.Thread(target=delete, args=(k,)) for k in ids[10:]]
    threads += [threading.Thread(target=start_then_delete, args=("pyexec" if i % 2 else None,))
                for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - t0
    assert len(results) == 50, len(results)
    assert {s for s, _ in results.values()} == {204}, results
    slowest = max(d for _, d in results.values())
    print(f"50 deletes: {elapsed:.2f} s in all, slowest {slowest:.2f} s")
    assert not forced(gw), forced(gw)
    assert metric(gw, "kgw_kernel_shutdown_forced_total") == 0
    # none waited for a grace (30 s): far under a second of grace per kernel
    assert slowest < GRACE_MS / 1000 / 2, results
    S.wait_for(lambda: not gw.request("GET", "/api/kernels")[1], 30, what="no kernels")
    ended = re.findall(r"kernel=\S+: shut down \(([^)]*)\)", gw.log())
    assert ended and all(e in ("ended after its shutdown_reply", "ended while starting") or
                         "status 0" in e
                         for e in ended), ended


def test_delete_while_starting_ends_at_once(lgw):
    """A kernel deleted before it has started is ended at once: no shutdown_request waits for
    a start that may take longer than the grace."""
    gw = lgw
    post = S.Background(lambda: gw.request("POST", "/api/kernels", {"name": "slow"}))
    post.start()
    kid = S.wait_for(lambda: next((m["id"] for m in gw.request("GET", "/api/kernels")[1]
                                   if m["name"] == "slow"), None), 30, what="the slow kernel")
    time.sleep(0.5)  # its process runs (sleeping before it imports ipykernel)
    t = time.monotonic()
    assert gw.delete_kernel(kid) == 204
    took = time.monotonic() - t
    status, body, _ = post.value(30)
    # shut down while it started: a conflict with the DELETE, not a failure of the kernel
    assert status == 409, (status, body)
    assert body["message"] == f"kernel {kid} was shut down while it started", body
    assert took < 5, took  # not the grace (30 s), nor the kernel's start (120 s)
    assert f"kernel={kid}: shut down (ended while starting)" in gw.log()
    assert not forced(gw), forced(gw)


def test_every_face_answers_a_shutdown_during_its_wait_alike(lgw):
    """A kernel shut down while a face waits for its start or restart: each face answers that
    it was shut down meanwhile (409, the same words from kops.c), not that the kernel failed
    (500, 503): REST's start and restart, a session's start, an E2B sandbox's create and a
    context's, whichever face shut it down. Found by test_lifecycle_stress.py (a restart cut
    short by a sandbox's timeout, a one-shot execution's end, a DELETE)."""
    gw = lgw
    key = {"X-API-KEY": gw.token}

    def slow_kernel(pred=lambda m: True):
        return S.wait_for(lambda: next((m["id"] for m in gw.request("GET", "/api/kernels")[1]
                                        if m["name"] == "slow" and pred(m)), None), 30,
                          what="the slow kernel")

    # REST: a start, and a restart of the same kernel, cut short by DELETE
    post = S.Background(lambda: gw.request("POST", "/api/kernels", {"name": "slow"}))
    post.start()
    kid = slow_kernel()
    restart = S.Background(lambda: gw.request("POST", f"/api/kernels/{kid}/restart", {}))
    restart.start()
    S.wait_for(lambda: gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] ==
               "restarting", 30, what="the restart")
    assert gw.delete_kernel(kid) == 204
    status, body, _ = restart.value(30)
    assert (status, body["message"]) == (409, f"kernel {kid} was shut down while it restarted")
    status, body, _ = post.value(30)
    assert (status, body["message"]) == (409, f"kernel {kid} was shut down while it started")
    # a session's kernel, deleted through /api/kernels
    sess = S.Background(lambda: gw.request("POST", "/api/sessions", {
        "path": "stress.ipynb", "type": "notebook", "kernel": {"name": "slow"}}))
    sess.start()
    kid = slow_kernel()
    assert gw.delete_kernel(kid) == 204
    status, body, _ = sess.value(30)
    assert (status, body["message"]) == (409, f"kernel {kid} was shut down while it started")
    assert gw.request("GET", "/api/sessions")[1] == []
    # an E2B sandbox whose kernel is deleted through /api/kernels while the create waits: 409,
    # and the sandbox is gone (before: 503 "failed to start")
    from test_e2b import create, request
    made = S.Background(lambda: create(gw, gw.token, {"templateID": "slow"}))
    made.start()
    kid = slow_kernel()
    assert gw.delete_kernel(kid) == 204
    status, body, _ = made.value(30)
    assert status == 409 and "while it started" in body["message"], (status, body)
    assert request(gw, "GET", "/e2b/api/v2/sandboxes", headers=key)[1] == []
    S.wait_for(lambda: gw.request("GET", "/api/kernels")[1] == [], 30, what="no kernels left")


def test_start_failure_leaves_stderr_in_log_and_cause(lgw):
    """A kernelspec whose process fails with an ImportError: the REST error quotes the end of
    its stderr, the log has its last lines, and a secret of its environment is in neither."""
    gw = lgw
    status, body, _ = gw.request("POST", "/api/kernels",
                                 {"name": "broken", "env": {"KERNEL_TOKEN": SECRET}})
    assert status == 500, (status, body)
    msg = body["message"]
    print(msg)
    assert "exited with status 1" in msg, msg
    assert "ModuleNotFoundError: No module named 'kgw_no_such_module'" in msg, msg
    assert SECRET not in msg, msg
    assert len(msg) < 700, msg
    kid = re.search(r"kernel (\S+) failed to start", msg).group(1)
    log = gw.log()
    lines = [l for l in log.splitlines() if f"kernel={kid}: stderr: " in l]
    assert any("Traceback (most recent call last):" in l for l in lines), lines
    assert any("ModuleNotFoundError: No module named 'kgw_no_such_module'" in l for l in lines)
    # the secret the kernel printed is blotted out; the line is there
    assert any(l.endswith("stderr: token " + "*" * len(SECRET)) for l in lines), lines
    assert SECRET not in log



def test_session_start_failure_replies_like_rest(lgw):
    """POST /api/sessions with the kernelspec that fails to start: the same 500 and cause as
    POST /api/kernels (rest_start_failed), no session is left behind, nor its kernel."""
    gw = lgw
    path = f"kgw-broken-{os.getpid()}.ipynb"
    status, body, _ = gw.request("POST", "/api/sessions",
                                 {"path": path, "type": "notebook", "kernel": {"name": "broken"}})
    assert status == 500, (status, body)
    msg = body["message"]
    assert re.search(r"kernel \S+ failed to start: .*exited with status 1", msg), msg
    assert "No module named 'kgw_no_such_module'" in msg, msg
    kid = re.search(r"kernel (\S+) failed to start", msg).group(1)
    status, sessions, _ = gw.request("GET", "/api/sessions")
    assert status == 200
    assert [s for s in sessions if s["path"] == path] == [], sessions
    S.wait_for(lambda: kid not in [k["id"] for k in gw.request("GET", "/api/kernels")[1]], 30,
               what=f"kernel {kid} gone")


# writes to the kernel's own stderr (ipykernel sends what is written to fd 2 to iopub, and a
# copy to the stderr the kernel was started with: that one is the gateway's pipe)
STDERR_FD = "fd = getattr(sys.stderr, '_original_stdstream_copy', None) or 2\n"


def test_death_cause_quotes_stderr(lgw):
    """A kernel (forked from the fork server) that says something on stderr and dies: the
    outcome of the execution in flight quotes it, and the log has it."""
    from test_outcomes import provoke
    gw = lgw
    code = ("import os, sys, time\n" + STDERR_FD +
            "os.write(fd, b'kgw-last-words: disk on fire\\n')\ntime.sleep(0.5)\nos._exit(3)")
    provoke(gw, code, "KernelDied",
            ["exited with status 3", "its stderr ended", "kgw-last-words: disk on fire"])
    assert re.search(r"kernel=\S+: stderr: kgw-last-words: disk on fire", gw.log())


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l for l in f if l.startswith("VmRSS:")).split()[1])


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_stderr_flood_costs_no_gateway_memory(lgw):
    """A kernel writing to its stderr as fast as it can for 6 s: the gateway reads it all (the
    total in the log), paced (the kernel blocks on its full pipe), its resident memory does not
    grow and its CPU time stays small."""
    gw = lgw
    pid = gw.proc.pid
    kid = S.new_kernel(gw)
    flood = ("import os, sys, time\n" + STDERR_FD +
             "chunk = (b'flood ' * 11000)[:65535] + b'\\n'\nn = 0\nt = time.monotonic()\n"
             "while time.monotonic() - t < 6:\n    n += os.write(fd, chunk)\n"
             "R['wrote'] = n\n")
    S.kexec(gw, kid, "pass")  # connected once: the session's own memory is not the flood's
    base = rss_kib(pid)
    cpu0 = cpu_seconds(pid)
    peak = [base]
    result = {}
    t = S.Background(lambda: result.update(S.kcall(gw, kid, flood, timeout=60)))
    t.start()
    while t.is_alive():
        peak.append(rss_kib(pid))
        time.sleep(0.1)
    t.value(1)
    cpu = cpu_seconds(pid) - cpu0
    wrote = result["wrote"]
    grew = (max(peak) - base) / 1024
    print(f"flood: {wrote / 2**20:.1f} MiB written to stderr in 6 s; gateway RSS "
          f"{base / 1024:.1f} MiB, peak +{grew:.2f} MiB, CPU {cpu:.2f} s")
    assert wrote >= 4 << 20, wrote  # 512 times the ring: a leak would show
    assert wrote <= 32 << 20, wrote  # paced: 1.25 MiB/s and a pipe's 64 KiB
    assert grew < 8, (base, max(peak))
    assert cpu < 2, cpu
    # its death makes the gateway log its stderr's total: everything was read
    S.kexec(gw, kid, "import os, sys, time\n" + STDERR_FD +
            "os.write(fd, b'kgw-flood-end\\n')\ntime.sleep(0.3)\nos._exit(4)", guard=False,
            timeout=30)
    m = S.wait_for(lambda: re.search(r"kernel=%s: the end of its stderr \((\d+) bytes in all\)"
                                     % kid, gw.log()), 30, what="the stderr log")
    assert int(m.group(1)) >= wrote, (m.group(1), wrote)
    lines = [l for l in gw.log().splitlines() if f"kernel={kid}: stderr: " in l]
    assert lines[-1].endswith("stderr: kgw-flood-end"), lines[-3:]
    assert len(lines) <= 41, len(lines)
    gw.delete_kernel(kid)
