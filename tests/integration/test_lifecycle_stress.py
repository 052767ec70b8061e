"""Every face's lifecycle under any interleaving: a seeded random stress of one gateway.

A few worker threads issue random operations on random shared targets for a bounded time, so
that they interleave: a kernel deleted while a face still starts it, restarted during an
execution, rolled back during a fork, a sandbox killed while its create waits, clients that
go away mid-stream. The faces: REST kernels (create, delete, restart, interrupt), kernel
websockets opened and dropped mid-execution, sessions, the /channel RPC, the execute API (on a
kernel and one-shot, readers that leave, DELETE of executions), checkpoints, rollbacks and
forks, commands, MCP, and the E2B API (create, delete, timeout, connect, contexts, /execute,
process.Start and SendSignal). A slow kernelspec widens the start windows; short E2B
timeouts, MCP idle timeouts and culling add the gateway's own ends.

Checked:
- the gateway lives throughout and exits cleanly (status 0: under ASan, no leak at exit);
- every request is answered, in time: a status below 500, or one of the 5xx the docs name
  for a kernel that genuinely failed (EXPECTED_5XX); no hung request, websocket call or
  stream (REQ_TIMEOUT);
- afterwards, once every kernel is deleted: no kernel process left (of the processes whose
  parent chain is kgw, as many outside kernel cgroups as at the start, and no kernel cgroup
  with processes beyond the warm pool's), no more cgroup directories than the spares, the
  gateway's descriptors back near their count at the start (the pool's counted apart: it
  grows under demand), and no "ERROR: AddressSanitizer" / "runtime error:" in its log.

Reproducible in what it asks: KGW_STRESS_SEED (printed; random when unset) picks every
thread's operations and arguments; the interleaving is the machine's. KGW_STRESS_SECONDS
bounds the operations (default 60; the integration suite runs a short form, tests/meson.build).
KGW_STRESS_THREADS sets the workers (default 4).
"""
import asyncio
import collections
import http.client
import json
import os
import random
import re
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
import uuid

import pytest
import websockets

import conftest
import jclient as J
from channel_client import Channel, RemoteError  # noqa: E402 (examples/, on jclient's path)

pytestmark = [pytest.mark.kgw_only, pytest.mark.needs_sandbox]

SEED = int(os.environ.get("KGW_STRESS_SEED") or random.SystemRandom().randrange(1 << 32))
SECONDS = float(os.environ.get("KGW_STRESS_SECONDS") or 60)
THREADS = int(os.environ.get("KGW_STRESS_THREADS") or 4)
REQ_TIMEOUT = 120      # seconds: an answer later than this is a hang (ASan, 2 loaded cores)
MAX_KERNELS = 10       # kernels the workers keep at once (each face's creates skip beyond)
POOL = 1               # warm python3 kernels
CGROUP_SPARES = 16     # empty cgroups the gateway keeps ready (sandbox/cgroup.c SPARES)
FDS_PER_POOLED = 10    # descriptors of the gateway's end of a pooled kernel, if not measured

# a kernelspec whose process sleeps before it starts ipykernel: creates stay open longer, so
# deletes, timeouts and client departures land while they wait
SLOW_SPEC = ["/usr/bin/python3", "-c",
             "import random, runpy, sys, time; time.sleep(random.uniform(0.5, 2.5)); "
             "sys.argv = ['k', '-f', sys.argv[1]]; "
             "runpy.run_module('ipykernel_launcher', run_name='__main__')", "{connection_file}"]

# What a kernel runs: quick, printing, sleeping, failing, flooding, dying.
CODES = [
    ("quick", 6, "6 * 7"),
    ("print", 6, "print('hello', flush=True)"),
    ("sleep", 6, "import time\nfor i in range(4):\n    print(i, flush=True)\n    time.sleep(0.4)"),
    ("error", 3, "1 / 0"),
    ("flood", 2, "for i in range(3000):\n    print('x' * 80, i)"),
    ("state", 3, "x = globals().get('x', 0) + 1\nx"),
    ("die", 1, "import os\nos.kill(os.getpid(), 9)"),
]

# The 5xx answers the docs name for a kernel (or capacity) that genuinely failed; each is a
# (status, substring of the answer) pair. Any other 5xx is a failure.
EXPECTED_5XX = [
    (502, "is not running"),            # e2b sandbox plane: the sandbox is gone (docs/e2b.md)
    (503, "kernel limit reached"),      # --max-kernels
    (503, "too many executions"),       # the tenant's execution budget
    (503, "retry later"),
    (504, "did not answer"),            # a checkpoint or rollback behind a long cell
    (504, "timed out"),
    (507, ""),                          # a checkpoint at the kernel's memory or pids limit
]


def _envelope(obj, flags=0):
    data = json.dumps(obj).encode()
    return bytes([flags]) + struct.pack(">I", len(data)) + data


def descendants(root):
    """Pids of every process whose parent chain leads to root."""
    kids = collections.defaultdict(list)
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        kids[int(s[s.rindex(")") + 2:].split()[1])].append(int(p))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def describe(pid):
    """pid, parent, cgroup and command line of a process, for a report."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline") as f:
            cmd = f.read().replace("\0", " ")[:80]
        with open(f"/proc/{pid}/cgroup") as f:
            cg = sorted({line.rstrip().rsplit("/", 1)[-1] for line in f if "kgw-gw-" in line})
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} ppid {stat[stat.rindex(')') + 2:].split()[1]} {cg} {cmd}"


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def instance_of(pid):
    """The gateway's runtime directory name (gw-XXXXXX): the one whose .lock it holds."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.search(r"/(gw-[A-Za-z0-9]+)/\.lock$", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            return m.group(1)
    return None


def cgroups_of(inst):
    """{directory: processes in it} of the gateway's kernel cgroups (cg-TAG-N, every hierarchy)."""
    out = {}
    for base in conftest._own_cgroup_dirs():
        try:
            tops = [n for n in os.listdir(base) if n.startswith(f"kgw-{inst}")]
        except OSError:
            continue
        for top in tops:
            for sub in os.listdir(os.path.join(base, top)):
                d = os.path.join(base, top, sub)
                if not os.path.isdir(d):
                    continue
                try:
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        out[d] = len(f.read().split())
                except OSError:
                    out[d] = 0
    return out


