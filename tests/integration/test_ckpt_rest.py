"""Checkpoints and rollbacks over REST (docs/checkpoints.md) on real sandboxed ipykernel kernels:
POST/GET /api/kernels/{id}/checkpoints, GET/DELETE .../checkpoints/{cp}, POST .../rollback.
What comes back after a rollback (a variable, a numpy array's checksum, the random state, a
workspace file's bytes, execution counts), twice; a websocket client connected across a
rollback sees the notice and keeps working; tenancy; --max-checkpoints; the memory and pids
limits; the leak check; the execute API's "checkpoint" and "rollback_on_error"."""
import asyncio
import json
import os
import shutil
import subprocess
import time

import pytest

import jclient
from conftest import key_file
from test_execute import execute

pytestmark = pytest.mark.kgw_only


def run(gw, kid, code, **body):
    """Runs code through the execute API: (end event, stdout text, events)."""
    st, events, _ = execute(gw, kid, {"code": code, **body})
    assert st in (200, 201), (st, events)
    out = "".join(e.get("text", "") for e in events
                  if e["type"] == "stream" and e.get("name") == "stdout")
    return events[-1], out, events


def take(gw, kid, body=None, want=201):
    st, cp, hdrs = gw.request("POST", f"/api/kernels/{kid}/checkpoints", body or {})
    assert st == want, (st, cp)
    return cp


def rollback(gw, kid, cp, want=200):
    st, body, _ = gw.request("POST", f"/api/kernels/{kid}/rollback", {"checkpoint": cp})
    assert st == want, (st, body)
    return body


STATE = ("import numpy as np, random, os\n"
         "print(x, float(np.sum(a)), random.random(), np.random.random(),\n"
         "      open('notes.txt').read(), sorted(os.listdir('.')))")


def test_rollback_restores_state_twice(gateway, kernel):
    kid = kernel["id"]
    end, _, _ = run(gateway, kid,
                    "import numpy as np, random, os\n"
                    "x = 41\n"
                    "a = np.arange(100000, dtype=np.float64)\n"
                    "random.seed(7); np.random.seed(7)\n"
                    "open('notes.txt', 'w').write('before')")
    assert end["status"] == "ok", end
    cp = take(gateway, kid)
    assert cp["kernel_id"] == kid and cp["files"] is True and cp["files_bytes"] == 6, cp
    count = cp["execution_count"]  # the number the next cell gets
    assert count == end["execution_count"] + 1, (cp, end)
    assert cp["pss_bytes"] > 0 and cp["private_bytes"] >= 0, cp
    # what the checkpoint holds, read once without a rollback (random draws advance state)
    end, before, _ = run(gateway, kid, STATE)
    assert end["execution_count"] == count
    # damage everything
    end, _, _ = run(gateway, kid,
                    "x = 0\na[:] = 0\nrandom.seed(1); np.random.seed(1)\n"
                    "open('notes.txt', 'w').write('after')\nopen('junk', 'w').write('j')\n"
                    "for _ in range(3): random.random()")
    assert end["status"] == "ok"
    for _ in range(2):  # the same state twice
        rb = rollback(gateway, kid, cp["id"])
        assert rb["id"] == cp["id"]
        end, got, _ = run(gateway, kid, STATE)
        assert end["status"] == "ok", end
        assert got == before, (got, before)
        assert end["execution_count"] == count  # the count continues from the checkpoint's
    # the checkpoint is listed, then dropped, and gone
    st, lst, _ = gateway.request("GET", f"/api/kernels/{kid}/checkpoints")
    assert st == 200 and [c["id"] for c in lst] == [cp["id"]]
    st, one, _ = gateway.request("GET", f"/api/kernels/{kid}/checkpoints/{cp['id']}")
    assert st == 200 and one["execution_count"] == count
    assert gateway.request("DELETE", f"/api/kernels/{kid}/checkpoints/{cp['id']}")[0] == 204
    assert gateway.request("GET", f"/api/kernels/{kid}/checkpoints")[1] == []
    rollback(gateway, kid, cp["id"], want=404)


