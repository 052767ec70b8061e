"""The kernel side of checkpoints (python/kgw_ckpt.py), on a real ipykernel driven directly over
ZeroMQ (jupyter_client), as the gateway will drive it: take a checkpoint, change the state, roll
back (twice), and check what came back: variables, a numpy array's checksum, the random state,
a workspace file's bytes, the execution count; that the frozen checkpoint holds no socket but
its own; that nothing is left behind after many cycles; what a revived process must not do
with the descriptor numbers of the generation before it. The gateway's faces are tested in
test_ckpt_rest.py and the files beside it (docs/checkpoints.md)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
from jupyter_client import BlockingKernelClient  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"


class Kernel:
    def __init__(self, tmp):
        self.dir = tmp
        self.ws = os.path.join(tmp, "ws")
        os.makedirs(self.ws)
        self.cf = os.path.join(tmp, "connection.json")
        with open(self.cf, "w") as f:
            json.dump({"transport": "ipc", "ip": os.path.join(tmp, "k"), "shell_port": 1,
                       "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
                       "key": uuid.uuid4().hex, "signature_scheme": "hmac-sha256"}, f)
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"),
                   PYDEVD_DISABLE_FILE_VALIDATION="1")
        # as under kgw: ipykernel captures descriptors 1 and 2 unless it sees pytest
        env.pop("PYTEST_CURRENT_TEST", None)
        self.proc = subprocess.Popen([PY, "-m", "ipykernel_launcher", "-f", self.cf], env=env,
                                     stdout=subprocess.DEVNULL,
                                     start_new_session=True)
        self.kc = BlockingKernelClient(connection_file=self.cf)
        self.kc.load_connection_file()
        self.kc.start_channels()
        self.wait_info(60)
        assert self.execute("import kgw_ckpt; kgw_ckpt.install()", silent=True)["status"] == "ok"

    def wait_info(self, timeout):
        """Asks kernel_info until it is answered and an iopub message proves the subscription
        live (a new process binds the endpoints again; SUB sockets join late), as the
        gateway does at a start."""
        t0 = time.monotonic()
        got_reply = got_iopub = False
        while time.monotonic() - t0 < timeout:
            self.kc.kernel_info()
            end = time.monotonic() + 0.3
            while time.monotonic() < end and not (got_reply and got_iopub):
                try:
                    r = self.kc.get_shell_msg(timeout=0.05)
                    got_reply = got_reply or r["msg_type"] == "kernel_info_reply"
                except Exception:
                    pass
                try:
                    m = self.kc.get_iopub_msg(timeout=0.05)
                    # the new process's answer to a probe (not an old message still queued)
                    got_iopub = got_iopub or (got_reply and m["parent_header"].get("msg_type")
                                              == "kernel_info_request")
                except Exception:
                    pass
            if got_reply and got_iopub:
                # what is left of the probes' output
                while True:
                    try:
                        self.kc.get_iopub_msg(timeout=0.2)
                    except Exception:
                        break
                while True:
                    try:
                        self.kc.get_shell_msg(timeout=0.05)
                    except Exception:
                        break
                return time.monotonic() - t0
        raise AssertionError("no kernel_info_reply in %s s" % timeout)

    def execute(self, code, silent=False):
        out = []

        def hook(m):
            if m["msg_type"] == "stream":
                out.append(m["content"]["text"])
        r = self.kc.execute_interactive(code, silent=silent, timeout=20, output_hook=hook)
        r["content"]["stdout"] = "".join(out)
        return r["content"]

    def value(self, expr):
        c = self.execute("print(repr(%s))" % expr)
        assert c["status"] == "ok", c
        return c["stdout"].strip()

    def request(self, msg_type, content, timeout=30):
        m = self.kc.session.msg(msg_type, content)
        self.kc.shell_channel.send(m)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                r = self.kc.get_shell_msg(timeout=1)
            except Exception:
                continue
            if r["parent_header"].get("msg_id") == m["header"]["msg_id"]:
                return r["content"]
        raise AssertionError("no reply to " + msg_type)

    def checkpoint(self, cid, files=True):
        c = self.request("kgw_checkpoint_request",
                         {"id": cid, "files_dir": self.ws if files else None})
        assert c["status"] == "ok", c
        return c

    def rollback(self, cid, files=True):
        # on success the old process goes without answering: the new one answers kernel_info
        self.kc.shell_channel.send(self.kc.session.msg("kgw_rollback_request",
                                                       {"id": cid, "files": files}))
        return self.wait_info(60)

    def processes(self):
        """Pids of every process of this kernel (the session it leads)."""
        out = subprocess.run(["ps", "-o", "pid=", "-s", str(self.proc.pid)],
                             capture_output=True, text=True).stdout
        return sorted(int(p) for p in out.split())

    def close(self):
        self.kc.stop_channels()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)



@pytest.fixture
def kernel():
    with tempfile.TemporaryDirectory(prefix="kgw-ckpt-") as tmp:
        k = Kernel(tmp)
        try:
            yield k
        finally:
            k.close()


def test_rollback_restores_state_twice(kernel):
    k = kernel
    numpy = k.execute("import numpy")["status"] == "ok"
    setup = "import random, hashlib\nx = 41\nfunc = lambda v: v + 1\n"
    if numpy:
        setup += "import numpy as np\na = np.arange(100000)\n"
    assert k.execute(setup)["status"] == "ok"
    with open(os.path.join(k.ws, "data.txt"), "wb") as f:
        f.write(b"before\x00\xff")
    count = k.checkpoint("c1")
    assert count["files_bytes"] == 8
    first_random = k.value("random.random()")
    # ruin everything
    k.execute("x = 99\nfunc = None\nimport os\nos.remove(%r)\nopen(%r, 'w').write('new')"
              % (os.path.join(k.ws, "data.txt"), os.path.join(k.ws, "other.txt")))
    if numpy:
        k.execute("a[:] = 0")
    for _ in range(2):
        k.rollback("c1")
        # execution counts continue from the checkpoint's
        c = k.execute("seen = x")
        assert c["execution_count"] == count["execution_count"]
        assert k.value("seen") == "41"
        assert k.value("func(1)") == "2"
        if numpy:
            assert k.value("int(a.sum())") == str(sum(range(100000)))
        # the random state is the checkpoint's: the same draw again
        assert k.value("random.random()") == first_random
        with open(os.path.join(k.ws, "data.txt"), "rb") as f:
            assert f.read() == b"before\x00\xff"
        assert not os.path.exists(os.path.join(k.ws, "other.txt"))
        k.execute("x = 7")
        open(os.path.join(k.ws, "data.txt"), "w").write("changed")




def test_checkpoint_without_files_keeps_workspace(kernel):
    k = kernel
    k.execute("y = 'kept'")
    k.checkpoint("nofiles", files=False)
    with open(os.path.join(k.ws, "later.txt"), "w") as f:
        f.write("written after")
    k.execute("y = 'lost'")
    k.rollback("nofiles", files=False)
    assert k.value("y") == "'kept'"
    assert open(os.path.join(k.ws, "later.txt")).read() == "written after"


def test_frozen_checkpoint_holds_only_its_socket(kernel):
    k = kernel
    before = set(k.processes())
    k.checkpoint("f1", files=False)
    new = set(k.processes()) - before
    assert len(new) == 1
    pid = new.pop()
    fds = os.listdir("/proc/%d/fd" % pid)
    sockets = [fd for fd in fds if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:")]
    assert len(sockets) == 1, sockets  # its own listening socket: no ZeroMQ socket
    with open("/proc/%d/status" % pid) as f:
        assert "Threads:\t1\n" in f.read()
    # a checkpoint that is dropped ends
    assert k.request("kgw_ckpt_drop_request", {"id": "f1"})["status"] == "ok"
    t0 = time.monotonic()
    while pid in k.processes() and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert pid not in k.processes()
    # and cannot be rolled back to
    c = k.request("kgw_rollback_request", {"id": "f1"})
    assert c["status"] == "error" and c["ename"] == "CheckpointError"


def test_bad_ids_refused(kernel):
    for t in ("kgw_checkpoint_request", "kgw_rollback_request", "kgw_ckpt_drop_request"):
        c = kernel.request(t, {"id": "../../etc/x"})
        assert c["status"] == "error" and c["ename"] == "ValueError"


def test_cycles_leave_nothing_behind(kernel):
    k = kernel
    k.execute("n = 0")
    k.checkpoint("base", files=False)
    k.rollback("base", files=False)  # the first process becomes the keeper
    settled = len(k.processes())
    for i in range(10):
        k.execute("n = %d" % (i + 1))
        k.checkpoint("c%d" % i, files=False)
        k.rollback("c%d" % i, files=False)
        assert k.value("n") == str(i + 1)
        assert k.request("kgw_ckpt_drop_request", {"id": "c%d" % i})["status"] == "ok"
    t0 = time.monotonic()
    while len(k.processes()) != settled and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    # the keeper, the checkpoint "base", the live kernel: as after the first rollback
    assert len(k.processes()) == settled
    names = [n for n in os.listdir(k.dir) if n.startswith(".ckpt-")]
    assert names == [".ckpt-base"]


# ipykernel points its application's log at a FileIO on its copy of descriptor 2; here that
# copy is moved to a number the next generation's own copy will not get
MOVE_LOG_COPY = """
import logging, os, sys
old = sys.stderr._original_stdstream_copy
os.dup2(old, 300)
sys.stderr._original_stdstream_copy = 300
kept = []
for h in logging.getLogger("IPKernelApp").handlers:
    st = getattr(h, "stream", None)
    if st is not None and st.fileno() == old:
        kept.append(st)
        h.stream = open(300, "w", closefd=False)