class Hang(Exception):
    pass


FAILED = object()   # a /channel call that was answered with an exception


class Stress:
    """The shared world of the workers: targets, and what went wrong."""

    def __init__(self, gw, seed, seconds):
        self.gw = gw
        self.seed = seed
        self.deadline = time.monotonic() + seconds
        self.lock = threading.Lock()
        self.kernels = set()           # kernel ids (any face's; some may be gone)
        self.sandboxes = {}            # e2b sandbox id -> create answer (tokens); {} if unknown
        self.contexts = {}             # e2b sandbox id -> context ids
        self.sessions = {}             # session id -> kernel id
        self.mcp = {}                  # MCP session id -> last checkpoint id or None
        self.ckpts = collections.defaultdict(list)   # kernel id -> checkpoint ids
        self.executions = []           # execution ids
        self.failures = []
        self.answered_5xx = collections.Counter()
        self.ops = collections.Counter()
        self.slowest = (0.0, "")

    # ---- bookkeeping

    def fail(self, what):
        with self.lock:
            self.failures.append(f"[seed {self.seed}] {what}")
        sys.stderr.write(f"STRESS FAILURE: {what}\n")

    def pick(self, rng, coll):
        with self.lock:
            items = sorted(coll)
        return rng.choice(items) if items else None

    def add_kernel(self, kid):
        if kid:
            with self.lock:
                self.kernels.add(kid)

    def forget_kernel(self, kid):
        with self.lock:
            self.kernels.discard(kid)
            self.ckpts.pop(kid, None)

    def room(self):
        with self.lock:
            return len(self.kernels) < MAX_KERNELS

    def time_left(self):
        return self.deadline - time.monotonic()

    def check(self, what, status, body):
        """A status below 500, or one of EXPECTED_5XX."""
        if status < 500:
            return
        text = json.dumps(body) if not isinstance(body, (bytes, str)) else \
            (body.decode(errors="replace") if isinstance(body, bytes) else body)
        for st, sub in EXPECTED_5XX:
            if status == st and sub in text:
                with self.lock:
                    self.answered_5xx[(status, sub)] += 1
                return
        self.fail(f"{what}: {status} {text[:400]}")

    # ---- HTTP

    def headers(self, extra=None, auth=True):
        h = {"Content-Type": "application/json"}
        if auth:
            h["Authorization"] = f"token {self.gw.token}"
        h.update(extra or {})
        return h

    def connect(self, timeout=REQ_TIMEOUT):
        return http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=timeout)

    def http(self, method, path, body=None, headers=None, auth=True, raw=None):
        """One request on its own connection: (status, parsed JSON or bytes, headers)."""
        what = f"{method} {path}"
        t0 = time.monotonic()
        c = self.connect()
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            c.request(method, path, body=data, headers=self.headers(headers, auth))
            r = c.getresponse()
            payload = r.read()
        except socket.timeout:
            self.fail(f"{what}: no answer within {REQ_TIMEOUT}s")
            raise Hang(what)
        except (ConnectionError, http.client.HTTPException) as e:
            self.fail(f"{what}: the connection ended without an answer: {e!r}")
            raise Hang(what)
        finally:
            c.close()
        self.took(time.monotonic() - t0, what)
        try:
            parsed = json.loads(payload) if payload else None
        except ValueError:
            parsed = payload
        self.check(what, r.status, parsed)
        return r.status, parsed, r.headers

    def took(self, dt, what):
        with self.lock:
            if dt > self.slowest[0]:
                self.slowest = (dt, what)

    def stream(self, rng, method, path, body, headers=None, raw=None, parse=None, drop=None,
               broken_ok=None):
        """A streamed answer: opens it, takes items (parse(response) -> item or None at the end)
        until the end or a drop (drop(items) true: the socket is closed mid-stream, half the
        time with a reset). A stream that breaks is a failure unless broken_ok() says it may
        (an E2B sandbox killed meanwhile). Returns (status, items, headers, ended)."""
        what = f"{method} {path}"
        reset = rng.random() < 0.5
        c = self.connect()
        t0 = time.monotonic()
        items, ended = [], False
        try:
            data = raw if raw is not None else json.dumps(body).encode()
            c.request(method, path, body=data, headers=self.headers(headers))
            r = c.getresponse()
            if r.status >= 300:
                payload = r.read()
                try:
                    parsed = json.loads(payload) if payload else None
                except ValueError:
                    parsed = payload
                self.check(what, r.status, parsed)
                return r.status, parsed, r.headers, True
            while True:
                item = parse(r)
                if item is None:
                    ended = True
                    break
                items.append(item)
                if drop is not None and drop(items):
                    break
            return r.status, items, r.headers, ended
        except socket.timeout:
            self.fail(f"{what}: stream stalled for {REQ_TIMEOUT}s after {len(items)} items")
            raise Hang(what)
        except (ConnectionError, http.client.HTTPException) as e:
            if not items:
                self.fail(f"{what}: the connection ended without an answer: {e!r}")
                raise Hang(what)
            # a stream ends with its end event, also when its kernel ended
            if broken_ok is not None and broken_ok():
                return 200, items, None, False
            self.fail(f"{what}: the stream broke after {len(items)} items: {e!r}")
            raise Hang(what)
        finally:
            if not ended and reset and c.sock is not None:
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            self.took(time.monotonic() - t0, what)

    @staticmethod
    def ndjson(r):
        line = r.readline()
        return json.loads(line) if line.strip() else None

    @staticmethod
    def envelope(r):
        head = r.read(5)
        if len(head) < 5:
            return None
        n = struct.unpack(">I", head[1:5])[0]
        msg = json.loads(r.read(n) or b"null")
        return {"flags": head[0], "msg": msg}

    @staticmethod
    def sse(r):
        ev = {}
        while True:
            line = r.readline()
            if not line:
                return ev or None
            line = line.decode().rstrip("\n")
            if not line:
                if ev:
                    return ev
                continue
            k, _, v = line.partition(":")
            ev[k] = ev.get(k, "") + v.strip()

    # ---- workers

    def run_async(self, coro, what):
        try:
            return asyncio.run(asyncio.wait_for(coro, REQ_TIMEOUT))
        except asyncio.TimeoutError:
            self.fail(f"{what}: no answer within {REQ_TIMEOUT}s")
            raise Hang(what)