def test_without_files_keeps_the_workspace(gateway, kernel):
    kid = kernel["id"]
    run(gateway, kid, "y = 1\nopen('f.txt', 'w').write('one')")
    cp = take(gateway, kid, {"files": False})
    assert cp["files"] is False and cp["files_bytes"] == 0
    run(gateway, kid, "y = 2\nopen('f.txt', 'w').write('two')")
    rollback(gateway, kid, cp["id"])
    _, out, _ = run(gateway, kid, "print(y, open('f.txt').read())")
    assert out == "1 two\n"


def test_bad_requests(gateway, kernel):
    kid = kernel["id"]
    st, body, _ = gateway.request("POST", f"/api/kernels/{kid}/checkpoints", {"files": "yes"})
    assert st == 400 and body["reason"] and body["message"]
    for bad in ({}, {"checkpoint": 5}, {"checkpoint": "../x"}):
        st, body, _ = gateway.request("POST", f"/api/kernels/{kid}/rollback", bad)
        assert st == 400 and body["message"], (bad, st, body)
    nope = "00000000-0000-0000-0000-000000000000"
    st, body, _ = gateway.request("POST", f"/api/kernels/{kid}/rollback", {"checkpoint": nope})
    assert st == 404 and body["message"]
    assert gateway.request("DELETE", f"/api/kernels/{kid}/checkpoints/{nope}")[0] == 404
    assert gateway.request("GET", f"/api/kernels/{nope}/checkpoints")[0] == 404


def test_clients_keep_their_websocket_and_see_the_notice(gateway, kernel):
    kid = kernel["id"]

    async def go():
        c = await jclient.connect(gateway, kid)
        try:
            await c.wait_ready()
            ex = await c.execute("z = 'kept'")
            assert ex.status == "ok"
            n = ex.reply["content"]["execution_count"]
            cp = await asyncio.to_thread(take, gateway, kid)
            ex = await c.execute("z = 'lost'")
            c.backlog.clear()
            await asyncio.to_thread(rollback, gateway, kid, cp["id"])
            seen = []
            while len(seen) < 3:
                m = await c.recv(lambda m: m["channel"] == "iopub"
                                 and "kgw_rollback" in m.get("metadata", {}), timeout=10)
                seen.append(m)
            assert [(m["header"]["msg_type"], m["content"].get("execution_state"))
                    for m in seen] == [("status", "starting"), ("stream", None),
                                       ("status", "idle")], seen
            note = seen[1]["content"]
            assert note["name"] == "stderr" and cp["id"] in note["text"]
            assert "threads" in note["text"] and "subprocesses" in note["text"]
            assert seen[1]["metadata"]["kgw_rollback"]["checkpoint"] == cp["id"]
            # the same websocket keeps working, with the checkpoint's state and count
            ex = await c.execute("print(z)")
            assert ex.status == "ok" and ex.stdout == "kept\n", (ex.types, ex.reply)
            assert ex.reply["content"]["execution_count"] == n + 1
        finally:
            await c.close()

    jclient.run(go(), timeout=90)


def test_other_tenants_see_404(gateway_factory, tmp_path):
    path, keys = key_file(["alice", "bob"], tmp_path)
    gw = gateway_factory("--key-file", path)
    gw.token = keys["alice"]
    kid = gw.start_kernel()["id"]
    cp = take(gw, kid)
    gw.token = keys["bob"]
    for method, p, body in (("GET", "/checkpoints", None), ("POST", "/checkpoints", {}),
                            ("GET", f"/checkpoints/{cp['id']}", None),
                            ("DELETE", f"/checkpoints/{cp['id']}", None),
                            ("POST", "/rollback", {"checkpoint": cp["id"]})):
        st, body, _ = gw.request(method, f"/api/kernels/{kid}{p}", body)
        assert st == 404, (method, p, st, body)
    gw.token = keys["alice"]
    assert len(gw.request("GET", f"/api/kernels/{kid}/checkpoints")[1]) == 1


