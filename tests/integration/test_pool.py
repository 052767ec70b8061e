"""The warm pool (--pool NAME=N): kernels started ahead of requests and handed out by
POST /api/kernels and RPC start_kernel. Real gateways, real sandboxed kernels, real clients."""
import concurrent.futures
import os
import signal
import sys
import time

import pytest

from conftest import REPO
import jclient as J
from jclient import run
import sbxutil as S

sys.path.insert(0, os.path.join(REPO, "examples"))
from channel_client import Channel  # noqa: E402

pytestmark = pytest.mark.kgw_only

# Runs as the first cell of a kernel taken from the pool: what a client could see of the
# pool's past (names, history, files, environment).
FIRST_CELL = """
import os as _p_os, subprocess as _p_sp
R = dict(
    count=get_ipython().execution_count,
    In=list(In),
    history=list(get_ipython().history_manager.get_range(output=False)),
    user_names=sorted(n for n in get_ipython().user_ns
                      if not n.startswith('_') and n not in ('In', 'Out', 'R', 'get_ipython', 'exit', 'quit', 'open')),
    files=sorted(_p_os.listdir('/mnt/data')),
    kernel_env={k: v for k, v in _p_os.environ.items() if k.startswith('KERNEL_')},
    shell_env=_p_sp.run(['sh', '-c', 'env'], capture_output=True, text=True).stdout,
    path=_p_os.environ.get('PATH'),
    foo=_p_os.environ.get('FOO'),
)
"""


def pool_state(gw, name="python3"):
    status, body, _ = gw.request("GET", "/api/status")
    assert status == 200, body
    return body["pool"].get(name)


def wait_pool_ready(gw, n, timeout=120, name="python3"):
    S.wait_for(lambda: (pool_state(gw, name) or {}).get("ready", 0) >= n, timeout,
               what=f"{n} ready pooled kernels")


def post_kernel(gw, body=None):
    t0 = time.monotonic()
    status, model, _ = gw.request("POST", "/api/kernels", body or {})
    dt = time.monotonic() - t0
    assert status == 201, (status, model)
    return model, dt


def first_cell(gw, kid):
    """Connects, checks no message of the pool's own execution arrives, runs FIRST_CELL."""
    async def go():
        c = await J.connect(gw, kid)
        try:
            stray = await c.drain(0.5)
            assert not [m for m in stray if m["parent_header"].get("msg_type") == "execute_request"], \
                [m["header"]["msg_type"] for m in stray]
            ex = await c.execute(S.wrap(FIRST_CELL, result=True), timeout=30)
            S.check_contained(ex)
            r = S.parse_result(ex)
            r["reply_count"] = ex.reply["content"]["execution_count"]
            r["inputs"] = [m for m in ex.of_type("execute_input")]
            return r
        finally:
            await c.close()
    return run(go(), 90)


@pytest.fixture(scope="module")
def pgw():
    gw = S.start_sandboxed("--pool", "python3=2")
    try:
        wait_pool_ready(gw, 2)
        yield gw
    finally:
        from conftest import stop_gateway
        stop_gateway(gw)


def test_handed_out_fast_and_never_ran_user_code(pgw):
    wait_pool_ready(pgw, 2)
    before = pool_state(pgw)
    model, dt = post_kernel(pgw)
    try:
        after = pool_state(pgw)
        assert after["handouts"] == before["handouts"] + 1
        # the pool's whole point; generous for a loaded 2-core machine (a cold start is ~0.5 s+)
        assert dt < 0.25, f"POST took {dt * 1000:.1f} ms"
        assert model["execution_state"] == "idle"
        r = first_cell(pgw, model["id"])
        assert r["count"] == 1 and r["reply_count"] == 1
        assert r["In"] == ["", r["In"][1]] and len(r["In"]) == 2
        assert [h[1] for h in r["history"]] == [1], r["history"]  # only this cell
        assert r["files"] == []
        assert r["kernel_env"] == {}
        assert r["user_names"] == [], r["user_names"]
    finally:
        assert pgw.delete_kernel(model["id"]) == 204


