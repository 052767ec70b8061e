"""POST /api/kernels/{id}/fork (docs/checkpoints.md, "Fork"), on real kernels through the real
gateway: the fork holds its parent's state (a variable, a numpy array's checksum, the execution
count) and the two then diverge; a fork from a checkpoint; Python's and numpy's generators are
reseeded; another tenant gets 404; the fork has its own key (the parent's cannot talk to it);
deleting the fork leaves the parent as it was; deleting the parent ends the fork, whose
execution in flight ends kernel_died with a cause that says why, and whose restart is a fresh
kernel; nothing is left behind."""
import http.client
import json
import os
import re
import threading
import time

import pytest

import jclient as J
from conftest import key_file, start_gateway, stop_gateway

pytestmark = pytest.mark.kgw_only


def execute(gw, kid, code, key=None, timeout=60):
    """Runs code through the execute API: (stdout, end event)."""
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    h = gw.headers()
    if key:
        h["Authorization"] = f"token {key}"
    c.request("POST", f"/api/kernels/{kid}/execute", body=json.dumps({"code": code}).encode(),
              headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    assert r.status == 201, (r.status, data)
    events = [json.loads(x) for x in data.splitlines() if x]
    out = "".join(e.get("text", "") for e in events if e["type"] == "stream"
                  and e["name"] == "stdout")
    return out, events[-1]


def value(gw, kid, expr):
    out, end = execute(gw, kid, f"print(repr({expr}))")
    assert end["status"] == "ok", end
    return out.strip()


def fork(gw, kid, body=None, key=None):
    h = {"Authorization": f"token {key}"} if key else None
    return gw.request("POST", f"/api/kernels/{kid}/fork", body if body is not None else {},
                      headers=h)


def has_numpy(gw, kid):
    return execute(gw, kid, "import numpy")[1]["status"] == "ok"


def sandbox_pids(gw, kid):
    """The processes of the kernel's sandbox, as its code sees them (its pid namespace; the
    host's processes when unsandboxed, so only used sandboxed)."""
    return json.loads(value(gw, kid, "__import__('json').dumps(sorted(int(p) for p in "
                                     "__import__('os').listdir('/proc') if p.isdigit()))")
                      .strip("'"))


def ended(pid, timeout=10):
    """Whether the process ends within timeout: gone, or a zombie (unsandboxed, a fork is
    reparented to the host's init, which reaps it when it will)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def sandboxed(gw):
    return "--no-sandbox" not in os.environ.get("KGW_EXTRA_ARGS", "")


@pytest.fixture(scope="module")
def tenants():
    path, keys = key_file(["alice", "bob"])
    gw = start_gateway(("--key-file", path))
    gw.token = keys["alice"]
    yield gw, keys
    stop_gateway(gw)
    os.unlink(path)


def test_fork_has_the_state_then_diverges(tenants):
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    numpy = has_numpy(gw, parent)
    setup = "x = 41\nsquare = lambda v: v * v\n"
    if numpy:
        setup += "import numpy as np\na = np.arange(100000)\n"
    assert execute(gw, parent, setup)[1]["status"] == "ok"
    before = sandbox_pids(gw, parent) if sandboxed(gw) else None
    count = execute(gw, parent, "pass")[1]["execution_count"]
    t0 = time.monotonic()
    status, model, hdrs = fork(gw, parent)
    took = time.monotonic() - t0
    assert status == 201, model
    child = model["id"]
    assert child != parent and model["name"] == "python3"
    assert hdrs["Location"] == f"/api/kernels/{child}"
    assert model["execution_state"] == "idle"
    # the same workspace (a fork lives in its parent's sandbox)
    assert model["workspace"] == gw.request("GET", f"/api/kernels/{parent}")[1]["workspace"]
    assert value(gw, child, "x") == "41"
    assert value(gw, child, "square(7)") == "49"
    if numpy:
        assert value(gw, child, "int(a.sum())") == str(sum(range(100000)))
    # execution counts go on from the parent's (2 or 3 executions in the child so far)
    _, end = execute(gw, child, "x = 1")
    assert end["execution_count"] == count + (4 if numpy else 3)
    if numpy:
        execute(gw, child, "a[:] = 0")
        assert value(gw, parent, "int(a.sum())") == str(sum(range(100000)))
        assert value(gw, child, "int(a.sum())") == "0"
    assert value(gw, parent, "x") == "41"
    assert value(gw, child, "x") == "1"
    execute(gw, parent, "x = 2")
    assert value(gw, child, "x") == "1"
    if sandboxed(gw):
        # the fork is one process more in the parent's sandbox; deleting it takes it away
        assert len(sandbox_pids(gw, parent)) == len(before) + 1
    assert gw.delete_kernel(child) == 204
    assert gw.request("GET", f"/api/kernels/{child}")[0] == 404
    # the parent is as it was
    assert value(gw, parent, "x") == "2"
    if sandboxed(gw):
        deadline = time.monotonic() + 10
        while len(sandbox_pids(gw, parent)) != len(before) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(sandbox_pids(gw, parent)) == len(before)
    assert gw.delete_kernel(parent) == 204
    print(f"fork: {took * 1000:.0f} ms request to 201")


def test_fork_reseeds_random(tenants):
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    numpy = has_numpy(gw, parent)
    code = "import random\nrandom.seed(7)\n"
    if numpy:
        code += "import numpy as np\nnp.random.seed(7)\n"
    execute(gw, parent, code)
    draws = []
    for _ in range(2):
        status, model, _ = fork(gw, parent)
        assert status == 201, model
        child = model["id"]
        d = [value(gw, child, "random.random()")]
        if numpy:
            d.append(value(gw, child, "float(np.random.random())"))
        draws.append(d)
        gw.delete_kernel(child)
    # the parent's streams as seeded: what a fork that was not reseeded would draw first
    seeded = [value(gw, parent, "random.random()")]
    if numpy:
        seeded.append(value(gw, parent, "float(np.random.random())"))
    for d in draws:
        for got, same in zip(d, seeded):
            assert got != same
    assert draws[0] != draws[1]
    gw.delete_kernel(parent)


def test_fork_requests_refused(tenants):
    gw, keys = tenants
    parent = gw.start_kernel()["id"]
    # another tenant: as if the kernel did not exist
    status, body, _ = fork(gw, parent, key=keys["bob"])
    assert status == 404 and "reason" in body and "message" in body
    assert fork(gw, "00000000-0000-0000-0000-000000000000")[0] == 404
    for bad in ({"checkpoint": "../x"}, {"checkpoint": 3}, {"checkpoint": ""},
                {"checkpoint": "nosuch"}, {"checkpoint": "a-b-c-d-" + "e" * 200},
                {"other": 1}):
        status, body, _ = fork(gw, parent, bad)
        assert status == 400, (bad, status, body)
    status, body, _ = gw.request("POST", f"/api/kernels/{parent}/fork", raw_body=b"[1]")
    assert status == 400
    # a checkpoint the kernel does not have
    status, body, _ = fork(gw, parent, {"checkpoint": "00000000-0000-0000-0000-000000000000"})
    assert status == 404, body
    assert "Checkpoint" in body["message"]
    # no kernel left behind by the refusals
    ids = [k["id"] for k in gw.request("GET", "/api/kernels")[1]]
    assert ids == [parent]
    gw.delete_kernel(parent)


def test_fork_has_its_own_key(tenants):
    """Code in the parent, with the parent's connection (its key), cannot talk to the fork; with
    the fork's own connection file it can. (That code can read the fork's file at all is
    because both share one sandbox: docs/checkpoints.md.)"""
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    child = model["id"]
    probe = r"""