def test_max_checkpoints(gateway_factory):
    gw = gateway_factory("--max-checkpoints=2")
    kid = gw.start_kernel()["id"]
    a, b = take(gw, kid), take(gw, kid, {"files": False})
    body = take(gw, kid, want=409)
    assert "--max-checkpoints" in body["message"], body
    assert gw.request("DELETE", f"/api/kernels/{kid}/checkpoints/{a['id']}")[0] == 204
    c = take(gw, kid)
    assert {x["id"] for x in gw.request("GET", f"/api/kernels/{kid}/checkpoints")[1]} == \
        {b["id"], c["id"]}
    # checkpoints die with their kernel's process: a restart ends them
    st, _, _ = gw.request("POST", f"/api/kernels/{kid}/restart")
    assert st == 200
    assert gw.request("GET", f"/api/kernels/{kid}/checkpoints")[1] == []
    rollback(gw, kid, c["id"], want=404)


@pytest.mark.needs_sandbox  # the pids limit is the sandbox's cgroup
def test_at_the_pids_limit_a_clear_error_and_nothing_changed(gateway_factory):
    gw = gateway_factory()
    st, model, _ = gw.request("POST", "/api/kernels", {"limits": {"pids": 64}})
    assert st == 201, model
    kid = model["id"]
    # threads until the pids limit refuses more: a fork then fails too
    end, out, _ = run(gw, kid,
                      "import threading\nev = threading.Event(); ts = []\n"
                      "try:\n"
                      "    while True:\n"
                      "        t = threading.Thread(target=ev.wait); t.start(); ts.append(t)\n"
                      "except RuntimeError:\n"
                      "    pass\n"
                      "print(len(ts))\nv = 'live'")
    assert end["status"] == "ok" and int(out) > 0, (end, out)
    body = take(gw, kid, want=507)
    assert "limit" in body["message"], body
    assert gw.request("GET", f"/api/kernels/{kid}/checkpoints")[1] == []
    end, out, _ = run(gw, kid, "ev.set()\nfor t in ts: t.join()\nprint(v)")
    assert out == "live\n", (end, out)
    cp = take(gw, kid)  # with room again it works
    rollback(gw, kid, cp["id"])
    assert run(gw, kid, "print(v)")[1] == "live\n"


def kernel_procs(gw, kid):
    """The processes of the kernel's sandbox (its own pid namespace: the keeper, the live
    kernel, its checkpoints, init), as (pid, state) pairs; Z is a zombie."""
    _, out, _ = run(gw, kid, "import os\n"
                    "print(sorted((int(p), open(f'/proc/{p}/stat').read().split(') ')[1][0])\n"
                    "             for p in os.listdir('/proc') if p.isdigit()))")
    return out


CYCLES = 60
KFDS = "import os\nprint(len(os.listdir('/proc/self/fd')))"


