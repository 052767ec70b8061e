"""Scale-out: three kgw shards (127.0.0.2-4) behind Debian's HAProxy (127.0.0.1), the router's
configuration rendered from the same template as the Kubernetes ConfigMap
(deploy/haproxy/render.py). See docs/scale-out.md.

Through the router's single URL: kernels are created on every shard and their ids carry the
shard's tag, each executes `1+1` over its websocket (python websockets and @jupyterlab/services),
/channel works, lists are the answering shard's and say so. Through a shard prefix: jupyter_server's
gateway client. X-Forwarded-For is believed from the router only. Then one shard is SIGKILLed
(its kernels answer an error within a second, the others go on, creates go to live shards) and
another SIGTERMed (it drains: a running execution finishes, new kernels go elsewhere, it exits 0).

The tests run in file order and share one set of processes (module scope); the last two take
shards away. Bounded, loopback only.
"""
import asyncio
import hashlib
import http.client
import io
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from conftest import KGW_BIN, REFERENCE, REPO, Gateway
import jclient as J

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy")
                                      else None)
RENDER = os.path.join(REPO, "deploy", "haproxy", "render.py")
PYTHON = "/usr/bin/python3"
SHARD_IPS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
NAMES = [f"kgw-{i}" for i in range(3)]
CLIENT_IP = "127.0.0.9"  # the test's own source address, to see what kgw believes
N_KERNELS = 30

pytestmark = [
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/deps.sh --test)"),
    pytest.mark.skipif(bool(REFERENCE), reason="kgw's sharding only"),
]

sys.path.insert(0, os.path.join(REPO, "examples"))


def tag(name):
    return hashlib.sha256(name.encode()).hexdigest()[:4]


