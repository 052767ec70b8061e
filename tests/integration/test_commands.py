"""Shell commands in a kernel's sandbox (docs/commands.md) against real kernels: POST
/api/kernels/{id}/commands streams start, stdout, stderr and one end; DELETE cancels; the MCP
run_command tool. A command runs where the kernel runs: its namespaces, workspace, cgroup
(pids, memory), seccomp filter, uid, network policy and environment, and ends with it."""
import hashlib
import http.client
import json
import os
import shutil
import tempfile
import threading
import time

import pytest

import conftest
from conftest import key_file

pytestmark = pytest.mark.kgw_only


@pytest.fixture(scope="module")
def gw():
    d = tempfile.mkdtemp(prefix="kgw-cmds-")
    kf, keys = key_file(["other"], directory=d)
    audit = os.path.join(d, "audit.jsonl")
    g = conftest.start_gateway(["--key-file", kf, "--audit-log", audit, "--pids-limit", "64",
                                "--mem-limit", str(256 << 20), "--output-cap", "200000"])
    g.audit = audit
    g.other_key = keys["other"]
    yield g
    conftest.stop_gateway(g)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kid(gw):
    k = gw.start_kernel(env={"KERNEL_TEST_VAR": "from-the-kernel"})
    yield k["id"]
    gw.delete_kernel(k["id"])


def sandboxed(gw):
    return gw.request("GET", "/api")[1].get("sandbox") == "enabled"


def open_cmd(gw, kid, body, accept=None, key=None, timeout=120):
    """Starts a command; (connection, response) with its events still to read."""
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    h = {"Authorization": f"token {key or gw.token}", "Content-Type": "application/json"}
    if accept:
        h["Accept"] = accept
    c.request("POST", f"/api/kernels/{kid}/commands", body=json.dumps(body).encode(), headers=h)
    return c, c.getresponse()


def events_of(resp, limit=None):
    out = []
    while limit is None or len(out) < limit:
        line = resp.readline()
        if not line:
            break
        out.append(json.loads(line))
    return out


def run(gw, kid, body, **kw):
    """Runs a command to its end: (status, events or error body)."""
    c, r = open_cmd(gw, kid, body, **kw)
    try:
        if r.status >= 300:
            return r.status, json.loads(r.read())
        return r.status, events_of(r)
    finally:
        c.close()


def check_stream(evs):
    """The stream's invariants; returns (stdout, stderr, end)."""
    assert [e["seq"] for e in evs] == list(range(len(evs))), evs
    assert evs[0]["type"] == "start" and evs[-1]["type"] == "end", evs
    assert sum(e["type"] == "end" for e in evs) == 1
    out = "".join(e["text"] for e in evs if e["type"] == "stdout")
    err = "".join(e["text"] for e in evs if e["type"] == "stderr")
    return out, err, evs[-1]


def sh(gw, kid, command, **extra):
    st, evs = run(gw, kid, {"command": command, **extra})
    assert st == 201, evs
    return check_stream(evs)