def test_env_applied_without_trace(pgw):
    wait_pool_ready(pgw, 2)
    before = pool_state(pgw)
    weird = "it's \"quoted\" \\ $HOME `x` ünï\tcode'); import os; os._exit(1) #"
    env = {"KERNEL_USERNAME": "alice", "KERNEL_WEIRD": weird, "PATH": "/evil", "FOO": "x",
           "KERNEL_NUM": 3}
    model, dt = post_kernel(pgw, {"env": env})
    try:
        assert pool_state(pgw)["handouts"] == before["handouts"] + 1
        assert dt < 0.5, f"POST took {dt * 1000:.1f} ms"
        r = first_cell(pgw, model["id"])
        assert r["kernel_env"] == {"KERNEL_USERNAME": "alice", "KERNEL_WEIRD": weird}
        assert "KERNEL_USERNAME=alice" in r["shell_env"]  # subprocesses inherit it
        assert r["path"] != "/evil" and r["foo"] is None  # only KERNEL_* names apply
        assert r["count"] == 1 and r["reply_count"] == 1 and len(r["In"]) == 2
        assert [h[1] for h in r["history"]] == [1] and r["user_names"] == [], r
        assert "fromhex" not in str(r["history"]) + str(r["In"])
    finally:
        pgw.delete_kernel(model["id"])


def test_env_kept_across_restart(pgw):
    """A restart starts the process cold: the request's variables are in its environment."""
    wait_pool_ready(pgw, 1)
    model, _ = post_kernel(pgw, {"env": {"KERNEL_KEEP": "yes"}})
    kid = model["id"]
    try:
        S.kcall(pgw, kid, "open('/mnt/data/f', 'w').write('x')")
        status, m2, _ = pgw.request("POST", f"/api/kernels/{kid}/restart")
        assert status == 200 and m2["id"] == kid and m2["workspace"] == model["workspace"]
        r = S.kcall(pgw, kid, "import os\nR['env'] = os.environ.get('KERNEL_KEEP')\n"
                              "R['files'] = os.listdir('/mnt/data')")
        assert r == {"env": "yes", "files": ["f"]}
    finally:
        pgw.delete_kernel(kid)


def test_two_pooled_kernels_are_independent(pgw):
    wait_pool_ready(pgw, 2)
    a, _ = post_kernel(pgw)
    b, _ = post_kernel(pgw)
    try:
        code = ("import random, uuid, os\nR['r'] = random.random()\nR['u'] = uuid.uuid4().hex\n"
                "R['urandom'] = os.urandom(8).hex()\nR['ws'] = os.listdir('/mnt/data')\n"
                "open('/mnt/data/mine', 'w').write('1')\nR['uid'] = os.stat('/mnt/data').st_uid")
        ra, rb = S.kcall(pgw, a["id"], code), S.kcall(pgw, b["id"], code)
        assert ra["r"] != rb["r"] and ra["u"] != rb["u"] and ra["urandom"] != rb["urandom"]
        assert ra["ws"] == [] and rb["ws"] == []
        assert a["workspace"] != b["workspace"]
    finally:
        pgw.delete_kernel(a["id"])
        pgw.delete_kernel(b["id"])


def test_pool_refills_and_is_invisible(pgw):
    wait_pool_ready(pgw, 2)
    status, listed, _ = pgw.request("GET", "/api/kernels")
    assert status == 200 and listed == []

    async def rpc_ids():
        ch = await Channel.connect(pgw.ws_url, pgw.token)
        try:
            return await ch.mkm.list_kernel_ids()
        finally:
            await ch.close()
    assert run(rpc_ids()) == []
    assert pgw.request("GET", "/api/status")[1]["kernels"] == 0
    model, _ = post_kernel(pgw)
    try:
        _, listed, _ = pgw.request("GET", "/api/kernels")
        assert [k["id"] for k in listed] == [model["id"]]
        wait_pool_ready(pgw, 2, timeout=120)
        _, listed, _ = pgw.request("GET", "/api/kernels")
        assert [k["id"] for k in listed] == [model["id"]]
    finally:
        pgw.delete_kernel(model["id"])


def test_rpc_start_kernel_takes_from_the_pool(pgw):
    wait_pool_ready(pgw, 1)
    before = pool_state(pgw)

    async def go():
        ch = await Channel.connect(pgw.ws_url, pgw.token)
        try:
            kid = await ch.mkm.start_kernel(kernel_name="python3", env={"KERNEL_X": "1"})
            assert await ch.mkm.list_kernel_ids() == [kid]
            await ch.mkm.shutdown_kernel(kid)
        finally:
            await ch.close()
    run(go(), 120)
    assert pool_state(pgw)["handouts"] == before["handouts"] + 1