def port_free_on_all(ips):
    for _ in range(50):
        with socket.socket() as s:
            s.bind((ips[0], 0))
            port = s.getsockname()[1]
        ok = True
        for ip in ips[1:]:
            with socket.socket() as s:
                try:
                    s.bind((ip, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no port free on every shard address")


class Node(Gateway):
    """A kgw shard or the router: Gateway's REST helpers on another address."""

    def __init__(self, proc, ip, port, token, log_path, name=None, audit=None):
        super().__init__(proc, port, token, log_path)
        self.ip, self.name, self.audit = ip, name, audit
        self.url = f"http://{ip}:{port}"
        self.ws_url = f"ws://{ip}:{port}"


def wait_for(pred, timeout, what, every=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def start_shard(i, port, token, workdir):
    ip, name = SHARD_IPS[i], NAMES[i]
    log = os.path.join(workdir, f"{name}.log")
    audit = os.path.join(workdir, f"{name}.audit")
    argv = [*shlex.split(os.environ.get("KGW_WRAPPER", "")), KGW_BIN, "--ip", ip,
            "--port", str(port), "--api-key", token, "--instance-id", name,
            "--trusted-proxies", "127.0.0.1", "--pool", "python3=0", "--drain-timeout", "20",
            "--auth-fail-limit=0", "--rate-limit=0", "--audit-log", audit,
            "--shutdown-grace-ms", "1000", "--log-level", "debug",
            *shlex.split(os.environ.get("KGW_EXTRA_ARGS", ""))]
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    node = Node(proc, ip, port, token, log, name=name, audit=audit)
    wait_for(lambda: node.alive() and node.request("GET", "/check_ready", auth=False)[0] == 200,
             30, f"{name} ready:\n{node.log()}")
    return node


def start_router(shard_port, token, workdir):
    port = free_port_on("127.0.0.1")
    out = os.path.join(workdir, "router")
    subprocess.run([PYTHON, RENDER, "--out", out, "--bind", f"127.0.0.1:{port}",
                    *[f"--shard={n}={ip}:{shard_port}" for n, ip in zip(NAMES, SHARD_IPS)]],
                   check=True)
    cfg = os.path.join(out, "haproxy.cfg")
    subprocess.run([HAPROXY, "-c", "-q", "-f", cfg], check=True)
    log = os.path.join(workdir, "haproxy.log")
    with open(log, "w") as f:
        proc = subprocess.Popen([HAPROXY, "-db", "-f", cfg], stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    router = Node(proc, "127.0.0.1", port, token, log, name="router")
    # every shard seen ready by the router's checks (rise 2)
    wait_for(lambda: len({router.request("GET", "/check_ready", auth=False)[2]["X-KGW-Shard"]
                          for _ in range(6)}) == 3, 20,
             f"the router to see every shard ready:\n{router.log()}")
    return router


def free_port_on(ip):
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def stop(proc, sig=signal.SIGINT, timeout=15):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cluster():
    token = os.urandom(16).hex()
    workdir = tempfile.mkdtemp(prefix="kgw-scaleout-")
    port = port_free_on_all(SHARD_IPS)
    shards, router = [], None
    try:
        for i in range(3):
            shards.append(start_shard(i, port, token, workdir))
        router = start_router(port, token, workdir)
        yield {"shards": shards, "router": router, "kernels": {}, "workdir": workdir}
    finally:
        if router is not None:
            stop(router.proc, signal.SIGTERM)
        for s in shards:
            stop(s.proc)
        if any(s.proc.returncode not in (0, -signal.SIGKILL) for s in shards):
            for s in shards:
                sys.stderr.write(f"--- {s.name} (exit {s.proc.returncode})\n{s.log()[-4000:]}")
        shutil.rmtree(workdir, ignore_errors=True)


def by_name(cluster, name):
    return next(s for s in cluster["shards"] if s.name == name)


async def one_plus_one(gw, kid, protocol="legacy"):
    kc = await J.connect(gw, kid, protocol)
    try:
        await kc.wait_ready(timeout=30)
        ex = await kc.execute("1+1", timeout=30)
        assert ex.status == "ok", ex.reply
        res = ex.of_type("execute_result")
        assert res and res[0]["content"]["data"]["text/plain"] == "2", ex.types
    finally:
        await kc.close()


def test_creates_spread_over_shards_and_ids_carry_the_shard(cluster):
    router, kernels = cluster["router"], cluster["kernels"]
    for _ in range(N_KERNELS):
        st, model, h = router.request("POST", "/api/kernels", {"name": "python3"})
        assert st == 201, (st, model)
        shard = h["X-KGW-Shard"]
        kid = model["id"]
        # UUID-shaped, version 4, the shard's tag at the head of the last group
        assert uuid.UUID(kid).version == 4, kid
        assert kid.split("-")[4][:4] == tag(shard), (kid, shard)
        kernels[kid] = shard
    counts = {n: list(kernels.values()).count(n) for n in NAMES}
    assert all(c >= 2 for c in counts.values()), counts


def test_each_kernel_by_id_reaches_its_shard(cluster):
    router = cluster["router"]
    for kid, shard in cluster["kernels"].items():
        st, model, h = router.request("GET", f"/api/kernels/{kid}")
        assert st == 200 and model["id"] == kid, (st, model)
        assert h["X-KGW-Shard"] == shard


def test_execute_on_every_kernel_through_the_router(cluster):
    router = cluster["router"]

    async def go():
        # a few at a time: 2 cores
        items = list(cluster["kernels"])
        for i in range(0, len(items), 4):
            await asyncio.gather(*(one_plus_one(router, k, ("legacy", "v1")[j % 2])
                                   for j, k in enumerate(items[i:i + 4])))
    J.run(go(), timeout=180)


def test_lists_are_the_answering_shards_and_prefixes_pin(cluster):
    router, kernels = cluster["router"], cluster["kernels"]
    for name in NAMES:
        mine = {k for k, s in kernels.items() if s == name}
        st, lst, h = router.request("GET", f"/s/{name}/api/kernels")
        assert st == 200 and h["X-KGW-Shard"] == name
        assert {m["id"] for m in lst} == mine
        # a prefixed id path, a prefixed websocket
        kid = sorted(mine)[0]
        st, model, h = router.request("GET", f"/s/{name}/api/kernels/{kid}")
        assert st == 200 and model["id"] == kid
        # a create under the prefix lands there, and its Location stays under it
        st, model, h = router.request("POST", f"/s/{name}/api/kernels", {"name": "python3"})
        assert st == 201 and h["X-KGW-Shard"] == name, (st, model)
        assert h["Location"] == f"/s/{name}/api/kernels/{model['id']}", h["Location"]
        assert router.request("DELETE", h["Location"])[0] == 204
        J.run(one_plus_one(pinned(router, name), kid))
    # unprefixed: one shard's list, and the header says which
    st, lst, h = router.request("GET", "/api/kernels")
    assert st == 200
    assert {m["id"] for m in lst} == {k for k, s in kernels.items() if s == h["X-KGW-Shard"]}
    # a kernel of another shard, asked of a shard directly: not there (nothing aggregates)
    kid, shard = next(iter(kernels.items()))
    other = next(s for s in cluster["shards"] if s.name != shard)
    assert other.request("GET", f"/api/kernels/{kid}")[0] == 404
    # an unknown prefix or an id with an unknown tag: the router's own 404
    assert router.request("GET", "/s/kgw-9/api/kernels")[0] == 404
    st, body, _ = router.request("GET", "/api/kernels/4f1c8c3e-9d2a-4b7e-8f00-000067890ab1")
    assert st == 404 and "shard" in body["reason"]
    # a shard refuses another shard's prefix (a router sent it astray)
    assert cluster["shards"][0].request("GET", f"/s/{NAMES[1]}/api/kernels")[0] == 404


def pinned(router, name):
    """The router's URL under a shard's prefix, as a Jupyter front end is given it."""
    n = Node(router.proc, "127.0.0.1", router.port, router.token, router.log_path, name=name)
    n.url += f"/s/{name}"
    n.ws_url += f"/s/{name}"
    return n


def test_sessions_and_workspaces_route_by_id(cluster):
    router = cluster["router"]
    st, sess, h = router.request("POST", "/api/sessions", {
        "path": "scaleout.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}})
    assert st == 201, (st, sess)
    shard = h["X-KGW-Shard"]
    assert sess["id"].split("-")[4][:4] == tag(shard)
    assert sess["kernel"]["id"].split("-")[4][:4] == tag(shard)
    st, again, h = router.request("GET", f"/api/sessions/{sess['id']}")
    assert st == 200 and again["id"] == sess["id"] and h["X-KGW-Shard"] == shard
    ws = sess["kernel"].get("workspace")
    if ws:
        assert ws.split("-")[4][:4] == tag(shard)
        st, files, h = router.request("GET", f"/files?workspace={ws}")
        assert st == 200 and h["X-KGW-Shard"] == shard, (st, files)
    assert router.request("DELETE", f"/api/sessions/{sess['id']}")[0] == 204


def test_channel_through_the_router(cluster):
    from channel_client import Channel, run_cell
    router = cluster["router"]

    async def go():
        ch = await Channel.connect(router.ws_url, router.token)
        try:
            kid = await ch.mkm.start_kernel(kernel_name="python3")
            assert kid.split("-")[4][:4] in {tag(n) for n in NAMES}
            km = await ch.mkm.get_kernel(kid)
            client = await km.client()
            await client.start_channels()
            await client.wait_for_ready(timeout=30)
            out = io.StringIO()
            status, _ = await run_cell(client, "print(6*7)", out=out)
            assert status == "ok" and out.getvalue() == "42\n", out.getvalue()
            await ch.mkm.shutdown_kernel(kid)
        finally:
            await ch.close()
    J.run(go(), timeout=90)


def test_mcp_sessions_through_the_router(cluster):
    """One URL for MCP too: initialize goes to any ready shard, and every later message of the
    session to the shard whose tag its Mcp-Session-Id carries, so its kernel keeps its state;
    a session id naming no shard of the router is 404."""
    import test_mcp as M
    router = cluster["router"]
    for i in range(4):
        sid = M.initialize(router)
        assert sid.split("-")[4][:4] in {tag(n) for n in NAMES}, sid
        st, body, h = M.call(router, sid, 2, "execute_code", {"code": f"x = {i + 1}"})
        assert st == 200 and not body["result"]["isError"], body
        shard = h["X-KGW-Shard"]
        assert sid.split("-")[4][:4] == tag(shard), (sid, shard)
        st, body, h = M.call(router, sid, 3, "execute_code", {"code": "print(x * 2)"})
        assert st == 200 and h["X-KGW-Shard"] == shard, (st, body)
        out = body["result"]["content"][0]["text"]     # then the end event, as JSON text
        assert out == f"{2 * (i + 1)}\n", body
        assert M.post(router, None, sid, method="DELETE")[0] == 204
    stray = str(uuid.uuid4())
    st, body, _ = M.post(router, {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         stray[:24] + "ffff" + stray[28:])
    assert st == 404, (st, body)


def test_mcp_named_kernels_through_the_router(cluster):
    """Every MCP session naming a kernel (Kgw-Kernel-Name) starts on the shard the name hashes
    to, so a client that opens a session per call keeps its kernel through the router."""
    import test_mcp_named as N
    router = cluster["router"]
    seen = {}
    for i in range(6):
        name = f"conversation-{i}"
        text, st = N.per_call(router, f"x = {i}", name)
        assert st["status"] == "ok", text
        kid = st["kernel_id"]
        for _ in range(2):
            text, st = N.per_call(router, "print(x)", name)
            assert text.startswith(f"{i}\n") and st["kernel_id"] == kid, (name, text)
        seen[name] = kid.split("-")[4][:4]
    assert set(seen.values()) <= {tag(n) for n in NAMES}, seen
    assert len(set(seen.values())) > 1, f"names spread over shards: {seen}"


def _audit_addrs(shard):
    addrs = []
    with open(shard.audit) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("event") == "auth_success" or "addr" in ev:
                addrs.append(ev.get("addr"))
    return addrs


def test_forwarded_for_is_believed_from_the_router_only(cluster):
    router, shard = cluster["router"], cluster["shards"][0]
    mark = "/api/kernels/" + next(k for k, s in cluster["kernels"].items() if s == shard.name)

    def get(host, port, forged):
        c = http.client.HTTPConnection(host, port, timeout=10, source_address=(CLIENT_IP, 0))
        c.request("GET", mark, headers={"Authorization": f"token {router.token}",
                                        "X-Forwarded-For": forged})
        r = c.getresponse()
        r.read()
        c.close()
        return r.status

    n0 = len(_audit_addrs(shard))
    assert get("127.0.0.1", router.port, "203.0.113.66") == 200  # through the router
    assert get(shard.ip, shard.port, "203.0.113.77") == 200  # straight to the shard
    wait_for(lambda: len(_audit_addrs(shard)) >= n0 + 2, 5, "audit events")
    addrs = _audit_addrs(shard)[n0:]
    # through the router: the client's address (not the router's, not the forged one);
    # straight from an untrusted peer: the peer's
    assert addrs.count(CLIENT_IP) >= 2 and "127.0.0.1" not in addrs, addrs
    assert "203.0.113.66" not in addrs and "203.0.113.77" not in addrs, addrs


def test_jupyterlab_services_pinned_by_prefix(cluster):
    node = shutil.which("node")
    node_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node")
    if not node or not os.path.isdir(os.path.join(node_dir, "node_modules", "@jupyterlab")):
        pytest.skip("node or tests/node/node_modules missing (npm ci in tests/node)")
    # a front end lists the kernels it started: it is pinned to one shard by the prefix (the
    # unprefixed list is the answering shard's, which need not be the one that started it)
    front = pinned(cluster["router"], NAMES[2])
    env = dict(os.environ, KGW_WS_PROTOCOL="auto", KGW_CLIENT_TIMEOUT_MS="35000")
    proc = subprocess.Popen([node, os.path.join(node_dir, "services_client.mjs"), front.url,
                             front.token], cwd=node_dir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0] + "\n[test] killed after 60 s"
    assert proc.returncode == 0 and "PASS:" in out, out


def test_jupyter_server_gateway_client_pinned_by_prefix(cluster):
    import test_proxy_gateway as P
    if P.websockets is None:
        pytest.skip("python3-websockets is not installed")
    router, name = cluster["router"], NAMES[1]
    workdir = tempfile.mkdtemp(prefix="kgw-scaleout-proxy-", dir=cluster["workdir"])
    proxy = P._start_proxy(pinned(router, name), workdir)
    try:
        before = {m["id"] for m in router.request("GET", f"/s/{name}/api/kernels")[1]}
        st, model, _ = proxy.request("POST", "/api/kernels", {"name": "python3"})
        assert st == 201, (st, model)
        kid = model["id"]
        assert kid.split("-")[4][:4] == tag(name)
        st, lst, _ = proxy.request("GET", "/api/kernels")
        assert st == 200 and kid in {m["id"] for m in lst}, lst

        async def go():
            k = await P.KernelWS.open(proxy, kid)
            try:
                await k.kernel_info()
                reply, out, _ = await k.execute("print(1+1)")
                assert reply["content"]["status"] == "ok" and out == "2\n", (reply, out)
            finally:
                await k.close()
        P.run(go(), timeout=60)
        after = {m["id"] for m in router.request("GET", f"/s/{name}/api/kernels")[1]}
        assert after - before == {kid}
        assert proxy.request("DELETE", f"/api/kernels/{kid}")[0] == 204
        st, lst, _ = proxy.request("GET", "/api/kernels")
        assert kid not in {m["id"] for m in lst}
    finally:
        P._stop_proxy(proxy)


def test_sigkill_one_shard(cluster):
    router, kernels = cluster["router"], cluster["kernels"]
    dead = by_name(cluster, NAMES[2])
    dead_ids = [k for k, s in kernels.items() if s == dead.name]
    live_ids = [k for k, s in kernels.items() if s != dead.name]

    async def go():
        kc = await J.connect(router, dead_ids[0])
        await kc.wait_ready(timeout=30)
        dead.proc.kill()
        dead.proc.wait()
        killed = time.monotonic()
        # its kernels: an error, at once, through the router (blocking calls: nothing else
        # runs on this loop meanwhile)
        for kid in dead_ids:
            t0 = time.monotonic()
            st, _, _ = router.request("GET", f"/api/kernels/{kid}")
            took = time.monotonic() - t0
            assert st in (502, 503, 504), st
            assert took < 1.0, took
        # its open websocket is closed by the router
        with pytest.raises(J.websockets.exceptions.ConnectionClosed):
            while True:
                await asyncio.wait_for(kc.ws.recv(), 5)
        assert time.monotonic() - killed < 5
    J.run(go(), timeout=60)
    # the other shards' kernels go on
    async def others():
        await asyncio.gather(*(one_plus_one(router, k) for k in live_ids[:4]))
    J.run(others(), timeout=90)
    # creates go only to live shards (from the first one: a refused connection is retried)
    new = []
    for _ in range(6):
        st, model, h = router.request("POST", "/api/kernels", {"name": "python3"})
        assert st == 201, (st, model)
        assert h["X-KGW-Shard"] != dead.name
        new.append(model["id"])
        kernels[model["id"]] = h["X-KGW-Shard"]
    for kid in dead_ids:
        del kernels[kid]


def test_sigterm_drains_a_shard(cluster):
    router, kernels = cluster["router"], cluster["kernels"]
    draining = by_name(cluster, NAMES[1])
    kid = next(k for k, s in kernels.items() if s == draining.name)

    async def go():
        kc = await J.connect(router, kid)
        try:
            await kc.wait_ready(timeout=30)
            await kc.request("execute_request", {
                "code": "import time; time.sleep(3); print('done')", "silent": False,
                "store_history": False, "user_expressions": {}, "allow_stdin": False})
            await kc.recv(lambda m: m["header"]["msg_type"] == "status"
                          and m["content"]["execution_state"] == "busy", timeout=15)
            draining.proc.send_signal(signal.SIGTERM)
            # no new kernel reaches the draining shard
            loop = asyncio.get_running_loop()
            for _ in range(4):
                st, model, h = await loop.run_in_executor(
                    None, router.request, "POST", "/api/kernels", {"name": "python3"})
                assert st == 201, (st, model)
                assert h["X-KGW-Shard"] == NAMES[0], h["X-KGW-Shard"]
            # the running execution finishes, through the router
            out = await kc.recv(lambda m: m["header"]["msg_type"] == "stream", timeout=15)
            assert out["content"]["text"] == "done\n"
        finally:
            await kc.close()
    J.run(go(), timeout=60)
    draining.proc.wait(timeout=30)
    assert draining.proc.returncode == 0, draining.log()[-3000:]
    assert "drain" in draining.log()