def execute(gw, kid, code, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    c.request("POST", f"/api/kernels/{kid}/execute", body=json.dumps({"code": code}).encode(),
              headers={"Authorization": f"token {gw.token}", "Content-Type": "application/json"})
    r = c.getresponse()
    evs = events_of(r)
    c.close()
    text = "".join(e.get("text", "") for e in evs if e["type"] == "stream")
    return text, evs[-1]


def test_output_order_separation_and_exit_codes(gw, kid):
    out, err, end = sh(gw, kid, "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; "
                                "done; exit 3")
    assert out == "out1\nout2\nout3\n" and err == "err1\nerr2\nerr3\n", (out, err)
    assert end["status"] == "error" and end["exit_code"] == 3 and end["signal"] is None, end
    assert end["duration_ms"] >= 100
    out, err, end = sh(gw, kid, "true")
    assert (out, err, end["status"], end["exit_code"], end["message"]) == ("", "", "ok", 0, "")
    # argv, without a shell; a program that does not exist: 127, as a shell says it
    st, evs = run(gw, kid, {"argv": ["printf", "%s|", "a b", "$HOME", "*"]})
    out, _, end = check_stream(evs)
    assert out == "a b|$HOME|*|" and end["status"] == "ok", evs
    st, evs = run(gw, kid, {"argv": ["/no/such/program"]})
    _, _, end = check_stream(evs)
    assert end["exit_code"] == 127 and end["status"] == "error", end
    assert "No such file or directory" in end["message"], end
    # bytes that are not UTF-8 arrive as U+FFFD, a character cut between reads whole
    out, _, _ = sh(gw, kid, r"printf 'a\xffb\xe2\x82'; sleep 0.2; printf '\xac'")
    assert out == "a\ufffdb\u20ac", repr(out)


def test_sse(gw, kid):
    c, r = open_cmd(gw, kid, {"command": "echo hi"}, accept="text/event-stream")
    assert r.status == 201 and r.getheader("Content-Type").startswith("text/event-stream")
    body = r.read().decode()
    c.close()
    blocks = [b for b in body.split("\n\n") if b]
    types = [dict(l.split(": ", 1) for l in b.splitlines())["event"] for b in blocks]
    assert types == ["start", "stdout", "end"], body
    assert json.loads(blocks[1].splitlines()[-1][6:])["text"] == "hi\n"


def test_signal_and_timeout(gw, kid):
    _, _, end = sh(gw, kid, "kill -TERM $$")
    assert end["status"] == "killed" and end["signal"] == 15 and end["exit_code"] is None, end
    assert "SIGTERM" in end["message"]
    t = time.monotonic()
    out, _, end = sh(gw, kid, "echo before; sleep 60; echo after", timeout=0.5)
    assert time.monotonic() - t < 30
    assert out == "before\n" and end["status"] == "timeout" and end["signal"] == 9, (out, end)
    assert "timeout" in end["message"]


def wait_gone(gw, kid, pidfile, within=20):
    """True once the process whose pid the command wrote into pidfile is gone."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        out, _, _ = sh(gw, kid, f"kill -0 $(cat {pidfile}) 2>/dev/null && echo alive || echo gone")
        if out == "gone\n":
            return True
        time.sleep(0.2)
    return False


def test_cancel_by_delete_and_by_client_gone(gw, kid):
    c, r = open_cmd(gw, kid, {"command": "echo $$ > p1; echo started; exec sleep 60"})
    assert r.status == 201
    loc = r.getheader("Location")
    start, out = events_of(r, 2)
    assert out["text"] == "started\n"
    assert loc == f"/api/kernels/{kid}/commands/{start['command_id']}"
    st, body, _ = gw.request("DELETE", loc)
    assert st == 202 and body["state"] == "cancelling", body
    end = events_of(r)[-1]
    c.close()
    assert end["type"] == "end" and end["status"] == "cancelled" and end["signal"] == 9, end
    assert wait_gone(gw, kid, "p1")
    # once ended, the command is no longer known
    assert gw.request("DELETE", loc)[0] == 404
    # the client goes away: the command (and what it started) is killed
    c, r = open_cmd(gw, kid, {"command": "sleep 60 & echo $! > p2; echo started; wait"})
    events_of(r, 2)
    c.close()
    assert wait_gone(gw, kid, "p2")


def test_stdin(gw, kid):
    data = "".join(f"line {i} é\n" for i in range(20000))  # ~250 KB: more than a pipe holds
    out, _, end = sh(gw, kid, "wc -c", stdin=data)
    assert end["status"] == "ok" and out.strip() == str(len(data.encode())), out
    st, evs = run(gw, kid, {"command": "sha256sum", "stdin": data})
    out, _, _ = check_stream(evs)
    assert out.split()[0] == hashlib.sha256(data.encode()).hexdigest()
    # without stdin: /dev/null
    out, _, _ = sh(gw, kid, "cat; echo eof")
    assert out == "eof\n"
    # the documented most (1 MiB) fits under the default --max-body-bytes (also 1 MiB): the
    # route takes the JSON-escaped stdin beyond it; binary-looking text escapes to 6 bytes each
    big = "\x01" * (1 << 20)
    st, evs = run(gw, kid, {"command": "wc -c", "stdin": big})
    assert st == 201, evs
    out, _, end = check_stream(evs)
    assert end["status"] == "ok" and out.strip() == str(1 << 20), (out, end)
    st, body = run(gw, kid, {"command": "wc -c", "stdin": "x" * ((1 << 20) + 1)})
    assert st == 400 and "stdin" in body["message"], body


def test_environment_cwd_and_workspace(gw, kid):
    out, _, _ = sh(gw, kid, 'echo "$KERNEL_TEST_VAR $EXTRA"; pwd', env={"EXTRA": "over"})
    assert out.splitlines()[0] == "from-the-kernel over", out
    sb = sandboxed(gw)
    # the kernel's workspace, at the same paths, both ways
    text, end = execute(gw, kid, "import os\nopen('from_kernel.txt','w').write('k')\n"
                                 "print(os.getcwd())")
    kcwd = text.strip()
    assert out.splitlines()[1] == kcwd, (out, kcwd)
    out, _, _ = sh(gw, kid, "cat from_kernel.txt; echo c > from_cmd.txt; mkdir -p sub")
    assert out == "k"
    text, _ = execute(gw, kid, "print(open('from_cmd.txt').read(), end='')")
    assert text == "c\n"
    out, _, _ = sh(gw, kid, "pwd", cwd="sub")
    assert out == os.path.join(kcwd, "sub") + "\n"
    # a relative cwd stays inside the workspace: one that leaves it is refused, not run there
    for bad in ("../../../etc", "sub/../..", "./sub", "sub//x", ".."):
        st, body = run(gw, kid, {"command": "pwd", "cwd": bad})
        assert st == 400 and "cwd" in body["message"], (bad, st, body)
    if sb:
        assert kcwd == "/mnt/data"


@pytest.mark.needs_sandbox
def test_sandboxed_like_the_kernel(gw, kid):
    code = ("import os\nprint(os.getuid(), os.getgid(), open('/proc/1/cmdline','rb').read(), "
            "os.uname().nodename)")
    text, _ = execute(gw, kid, code)
    out, _, _ = sh(gw, kid, "python3 -c \"" + code.replace("\n", ";") + "\"")
    assert out == text and out.startswith("1000 1000 b'init\\x00' sandbox"), (out, text)
    out, _, _ = sh(gw, kid, "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status")
    st = dict(l.split(":\t") for l in out.splitlines())
    assert st == {"Seccomp": "2", "NoNewPrivs": "1", "CapEff": "0000000000000000"}, st
    # same pid namespace, cgroup namespace: the kernel is pid 2, and init is pid 1
    out, _, _ = sh(gw, kid, "cat /proc/2/cmdline | tr '\\0' ' '; echo; cat /proc/self/cgroup")
    assert "ipykernel" in out.splitlines()[0] or "python" in out.splitlines()[0], out
    # no host files: no /etc/shadow, nothing of the gateway's runtime directory or binary
    out, _, _ = sh(gw, kid, "ls /etc/shadow /run/kgw /work " + conftest.KGW_BIN +
                   " 2>&1; ls /; cat /proc/1/environ | wc -c")
    assert out.count("No such file or directory") == 4, out
    assert out.splitlines()[-1] == "0", out
    # init's descriptors (its command socket) are not the command's to take
    out, _, _ = sh(gw, kid, "ls /proc/1/fd 2>&1; python3 -c "
                            "'import os; print(sorted(os.listdir(\"/proc/self/fd\")))'")
    assert "Permission denied" in out, out
    # nothing but its stdio (and the directory being listed)
    assert out.splitlines()[-1] == "['0', '1', '2', '3']", out
    # no network without an egress policy: only a loopback of its own
    out, _, _ = sh(gw, kid, "python3 - <<'EOF'\nimport socket\n"
                            f"for a in [('127.0.0.1', {gw.port}), ('1.1.1.1', 53)]:\n"
                            "    s = socket.socket(); s.settimeout(3)\n"
                            "    try: s.connect(a); print('connected')\n"
                            "    except OSError as e: print(type(e).__name__)\n"
                            "print(sorted(n for _, n in socket.if_nameindex()))\nEOF")
    lines = out.splitlines()
    assert "connected" not in out and lines[-1] == "['lo']", out


@pytest.mark.needs_sandbox
def test_limits_count_the_commands(gw, kid):
    # a fork bomb stays inside the kernel's pids limit (64), and the kernel lives on
    bomb = ("import os, time\nn = 0\ntry:\n    while n < 500:\n        if os.fork() == 0:\n"
            "            time.sleep(60)\n            os._exit(0)\n        n += 1\n"
            "except OSError as e:\n    print(e.errno)\n"
            "print(n, sum(p.isdigit() for p in os.listdir('/proc')))\n")
    out, err, end = sh(gw, kid, "python3 -c \"$BOMB\"", env={"BOMB": bomb}, timeout=60)
    assert end["status"] == "ok", (out, err, end)
    errno_, counts = out.splitlines()
    started, procs = (int(x) for x in counts.split())
    assert errno_ == "11", out  # EAGAIN: the cgroup's pids.max
    assert started < 64 and procs <= 64, out
    # its processes went with it (the group is killed when the command exits)
    out, _, _ = sh(gw, kid, "ls /proc | grep -c '^[0-9]'")
    assert int(out) < 10, out
    text, end = execute(gw, kid, "print('alive')")
    assert text == "alive\n"
    # memory: the kernel's cgroup limit (256 MiB) kills a command that takes more
    _, _, end = sh(gw, kid, "python3 -c 'b = bytearray(600 << 20); print(len(b))'")
    assert end["status"] == "out_of_memory" and end["signal"] == 9, end
    assert str(256 << 20) in end["message"], end
    text, end = execute(gw, kid, "print('alive')")
    assert text == "alive\n"


def test_output_cap(gw, kid):
    out, _, end = sh(gw, kid, "head -c 5000000 /dev/zero | tr '\\0' x; echo never")
    assert end["status"] == "output_limit" and len(out) == 200000, (len(out), end)
    assert set(out) == {"x"}


def test_runs_while_a_cell_is_busy(gw, kid):
    res = {}
    t = threading.Thread(target=lambda: res.update(r=execute(gw, kid, "import time\n"
                                                             "time.sleep(8)\nprint('done')")))
    t.start()
    try:
        time.sleep(1.5)
        t0 = time.monotonic()
        out, _, end = sh(gw, kid, "echo during")
        took = time.monotonic() - t0
        assert out == "during\n" and end["status"] == "ok"
        assert took < 6 and t.is_alive(), took
    finally:
        t.join(60)
    assert res["r"][0] == "done\n"


def test_ended_with_the_kernel(gw):
    k = gw.start_kernel()["id"]
    # a restart: the command ends, and commands run in the new process
    c, r = open_cmd(gw, k, {"command": "echo started; sleep 120"})
    events_of(r, 2)
    assert gw.request("POST", f"/api/kernels/{k}/restart")[0] == 200
    end = events_of(r)[-1]
    c.close()
    assert end["type"] == "end" and end["status"] == "kernel_died", end
    out, _, end = sh(gw, k, "echo again")
    assert out == "again\n" and end["status"] == "ok"
    # a shutdown
    c, r = open_cmd(gw, k, {"command": "echo started; sleep 120"})
    events_of(r, 2)
    assert gw.delete_kernel(k) == 204
    end = events_of(r)[-1]
    c.close()
    assert end["type"] == "end" and end["status"] == "kernel_died", end


def test_tenancy_and_bad_requests(gw, kid):
    st, body = run(gw, kid, {"command": "id"}, key=gw.other_key)
    assert st == 404 and body["reason"] == "Not Found", body
    c, r = open_cmd(gw, kid, {"command": "echo $$ > p3; exec sleep 60"})
    start = events_of(r, 1)[0]
    loc = f"/api/kernels/{kid}/commands/{start['command_id']}"
    h = {"Authorization": f"token {gw.other_key}"}
    assert gw.request("DELETE", loc, headers=h)[0] == 404
    assert gw.request("DELETE", loc)[0] == 202
    c.close()
    st, body = run(gw, "6f1c2a4e-93b1-4d5e-8a0f-2b7c9d1e3f40", {"command": "id"})
    assert st == 404
    for bad in [{}, {"command": "id", "argv": ["id"]}, {"command": ""}, {"argv": []},
                {"argv": [""]}, {"argv": "id"}, {"command": "id", "nope": 1},
                {"command": "id", "timeout": 0}, {"command": "id", "timeout": "1"},
                {"command": "id", "env": {"A-B": "x"}}, {"command": "id", "env": {"A": 1}},
                {"command": "a\u0000b"}, {"command": "id", "stdin": 5}, [1]]:
        st, body = run(gw, kid, bad)
        assert st == 400 and body["message"], (bad, st, body)


def test_concurrency_limit(gw, kid):
    conns = []
    try:
        for _ in range(16):
            c, r = open_cmd(gw, kid, {"command": "sleep 60"})
            assert r.status == 201
            events_of(r, 1)
            conns.append(c)
        st, body = run(gw, kid, {"command": "true"})
        assert st == 429 and "--max-commands-per-kernel" in body["message"], body
    finally:
        for c in conns:
            c.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        st, evs = run(gw, kid, {"command": "true"})
        if st == 201:
            break
        time.sleep(0.2)
    assert st == 201


def test_audited(gw, kid):
    sh(gw, kid, "exit 4")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(gw.audit) as f:
            evs = [json.loads(l) for l in f]
        ends = [e for e in evs if e["event"] == "command" and e["kernel"] == kid
                and e["exit_code"] == 4]
        if ends:
            break
        time.sleep(0.2)
    e = ends[-1]
    assert e["tenant"] == "default" and e["status"] == "error" and e["program"] == "/bin/bash"
    assert len(e["command_sha256"]) == 64 and "exit 4" not in json.dumps(e)
    assert any(s["event"] == "command_start" and s["command_sha256"] == e["command_sha256"]
               for s in evs)
    # and counted
    st, text, _ = gw.request("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else text
    counts = {l.split()[0]: float(l.split()[1]) for l in text.splitlines()
              if l.startswith("kgw_commands_total{")}
    assert counts['kgw_commands_total{status="error"}'] >= 1, counts
    assert len(counts) == 8, counts


def test_mcp_run_command(gw):
    import test_mcp as M
    sid = M.initialize(gw)
    try:
        st, body, _ = M.call(gw, sid, 2, "run_command",
                             {"command": "echo out; echo err >&2; exit 2"})
        res = body["result"]
        assert st == 200 and res["isError"] is True, body
        texts = [c["text"] for c in res["content"]]
        assert texts[:2] == ["out\n", "err\n"], texts
        assert res["structuredContent"]["exit_code"] == 2
        assert res["structuredContent"]["status"] == "error"
        # the session's kernel: the same workspace as execute_code
        M.call(gw, sid, 3, "execute_code", {"code": "open('m.txt','w').write('mcp')"})
        st, body, _ = M.call(gw, sid, 4, "run_command", {"command": "cat m.txt", "timeout": 5})
        assert body["result"]["isError"] is False
        assert body["result"]["content"][0]["text"] == "mcp"
        st, body, _ = M.call(gw, sid, 5, "run_command", {"command": "sleep 30", "timeout": 0.3})
        assert body["result"]["structuredContent"]["status"] == "timeout"
        # notifications/cancelled kills it
        res = {}
        t = threading.Thread(target=lambda: res.update(r=M.call(
            gw, sid, 6, "run_command", {"command": "echo $$ > mc.pid; exec sleep 60"})))
        t0 = time.monotonic()
        t.start()
        time.sleep(1.5)
        st, _, _ = M.post(gw, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 6, "reason": "test"}}, sid)
        assert st == 202
        t.join(30)
        assert not t.is_alive() and time.monotonic() - t0 < 30
        st, body, _ = M.call(gw, sid, 7, "run_command",
                             {"command": "kill -0 $(cat mc.pid) 2>/dev/null && echo alive || "
                                         "echo gone"})
        assert body["result"]["content"][0]["text"] == "gone\n", body
    finally:
        M.post(gw, None, sid, method="DELETE")


@pytest.mark.parametrize("flags", [["--pool", "python3=0"], ["--no-fork-server"],
                                   ["--no-sandbox"]])
def test_start_paths(gateway_factory, flags):
    """A kernel forked by the fork server (its init gets the command socket through the
    server), one exec'd, and an unsandboxed one."""
    import re
    g = gateway_factory(*flags)
    forked = "--pool" in flags
    if forked:
        deadline = time.monotonic() + 60
        while "fork server: ready" not in g.log() and time.monotonic() < deadline:
            time.sleep(0.1)
    k = g.start_kernel()["id"]
    if forked:
        assert re.search(rf"kernel={k}: ready \(pid \d+, forked", g.log()), "not forked"
    try:
        # (argv: unsandboxed, "command"'s login shell would read the host's profile)
        st, evs = run(g, k, {"argv": ["/bin/bash", "-c", "echo $((6*7)); echo e >&2; id -u"],
                             "timeout": 30})
        out, err, end = check_stream(evs)
        lines = out.splitlines()
        assert lines[0] == "42" and err == "e\n" and end["status"] == "ok", (out, end)
        if "--no-sandbox" in flags:
            assert lines[1] == str(os.getuid())
        else:
            assert lines[1] == "1000"
        st, evs = run(g, k, {"argv": ["sleep", "30"], "timeout": 0.3})
        end = evs[-1]
        assert end["status"] == "timeout"
        c, r = open_cmd(g, k, {"argv": ["/bin/sh", "-c", "echo started; exec sleep 120"]})
        events_of(r, 2)
        assert g.delete_kernel(k) == 204
        assert events_of(r)[-1]["status"] == "kernel_died"
        c.close()
    finally:
        g.delete_kernel(k)


# Runs kgw with descriptors 3..1102 taken (inherited), as a gateway with many kernels and
# clients has them: every descriptor it opens from then on has a number above 1024.
BUSY = ("import os, resource, sys\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n"
        "for _ in range(1100):\n"
        "    os.set_inheritable(os.open('/dev/null', os.O_RDONLY), True)\n"
        "os.execv(sys.argv[1], sys.argv[1:])\n")


@pytest.mark.needs_sandbox
def test_exec_started_kernel_on_a_busy_gateway():
    """The command socket of a kernel the gateway exec's (not forked by the fork server) has
    the gateway's number for it, above 1024 on a busy gateway: init must still find it (it was
    left looking below 1024, and commands then never answered)."""
    g = conftest.start_gateway(["--no-fork-server"], prefix=["/usr/bin/python3", "-c", BUSY])
    try:
        k = g.start_kernel()["id"]
        st, evs = run(g, k, {"argv": ["/bin/sh", "-c", "echo $((6*7))"], "timeout": 20},
                      timeout=30)
        out, _, end = check_stream(evs)
        assert out == "42\n" and end["status"] == "ok", (out, end)
        g.delete_kernel(k)
    finally:
        conftest.stop_gateway(g)


@pytest.mark.needs_sandbox
def test_egress_policy_applies(gateway_factory, tmp_path):
    """A command reaches what its kernel's egress policy allows, through the kernel's proxy,
    and nothing else."""
    import hashlib
    import http.server
    import secrets as pysecrets

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    servers = [http.server.ThreadingHTTPServer((h, 0), Hello) for h in ("127.0.0.2", "127.0.0.3")]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        allowed, other = (s.server_address[1] for s in servers)
        key = pysecrets.token_hex(16)
        h = hashlib.blake2b(key.encode(), digest_size=32).hexdigest()
        kf = tmp_path / "keys"
        kf.write_text(f"egt blake2b:{h} egress=127.0.0.2:{allowed}\n")
        g = gateway_factory(f"--key-file={kf}")
        g.token = key
        k = g.start_kernel()["id"]
        fetch = ("python3 - <<'EOF'\nimport urllib.request\n"
                 f"for u in ['http://127.0.0.2:{allowed}/', 'http://127.0.0.3:{other}/']:\n"
                 "    try: print(urllib.request.urlopen(u, timeout=10).read().decode())\n"
                 "    except Exception as e: print('refused', getattr(e, 'code', type(e).__name__))\n"
                 "EOF")
        out, _, end = sh(g, k, fetch, timeout=60)
        assert out.splitlines() == ["hello from the host", "refused 403"], out
        # without the proxy (its variables unset), nothing at all
        out, _, _ = sh(g, k, "env -u HTTP_PROXY -u http_proxy " + fetch, timeout=60)
        assert [l.split()[0] for l in out.splitlines()] == ["refused", "refused"], out
        g.delete_kernel(k)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