# ---------------------------------------------------------------- operations
# Each takes (stress, rng). They choose targets among the shared ones (which may be gone:
# 404s are answers too) and record what they made.

def code_of(rng):
    names = [c for c in CODES]
    name, _, code = rng.choices(names, weights=[w for _, w, _ in names])[0]
    return code


# A race's target (op_race): the operations of the thread that sets it act on it.
FORCED = threading.local()


def kid_of(st, rng):
    kid = getattr(FORCED, "kid", None)
    return kid if kid else st.pick(rng, st.kernels)


def op_kernel_create(st, rng):
    if not st.room():
        return
    body = {"name": "pyslow"} if rng.random() < 0.4 else {}
    status, m, _ = st.http("POST", "/api/kernels", body)
    if status == 201:
        st.add_kernel(m["id"])


def op_kernel_delete(st, rng):
    kid = kid_of(st, rng)
    if kid:
        status, _, _ = st.http("DELETE", f"/api/kernels/{kid}")
        if status in (204, 404):
            st.forget_kernel(kid)


def op_kernel_restart(st, rng):
    kid = kid_of(st, rng)
    if kid:
        st.http("POST", f"/api/kernels/{kid}/restart", {})


def op_kernel_interrupt(st, rng):
    kid = kid_of(st, rng)
    if kid:
        st.http("POST", f"/api/kernels/{kid}/interrupt", {})


def op_discover(st, rng):
    """Lists: kernels still starting and sandboxes still being created become targets."""
    status, ks, _ = st.http("GET", "/api/kernels")
    if status == 200:
        live = {k["id"] for k in ks}
        with st.lock:
            for kid in list(st.kernels):
                if kid not in live and rng.random() < 0.5:
                    st.kernels.discard(kid)
            st.kernels.update(list(live)[:MAX_KERNELS])
    status, sbxs, _ = st.http("GET", "/e2b/api/v2/sandboxes", headers={"X-API-KEY": st.gw.token})
    if status == 200:
        with st.lock:
            for s in sbxs:
                st.sandboxes.setdefault(s["sandboxID"], {})
    if rng.random() < 0.3:
        st.http("GET", "/api/sessions")