def test_cycles_leave_nothing_behind(gateway):
    kid = gateway.start_kernel()["id"]
    try:
        run(gateway, kid, "import numpy as np\na = np.ones(1000)")
        cp = take(gateway, kid)
        rollback(gateway, kid, cp["id"])  # the first makes the keeper: the baseline after it
        gateway.request("DELETE", f"/api/kernels/{kid}/checkpoints/{cp['id']}")
        # the kernel's own processes: in its sandbox's pid namespace (unsandboxed, /proc shows
        # the host's)
        sandboxed = "--no-sandbox" not in os.environ.get("KGW_EXTRA_ARGS", "")
        procs0 = kernel_procs(gateway, kid) if sandboxed else None
        fds0 = len(os.listdir(f"/proc/{gateway.proc.pid}/fd"))
        # the kernel's own descriptors: a revived kernel's machinery (loop, ZeroMQ, pipes)
        # must not pile up, generation after generation (RLIMIT_NOFILE is 1024)
        kfds = []
        for i in range(CYCLES):
            cp = take(gateway, kid, {"files": i % 2 == 0})
            run(gateway, kid, f"a[:] = {i}")
            rollback(gateway, kid, cp["id"])
            assert gateway.request("DELETE",
                                   f"/api/kernels/{kid}/checkpoints/{cp['id']}")[0] == 204
            kfds.append(int(run(gateway, kid, KFDS)[1]))
        # flat from the third rollback on (the first generations close what the one before
        # them opened; each later one as many as it opens), give or take the few connections
        # that clients' sockets happen to hold at the moment (one per cycle more would leave
        # the last ten some 50 above the first)
        assert max(kfds[-10:]) <= max(kfds[2:12]) + 3 and max(kfds[2:]) - min(kfds[2:]) <= 8, \
            kfds
        assert run(gateway, kid, "print(int(a.sum()))")[1] == "1000\n"
        # the same number of processes (the live kernel's pid changes), none a zombie (the
        # ones dropped are reaped by their parent, maybe a moment after the DELETE)
        t0 = time.monotonic()
        while sandboxed:
            procs = kernel_procs(gateway, kid)
            if (len(eval(procs)) == len(eval(procs0)) and "'Z'" not in procs) or \
                    time.monotonic() - t0 > 10:
                break
            time.sleep(0.2)
        if sandboxed:
            assert len(eval(procs)) == len(eval(procs0)) and "'Z'" not in procs, (procs0, procs)
        # the gateway's descriptors: as before (HTTP connections of the client closing late
        # may count for a moment)
        t0 = time.monotonic()
        while len(os.listdir(f"/proc/{gateway.proc.pid}/fd")) > fds0 + 2 and \
                time.monotonic() - t0 < 10:
            time.sleep(0.2)
        assert len(os.listdir(f"/proc/{gateway.proc.pid}/fd")) <= fds0 + 2
    finally:
        gateway.delete_kernel(kid)


def test_execute_checkpoint_and_rollback_on_error(gateway, kernel):
    kid = kernel["id"]
    run(gateway, kid, "v = ['start']\nopen('w.txt', 'w').write('start')")
    # "checkpoint": one taken right before the code ran; "end" names it
    end, _, _ = run(gateway, kid, "v.append('a')", checkpoint=True)
    assert end["status"] == "ok" and end["checkpoint"], end
    assert "rolled_back" not in end
    first = end["checkpoint"]
    st, cp, _ = gateway.request("GET", f"/api/kernels/{kid}/checkpoints/{end['checkpoint']}")
    assert st == 200 and cp["execution_count"] == end["execution_count"], (cp, end)
    rollback(gateway, kid, end["checkpoint"])
    assert run(gateway, kid, "print(v)")[1] == "['start']\n"
    # a raised error: rolled back (variables and files), and the end says so
    end, _, events = run(gateway, kid,
                         "v.append('b')\nopen('w.txt', 'w').write('b')\nraise ValueError('no')",
                         rollback_on_error=True)
    assert end["status"] == "error" and end["rolled_back"] is True, end
    assert "checkpoint" not in end  # its own checkpoint: dropped once over
    assert any(e["type"] == "error" and e.get("ename") == "ValueError" for e in events)
    assert run(gateway, kid, "print(v, open('w.txt').read())")[1] == "['start'] start\n"
    # a success is not rolled back
    end, _, _ = run(gateway, kid, "v.append('c')", rollback_on_error=True)
    assert end["status"] == "ok" and end["rolled_back"] is False, end
    assert run(gateway, kid, "print(v)")[1] == "['start', 'c']\n"
    # a timeout (the execution is interrupted): rolled back too
    end, _, _ = run(gateway, kid, "v.append('d')\nimport time\ntime.sleep(60)",
                    rollback_on_error=True, timeout=1)
    assert end["status"] == "timeout" and end["rolled_back"] is True, end
    end, out, _ = run(gateway, kid, "print(v)")
    assert out == "['start', 'c']\n", (out, end)
    # the one "checkpoint" took stays; those rollback_on_error took alone were dropped
    st, lst, _ = gateway.request("GET", f"/api/kernels/{kid}/checkpoints")
    assert st == 200 and [c["id"] for c in lst] == [first], lst
    # both: rolled back, and the checkpoint stays
    end, _, _ = run(gateway, kid, "v.append('e')\n1/0", checkpoint=True, rollback_on_error=True)
    assert end["status"] == "error" and end["rolled_back"] is True and end["checkpoint"], end
    assert len(gateway.request("GET", f"/api/kernels/{kid}/checkpoints")[1]) == 2


