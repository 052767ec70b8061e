"""A kernel whose interpreter dies while it has checkpoints comes back from its newest one
(docs/checkpoints.md, "A kernel that dies"), on real ipykernel kernels: the execute API's
"rollback_on_error" for a segfault, a SIGKILL and a memory bomb (the end keeps its real status
and says it was rolled back); a death without "rollback_on_error" brings back the newest
checkpoint's state, and a websocket client is told which; a kernel with no checkpoint still
restarts empty; nothing is left behind."""
import asyncio
import json
import os
import time

import pytest

import jclient
from conftest import start_gateway
from test_ckpt_rest import kernel_procs, run, take

pytestmark = pytest.mark.kgw_only

MiB = 1 << 20
NO_SANDBOX = "--no-sandbox" in os.environ.get("KGW_EXTRA_ARGS", "")

DEATHS = {
    "segfault": ("import ctypes\nctypes.string_at(0)", "killed", "signal 11"),
    "sigkill": ("import os\nos.kill(os.getpid(), 9)", "killed", "signal 9"),
    "memory_bomb": ("b = []\nwhile True:\n    b.append(bytearray(16 << 20))", "out_of_memory",
                    "out of memory"),
}


@pytest.mark.parametrize("case", sorted(DEATHS))
def test_rollback_on_error_undoes_a_death(gateway_factory, case):
    if case == "memory_bomb" and NO_SANDBOX:
        pytest.skip("the memory limit needs the sandbox")
    gw = gateway_factory("--mem-limit", str(256 * MiB), "--autorestart")
    kid = gw.start_kernel()["id"]
    try:
        end, _, _ = run(gw, kid, "v = ['start']")
        assert end["status"] == "ok", end
        code, status, words = DEATHS[case]
        end, _, events = run(gw, kid, "v.append('lost')\n" + code, rollback_on_error=True)
        assert end["status"] == status and words in end["cause"], end
        assert end["rolled_back"] is True, end
        # the state is the checkpoint's, in the same kernel (not a restart's empty one)
        end, out, _ = run(gw, kid, "print(v)")
        assert end["status"] == "ok" and out == "['start']\n", (end, out)
        # and it can die and come back again
        end, _, _ = run(gw, kid, "v.append('again')\n" + DEATHS["sigkill"][0],
                        rollback_on_error=True)
        assert end["status"] == "killed" and end["rolled_back"] is True, end
        assert run(gw, kid, "print(v)")[1] == "['start']\n"
    finally:
        gw.delete_kernel(kid)


def test_dead_kernel_comes_back_from_its_newest_checkpoint(gateway_factory, tmp_path):
    audit = tmp_path / "audit.jsonl"
    gw = gateway_factory("--autorestart", f"--audit-log={audit}")
    kid = gw.start_kernel()["id"]

    async def go():
        c = await jclient.connect(gw, kid)
        try:
            await c.wait_ready()
            assert (await c.execute("x = 'first'")).status == "ok"
            await asyncio.to_thread(take, gw, kid)
            assert (await c.execute("x = 'newest'")).status == "ok"
            newest = await asyncio.to_thread(take, gw, kid)
            assert (await c.execute("x = 'after'")).status == "ok"
            nonlocal pgid
            pgid = int((await c.execute("import os\nprint(os.getpgid(0))")).stdout)
            procs0 = await asyncio.to_thread(procs_of, gw, kid, pgid)
            c.backlog.clear()
            # the live interpreter dies, by a plain execution (no rollback_on_error)
            end, _, _ = await asyncio.to_thread(run, gw, kid, "import os\nos.kill(os.getpid(), 9)")
            assert end["status"] == "killed" and "rolled_back" not in end, end
            seen = []
            while len(seen) < 3:
                m = await c.recv(lambda m: m["channel"] == "iopub"
                                 and "kgw_rollback" in m.get("metadata", {}), timeout=20)
                seen.append(m)
            assert [(m["header"]["msg_type"], m["content"].get("execution_state"))
                    for m in seen] == [("status", "starting"), ("stream", None),
                                       ("status", "idle")], seen
            meta = seen[1]["metadata"]["kgw_rollback"]
            assert meta["checkpoint"] == newest["id"], meta
            assert "died" in meta["cause"] and "signal 9" in meta["cause"], meta
            assert newest["id"] in seen[1]["content"]["text"]
            # the same websocket keeps working, with the newest checkpoint's state
            ex = await c.execute("print(x)")
            assert ex.status == "ok" and ex.stdout == "newest\n", (ex.types, ex.reply)
            # the same processes as before the death (another live interpreter), no zombie
            t0 = time.monotonic()
            while True:
                procs = await asyncio.to_thread(procs_of, gw, kid, pgid)
                if (len(eval(procs)) == len(eval(procs0)) and "'Z'" not in procs) or \
                        time.monotonic() - t0 > 10:
                    break
                await asyncio.sleep(0.2)
            assert len(eval(procs)) == len(eval(procs0)) and "'Z'" not in procs, (procs0, procs)
        finally:
            await c.close()

    pgid = None
    try:
        jclient.run(go(), timeout=120)
        st, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        assert st == 200 and model["execution_state"] != "dead", model
        # the revival is audited, under the kernel's tenant (no caller asked for it)
        events = [json.loads(line) for line in audit.read_text().splitlines()]
        rev = [e for e in events if e["event"] == "revive"]
        assert [(e["tenant"], e["kernel"], e["result"]) for e in rev] == [
            ("default", kid, "ok")], rev
        assert "died" in rev[0]["cause"], rev
    finally:
        gw.delete_kernel(kid)
    if NO_SANDBOX:  # (a sandbox's processes end with its pid namespace)
        # the keeper, the checkpoints and the live interpreter: all gone with the kernel
        t0 = time.monotonic()
        while pgroup(pgid) and time.monotonic() - t0 < 10:
            time.sleep(0.2)
        assert pgroup(pgid) == [], pgroup(pgid)