def op_ws(st, rng):
    """A kernel websocket: an execution, then the socket dropped after a few messages, or the
    reply awaited (which must come, or the socket close: never silence)."""
    kid = kid_of(st, rng)
    if not kid:
        return
    code = code_of(rng)
    wait = rng.random() < 0.4
    after = rng.randint(0, 6)
    proto = rng.choice(J.PROTOCOLS)

    async def go():
        try:
            c = await J.connect(st.gw, kid, proto)
        except (websockets.exceptions.InvalidStatusCode, websockets.exceptions.InvalidHandshake,
                ConnectionError) as e:
            return f"refused {e}"
        try:
            msg_id = await c.request("execute_request", {
                "code": code, "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True})
            if wait:
                try:
                    await c.reply(msg_id, timeout=REQ_TIMEOUT - 10)
                except asyncio.TimeoutError:
                    st.fail(f"ws {kid}: no execute_reply nor close within {REQ_TIMEOUT - 10}s "
                            f"({code!r})")
            else:
                for _ in range(after):
                    await c.recv(timeout=3)
        except (websockets.exceptions.ConnectionClosed, asyncio.TimeoutError):
            pass
        finally:
            if rng.random() < 0.5:
                c.ws.transport.abort()
            else:
                await c.close()
    st.run_async(go(), f"ws {kid}")


def op_session(st, rng):
    r = rng.random()
    if r < 0.4 and st.room():
        kid = kid_of(st, rng) if rng.random() < 0.3 else None
        body = {"path": f"stress-{uuid.uuid4().hex[:8]}.ipynb", "type": "notebook",
                "name": "s", "kernel": {"id": kid} if kid else
                {"name": rng.choice(["python3", "pyslow"])}}
        status, m, _ = st.http("POST", "/api/sessions", body)
        if status == 201:
            with st.lock:
                st.sessions[m["id"]] = m["kernel"]["id"]
            st.add_kernel(m["kernel"]["id"])
        return
    sid = st.pick(rng, st.sessions)
    if not sid:
        return
    if r < 0.7:
        status, _, _ = st.http("DELETE", f"/api/sessions/{sid}")
        if status in (204, 404):
            with st.lock:
                st.sessions.pop(sid, None)
    elif r < 0.8:
        st.http("PATCH", f"/api/sessions/{sid}", {"path": f"renamed-{rng.randint(0, 99)}.ipynb"})
    elif r < 0.9:   # another kernel for the session: a new one, or one of the others
        kid = kid_of(st, rng) if rng.random() < 0.5 else None
        if not kid and not st.room():
            return
        status, m, _ = st.http("PATCH", f"/api/sessions/{sid}", {"kernel": {"id": kid} if kid else
                                                                 {"name": "pyslow"}})
        if status == 200:
            st.add_kernel(m["kernel"]["id"] if m.get("kernel") else None)
    else:
        st.http("GET", f"/api/sessions/{sid}")


def op_channel(st, rng):
    """The /channel RPC: a few calls on random kernels, some left unanswered by closing."""
    op_channel_steps(st, rng, [rng.random() for _ in range(rng.randint(1, 6))])


def op_channel_steps(st, rng, choices):
    """One /channel connection, a call (or a client's few) per choice in [0, 1)."""
    kids = [kid_of(st, rng) for _ in choices]
    code = code_of(rng)
    room = st.room()

    async def call(coro, what):
        """The call's value, or FAILED (an exception the gateway answered, or the socket
        closed); a call left without an answer is a failure."""
        try:
            return await asyncio.wait_for(coro, REQ_TIMEOUT - 10)
        except asyncio.TimeoutError:
            st.fail(f"/channel {what}: no answer within {REQ_TIMEOUT - 10}s")
        except RemoteError as e:
            if e.type not in ("KeyError", "RuntimeError", "TimeoutError", "Empty"):
                st.fail(f"/channel {what}: {e}")
        except ConnectionError:
            pass
        return FAILED

    async def go():
        try:
            ch = await Channel.connect(st.gw.ws_url, st.gw.token, close_timeout=2)
        except (websockets.exceptions.InvalidStatusCode, ConnectionError) as e:
            st.fail(f"/channel refused: {e}")
            return
        try:
            for c, kid in zip(choices, kids):
                if c < 0.15 and room:
                    new = await call(ch.mkm.start_kernel(
                        kernel_name=rng.choice([None, "pyslow"])), "start_kernel")
                    if new is not FAILED:
                        st.add_kernel(new)
                elif not kid:
                    await call(ch.mkm.list_kernel_ids(), "list_kernel_ids")
                elif c < 0.25:
                    await call(ch.mkm.restart_kernel(kid), "restart_kernel")
                elif c < 0.32:
                    if await call(ch.mkm.shutdown_kernel(kid), "shutdown_kernel") is None:
                        st.forget_kernel(kid)   # None: jupyter_client's value for done
                elif c < 0.4:
                    await call(ch.mkm.interrupt_kernel(kid), "interrupt_kernel")
                else:
                    km = await call(ch.mkm.get_kernel(kid), "get_kernel")
                    if km is FAILED:
                        continue
                    client = await call(km.client(), "client")
                    if client is FAILED:
                        continue
                    await call(client.start_channels(), "start_channels")
                    if c < 0.6:
                        await call(client.wait_for_ready(timeout=rng.choice([0.5, 5, 30])),
                                   "wait_for_ready")
                    await call(client.execute(code), "execute")
                    for _ in range(rng.randint(0, 4)):
                        if await call(client.get_iopub_msg(timeout=rng.choice([0, 1, 5])),
                                      "get_iopub_msg") is FAILED:
                            break
                    if c > 0.9:   # a waiting call, then the socket is gone
                        fut = asyncio.ensure_future(client.get_shell_msg(timeout=60))
                        await asyncio.sleep(rng.random() * 0.5)
                        ch.ws.transport.abort()
                        fut.cancel()
                        return
        finally:
            await ch.close()
    st.run_async(go(), "/channel")


def op_execute(st, rng):
    """The execute API on a kernel; its reader stays to the end or leaves mid-stream."""
    kid = kid_of(st, rng)
    if not kid:
        return
    body = {"code": code_of(rng)}
    if rng.random() < 0.2:
        body["timeout"] = rng.choice([0.5, 2, 10])
    if rng.random() < 0.15:
        body["checkpoint"] = True
    if rng.random() < 0.15:
        body["rollback_on_error"] = True
    drop = rng.choice([None, None, 1, 2, 4])
    accept = rng.choice(["application/x-ndjson", "text/event-stream"])
    parse = st.ndjson if accept == "application/x-ndjson" else \
        (lambda r: (lambda e: json.loads(e["data"]) if e and "data" in e else None)(st.sse(r)))
    status, evs, h, ended = st.stream(rng, "POST", f"/api/kernels/{kid}/execute", body,
                                      headers={"Accept": accept}, parse=parse,
                                      drop=(lambda items: len(items) >= drop) if drop else None)
    if status == 201:
        xid = h["Location"].rsplit("/", 1)[1]
        with st.lock:
            st.executions.append(xid)
        if ended:
            ends = [e for e in evs if e["type"] == "end"]
            if len(ends) != 1 or evs[-1]["type"] != "end":
                st.fail(f"execution {xid} on {kid}: {len(ends)} end events: {evs[-3:]}")
            elif ends[0].get("checkpoint"):
                with st.lock:
                    st.ckpts[kid].append(ends[0]["checkpoint"])


def op_execute_oneshot(st, rng):
    if not st.room():
        return
    drop = rng.choice([None, 1, 3])
    st.stream(rng, "POST", "/api/execute", {"code": code_of(rng)}, parse=st.ndjson,
              drop=(lambda items: len(items) >= drop) if drop else None)


def op_execution(st, rng):
    xid = st.pick(rng, st.executions)
    if not xid:
        return
    r = rng.random()
    if r < 0.4:
        st.http("DELETE", f"/api/executions/{xid}")
    elif r < 0.7:
        st.http("GET", f"/api/executions/{xid}")
    else:
        st.stream(rng, "GET", f"/api/executions/{xid}/events?since={rng.randint(0, 3)}", None,
                  raw=b"", parse=st.ndjson,
                  drop=(lambda items: len(items) >= 2) if rng.random() < 0.5 else None)


def op_checkpoint(st, rng):
    kid = kid_of(st, rng)
    if not kid:
        return
    r = rng.random()
    with st.lock:
        cps = list(st.ckpts.get(kid, []))
    if r < 0.35 or not cps:
        status, m, _ = st.http("POST", f"/api/kernels/{kid}/checkpoints",
                               {"files": rng.random() < 0.5})
        if status == 201:
            with st.lock:
                st.ckpts[kid].append(m["id"])
        elif status == 409 and isinstance(m, dict) and "limit" in m.get("message", ""):
            cp = rng.choice(cps) if cps else None
            if cp:
                st.http("DELETE", f"/api/kernels/{kid}/checkpoints/{cp}")
    elif r < 0.65:
        st.http("POST", f"/api/kernels/{kid}/rollback", {"checkpoint": rng.choice(cps)})
    elif r < 0.8:
        cp = rng.choice(cps)
        status, _, _ = st.http("DELETE", f"/api/kernels/{kid}/checkpoints/{cp}")
        if status in (204, 404):
            with st.lock:
                if cp in st.ckpts.get(kid, []):
                    st.ckpts[kid].remove(cp)
    else:
        st.http("GET", f"/api/kernels/{kid}/checkpoints")


def op_fork(st, rng):
    kid = kid_of(st, rng)
    if not kid or not st.room():
        return
    with st.lock:
        cps = list(st.ckpts.get(kid, []))
    body = {"checkpoint": rng.choice(cps)} if cps and rng.random() < 0.5 else {}
    status, m, _ = st.http("POST", f"/api/kernels/{kid}/fork", body)
    if status == 201:
        st.add_kernel(m["id"])


def op_command(st, rng):
    kid = kid_of(st, rng)
    if not kid:
        return
    cmd = rng.choice(["echo a; sleep 1; echo b", "true", "sleep 3", "yes | head -c 200000",
                      "exit 3"])
    how = rng.choice(["read", "drop", "delete"])
    box = {}

    def dropper(items):
        if how == "drop":
            return len(items) >= 1
        if how == "delete" and items and items[0].get("type") == "start" and "d" not in box:
            box["d"] = True
            st.http("DELETE", f"/api/kernels/{kid}/commands/{items[0]['command_id']}")
        return False
    status, evs, _, ended = st.stream(rng, "POST", f"/api/kernels/{kid}/commands",
                                      {"command": cmd, "timeout": 30}, parse=st.ndjson,
                                      drop=dropper)
    if status == 201 and ended:
        ends = [e for e in evs if e["type"] == "end"]
        if len(ends) != 1 or evs[-1]["type"] != "end":
            st.fail(f"command on {kid}: {len(ends)} end events: {evs[-3:]}")


# ---- MCP

def mcp_post(st, body, sid=None, name=None, method="POST"):
    h = {"Accept": "application/json, text/event-stream"}
    if sid:
        h["Mcp-Session-Id"] = sid
    if name:
        h["Kgw-Kernel-Name"] = name
    return st.http(method, "/mcp", body, headers=h)


def op_mcp(st, rng):
    r = rng.random()
    if r < 0.2 or not st.mcp:
        if not st.room():
            return
        name = rng.choice([None, None, "stress-a", "stress-b"])
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "stress", "version": "1"}}}
        status, body, h = mcp_post(st, init, name=name)
        if status == 200:
            sid = h["Mcp-Session-Id"]
            mcp_post(st, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid, name)
            with st.lock:
                st.mcp[sid] = None
        return
    sid = st.pick(rng, st.mcp)
    if r < 0.3:
        status, _, _ = mcp_post(st, None, sid, method="DELETE")
        with st.lock:
            st.mcp.pop(sid, None)
        return
    tool = rng.choices(["execute_code", "restart_kernel", "run_command", "rollback", "fork",
                        "list_files"], weights=[8, 2, 2, 2, 1, 1])[0]
    args = {}
    if tool == "execute_code":
        args = {"code": code_of(rng)}
        if rng.random() < 0.3:
            args["checkpoint"] = True
        if rng.random() < 0.2:
            args["rollback_on_error"] = True
    elif tool == "run_command":
        args = {"command": rng.choice(["echo hi", "sleep 2"]), "timeout": 20}
    elif tool == "rollback":
        with st.lock:
            cp = st.mcp.get(sid)
        args = {"checkpoint": cp or str(uuid.uuid4())}
    elif tool == "fork":
        if not st.room():
            return
        args = {"name": f"stress-f{rng.randint(0, 3)}"}
    msg = {"jsonrpc": "2.0", "id": rng.randint(2, 1 << 30), "method": "tools/call",
           "params": {"name": tool, "arguments": args}}
    if tool == "execute_code" and rng.random() < 0.4:
        msg["params"]["_meta"] = {"progressToken": "p"}
        drop = rng.choice([None, 1, 2])
        h = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": sid}
        st.stream(rng, "POST", "/mcp", msg, headers=h, parse=st.sse,
                  drop=(lambda items: len(items) >= drop) if drop else None)
        return
    status, body, _ = mcp_post(st, msg, sid)
    if status == 404:
        with st.lock:
            st.mcp.pop(sid, None)
    elif status == 200 and isinstance(body, dict):
        res = body.get("result") or {}
        sc = res.get("structuredContent") or {}
        if tool == "execute_code" and sc.get("checkpoint"):
            with st.lock:
                if sid in st.mcp:
                    st.mcp[sid] = sc["checkpoint"]
                if sc.get("kernel_id"):
                    st.ckpts[sc["kernel_id"]].append(sc["checkpoint"])
        if sc.get("kernel_id"):
            st.add_kernel(sc["kernel_id"])