def test_execute_checkpoint_refused_at_the_limit(gateway_factory):
    gw = gateway_factory("--max-checkpoints=1")
    kid = gw.start_kernel()["id"]
    take(gw, kid)
    end, _, events = run(gw, kid, "print('never')", checkpoint=True)
    assert end["status"] == "checkpoint_failed" and end["checkpoint"] is None, end
    assert "--max-checkpoints" in end["cause"], end
    assert not any(e["type"] == "stream" for e in events)
    st, body, _ = execute(gw, kid, {"code": "1", "checkpoint": "yes"})
    assert st == 400 and "checkpoint" in body["message"], body


def test_mcp_checkpoint_rollback_on_error_and_rollback_tool(gateway):
    from test_mcp import call, initialize, post
    sid = initialize(gateway)
    try:
        call(gateway, sid, 0, "execute_code", {"code": "m = 1"})
        # the checkpoint is taken before the code runs: it holds m = 1
        st, body, _ = call(gateway, sid, 1, "execute_code", {"code": "m = 10", "checkpoint": True})
        end = body["result"]["structuredContent"]
        assert end["status"] == "ok" and end["checkpoint"], body
        cp = end["checkpoint"]
        st, body, _ = call(gateway, sid, 2, "execute_code",
                           {"code": "m = 2\nraise KeyError('k')", "rollback_on_error": True})
        end = body["result"]["structuredContent"]
        assert body["result"]["isError"] is True and end["status"] == "error", body
        assert end["rolled_back"] is True, end
        st, body, _ = call(gateway, sid, 3, "execute_code", {"code": "print(m)\nm = 3"})
        assert body["result"]["content"][0]["text"] == "10\n", body
        st, body, _ = call(gateway, sid, 4, "rollback", {"checkpoint": cp})
        res = body["result"]
        assert res["isError"] is False and res["structuredContent"]["id"] == cp, body
        st, body, _ = call(gateway, sid, 5, "execute_code", {"code": "print(m)"})
        assert body["result"]["content"][0]["text"] == "1\n", body
        # bad arguments: JSON-RPC errors; an unknown checkpoint: a tool error
        st, body, _ = call(gateway, sid, 6, "execute_code", {"code": "1", "checkpoint": "yes"})
        assert body["error"]["code"] == -32602, body
        st, body, _ = call(gateway, sid, 7, "rollback",
                           {"checkpoint": "00000000-0000-0000-0000-000000000000"})
        assert body["result"]["isError"] is True and "no checkpoint" in \
            body["result"]["content"][0]["text"], body
    finally:
        post(gateway, None, sid, method="DELETE")


NODE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node")


@pytest.mark.skipif(not shutil.which("node") or not os.path.isdir(
    os.path.join(NODE_DIR, "node_modules", "@jupyterlab", "services")),
    reason="node or tests/node/node_modules (npm ci) missing")
def test_jupyterlab_services_client_across_a_rollback(gateway):
    proc = subprocess.Popen(["node", os.path.join(NODE_DIR, "rollback_client.mjs"), gateway.url,
                             gateway.token], cwd=NODE_DIR, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out = proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0] + "\n[test] killed after 120 s"
    assert proc.returncode == 0 and "PASS" in out, out


