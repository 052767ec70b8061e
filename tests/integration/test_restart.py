"""kgw restarted behind a listening socket it is given (systemd's socket activation, as a
kgw.socket unit does it): the socket outlives each kgw, so connections made while none runs
wait in its backlog and no client is refused, whether kgw stopped by SIGTERM or was killed."""
import errno
import http.client
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import conftest
from conftest import Gateway, _wait_ready

pytestmark = pytest.mark.kgw_only

# LISTEN_PID must be kgw's own pid: the shell's, which kgw keeps through the execs
ACTIVATE = ["/bin/sh", "-c", 'export LISTEN_FDS=1 LISTEN_PID=$$; exec "$@"', "sh"]


def listening_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


def start_activated(sock, token, extra=()):
    """kgw with sock as its descriptor 3, as the service manager passes it."""
    port = sock.getsockname()[1]
    log = tempfile.NamedTemporaryFile(prefix="kgw-test-", suffix=".log", delete=False)
    argv = [*ACTIVATE, *shlex.split(os.environ.get("KGW_WRAPPER", "")), conftest.KGW_BIN,
            "--ip", "127.0.0.1", "--port", str(port), "--api-key", token,
            "--log-level", "info", "--pool", "python3=0",
            *shlex.split(os.environ.get("KGW_EXTRA_ARGS", "")), *extra]
    fd = sock.fileno()

    def as_fd3():
        os.dup2(fd, 3)  # dup2 clears close-on-exec on the copy

    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, pass_fds=(fd, 3),
                            preexec_fn=as_fd3, start_new_session=True)
    gw = Gateway(proc, port, token, log.name)
    _wait_ready(gw)
    return gw


class Loop(threading.Thread):
    """GET /api in a loop on new connections; counts answers, refusals and other failures."""

    def __init__(self, port, token):
        super().__init__(daemon=True)
        self.port, self.token = port, token
        self.stop = threading.Event()
        self.ok, self.refused, self.other = 0, 0, []

    def run(self):
        while not self.stop.is_set():
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                c.request("GET", "/api", headers={"Authorization": f"token {self.token}"})
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    self.ok += 1
                else:
                    self.other.append(r.status)
            except ConnectionRefusedError:
                self.refused += 1
            except OSError as e:
                # a connection the stopping kgw had taken but not answered: reset or closed;
                # the client sends it again, as HTTP clients do on an idempotent request
                self.other.append(errno.errorcode.get(e.errno, str(e)))
            except http.client.HTTPException as e:
                self.other.append(type(e).__name__)
            finally:
                c.close()
            time.sleep(0.005)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_restart_refuses_no_connection(how):
    sock = listening_socket()
    token = secrets.token_hex(16)
    gws = [start_activated(sock, token)]
    try:
        assert "the socket kgw was given" in gws[0].log(), gws[0].log()
        loop = Loop(sock.getsockname()[1], token)
        loop.start()
        time.sleep(0.5)
        before = loop.ok
        assert before > 0
        gws[0].proc.send_signal(getattr(signal, how))
        gws[0].proc.wait(timeout=30)
        # a moment with no kgw at all: connections wait in the socket's backlog
        time.sleep(0.5)
        during = loop.ok
        gws.append(start_activated(sock, token))
        time.sleep(0.5)
        loop.stop.set()
        loop.join(60)
        assert loop.refused == 0, f"{loop.refused} connections refused"
        assert loop.ok > during >= before, (before, during, loop.ok)
        # at most the one connection the first kgw held when it went
        assert len(loop.other) <= 1, loop.other
    finally:
        for g in gws:
            conftest.stop_gateway(g) if g.proc.poll() is None else None
        sock.close()


def test_socket_for_another_address_is_closed():
    """A socket passed in that is not for --ip/--port is closed (logged), and kgw listens on
    its own."""
    other = listening_socket()
    token = secrets.token_hex(16)
    port = conftest.free_port()
    log = tempfile.NamedTemporaryFile(prefix="kgw-test-", suffix=".log", delete=False)
    fd = other.fileno()
    proc = subprocess.Popen([*ACTIVATE, conftest.KGW_BIN, "--ip", "127.0.0.1", "--port", str(port),
                             "--api-key", token, "--pool", "python3=0",
                             *shlex.split(os.environ.get("KGW_EXTRA_ARGS", ""))],
                            stdout=log, stderr=subprocess.STDOUT, pass_fds=(fd, 3),
                            preexec_fn=lambda: os.dup2(fd, 3), start_new_session=True)
    gw = Gateway(proc, port, token, log.name)
    try:
        _wait_ready(gw)
        assert "is not for --ip/--port" in gw.log(), gw.log()
        assert gw.request("GET", "/api")[0] == 200
    finally:
        conftest.stop_gateway(gw)
        other.close()


# --- SIGUSR2: kgw restarts itself in place (gateway/handover.h) ---

def descendants(pid):
    """The processes under pid (kernels, their sandboxes, the fork server)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def instance_dir(pid):
    """The runtime directory (gw-XXXXXX) the kgw process holds the lock of."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith("/.lock") and "/gw-" in target:
            return os.path.dirname(target)
    return None