def test_incompatible_requests_start_cold(pgw):
    """Limits other than the gateway's, or a shared workspace, cannot be applied to a started
    kernel: those requests get a fresh start and the pool is left alone."""
    wait_pool_ready(pgw, 2)
    before = pool_state(pgw)
    a, _ = post_kernel(pgw, {"limits": {"memory": 512 * 1024 * 1024}})
    b, _ = post_kernel(pgw, {"workspace": a["workspace"]})
    try:
        after = pool_state(pgw)
        assert after["handouts"] == before["handouts"] and after["ready"] == 2
        assert b["workspace"] == a["workspace"]
    finally:
        pgw.delete_kernel(a["id"])
        pgw.delete_kernel(b["id"])
    # limits equal to the gateway's own, and per-execution limits, do fit
    model, _ = post_kernel(pgw, {"limits": {"exec_timeout": 30, "output_bytes": 1000}})
    try:
        assert pool_state(pgw)["handouts"] == before["handouts"] + 1
        ex = S.kexec(pgw, model["id"], "print('x' * 5000)")
        shown, notice, _ = ex.stdout.partition("\n[output truncated:")
        assert notice and set(shown) == {"x"} and len(shown) <= 1000, ex.stdout[-200:]
    finally:
        pgw.delete_kernel(model["id"])


def test_max_kernels_counts_the_pool(gateway_factory):
    gw = gateway_factory("--pool", "python3=2", "--max-kernels", "2")
    wait_pool_ready(gw, 2)
    a, _ = post_kernel(gw)
    # a request the pool cannot serve: a pooled kernel gives way
    b, _ = post_kernel(gw, {"limits": {"pids": 100}})
    st = pool_state(gw)
    assert st["ready"] + st["starting"] == 0
    status, body, _ = gw.request("POST", "/api/kernels", {})
    assert status == 503, body
    assert gw.delete_kernel(b["id"]) == 204
    # room again: the pool takes it, never more than max-kernels in all
    wait_pool_ready(gw, 1)
    time.sleep(1)
    st = pool_state(gw)
    assert st["ready"] + st["starting"] == 1
    c, dt = post_kernel(gw)
    assert dt < 0.5
    gw.delete_kernel(a["id"])
    gw.delete_kernel(c["id"])


def test_pool_adapts_to_misses(gateway_factory):
    gw = gateway_factory("--pool", "python3=1")
    wait_pool_ready(gw, 1)
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        models = [m for m, _ in ex.map(lambda _: post_kernel(gw), range(4))]
    st = pool_state(gw)
    assert st["handouts"] + st["misses"] == 4 and st["handouts"] >= 1
    assert st["target"] == min(1 + st["misses"], 2), st
    for m in models:
        gw.delete_kernel(m["id"])


def test_pool_zero_is_off(gateway_factory):
    gw = gateway_factory("--pool", "python3=0")
    assert gw.request("GET", "/api/status")[1]["pool"] == {}
    model, _ = post_kernel(gw)
    gw.delete_kernel(model["id"])


def descendants(pid):
    kids, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    for c in f.read().split():
                        if int(c) not in kids:
                            kids.add(int(c))
                            todo.append(int(c))
        except OSError:
            pass
    return kids


def test_shutdown_leaves_no_processes(gateway_factory):
    gw = gateway_factory("--pool", "python3=3")
    wait_pool_ready(gw, 3)
    model, _ = post_kernel(gw)
    wait_pool_ready(gw, 3)  # refilled
    procs = descendants(gw.proc.pid)
    assert len(procs) >= 4 * 3  # proxy, init and kernel per kernel
    gw.proc.send_signal(signal.SIGTERM)
    gw.proc.wait(timeout=30)

    def gone():
        alive = []
        for p in procs:
            try:
                with open(f"/proc/{p}/stat") as f:
                    if f.read().split(") ")[1][0] != "Z":
                        alive.append(p)
            except OSError:
                pass
        return not alive
    S.wait_for(gone, 10, what="every kernel process gone")


def test_pool_refills_while_workspaces_linger(gateway_factory):
    """Deleted kernels' workspaces stay for downloads (--workspace-grace); when they fill
    --max-workspaces, a pooled start evicts the oldest of them, as a user's start would,
    instead of leaving the pool empty."""
    gw = gateway_factory("--pool", "python3=2", "--max-workspaces", "4")
    wait_pool_ready(gw, 2)
    for _ in range(4):
        model, _ = post_kernel(gw)
        assert gw.delete_kernel(model["id"]) == 204
        wait_pool_ready(gw, 2, timeout=120)
    st = pool_state(gw)
    assert st["ready"] == 2 and st["handouts"] == 4, st