def test_a_checkpoint_being_rolled_back_to_cannot_be_dropped(gateway):
    """A rollback waits behind a running cell; dropping its checkpoint meanwhile is 409 (the
    rollback would otherwise happen with no record left: its clients never told, the requests
    the old process had queued never answered), and works once the rollback is done."""
    import threading
    gw = gateway
    kid = gw.start_kernel()["id"]
    try:
        run(gw, kid, "v = 1")
        cp = take(gw, kid)["id"]
        cell = threading.Thread(target=run, args=(gw, kid, "import time\ntime.sleep(3)\nv = 2"))
        cell.start()
        time.sleep(0.5)
        done = {}
        back = threading.Thread(target=lambda: done.update(r=rollback(gw, kid, cp)))
        back.start()
        time.sleep(0.5)
        st, body, _ = gw.request("DELETE", f"/api/kernels/{kid}/checkpoints/{cp}")
        assert st == 409 and "in progress" in body["message"], (st, body)
        cell.join(30)
        back.join(30)
        assert done.get("r", {}).get("id") == cp, done
        assert run(gw, kid, "print(v)")[1] == "1\n"
        st, body, _ = gw.request("DELETE", f"/api/kernels/{kid}/checkpoints/{cp}")
        assert st == 204, (st, body)
    finally:
        gw.delete_kernel(kid)



def test_rollback_reached_after_its_caller_gave_up_is_refused(gateway_factory):
    """A rollback queued behind a long cell gets 504 when the gateway gives up on it
    (--http-timeout, less a second); when the kernel reaches it later, the request has expired
    and the state stays as it is: no rollback the caller was told did not happen. (Without
    the expiry the kernel rolled back after the cell, unannounced.)"""
    import threading
    gw = gateway_factory("--http-timeout=4")
    kid = gw.start_kernel()["id"]
    try:
        run(gw, kid, "x = 'before'")
        cp = take(gw, kid)
        run(gw, kid, "x = 'after'")
        cell = {}
        t = threading.Thread(target=lambda: cell.update(end=run(
            gw, kid, "import time\nfor i in range(14):\n    print(i, flush=True)\n"
                     "    time.sleep(0.5)\ny = 'cell'")[0]))
        t.start()
        time.sleep(0.8)  # the cell runs
        st, body, _ = gw.request("POST", f"/api/kernels/{kid}/rollback", {"checkpoint": cp["id"]})
        assert st == 504, (st, body)
        t.join(30)
        assert cell["end"]["status"] == "ok", cell
        time.sleep(0.5)  # the kernel has reached the rollback by now, and refused it
        end, out, _ = run(gw, kid, "print(x, y)")
        assert out == "after cell\n", (end, out)
        # the checkpoint is still there, and a rollback now works
        assert gw.request("GET", f"/api/kernels/{kid}/checkpoints/{cp['id']}")[0] == 200
        rollback(gw, kid, cp["id"])
        assert run(gw, kid, "print(x)")[1] == "before\n"
    finally:
        gw.delete_kernel(kid)


# an internal kgw_ckpt relies on, missing (as a later IPython might lack it), before the
# kernel's first checkpoint
DROP_INTERNAL = "import IPython.core.history as h\ndel h.HistorySavingThread"


def test_an_unsupported_ipykernel_is_refused_on_every_face(gateway):
    """A kernel whose ipykernel lacks an internal the checkpoints rely on refuses them with
    "unsupported ipykernel X.Y" (kgw_ckpt's UnsupportedError, -ENOTSUP in kernelmgr): 501 on
    REST, checkpoint_failed on the execute API, a tool error on MCP's rollback. (Before: the
    checkpoint was taken and the rollback went on without its history, silently.)"""
    from test_mcp import call, initialize, post
    gw = gateway
    kid = gw.start_kernel()["id"]
    try:
        run(gw, kid, DROP_INTERNAL)
        st, body, _ = gw.request("POST", f"/api/kernels/{kid}/checkpoints", {})
        assert st == 501, (st, body)
        msg = body["message"]
        assert msg.startswith("cannot take a checkpoint: unsupported ipykernel ") and \
            "IPython.core.history.HistorySavingThread" in msg, msg
        assert gw.request("GET", f"/api/kernels/{kid}/checkpoints")[1] == []
        end, _, events = run(gw, kid, "print('never')", checkpoint=True)
        assert end["status"] == "checkpoint_failed" and "unsupported ipykernel" in end["cause"], \
            end
        assert not any(e["type"] == "stream" for e in events)
        assert run(gw, kid, "print(h.__name__)")[1] == "IPython.core.history\n"  # as it was
    finally:
        gw.delete_kernel(kid)
    sid = initialize(gw)
    try:
        st, body, _ = call(gw, sid, 1, "execute_code", {"code": "m = 1", "checkpoint": True})
        cp = body["result"]["structuredContent"]["checkpoint"]
        assert cp, body
        call(gw, sid, 2, "execute_code", {"code": DROP_INTERNAL})
        st, body, _ = call(gw, sid, 3, "rollback", {"checkpoint": cp})
        res = body["result"]
        assert res["isError"] is True and "unsupported ipykernel" in res["content"][0]["text"], \
            body
    finally:
        post(gw, None, sid, method="DELETE")