def cgroups_of(inst):
    return [n for base in conftest._own_cgroup_dirs() if os.path.isdir(base)
            for n in os.listdir(base) if n.startswith(f"kgw-{inst}")]


def wait_for(pred, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    return pred()


def restarts(gw):
    return gw.log().count("restart: exec ")


def settled(gw, n):
    """The n-th new image serves: its warm pool and fork server are up again."""
    return wait_for(lambda: gw.log().count("fork server: ready") > n
                    and gw.log().count("pool: python3 filled") > n, 60)


def kernel_pid(gw, kid, what):
    """The pid of kid's process as the log says (its start, or its carrying over)."""
    m = re.findall(rf"kernel={kid}: {what} \(pid (\d+)", gw.log())
    return int(m[-1]) if m else None


def test_sigusr2_restarts_in_place():
    """The kernels go over: the same ids, processes, variables and sessions; clients reconnect
    (1012); nothing of the instance is left once they are gone."""
    import websockets.exceptions
    import jclient as J

    gw = conftest.start_gateway(["--pool", "python3=1", "--log-level", "info"])
    try:
        assert settled(gw, 0), gw.log()
        pid = gw.proc.pid
        procs_before = len(descendants(pid))
        inst = instance_dir(pid)
        assert inst and cgroups_of(os.path.basename(inst)), (inst, gw.log())
        kid = gw.start_kernel()["id"]
        kpid = wait_for(lambda: kernel_pid(gw, kid, "ready"))
        assert kpid and kpid in descendants(pid), gw.log()
        st, sess, _ = gw.request("POST", "/api/sessions", {
            "path": "work.ipynb", "name": "work.ipynb", "type": "notebook",
            "kernel": {"id": kid}})
        assert st == 201, (st, sess)

        async def until_closed(c, timeout=30):
            deadline = time.monotonic() + timeout
            try:
                while True:
                    await c._recv_frame(max(deadline - time.monotonic(), 0.01))
            except websockets.exceptions.ConnectionClosed:
                return c.ws.close_code

        async def before():
            c = await J.connect(gw, kid)
            assert (await c.execute("x = 42")).reply["content"]["status"] == "ok"
            loop = Loop(gw.port, gw.token)
            loop.start()
            time.sleep(0.3)
            gw.proc.send_signal(signal.SIGUSR2)
            code = await until_closed(c)
            return code, loop

        async def value(k, expr):
            c = await J.connect(gw, k)
            r = await c.execute(f"print({expr})")
            await c.close()
            return r.stdout

        def carried_over(n):
            """After the n-th restart: kid is the same kernel, with its state and session."""
            assert wait_for(lambda: gw.log().count("listening on http") >= n + 1, 60), gw.log()
            _wait_ready(gw)
            assert gw.proc.poll() is None and gw.proc.pid == pid
            st, model, _ = gw.request("GET", f"/api/kernels/{kid}")
            assert st == 200, (st, gw.log())
            assert kid in [k["id"] for k in gw.request("GET", "/api/kernels")[1]]
            assert kernel_pid(gw, kid, "restart: carried over") == kpid, gw.log()
            assert kpid in descendants(pid)
            assert "42" in J.run(value(kid, "x")), gw.log()
            st, ss, _ = gw.request("GET", "/api/sessions")
            assert st == 200 and [(s["id"], s["kernel"]["id"]) for s in ss
                                  if s["path"] == "work.ipynb"] == [(sess["id"], kid)], ss
            # the same instance: its runtime directory and cgroups
            assert instance_dir(pid) == inst and os.path.isdir(f"{inst}/{kid}")
            assert cgroups_of(os.path.basename(inst))

        code, loop = J.run(before())
        assert code == 1012, code
        assert wait_for(lambda: gw.log().count("listening on http") >= 2, 60), gw.log()
        _wait_ready(gw)
        time.sleep(0.3)
        loop.stop.set()
        loop.join(60)
        # the same process, and no connection refused while it changed images
        assert "restart: exec " in gw.log() and "keeping the API key" not in gw.log()
        assert loop.refused == 0, f"{loop.refused} connections refused"
        assert loop.ok > 0 and len(loop.other) <= 1, (loop.ok, loop.other)
        carried_over(1)
        assert settled(gw, 1), gw.log()
        # new kernels start and run (the fork server is back)
        kid2 = gw.start_kernel()["id"]
        assert "42" in J.run(value(kid2, "6 * 7"))
        # a second restart keeps both
        gw.proc.send_signal(signal.SIGUSR2)
        carried_over(2)
        assert settled(gw, 2), gw.log()
        assert gw.request("GET", f"/api/kernels/{kid2}")[0] == 200
        assert "42" in J.run(value(kid2, "6 * 7"))
        # a client's restart of a kernel that came over: a new process, as any restart
        assert gw.request("POST", f"/api/kernels/{kid2}/restart")[0] == 200, gw.log()
        assert "42" in J.run(value(kid2, "6 * 7"))
        # once they are deleted, nothing of them is left: processes, directories, cgroups
        for k in (kid, kid2):
            assert gw.request("DELETE", f"/api/kernels/{k}")[0] == 204
        assert wait_for(lambda: len(descendants(pid)) == procs_before), \
            (procs_before, descendants(pid))
        assert kpid not in descendants(pid)
        assert wait_for(lambda: not os.path.exists(f"{inst}/{kid}")
                        and not os.path.exists(f"{inst}/{kid2}"))
        assert gw.request("GET", "/api/sessions")[1] == []
    finally:
        conftest.stop_gateway(gw)
    # and nothing of the instance once kgw has stopped
    assert not os.path.exists(inst) and cgroups_of(os.path.basename(inst)) == []


def test_sigusr2_ends_the_kernels_that_cannot_go_over():
    """A kernel that is not running (here: paused) is shut down before the exec, as at any
    exit; the others go over."""
    gw = conftest.start_gateway(["--pool", "python3=0", "--log-level", "info"])
    try:
        pid = gw.proc.pid
        keep, paused = gw.start_kernel()["id"], gw.start_kernel()["id"]
        assert gw.request("POST", f"/api/kernels/{paused}/pause")[0] in (200, 204), gw.log()
        gw.proc.send_signal(signal.SIGUSR2)
        assert wait_for(lambda: gw.log().count("listening on http") >= 2, 60), gw.log()
        _wait_ready(gw)
        assert gw.request("GET", f"/api/kernels/{keep}")[0] == 200, gw.log()
        assert gw.request("GET", f"/api/kernels/{paused}")[0] == 404, gw.log()
        assert "1 kernel goes over, 1 ends" in gw.log(), gw.log()
        assert not os.path.exists(f"{instance_dir(pid)}/{paused}")
    finally:
        conftest.stop_gateway(gw)


def cgroup_dir(pid):
    """The memory cgroup directory of a process (v2: its only one)."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctl, path = line.rstrip("\n").split(":", 2)
            if ctl == "":
                return "/sys/fs/cgroup" + path
            if "memory" in ctl.split(","):
                return "/sys/fs/cgroup/memory" + path
    return None


def test_sigusr2_ends_a_kernel_it_cannot_take_over(tmp_path):
    """The new image cannot take a kernel whose kernelspec is gone: it is killed, and its
    runtime directory and cgroup removed; the others go over."""
    import jupyter_client.kernelspec as ks

    spec = tmp_path / "kernels" / "gone"
    spec.mkdir(parents=True)
    src = ks.KernelSpecManager().find_kernel_specs()["python3"]
    shutil.copy(os.path.join(src, "kernel.json"), spec / "kernel.json")
    gw = conftest.start_gateway(["--pool", "python3=0", "--log-level", "info"],
                                env={"JUPYTER_PATH": str(tmp_path)})
    try:
        pid = gw.proc.pid
        inst = instance_dir(pid)
        gone, kept = gw.start_kernel("gone")["id"], gw.start_kernel()["id"]
        kpid = wait_for(lambda: kernel_pid(gw, gone, "ready"))
        assert kpid and kpid in descendants(pid), gw.log()
        cg = cgroup_dir(kpid)
        assert cg and os.path.isdir(cg) and f"kgw-{os.path.basename(inst)}" in cg, cg
        shutil.rmtree(spec)
        gw.proc.send_signal(signal.SIGUSR2)
        assert wait_for(lambda: gw.log().count("listening on http") >= 2, 60), gw.log()
        _wait_ready(gw)
        assert re.search(rf"kernel={gone}: restart: not carried over \(ended\): its "
                         r"kernelspec gone is gone", gw.log()), gw.log()
        assert gw.request("GET", f"/api/kernels/{gone}")[0] == 404
        assert gw.request("GET", f"/api/kernels/{kept}")[0] == 200, gw.log()
        assert wait_for(lambda: kpid not in descendants(pid)), descendants(pid)
        assert wait_for(lambda: not os.path.exists(f"{inst}/{gone}")
                        and not os.path.exists(f"{inst}/{gone}.root"))
        assert wait_for(lambda: not os.path.exists(cg)), cg
    finally:
        conftest.stop_gateway(gw)


def test_sigusr2_keeps_a_generated_key():
    """Without --api-key kgw makes one up; the restarted image keeps it."""
    port = conftest.free_port()
    log = tempfile.NamedTemporaryFile(prefix="kgw-test-", suffix=".log", delete=False)
    proc = subprocess.Popen([conftest.KGW_BIN, "--ip", "127.0.0.1", "--port", str(port),
                             "--pool", "python3=0", "--log-level", "info",
                             *shlex.split(os.environ.get("KGW_EXTRA_ARGS", ""))],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    gw = Gateway(proc, port, "", log.name)
    try:
        key = wait_for(lambda: re.search(r"API key \(generated.*: ([0-9a-f]{64})", gw.log()))
        assert key, gw.log()
        gw.token = key.group(1)
        _wait_ready(gw)
        proc.send_signal(signal.SIGUSR2)
        assert wait_for(lambda: "keeping the API key" in gw.log()), gw.log()
        _wait_ready(gw)  # answered 200 with the same key
        assert gw.log().count("API key (generated") == 1
    finally:
        conftest.stop_gateway(gw)