# ---- E2B

def e2b_key(st):
    return {"X-API-KEY": st.gw.token}


def sbx_of(st, rng, tokens=False):
    sid = getattr(FORCED, "sid", None)
    if sid:
        with st.lock:
            m = st.sandboxes.get(sid)
        return (sid, m) if m or not tokens else (None, None)
    with st.lock:
        ids = sorted(i for i, m in st.sandboxes.items() if m or not tokens)
    if not ids:
        return None, None
    sid = rng.choice(ids)
    with st.lock:
        return sid, st.sandboxes.get(sid)


def sbx_headers(model, extra=None):
    h = {"E2b-Sandbox-Id": model["sandboxID"], "X-Access-Token": model["envdAccessToken"]}
    h.update(extra or {})
    return h


def op_e2b_create(st, rng):
    if not st.room():
        return
    body = {"templateID": rng.choice(["base", "code-interpreter-v1", "slow", "slow"]),
            "timeout": rng.choice([1, 2, 3, 5, 10, 30, 60])}
    if rng.random() < 0.3:
        body["envVars"] = {"STRESS": str(rng.randint(0, 9))}
    if rng.random() < 0.3:
        body["metadata"] = {"k": "v"}
    status, m, _ = st.http("POST", "/e2b/api/v2/sandboxes", body, headers=e2b_key(st))
    if status == 201:
        with st.lock:
            st.sandboxes[m["sandboxID"]] = m


def op_e2b_control(st, rng):
    sid, _ = sbx_of(st, rng)
    if not sid:
        return
    r = rng.random()
    if r < 0.3:
        status, _, _ = st.http("DELETE", f"/e2b/api/sandboxes/{sid}", headers=e2b_key(st))
        if status in (204, 404):
            with st.lock:
                st.sandboxes.pop(sid, None)
    elif r < 0.55:
        st.http("POST", f"/e2b/api/sandboxes/{sid}/timeout",
                {"timeout": rng.choice([1, 2, 5, 30])}, headers=e2b_key(st))
    elif r < 0.75:
        path = rng.choice([f"/e2b/api/sandboxes/{sid}/connect",
                           f"/e2b/api/v2/sandboxes/{sid}/connect"])
        status, m, _ = st.http("POST", path, {"timeout": rng.choice([5, 30])},
                               headers=e2b_key(st))
        if status in (200, 201):
            with st.lock:
                st.sandboxes[sid] = m
    else:
        status, _, _ = st.http("GET", f"/e2b/api/sandboxes/{sid}", headers=e2b_key(st))
        if status == 404:
            with st.lock:
                st.sandboxes.pop(sid, None)