def pgroup(pgid, states=False):
    """The host's processes in the process group pgid (with their states)."""
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
            if int(fields[2]) == pgid:
                out.append((int(p), fields[0]) if states else int(p))
        except (OSError, ValueError, IndexError):
            pass
    return sorted(out)


def procs_of(gw, kid, pgid):
    """The kernel's processes as (pid, state) pairs, as text: its sandbox's (all of them: the
    keeper, the live kernel, its checkpoints, init), or unsandboxed its process group's."""
    return repr(pgroup(pgid, True)) if NO_SANDBOX else kernel_procs(gw, kid)


@pytest.mark.parametrize("had_one", [False, True])
def test_without_checkpoints_a_death_restarts_the_kernel_empty(gateway_factory, had_one):
    """As before checkpoints existed: a kernel that never had one, or whose only one was
    dropped (its first process is then a keeper with nothing to revive from)."""
    gw = gateway_factory("--autorestart")
    kid = gw.start_kernel()["id"]
    try:
        run(gw, kid, "x = 1")
        if had_one:
            cp = take(gw, kid)
            assert gw.request("DELETE", f"/api/kernels/{kid}/checkpoints/{cp['id']}")[0] == 204
        end, _, _ = run(gw, kid, "import os\nos.kill(os.getpid(), 9)")
        assert end["status"] == "killed" and "rolled_back" not in end, end
        # the keeper, with nothing to revive from, ends (a moment after the interpreter), and
        # the kernel restarts: an execution sent in between hears kernel_died
        deadline = time.monotonic() + 60
        while True:
            end, _, events = run(gw, kid, "print(x)")
            if end["status"] != "kernel_died" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert end["status"] == "error", end
        assert any(e["type"] == "error" and e.get("ename") == "NameError" for e in events)
        assert gw.request("GET", f"/api/kernels/{kid}/checkpoints")[1] == []
    finally:
        gw.delete_kernel(kid)


def test_a_restart_asked_for_is_not_a_death(gateway_factory):
    """A kernel with checkpoints restarted by a client restarts empty (its keeper does not
    revive it), and its shutdown leaves nothing behind."""
    gw = gateway_factory()
    kid = gw.start_kernel()["id"]
    try:
        run(gw, kid, "x = 1")
        take(gw, kid)
        st, _, _ = gw.request("POST", f"/api/kernels/{kid}/restart")
        assert st == 200
        end, _, events = run(gw, kid, "print(x)")
        assert end["status"] == "error", end
        assert any(e["type"] == "error" and e.get("ename") == "NameError" for e in events)
        assert gw.request("GET", f"/api/kernels/{kid}/checkpoints")[1] == []
        pgid = int(run(gw, kid, "import os\nprint(os.getpgid(0))")[1])
        take(gw, kid)
    finally:
        gw.delete_kernel(kid)
    if NO_SANDBOX:
        t0 = time.monotonic()
        while pgroup(pgid) and time.monotonic() - t0 < 10:
            time.sleep(0.2)
        assert pgroup(pgid) == [], pgroup(pgid)


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_a_killed_gateway_leaves_no_revived_kernel_running():
    """Unsandboxed there is no pid namespace whose end kills everything: after a checkpoint the
    live interpreter is a descendant of the kernel's first process (which the gateway's death
    kills), not its child. It ends with that process, so a gateway killed outright leaves no
    kernel running on the host, even after an interrupt."""
    gw = start_gateway(["--no-sandbox"])
    try:
        kid = gw.start_kernel()["id"]
        take(gw, kid)  # the live interpreter is now a revived one
        # an interrupt (SIGINT to the kernel's process group) ends nothing but a cell
        st, _, _ = gw.request("POST", f"/api/kernels/{kid}/interrupt", {})
        assert st == 204, st
        _, out, _ = run(gw, kid, "import os\nprint(os.getpid())")
        pid = int(out)
        assert _running(pid)
    finally:
        gw.proc.kill()
        gw.proc.wait()
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid), f"the kernel's interpreter {pid} outlived its killed gateway"