print(len(kept))
"""
LOG_FDS = """
import logging, sys
fds = []
for h in logging.getLogger("IPKernelApp").handlers:
    try:
        fds.append(h.stream.fileno())
    except Exception:
        pass
print(sorted(fds), sys.stderr._original_stdstream_copy)
"""


def test_log_follows_each_generation(kernel):
    """A revived kernel closes the old generation's copies of descriptors 1 and 2: no log
    handler may be left writing to one (whatever the new generation opens on that number
    would get its lines). The application's log follows the new generation's copy. (This
    ipykernel's new application replaces the handler anyway; _reroute_logs also keeps the
    old handler's FileIO from closing that number when it is dropped.)"""
    k = kernel
    c = k.execute(MOVE_LOG_COPY)
    assert c["status"] == "ok" and c["stdout"].strip() == "1", c
    k.checkpoint("a", files=False)
    k.rollback("a", files=False)
    fds, copy = k.execute(LOG_FDS)["stdout"].rsplit(" ", 1)
    fds, copy = json.loads(fds), int(copy)
    assert copy != 300 and 300 not in fds and copy in fds, (fds, copy)
    # and the log still reaches the kernel's stderr, the kernel still answers
    assert k.execute("import logging\nlogging.getLogger('IPKernelApp').warning('x' * 200)"
                     )["status"] == "ok"
    assert k.value("1 + 1") == "2"


def test_old_output_stream_still_reaches_the_client(kernel):
    """Code that kept the output stream of an earlier generation (out = sys.stdout, or a log
    handler made with it) still reaches the client after a rollback, through the current one;
    nothing is sent through the old generation's ZeroMQ sockets. (Fails without _forward:
    the text is lost.)"""
    k = kernel
    assert k.execute("import sys\nout, err = sys.stdout, sys.stderr")["status"] == "ok"
    k.checkpoint("a", files=False)
    k.rollback("a", files=False)
    c = k.execute("print('via the old stream', file=out)\nout.flush()\n"
                  "out.writelines(['one\\n', 'two\\n'])\nprint('old err', file=err)")
    assert c["status"] == "ok", c
    assert "via the old stream\none\ntwo\n" in c["stdout"], c["stdout"]
    assert "old err" in c["stdout"], c["stdout"]  # (the hook collects both streams)
    assert k.value("1 + 1") == "2"


def test_long_runtime_directory():
    """An unsandboxed kernel's runtime directory can leave too little of a unix socket's 107
    bytes for <dir>/.ckpt-<uuid>: the checkpoint's socket gets a short name there, and
    checkpoint, rollback and drop work. (Failed before with "AF_UNIX path too long".)"""
    with tempfile.TemporaryDirectory(prefix="kgw-ckpt-") as tmp:
        d = os.path.join(tmp, "d" * max(1, 80 - len(tmp)))  # 81 bytes: k-5 fits, not that
        os.makedirs(d)
        k = Kernel(d)
        try:
            cid = str(uuid.uuid4())
            assert len(os.path.join(d, ".ckpt-" + cid)) > 107
            assert k.execute("x = 1")["status"] == "ok"
            k.checkpoint(cid, files=False)
            assert k.execute("x = 2")["status"] == "ok"
            k.rollback(cid, files=False)
            assert k.value("x") == "1"
            assert k.request("kgw_ckpt_drop_request", {"id": cid})["status"] == "ok"
        finally:
            k.close()


def test_kernel_end_ends_its_checkpoints(kernel):
    k = kernel
    k.checkpoint("a", files=False)
    k.checkpoint("b", files=False)
    pids = k.processes()
    assert len(pids) == 3
    os.kill(k.proc.pid, signal.SIGKILL)  # the kernel process the gateway started
    t0 = time.monotonic()
    while any(os.path.exists("/proc/%d" % p) and open("/proc/%d/stat" % p).read().split()[2] != "Z"
              for p in pids if p != k.proc.pid) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    alive = [p for p in pids if p != k.proc.pid and os.path.exists("/proc/%d" % p)
             and open("/proc/%d/stat" % p).read().split()[2] != "Z"]
    assert alive == []


class Client:
    """A client of a kernel forked from another (its own connection file)."""

    def __init__(self, cf):
        self.kc = BlockingKernelClient(connection_file=cf)
        self.kc.load_connection_file()
        self.kc.start_channels()

    wait_info = Kernel.wait_info
    execute = Kernel.execute
    value = Kernel.value
    request = Kernel.request


def fork_conn_file(k, name):
    d = os.path.join(k.dir, name)
    os.mkdir(d)
    cf = os.path.join(d, "connection.json")
    with open(cf, "w") as f:
        json.dump({"transport": "ipc", "ip": os.path.join(d, "k"), "shell_port": 1,
                   "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
                   "key": uuid.uuid4().hex, "signature_scheme": "hmac-sha256"}, f)
    return cf


def test_fork_live_and_from_checkpoint(kernel):
    k = kernel
    numpy = k.execute("import numpy")["status"] == "ok"
    assert k.execute("import random\nx = 41\nrandom.seed(5)")["status"] == "ok"
    if numpy:
        k.execute("import numpy as np\nnp.random.seed(5)\na = np.arange(1000)")
    count = k.execute("pass")["execution_count"]
    k.checkpoint("c", files=False)
    for cid in (None, "c"):
        cf = fork_conn_file(k, "f-" + str(cid))
        c = k.request("kgw_fork_request", {"connection_file": cf, "checkpoint": cid})
        assert c["status"] == "ok", c
        assert c["pid"] not in k.processes()  # a session of its own
        f = Client(cf)
        f.wait_info(60)
        assert f.value("x") == "41"
        if numpy:
            assert f.value("int(a.sum())") == str(sum(range(1000)))
            assert f.value("np.random.random()") != k.value("np.random.random()")
        assert f.value("random.random()") != k.value("random.random()")
        f.execute("x = 1")
        assert k.value("x") == "41"
        # the fork's counts go on from its parent's (the parent's own went on meanwhile)
        assert f.execute("pass")["execution_count"] > count
        # the parent goes on as before
        assert k.execute("pass")["status"] == "ok"
        os.kill(c["pid"], signal.SIGKILL)
        f.kc.stop_channels()


def test_fork_bad_requests(kernel):
    for content in ({"connection_file": "relative"}, {"connection_file": "/nonexistent"},
                    {"connection_file": fork_conn_file(kernel, "x"), "checkpoint": "../a"}):
        c = kernel.request("kgw_fork_request", content)
        assert c["status"] == "error" and c["ename"] == "ValueError", c
    c = kernel.request("kgw_fork_request",
                       {"connection_file": fork_conn_file(kernel, "y"), "checkpoint": "none"})
    assert c["status"] == "error" and c["ename"] == "CheckpointError", c


# an internal checkpoints rely on, missing (as a later IPython might lack it): harmless to the
# running kernel, which made its history thread already
DROP_INTERNAL = "import IPython.core.history as h\ndel h.HistorySavingThread"


def test_a_missing_internal_is_refused_with_the_version(kernel):
    """Where ipykernel (or IPython, pyzmq, asyncio, logging) lacks an internal kgw_ckpt relies
    on, every request that forks or revives is refused, naming the version and the internal,
    and so is install() (the gateway's first request to a process). (Before: the revived
    process swallowed the error behind "except Exception: pass", and wrote its history
    through the old generation's connection.)"""
    k = kernel
    k.checkpoint("before", files=False)
    assert k.execute(DROP_INTERNAL)["status"] == "ok"
    for t, content in (("kgw_checkpoint_request", {"id": "c", "files_dir": None}),
                       ("kgw_rollback_request", {"id": "before"}),
                       ("kgw_fork_request", {"connection_file": fork_conn_file(k, "f"),
                                             "checkpoint": None})):
        c = k.request(t, content)
        assert c["status"] == "error" and c["ename"] == "UnsupportedError", (t, c)
        assert c["evalue"].startswith("unsupported ipykernel ") and \
            "IPython.core.history.HistorySavingThread" in c["evalue"], c
    c = k.execute("import kgw_ckpt\nkgw_ckpt.install()", silent=True)
    assert c["status"] == "error" and c["ename"] == "UnsupportedError", c
    assert not [n for n in os.listdir(k.dir) if n == ".ckpt-c"]
    # nothing changed: the same process, its state
    assert k.value("h.__name__") == "'IPython.core.history'"


def test_the_generation_limit(kernel):
    """Each revival runs on the stack of the process it came from: past
    kgw_ckpt.MAX_GENERATIONS a rollback (and a fork) is refused, advising a restart; an older
    checkpoint (a shallower stack) can still be rolled back to. (Before: no limit.)"""
    k = kernel
    assert k.execute("import kgw_ckpt\nkgw_ckpt.MAX_GENERATIONS = 2\nn = 0")["status"] == "ok"
    k.checkpoint("g0", files=False)  # of generation 0 (the process started)
    for g in (1, 2):
        k.rollback("g%d" % (g - 1), files=False)
        assert k.value("kgw_ckpt._generation") == str(g)
        k.execute("n = %d" % g)
        k.checkpoint("g%d" % g, files=False)
    c = k.request("kgw_rollback_request", {"id": "g2"})
    assert c["status"] == "error" and c["ename"] == "GenerationLimitError", c
    assert "restart the kernel" in c["evalue"] and "at most 2" in c["evalue"], c
    for cid in ("g2", None):  # from the checkpoint, or as it is: a fork too
        c = k.request("kgw_fork_request", {"connection_file": fork_conn_file(k, "f%s" % cid),
                                           "checkpoint": cid})
        assert c["status"] == "error" and c["ename"] == "GenerationLimitError", c
    assert k.value("n") == "2"  # still the live kernel of generation 2
    k.rollback("g0", files=False)
    assert k.value("(n, kgw_ckpt._generation)") == "(0, 1)"


def test_the_keeper_is_its_own_file(kernel):
    """The first process becomes python3 -I -S <python dir>/kgw_keeper.py at its first
    rollback, and revives the kernel when its live process dies."""
    k = kernel
    k.execute("x = 1")
    k.checkpoint("a", files=False)
    k.rollback("a", files=False)
    with open("/proc/%d/cmdline" % k.proc.pid, "rb") as f:
        argv = f.read().split(b"\0")[:-1]
    assert argv[1:3] == [b"-I", b"-S"] and \
        argv[3] == os.path.join(REPO, "python", "kgw_keeper.py").encode(), argv
    live = int(open(os.path.join(k.dir, ".kgw-live")).read())
    os.kill(live, signal.SIGKILL)
    t0 = time.monotonic()
    while int(open(os.path.join(k.dir, ".kgw-live")).read()) == live and \
            time.monotonic() - t0 < 10:
        time.sleep(0.05)
    k.wait_info(60)
    assert k.value("x") == "1"


# A checkpoint of the test's making: its answer to a spawn comes in pieces, a few ms apart (a
# stream socket may deliver one message in several reads)
SLOW_CHECKPOINT = """
import os, socket, struct, threading, time, json, kgw_ckpt
def serve(path, answer, cut):
    ls = socket.socket(socket.AF_UNIX)
    ls.bind(path)
    ls.listen(1)
    def run():
        conn, _ = ls.accept()
        conn.recv(4096)
        for i in range(0, len(answer), cut):
            conn.sendall(answer[i:i + cut])
            time.sleep(0.005)
        conn.close()
        ls.close()
    threading.Thread(target=run, daemon=True).start()
body = json.dumps({"ok": False, "error": "x" * 3000}).encode()
serve(kgw_ckpt._sock_path("slow"), struct.pack(">I", len(body)) + body, 100)
serve(kgw_ckpt._sock_path("huge"), struct.pack(">I", 1 << 30), 4)
"""


def test_answers_are_read_whole(kernel):
    """A checkpoint's answer is read as one whole frame, however it arrives; one announcing
    more than the limit is refused before it is read. (Before: one recv() of at most 4096
    bytes, parsed as it came.)"""
    k = kernel
    assert k.execute(SLOW_CHECKPOINT)["status"] == "ok"
    c = k.request("kgw_rollback_request", {"id": "slow"})
    assert c["status"] == "error" and c["ename"] == "CheckpointError", c
    assert c["evalue"] == "x" * 500, c  # its whole message (cut at 500 by the reply)
    c = k.request("kgw_rollback_request", {"id": "huge"})
    assert c["status"] == "error" and "at most 4096" in c["evalue"], c
    assert k.value("1 + 1") == "2"