def op_e2b_execute(st, rng):
    sid, m = sbx_of(st, rng, tokens=True)
    if not m:
        return
    body = {"code": code_of(rng)}
    with st.lock:
        ctxs = list(st.contexts.get(sid, []))
    if ctxs and rng.random() < 0.4:
        body["context_id"] = rng.choice(ctxs)
    drop = rng.choice([None, 1, 2])
    status, lines, _, ended = st.stream(rng, "POST", "/e2b/sbx/execute", body,
                                        headers=sbx_headers(m), parse=st.ndjson,
                                        drop=(lambda items: len(items) >= drop) if drop else None,
                                        broken_ok=lambda: sbx_killed(st, m))
    if status == 200 and ended:
        types = [l["type"] for l in lines]
        if not types or types[-1] != "end_of_execution" or types.count("end_of_execution") != 1:
            # a sandbox killed meanwhile drops its streams, as E2B's does: the SDKs then find
            # /health at 502 and report the kill
            if not sbx_killed(st, m):
                st.fail(f"e2b /execute on {sid}: lines end {lines[-3:]}")


def sbx_killed(st, m):
    """Whether the sandbox is gone: a sandbox killed drops its streams, as E2B's does (the SDKs
    then find /health at 502 and report the kill)."""
    hs, _, _ = st.http("GET", "/e2b/sbx/health", None, headers=sbx_headers(m))
    return hs == 502


def op_e2b_context(st, rng):
    sid, m = sbx_of(st, rng, tokens=True)
    if not m:
        return
    with st.lock:
        ctxs = list(st.contexts.get(sid, []))
    r = rng.random()
    if r < 0.4 or not ctxs:
        if not st.room():
            return
        status, c, _ = st.http("POST", "/e2b/sbx/contexts", {"language": "python"},
                               headers=sbx_headers(m))
        if status == 200:
            with st.lock:
                st.contexts.setdefault(sid, []).append(c["id"])
            st.add_kernel(c["id"])
    elif r < 0.7:
        st.http("POST", f"/e2b/sbx/contexts/{rng.choice(ctxs)}/restart", {},
                headers=sbx_headers(m))
    else:
        cid = rng.choice(ctxs)
        status, _, _ = st.http("DELETE", f"/e2b/sbx/contexts/{cid}", headers=sbx_headers(m))
        if status in (204, 404):
            with st.lock:
                if cid in st.contexts.get(sid, []):
                    st.contexts[sid].remove(cid)


def op_e2b_process(st, rng):
    """process.Process/Start: the stream read to its end, dropped, or its command killed with
    SendSignal mid-run."""
    sid, m = sbx_of(st, rng, tokens=True)
    if not m:
        return
    cmd = rng.choice(["echo hi; sleep 1; echo there", "sleep 3", "exit 2", "seq 1 20000"])
    how = rng.choice(["read", "drop", "kill"])
    box = {}

    def dropper(items):
        if how == "drop":
            return len(items) >= 1
        start = (items[0]["msg"] or {}).get("event", {}).get("start") if items else None
        if how == "kill" and start and "k" not in box:
            box["k"] = True
            st.http("POST", "/e2b/sbx/process.Process/SendSignal",
                    {"process": {"pid": start["pid"]}, "signal": "SIGNAL_SIGKILL"},
                    headers=sbx_headers(m))
        return False
    st.stream(rng, "POST", "/e2b/sbx/process.Process/Start", None,
              raw=_envelope({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}),
              headers=sbx_headers(m, {"Content-Type": "application/connect+json"}),
              parse=st.envelope, drop=dropper, broken_ok=lambda: sbx_killed(st, m))


# ---- races: a second operation on the target of a first one still in flight

def op_session_create(st, rng):
    if not st.room():
        return
    body = {"path": f"stress-{uuid.uuid4().hex[:8]}.ipynb", "type": "notebook",
            "kernel": {"name": rng.choice(["python3", "pyslow"])}}
    status, m, _ = st.http("POST", "/api/sessions", body)
    if status == 201:
        with st.lock:
            st.sessions[m["id"]] = m["kernel"]["id"]
        st.add_kernel(m["kernel"]["id"])


def op_channel_start(st, rng):
    if st.room():
        FORCED.kid = None
        op_channel_steps(st, rng, [0.0])


def op_mcp_first_call(st, rng):
    """A new MCP session's first call: it starts the session's kernel."""
    if not st.room():
        return
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "stress", "version": "1"}}}
    status, _, h = mcp_post(st, init)
    if status != 200:
        return
    sid = h["Mcp-Session-Id"]
    with st.lock:
        st.mcp[sid] = None
    mcp_post(st, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "execute_code", "arguments": {"code": code_of(rng)}}}, sid)


def op_e2b_create_slow(st, rng):
    if st.room():
        st.http("POST", "/e2b/api/v2/sandboxes",
                {"templateID": "slow", "timeout": rng.choice([2, 5, 30])}, headers=e2b_key(st))


# (first operation, the second operations that may land while it runs)
RACES_ON_A_KERNEL = (
    [op_kernel_restart, op_checkpoint, op_fork, op_execute, op_command, op_ws, op_channel,
     op_kernel_interrupt],
    [op_kernel_delete, op_kernel_restart, op_kernel_interrupt, op_checkpoint, op_fork,
     op_execute, op_ws, op_command],
)
RACES_ON_A_NEW_KERNEL = (
    [op_kernel_create, op_session_create, op_fork, op_execute_oneshot, op_channel_start,
     op_mcp_first_call],
    [op_kernel_delete, op_kernel_restart, op_kernel_interrupt, op_checkpoint, op_fork,
     op_execute, op_ws, op_session],
)
RACES_ON_A_SANDBOX = (
    [op_e2b_execute, op_e2b_process, op_e2b_context, op_e2b_control],
    [op_e2b_control, op_e2b_context, op_e2b_execute],
)