import json, os, time
from jupyter_client import BlockingKernelClient
from ipykernel.connect import get_connection_file
mine = get_connection_file()
own = json.load(open(mine))
rundir = os.path.dirname(mine)
forks = [json.load(open(os.path.join(rundir, d, "connection.json"))) for d in os.listdir(rundir)
         if d.startswith("f") and os.path.exists(os.path.join(rundir, d, "connection.json"))]
assert len(forks) == 1, forks
info = forks[0]
def asks(key):
    kc = BlockingKernelClient()
    kc.load_connection_info(dict(info, key=key))
    kc.start_channels(iopub=False, stdin=False, hb=False, control=False)
    mid = kc.kernel_info()
    ok = False
    end = time.monotonic() + 3
    while time.monotonic() < end and not ok:
        try:
            m = kc.get_shell_msg(timeout=0.5)
            ok = m["parent_header"].get("msg_id") == mid
        except Exception:
            pass
    kc.stop_channels()
    return ok
print(json.dumps([info["key"] != own["key"], asks(own["key"]), asks(info["key"])]))
"""
    out, end = execute(gw, parent, probe)
    assert end["status"] == "ok", end
    assert json.loads(out.strip().splitlines()[-1]) == [True, False, True]
    gw.delete_kernel(child)
    gw.delete_kernel(parent)


def test_deleting_the_parent_ends_the_fork(tenants):
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    execute(gw, parent, "x = 41")
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    child = model["id"]
    pid = int(re.findall(rf"kernel={child}: forked from {parent} \(pid (\d+)\)", gw.log())[-1])
    assert os.path.exists(f"/proc/{pid}")
    result = {}

    def long_cell():
        result["out"], result["end"] = execute(gw, child, "import time\nprint('go', flush=True)\n"
                                               "time.sleep(60)")

    t = threading.Thread(target=long_cell)
    t.start()
    deadline = time.monotonic() + 20
    while gw.request("GET", f"/api/kernels/{child}")[1]["execution_state"] != "busy" and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw.delete_kernel(parent) == 204
    t.join(30)
    assert not t.is_alive()
    end = result["end"]
    assert end["status"] == "kernel_died", end
    assert "fork" in end["cause"] and parent in end["cause"], end
    # the fork is dead, not restarted into a fresh kernel behind its clients' backs
    deadline = time.monotonic() + 10
    while gw.request("GET", f"/api/kernels/{child}")[1]["execution_state"] != "dead" and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw.request("GET", f"/api/kernels/{child}")[1]["execution_state"] == "dead"
    assert ended(pid)
    # a restart makes it a fresh kernel of its kernelspec, in a sandbox of its own
    status, model, _ = gw.request("POST", f"/api/kernels/{child}/restart")
    assert status == 200, model
    out, end = execute(gw, child, "print('x' in globals())")
    assert end["status"] == "ok" and out.strip() == "False"
    assert gw.delete_kernel(child) == 204


def checkpoint(gw, kid):
    status, cp, _ = gw.request("POST", f"/api/kernels/{kid}/checkpoints", {"files": False})
    assert status == 201, cp
    return cp["id"]


def test_fork_from_a_checkpoint(tenants):
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    execute(gw, parent, "x = 'at the checkpoint'")
    cid = checkpoint(gw, parent)
    execute(gw, parent, "x = 'later'")
    status, model, _ = fork(gw, parent, {"checkpoint": cid})
    assert status == 201, model
    child = model["id"]
    assert value(gw, child, "x") == "'at the checkpoint'"
    assert value(gw, parent, "x") == "'later'"
    execute(gw, child, "x = 'in the fork'")
    # a fork is a kernel of its own: the parent's checkpoints are not its
    status, body, _ = fork(gw, child, {"checkpoint": cid})
    assert status == 404 and "Checkpoint" in body["message"], body
    # the checkpoint stays: a second fork from it has the same state
    status, model2, _ = fork(gw, parent, {"checkpoint": cid})
    assert status == 201, model2
    assert value(gw, model2["id"], "x") == "'at the checkpoint'"
    assert value(gw, child, "x") == "'in the fork'"
    for k in (model2["id"], child, parent):
        assert gw.delete_kernel(k) == 204


def test_fork_of_a_fork_and_the_limit(tenants):
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    execute(gw, parent, "x = [0]")
    status, a, _ = fork(gw, parent)
    assert status == 201, a
    execute(gw, a["id"], "x.append(1)")
    status, b, _ = fork(gw, a["id"])  # lives in the same sandbox, the parent's
    assert status == 201, b
    assert value(gw, b["id"], "x") == "[0, 1]"
    forks = [a["id"], b["id"]]
    while True:
        status, body, _ = fork(gw, parent)
        if status != 201:
            break
        forks.append(body["id"])
    assert status == 409 and "at most" in body["message"], body
    assert len(forks) == 6
    # the fork of the fork ends with its own parent
    assert gw.delete_kernel(a["id"]) == 204
    deadline = time.monotonic() + 10
    while gw.request("GET", f"/api/kernels/{b['id']}")[1]["execution_state"] != "dead" and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw.request("GET", f"/api/kernels/{b['id']}")[1]["execution_state"] == "dead"
    # room again for one more
    status, body, _ = fork(gw, parent)
    assert status == 201, body
    for k in forks[1:] + [body["id"], parent]:
        assert gw.delete_kernel(k) == 204


def test_interrupts_are_each_its_own(tenants):
    """The fork leads a process group of its own: interrupting the parent does not reach it,
    and interrupting it does not reach the parent."""
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    child = model["id"]
    ends = {}

    def run(kid):
        ends[kid] = execute(gw, kid, "import time\nfor i in range(300): time.sleep(0.1)\n"
                                     "print('finished')")

    threads = {kid: threading.Thread(target=run, args=(kid,)) for kid in (parent, child)}
    for t in threads.values():
        t.start()
    for kid in (parent, child):
        deadline = time.monotonic() + 20
        while gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] != "busy" and \
                time.monotonic() < deadline:
            time.sleep(0.05)
    for first, second in ((parent, child), (child, parent)):
        if first not in ends:
            assert gw.request("POST", f"/api/kernels/{first}/interrupt")[0] == 204
            threads[first].join(20)
            assert not threads[first].is_alive()
            out, end = ends[first]
            assert "finished" not in out and end["status"] in ("cancelled", "error"), end
        if second not in ends:
            assert gw.request("GET", f"/api/kernels/{second}")[1]["execution_state"] == "busy"
    for kid in (child, parent):
        assert value(gw, kid, "1 + 1") == "2"
        assert gw.delete_kernel(kid) == 204


def test_restarting_a_live_fork_makes_a_fresh_kernel(tenants):
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    execute(gw, parent, "x = 41")
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    child = model["id"]
    pid = int(re.findall(rf"kernel={child}: forked from {parent} \(pid (\d+)\)", gw.log())[-1])
    assert value(gw, child, "x") == "41"
    status, model, _ = gw.request("POST", f"/api/kernels/{child}/restart")
    assert status == 200, model
    assert model["id"] == child
    out, end = execute(gw, child, "print('x' in globals())")
    assert end["status"] == "ok" and out.strip() == "False"
    assert ended(pid)
    # a kernel of its own now: the parent's end is not its end
    assert gw.delete_kernel(parent) == 204
    assert value(gw, child, "1 + 1") == "2"
    assert gw.delete_kernel(child) == 204


def test_a_websocket_on_the_fork_hears_its_end(tenants):
    """A Jupyter client of the fork (its kernel websocket) works on it as on any kernel, and
    when the parent is deleted hears "dead" on iopub and a close 1011 that says why."""
    import asyncio

    import jclient as J
    import websockets
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    execute(gw, parent, "x = 41")
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    child = model["id"]

    async def scenario():
        kc = await J.connect(gw, child)
        await kc.wait_ready()
        r = await kc.execute("print(x + 1)")
        assert r.stdout == "42\n"
        assert gw.delete_kernel(parent) == 204
        dead = await kc.recv(lambda m: m["header"].get("msg_type") == "status" and
                             m["content"].get("execution_state") == "dead", timeout=20)
        assert dead
        with pytest.raises(websockets.exceptions.ConnectionClosed) as e:
            while True:
                await kc._recv_frame(20)
        return e.value

    closed = J.run(scenario())
    assert closed.rcvd.code == 1011 and "fork" in closed.rcvd.reason, closed.rcvd
    assert gw.delete_kernel(child) == 204


def test_a_fork_counts_in_its_tenants_quota(gateway_factory):
    gw = gateway_factory("--tenant-max-kernels", "2", "--pool", "python3=0")
    parent = gw.start_kernel()["id"]
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    status, body, _ = fork(gw, parent)
    assert status == 403 and "reason" in body, (status, body)
    assert gw.request("POST", "/api/kernels", {})[0] == 403
    assert gw.delete_kernel(model["id"]) == 204
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    for k in (model["id"], parent):
        assert gw.delete_kernel(k) == 204


def test_a_fork_has_checkpoints_and_rollbacks_of_its_own(tenants):
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    execute(gw, parent, "x = 'parent'")
    status, model, _ = fork(gw, parent)
    assert status == 201, model
    child = model["id"]
    execute(gw, child, "x = 'fork at its checkpoint'")
    cid = checkpoint(gw, child)
    execute(gw, child, "x = 'fork later'")
    status, body, _ = gw.request("POST", f"/api/kernels/{child}/rollback", {"checkpoint": cid})
    assert status == 200, body
    assert value(gw, child, "x") == "'fork at its checkpoint'"
    assert value(gw, parent, "x") == "'parent'"
    # forked from the fork's checkpoint: a fork of a fork
    status, grand, _ = fork(gw, child, {"checkpoint": cid})
    assert status == 201, grand
    assert value(gw, grand["id"], "x") == "'fork at its checkpoint'"
    for k in (grand["id"], child, parent):
        assert gw.delete_kernel(k) == 204


def test_a_fork_waits_behind_a_running_cell(tenants):
    """The fork request is a shell request: it waits for the cell the parent runs, and the
    fork has the state that cell left."""
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    result = {}

    def cell():
        result["end"] = execute(gw, parent, "import time\ntime.sleep(1.5)\ny = 'after the cell'")[1]

    t = threading.Thread(target=cell)
    t.start()
    deadline = time.monotonic() + 20
    while gw.request("GET", f"/api/kernels/{parent}")[1]["execution_state"] != "busy" and \
            time.monotonic() < deadline:
        time.sleep(0.02)
    status, model, _ = fork(gw, parent)
    t.join(30)
    assert status == 201, model
    assert result["end"]["status"] == "ok"
    assert value(gw, model["id"], "y") == "'after the cell'"
    for k in (model["id"], parent):
        assert gw.delete_kernel(k) == 204


def test_parent_deleted_while_the_fork_waits(tenants):
    """A fork whose parent is deleted while the fork request waits behind the parent's cell:
    the fork's answer is 409 (its parent is not running), not a 500 "failed to fork", and
    nothing of the fork is left. Found by test_lifecycle_stress.py."""
    gw, _ = tenants
    parent = gw.start_kernel()["id"]
    done = {}
    cell = threading.Thread(target=lambda: done.update(
        end=execute(gw, parent, "import time\ntime.sleep(3)")[1]))
    cell.start()
    deadline = time.monotonic() + 20
    while gw.request("GET", f"/api/kernels/{parent}")[1]["execution_state"] != "busy" and \
            time.monotonic() < deadline:
        time.sleep(0.02)
    before = {k["id"] for k in gw.request("GET", "/api/kernels")[1]}
    forked = threading.Thread(target=lambda: done.update(fork=fork(gw, parent)))
    forked.start()
    deadline = time.monotonic() + 20
    while not {k["id"] for k in gw.request("GET", "/api/kernels")[1]} - before and \
            time.monotonic() < deadline:
        time.sleep(0.02)                    # the fork is listed: its request is in the kernel
    assert gw.delete_kernel(parent) == 204
    forked.join(60)
    cell.join(60)
    status, body, _ = done["fork"]
    assert status == 409, (status, body)
    assert body["message"] == f"kernel {parent} is not running: it ended before the fork", body
    deadline = time.monotonic() + 30
    while {k["id"] for k in gw.request("GET", "/api/kernels")[1]} - before and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert not {k["id"] for k in gw.request("GET", "/api/kernels")[1]} - before


def test_requests_queued_behind_a_failing_cell(tenants):
    """A fork or a checkpoint asked for while another client's cell runs and then fails: the
    silent execution that installs the checkpoint handlers in a kernel's process, queued behind
    that cell, is aborted by ipykernel (stop_on_error) without running; the gateway sends it
    again instead of failing the fork (500 "the kernel could not fork: Error: ") or the
    checkpoint (409). Found by test_lifecycle_stress.py (seed 15)."""
    gw, _ = tenants
    for what in ("fork", "checkpoint"):
        kid = gw.start_kernel()["id"]          # a fresh process: no handlers installed yet
        done = {}

        async def failing_cell():              # a websocket client's, stop_on_error as usual
            c = await J.connect(gw, kid)
            try:
                ex = await c.execute("import time\ntime.sleep(1.5)\n1 / 0", timeout=30)
                done["status"] = ex.status
            finally:
                await c.close()
        cell = threading.Thread(target=lambda: J.run(failing_cell(), 60))
        cell.start()
        deadline = time.monotonic() + 20
        while gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] != "busy" and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        if what == "fork":
            status, model, _ = fork(gw, kid)
        else:
            status, model, _ = gw.request("POST", f"/api/kernels/{kid}/checkpoints", {})
        cell.join(30)
        assert done["status"] == "error", done
        assert status == 201, (what, status, model)
        if what == "fork":
            assert gw.delete_kernel(model["id"]) == 204
        assert gw.delete_kernel(kid) == 204
    assert "aborted by the kernel (a cell queued before it failed): sent again" in gw.log()