def test_the_generation_limit_refuses_with_409(gateway):
    """Past kgw_ckpt.MAX_GENERATIONS (set low here, from the kernel) a rollback is refused with
    409 advising a restart, on REST and for the execute API's rollback_on_error; an older
    checkpoint still works, and after a restart rollbacks do again. (Before: no limit.)"""
    gw = gateway
    kid = gw.start_kernel()["id"]
    try:
        run(gw, kid, "import kgw_ckpt\nkgw_ckpt.MAX_GENERATIONS = 2\nn = 0")
        first = take(gw, kid)["id"]  # generation 0; its keeper's revival: 1
        cp = take(gw, kid)["id"]  # of generation 1
        rollback(gw, kid, cp)  # 2
        run(gw, kid, "n = 2")
        last = take(gw, kid)["id"]  # of generation 2
        body = rollback(gw, kid, last, want=409)
        assert "generation limit" in body["message"] and \
            "restart the kernel" in body["message"], body
        end, _, _ = run(gw, kid, "n = 3\n1/0", rollback_on_error=True)
        assert end["status"] == "error" and end["rolled_back"] is False and \
            "restart the kernel" in end["rollback_error"], end
        rollback(gw, kid, first)  # (of generation 0: the new process is of 1)
        assert run(gw, kid, "print(n, kgw_ckpt._generation)")[1] == "0 1\n"
        st, _, _ = gw.request("POST", f"/api/kernels/{kid}/restart")
        assert st == 200, st
        run(gw, kid, "import kgw_ckpt\nkgw_ckpt.MAX_GENERATIONS = 2\nn = 5")
        cp = take(gw, kid)["id"]
        run(gw, kid, "n = 6")
        rollback(gw, kid, cp)
        assert run(gw, kid, "print(n)")[1] == "5\n"
    finally:
        gw.delete_kernel(kid)


def test_interrupts_during_checkpoints_and_rollbacks(gateway, kernel):
    """Interrupts, 10 a second, while a kernel takes its first checkpoint (which
    revives it from that checkpoint, to make its first process the keeper), is rolled back and
    takes more: each request is answered at once, and the kernel goes on with the state rolled
    back to. Before, a SIGINT that reached the process inside the rollback's handler left the
    rollback half done and unanswered (its caller got 504 after 29 s and the kernel was
    restarted), one that reached the process being revived ended it (the kernel died), and one
    that cut the silent install of the handlers short failed the checkpoint (409): an interrupt
    is not sent while only the gateway's own request runs. Found by test_lifecycle_stress.py
    (seed 15)."""
    import threading
    kid = kernel["id"]
    stop = threading.Event()

    def interrupts():
        while not stop.is_set():
            gateway.request("POST", f"/api/kernels/{kid}/interrupt", {})
            time.sleep(0.1)
    t = threading.Thread(target=interrupts)
    end, _, _ = run(gateway, kid, "x = 1")
    assert end["status"] == "ok", end
    t.start()
    try:
        t0 = time.monotonic()
        cp = take(gateway, kid)                 # the revival making the keeper
        run(gateway, kid, "x = 2")
        for _ in range(3):
            rollback(gateway, kid, cp["id"])
            take(gateway, kid)
        assert time.monotonic() - t0 < 25
    finally:
        stop.set()
        t.join(30)
    end, out, _ = run(gateway, kid, "print(x)")
    assert (end["status"], out) == ("ok", "1\n"), (end, out)