def run_forced(st, op, rng, target):
    """op(st, rng) with the thread's target set; its failures recorded as a worker's."""
    FORCED.kid, FORCED.sid = target.get("kid"), target.get("sid")
    try:
        op(st, rng)
    except Hang:
        pass
    except Exception:  # noqa: BLE001
        st.fail(f"{op.__name__} raised:\n{traceback.format_exc()}")
    finally:
        FORCED.kid = FORCED.sid = None


def new_ids(st, list_ids, before, wait):
    """Ids listed now that were not before (a target still being made), waiting for one."""
    deadline = time.monotonic() + wait
    while True:
        new = sorted(set(list_ids()) - before)
        if new or time.monotonic() >= deadline:
            return new
        time.sleep(0.05)


def op_race(st, rng):
    """Two operations on one target at once: the second lands while the first is in flight
    (a delete while a face creates, a restart during an execution, a rollback during a fork,
    a sandbox's delete or timeout during its create or execution...)."""
    kind = rng.choice(["kernel", "new kernel", "sandbox", "new sandbox"])
    ra, rb = random.Random(rng.random()), random.Random(rng.random())
    delay = rng.uniform(0, 1.5)

    def kernels():
        return [k["id"] for k in st.gw.request("GET", "/api/kernels")[1] or []]

    def sandboxes():
        return [x["sandboxID"] for x in st.gw.request(
            "GET", "/e2b/api/v2/sandboxes", headers={"X-API-KEY": st.gw.token})[1] or []]
    if kind == "kernel":
        first, second = rng.choice(RACES_ON_A_KERNEL[0]), rng.choice(RACES_ON_A_KERNEL[1])
        kid = kid_of(st, rng)
        if not kid:
            return
        target = {"kid": kid}
    elif kind == "new kernel":
        first, second = rng.choice(RACES_ON_A_NEW_KERNEL[0]), rng.choice(RACES_ON_A_NEW_KERNEL[1])
        target = {"kid": kid_of(st, rng)} if first is op_fork else {}
        before = set(kernels())
    elif kind == "sandbox":
        first, second = rng.choice(RACES_ON_A_SANDBOX[0]), rng.choice(RACES_ON_A_SANDBOX[1])
        sid, m = sbx_of(st, rng, tokens=True)
        if not m:
            return
        target = {"sid": sid}
    else:
        first, second = op_e2b_create_slow, rng.choice([op_e2b_control, op_kernel_delete])
        target = {}
        before = set(sandboxes())
    t = threading.Thread(target=run_forced, args=(st, first, ra, target), daemon=True)
    t.start()
    time.sleep(delay)
    if kind == "new kernel":
        new = new_ids(st, kernels, before, 3)
        if not new:
            return t.join(REQ_TIMEOUT + 10)
        target = {"kid": rng.choice(new)}
        st.add_kernel(target["kid"])
    elif kind == "new sandbox":
        new = new_ids(st, sandboxes, before, 3)
        if not new:
            return t.join(REQ_TIMEOUT + 10)
        with st.lock:
            st.sandboxes.setdefault(new[0], {})
        target = {"sid": new[0]}
        if second is op_kernel_delete:  # its kernel, through /api/kernels
            ks = [k for k in new_ids(st, kernels, set(), 0)]
            target = {"kid": rng.choice(ks)} if ks else target
    run_forced(st, second, rb, target)
    t.join(REQ_TIMEOUT + 10)
    if t.is_alive():
        st.fail(f"race {first.__name__} / {second.__name__}: the first still runs")


OPS = [
    (op_kernel_create, 5), (op_kernel_delete, 3), (op_kernel_restart, 2),
    (op_kernel_interrupt, 2), (op_discover, 3), (op_ws, 5), (op_session, 3), (op_channel, 4),
    (op_execute, 6), (op_execute_oneshot, 2), (op_execution, 2), (op_checkpoint, 5),
    (op_fork, 2), (op_command, 3), (op_mcp, 5), (op_e2b_create, 4), (op_e2b_control, 5),
    (op_e2b_execute, 4), (op_e2b_context, 2), (op_e2b_process, 3), (op_race, 10),
]


def worker(st, index):
    rng = random.Random(f"{st.seed}/{index}")
    fns, weights = [f for f, _ in OPS], [w for _, w in OPS]
    while st.time_left() > 0 and st.gw.alive():
        op = rng.choices(fns, weights)[0]
        with st.lock:
            st.ops[op.__name__] += 1
        try:
            op(st, rng)
        except Hang:
            pass
        except Exception:  # noqa: BLE001 - a bug of the test or an answer it cannot read
            st.fail(f"{op.__name__} raised:\n{traceback.format_exc()}")


# ---------------------------------------------------------------- the test

@pytest.fixture
def stress_gw():
    root = tempfile.mkdtemp(prefix="kgw-stress-")
    d = os.path.join(root, "kernels", "pyslow")
    os.makedirs(d)
    with open(os.path.join(d, "kernel.json"), "w") as f:
        json.dump({"argv": SLOW_SPEC, "display_name": "pyslow", "language": "python"}, f)
    gw = conftest.start_gateway(
        ["--pool", f"python3={POOL}", "--max-kernels", "48",
         "--e2b-templates", "base=,code-interpreter-v1=,slow=pyslow",
         "--mcp-idle-timeout", "15", "--cull-idle-timeout", "20", "--cull-interval", "5",
         "--max-header-connections-per-address", "256"],
        env={"JUPYTER_PATH": root})
    yield gw
    if gw.alive():
        conftest.stop_gateway(gw)


def wait_until(pred, timeout, every=0.25):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(every)


def pool_size(gw):
    """Pooled python3 kernels, ready or starting (the pool grows under demand: docs/pool.md)."""
    pool = gw.request("GET", "/api/status")[1]["pool"].get("python3") or {}
    return pool.get("ready", 0) + pool.get("starting", 0)


def kernel_cgroup(pid):
    """The kernel cgroup (cg-TAG-N) a process is in, or None."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                m = re.search(r"/kgw-gw-[^/]+/(cg-[0-9a-f]+-\d+)$", line.rstrip())
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


def at_rest(gw):
    """(processes under the gateway outside kernel cgroups, kernel cgroups with processes
    beyond the pooled kernels'), counted while the pool's size stays the same."""
    while True:
        n = pool_size(gw)
        procs = descendants(gw.proc.pid)
        groups = [kernel_cgroup(p) for p in procs]
        if pool_size(gw) == n:
            return sum(1 for g in groups if g is None), len({g for g in groups if g}) - n


def pool_full(gw):
    pool = gw.request("GET", "/api/status")[1]["pool"].get("python3") or {}
    return pool.get("ready", 0) >= pool.get("target", POOL) and pool.get("starting", 0) == 0


def fds_at_rest(gw, per_kernel):
    """The gateway's descriptors less its pooled kernels' (each holds per_kernel)."""
    while True:
        n = pool_size(gw)
        fds = fd_count(gw.proc.pid)
        if pool_size(gw) == n:
            return fds - per_kernel * n


def settled_baseline(gw):
    """The gateway at rest, its fork server up and its pool full, after a kernel through each
    path (lazily opened descriptors are then counted) and two at once (the pool grows, as it
    will under the workers' demand): (at_rest, descriptors besides the pool's, each pooled
    kernel's descriptors)."""
    assert wait_until(lambda: pool_full(gw), 120), "the pool did not fill"
    assert wait_until(lambda: "fork server: ready" in gw.log(), 120), "no fork server"
    n1, f1 = pool_size(gw), fd_count(gw.proc.pid)
    got = []
    ts = [threading.Thread(target=lambda: got.append(gw.start_kernel()["id"])) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for kid in got:
        assert gw.delete_kernel(kid) == 204
    assert len(got) == 2, got
    assert wait_until(lambda: pool_full(gw), 120), "the pool did not refill"
    time.sleep(1)
    n2, f2 = pool_size(gw), fd_count(gw.proc.pid)
    per = (f2 - f1) // (n2 - n1) if n2 > n1 else FDS_PER_POOLED
    return at_rest(gw), f2 - per * n2, per


def clean_up(st):
    """Ends everything the workers made (the gateway's own face for each), then every kernel."""
    gw = st.gw
    for sid in list(st.mcp):
        mcp_post(st, None, sid, method="DELETE")
    for sid in [s["sandboxID"] for s in gw.request(
            "GET", "/e2b/api/v2/sandboxes", headers={"X-API-KEY": gw.token})[1] or []]:
        st.http("DELETE", f"/e2b/api/sandboxes/{sid}", headers=e2b_key(st))
    for s in gw.request("GET", "/api/sessions")[1] or []:
        st.http("DELETE", f"/api/sessions/{s['id']}")

    def none_left():
        ks = gw.request("GET", "/api/kernels")[1]
        for k in ks:
            st.http("DELETE", f"/api/kernels/{k['id']}")
        return not ks
    assert wait_until(none_left, 120, every=1), \
        f"kernels left: {gw.request('GET', '/api/kernels')[1]}"


def test_lifecycle_stress(stress_gw):
    gw = stress_gw
    print(f"\nKGW_STRESS_SEED={SEED} KGW_STRESS_SECONDS={SECONDS} threads={THREADS} "
          f"gateway log {gw.log_path}", flush=True)
    rest0, fds0, fds_per = settled_baseline(gw)
    inst = instance_of(gw.proc.pid)
    st = Stress(gw, SEED, SECONDS)
    alive = {"ok": True}

    def watch():
        while st.time_left() > -REQ_TIMEOUT and alive["ok"]:
            if not gw.alive():
                st.fail(f"the gateway died (status {gw.proc.returncode})")
                return
            time.sleep(0.2)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    threads = [threading.Thread(target=worker, args=(st, i), daemon=True)
               for i in range(THREADS)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 3 * REQ_TIMEOUT)
    hung = [t for t in threads if t.is_alive()]
    ran = time.monotonic() - t0
    alive["ok"] = False
    print(f"ran {ran:.1f}s: {sum(st.ops.values())} operations {dict(st.ops)}; "
          f"expected 5xx {dict(st.answered_5xx)}; slowest {st.slowest[0]:.1f}s "
          f"({st.slowest[1]})", flush=True)
    assert not hung, f"[seed {SEED}] {len(hung)} workers still busy"
    assert gw.alive(), f"[seed {SEED}] the gateway died:\n" + gw.log()[-4000:]
    # the gateway at rest again (also after wrong answers: what it leaks is worth knowing):
    # kernel processes, cgroups, descriptors
    clean_up(st)
    if not wait_until(lambda: all(a <= b for a, b in zip(at_rest(gw), rest0)), 60):
        left = descendants(gw.proc.pid)
        st.fail(f"processes left under the gateway: (outside kernel cgroups, kernel cgroups "
                f"beyond its {pool_size(gw)} pooled kernels) {at_rest(gw)}, at the start "
                f"{rest0}:\n" + "\n".join(describe(p) for p in left))
    dirs = cgroups_of(inst)
    if len(dirs) > 3 * (CGROUP_SPARES + 2 * POOL + rest0[1] + 2):   # v1: 3 hierarchies
        st.fail(f"{len(dirs)} cgroup directories left: {sorted(dirs)[:10]}...")
    if not wait_until(lambda: fds_at_rest(gw, fds_per) <= fds0 + 8, 30):
        st.fail(f"the gateway holds {fd_count(gw.proc.pid)} descriptors with {pool_size(gw)} "
                f"pooled kernels ({fds_per} each), {fds0} besides the pool's at the start")
    try:
        conftest.stop_gateway(gw)   # raises unless it exits with 0 (ASan: no leaks at exit)
    except AssertionError as e:
        st.fail(str(e))
    log = gw.log()
    for bad in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
        if bad in log:
            i = log.index(bad)
            st.fail(f"{bad} in the gateway's log:\n{log[max(0, i - 2000):i + 6000]}")
    assert not st.failures, "\n".join(st.failures[:20])
