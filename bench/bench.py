#!/usr/bin/python3
"""kgw benchmark: the gateway measured against a floor measured in the same run.

The floor is the same operation done directly over ZeroMQ (ipc transport) against an ipykernel
that this script starts itself with jupyter_client's KernelManager, using a raw pyzmq client
that does the same JSON and HMAC-SHA256 work per message that any Jupyter client must do.

Sections (run in this order; pick with --only, comma separated):
  start       kernel start latency: POST /api/kernels -> websocket open -> kernel_info_reply
              on the websocket; floor: KernelManager.start_kernel() -> first kernel_info_reply
  rtt         execute `1+1` round trip (execute_reply + iopub idle), legacy and v1 protocols
  pipeline    20 kernels x 50 pipelined executions, all kernels at once: lost / duplicate /
              misordered replies; kgw RSS with 20 kernels started and connected
  throughput  iopub throughput: 200,000 print lines; one 50 MB string; kgw peak RSS
  pool        warm pool and fork server (own kgw instances): start latency, forked and from
              a pool of 4 (vs the cold exec path of section 1); sustained creation rate with
              a pool of 4, exec and fork server (each kernel deleted after one `1+1`); 20
              kernels ready at once (cold, forked, pools of 4 and 20); per-kernel PSS after
              `import numpy, pandas, matplotlib.pyplot`, cold vs forked
  rss         alias for "pipeline,throughput" (the idle RSS is measured in every run)

The main kgw runs with --pool python3=0 --no-fork-server (sections start..throughput measure
the cold exec path, comparable across versions); --kgw-arg overrides them.

Only the Python standard library and Debian packages (python3-websockets, python3-zmq,
python3-jupyter-client, python3-psutil, python3-ipykernel) are used.  Run with /usr/bin/python3.
See bench/README.md.
"""
import argparse
import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import hmac
import io
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid

import psutil
import zmq
from jupyter_client import KernelManager

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "examples"))
import kgwclient as K  # noqa: E402  (Jupyter messages, websocket encodings, REST)

V1 = K.V1
DELIM = b"<IDS|MSG>"
SECTIONS = ("start", "rtt", "pipeline", "throughput", "pool")

TARGET_ADDED_P50_MS = 0.2
TARGET_50MB_RATIO = 0.80
TARGET_RSS_IDLE_MB = 15.0
TARGET_RSS_20K_MB = 30.0
TARGET_POOL_P50_MS = 5.0        # warm pool start p50
TARGET_FORK_P50_MS = 30.0       # fork server start p50
TARGET_20_AT_ONCE_S = 1.0       # 20 kernels ready at once
TARGET_SUSTAINED_PER_S = 15.0   # kernels/s sustained with a pool of 4
BUSY = 0.10     # other processes using more than this share of the CPUs: figures unreliable

now = time.perf_counter


class BenchError(Exception):
    pass


class BenchTimeout(BaseException):
    """Raised from SIGALRM when the whole run exceeds its time limit."""


# ============================================================== small helpers

def pct(xs, p):
    """Nearest-rank percentile."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def ms(x):
    return x * 1000.0


iso_now = K.iso_now


def new_msg(msg_type, session, content=None, channel="shell"):
    return K.make_msg(msg_type, content, session=session, channel=channel, username="kgw-bench")


EXEC_CONTENT = {"silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True}


def exec_content(code):
    c = dict(EXEC_CONTENT)
    c["code"] = code
    return c


def log(msg=""):
    print(msg, flush=True)


def proc_status(pid):
    """VmRSS and VmHWM of pid in MB (1 MB = 2**20 bytes), from /proc/<pid>/status."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0]) / 1024.0
    except OSError:
        pass
    return out.get("VmRSS", float("nan")), out.get("VmHWM", float("nan"))


def proc_pss_mb(pid):
    """Proportional set size in MB (shared pages split among sharers), from smaps_rollup."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def helper_procs(kgw_pid):
    """kgw's descendants other than the kernels themselves (sandbox helpers, init processes):
    {name: [count, total VmRSS MB, total PSS MB]}."""
    out = {}
    try:
        for c in psutil.Process(kgw_pid).children(recursive=True):
            try:
                cmd = c.cmdline()
                if any("ipykernel" in a for a in cmd):
                    continue
                name = os.path.basename(cmd[0]) if cmd else c.name()
                e = out.setdefault(f"{name} ({c.name()})", [0, 0.0, 0.0])
                e[0] += 1
                e[1] += proc_status(c.pid)[0]
                e[2] += proc_pss_mb(c.pid)
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return out


def reset_hwm(pid):
    """Reset VmHWM to the current RSS (writing 5 to clear_refs; Linux >= 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def proc_cpu(pid):
    """CPU time of all threads of pid in seconds (ns resolution from schedstat, else stat)."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def machine_busy_s():
    """CPU seconds all CPUs spent in user, system or steal time since boot (/proc/stat).
    irq/softirq time is left out: it is not charged to any process (loopback TCP of our own
    50 MB relays lands there) and so cannot be told apart from other jobs' work."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[7]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s():
    """CPU seconds used by this process and all its descendants, live or reaped."""
    me = psutil.Process()
    total = 0.0
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


class Contention:
    """Share of the machine's CPUs used by processes outside this run (other jobs, builds)."""

    def __init__(self):
        self.t, self.busy, self.mine = now(), machine_busy_s(), tree_cpu_s()

    def others(self):
        dt = now() - self.t
        other = (machine_busy_s() - self.busy) - (tree_cpu_s() - self.mine)
        return max(0.0, other) / (dt * (os.cpu_count() or 1)) if dt > 0 else 0.0


class RssSampler:
    """Samples VmRSS of a pid every `every` seconds in a thread; .peak in MB."""

    def __init__(self, pid, every=0.002):
        self.pid, self.every, self.peak = pid, every, 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            rss, _ = proc_status(self.pid)
            if rss == rss:
                self.peak = max(self.peak, rss)
            time.sleep(self.every)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join()


# ============================================================== process bookkeeping

class Reaper:
    """Remembers every process this run started (pid + create time) and kills what is left."""

    def __init__(self):
        self.procs = {}          # pid -> (create_time, label)

    def track(self, pid, label):
        try:
            self.procs[pid] = (psutil.Process(pid).create_time(), label)
        except psutil.Error:
            pass

    def track_children(self, parent_pid, label):
        try:
            for c in psutil.Process(parent_pid).children(recursive=True):
                if c.pid not in self.procs:
                    self.track(c.pid, label)
        except psutil.Error:
            pass

    def alive(self, label_prefix=""):
        out = []
        for pid, (ct, label) in self.procs.items():
            if not label.startswith(label_prefix):
                continue
            try:
                p = psutil.Process(pid)
                if p.create_time() == ct and p.status() != psutil.STATUS_ZOMBIE:
                    out.append((pid, label))
            except psutil.Error:
                pass
        return out

    def kill_all(self):
        killed = []
        for pid, label in self.alive():
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append((pid, label))
            except OSError:
                pass
        return killed


# ============================================================== kgw process + REST

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    def __init__(self, binary, workdir, reaper, extra_args=(), name="kgw"):
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.runtime_dir = os.path.join(workdir, "kgw-runtime")
        os.makedirs(self.runtime_dir, exist_ok=True)
        self.reaper = reaper
        argv = [binary, "--ip", "127.0.0.1", "--port", str(self.port), "--api-key", self.token,
                "--log-level", "info", "--runtime-dir", self.runtime_dir, *extra_args]
        self.argv = argv
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("KGW_"):
                del env[k]
        self.logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        reaper.track(self.pid, "kgw")
        deadline = now() + 20
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"kgw exited at start with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                st, _ = self.request("GET", "/api", timeout=2)
                if st == 200:
                    break
            except OSError:
                pass
            if now() > deadline:
                raise BenchError("kgw did not answer GET /api within 20 s:\n" + self.log_tail())
            time.sleep(0.02)

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def request(self, method, path, body=None, timeout=90):
        """(HTTP status, parsed JSON answer or None)."""
        return K.request(f"http://127.0.0.1:{self.port}", self.token, method, path, body,
                         timeout)

    def start_kernel(self):
        st, model = self.request("POST", "/api/kernels", {"name": "python3"})
        if st != 201:
            raise BenchError(f"POST /api/kernels -> {st} {model}")
        self.reaper.track_children(self.pid, "kgw-kernel")
        return model["id"]

    def delete_kernel(self, kid):
        st, body = self.request("DELETE", f"/api/kernels/{kid}")
        if st != 204:
            raise BenchError(f"DELETE /api/kernels/{kid} -> {st} {body}")

    def rss(self):
        return proc_status(self.pid)

    def cpu(self):
        return proc_cpu(self.pid)

    def stop(self):
        """SIGTERM, then SIGKILL after 20 s. Returns (returncode, seconds)."""
        t0 = now()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode, now() - t0


# ============================================================== minimal blocking websocket client
# A plain blocking socket client so that the kgw path and the direct-ZeroMQ floor are measured
# with the same (synchronous, no event loop) client structure.

class WSClosed(Exception):
    pass


class SyncWS:
    GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, port, path, token, subprotocol=None, timeout=15):
        deadline = now() + timeout
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16))
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key.decode()}",
                 "Sec-WebSocket-Version: 13", f"Authorization: token {token}"]
        if subprotocol:
            lines.append(f"Sec-WebSocket-Protocol: {subprotocol}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            self.sock.settimeout(max(deadline - now(), 0.001))
            chunk = self.sock.recv(4096)
            if not chunk:
                raise WSClosed(f"connection closed during the handshake: {buf[:300]!r}")
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in lines[0] + " ":
            raise WSClosed(f"websocket upgrade refused: {lines[0]!r}")
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        want = base64.b64encode(hashlib.sha1(key + self.GUID).digest()).decode()
        if hdrs.get("sec-websocket-accept") != want:
            raise WSClosed("bad Sec-WebSocket-Accept")
        if subprotocol and hdrs.get("sec-websocket-protocol") != subprotocol:
            raise WSClosed(f"subprotocol not accepted: {hdrs.get('sec-websocket-protocol')!r}")
        self.buf = bytearray(rest)
        self.frames = 0
        self.marks = []     # (t first frame header parsed, t last byte, size) of messages >= 1 MB

    def _fill(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - now()
            if left <= 0:
                raise TimeoutError("websocket receive timed out")
            self.sock.settimeout(left)
            chunk = self.sock.recv(min(max(n - len(self.buf), 65536), 1 << 20))
            if not chunk:
                raise WSClosed("connection closed by the server")
            self.buf += chunk

    def _take(self, n, deadline):
        if len(self.buf) >= n:
            out = bytes(self.buf[:n])
            del self.buf[:n]
            return out
        out = bytearray(n)
        mv = memoryview(out)
        got = len(self.buf)
        mv[:got] = self.buf
        self.buf.clear()
        while got < n:
            left = deadline - now()
            if left <= 0:
                raise TimeoutError("websocket receive timed out")
            self.sock.settimeout(left)
            k = self.sock.recv_into(mv[got:], min(n - got, 4 << 20))
            if k == 0:
                raise WSClosed("connection closed by the server")
            got += k
        return out

    def _send_frame(self, opcode, payload):
        n = len(payload)
        if n < 126:
            hdr = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        mask = os.urandom(4)
        if n:
            km = (mask * (n // 4 + 1))[:n]
            payload = (int.from_bytes(payload, "little") ^ int.from_bytes(km, "little")).to_bytes(n, "little")
        self.sock.sendall(hdr + mask + payload)

    def send_text(self, data):
        self._send_frame(0x1, data)

    def send_binary(self, data):
        self._send_frame(0x2, data)

    def recv(self, deadline):
        """One complete data message: (is_binary, payload bytes)."""
        parts, first_op, t_first, size = [], None, None, 0
        while True:
            self._fill(2, deadline)
            b0, b1 = self.buf[0], self.buf[1]
            ln, hl = b1 & 0x7F, 2
            if ln == 126:
                self._fill(4, deadline)
                ln, hl = struct.unpack_from("!H", self.buf, 2)[0], 4
            elif ln == 127:
                self._fill(10, deadline)
                ln, hl = struct.unpack_from("!Q", self.buf, 2)[0], 10
            if b1 & 0x80:
                raise WSClosed("server sent a masked frame")
            del self.buf[:hl]
            if t_first is None:
                t_first = now()
            payload = self._take(ln, deadline)
            op, fin = b0 & 0x0F, b0 & 0x80
            self.frames += 1
            if op == 0x9:
                self._send_frame(0xA, payload)
                continue
            if op == 0xA:
                continue
            if op == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise WSClosed(f"server closed the websocket: code {code} {payload[2:]!r}")
            if op in (0x1, 0x2):
                if first_op is not None:
                    raise WSClosed("new data frame inside a fragmented message")
                first_op = op
            elif op != 0x0 or first_op is None:
                raise WSClosed(f"unexpected opcode {op}")
            parts.append(payload)
            size += len(payload)
            if fin:
                if size >= 1 << 20:
                    self.marks.append((t_first, now(), size, len(parts)))
                return first_op == 0x2, (parts[0] if len(parts) == 1 else b"".join(parts))

    def close(self):
        try:
            self._send_frame(0x8, struct.pack("!H", 1000))
            self.sock.shutdown(socket.SHUT_WR)
            deadline = now() + 1
            while now() < deadline:
                self.sock.settimeout(max(deadline - now(), 0.001))
                if not self.sock.recv(65536):
                    break
        except OSError:
            pass
        finally:
            self.sock.close()


class KgwClient:
    """Blocking Jupyter client over a kgw channels websocket (legacy or v1)."""

    def __init__(self, gw, kid, protocol, session=None):
        self.protocol = protocol
        self.session = session or uuid.uuid4().hex
        path = f"/api/kernels/{kid}/channels?session_id={self.session}"
        self.ws = SyncWS(gw.port, path, gw.token, V1 if protocol == "v1" else None)
        self.nmsgs = 0

    def send(self, msg_type, content, channel="shell"):
        msg = new_msg(msg_type, self.session, content, channel)
        frame = K.encode(msg, self.protocol)
        if isinstance(frame, str):
            self.ws.send_text(frame.encode())
        else:
            self.ws.send_binary(frame)
        return msg["msg_id"]

    @property
    def marks(self):
        return self.ws.marks

    def recv(self, deadline):
        binary, data = self.ws.recv(deadline)
        self.nmsgs += 1
        if self.protocol == "v1" and not binary:
            raise BenchError(f"v1 protocol: got a text frame {bytes(data[:200])!r}")
        return K.decode(data if binary else data.decode(), self.protocol)

    def close(self):
        self.ws.close()


class ZmqClient:
    """Blocking raw pyzmq Jupyter client (shell DEALER + iopub SUB), HMAC-SHA256 both ways."""

    def __init__(self, ctx, info, session=None):
        self.session = session or uuid.uuid4().hex
        key = info["key"]
        self.key = key if isinstance(key, bytes) else key.encode()

        def url(port):
            if info["transport"] == "ipc":
                return f"ipc://{info['ip']}-{port}"
            return f"tcp://{info['ip']}:{port}"
        self.shell = ctx.socket(zmq.DEALER)
        self.shell.setsockopt(zmq.IDENTITY, self.session.encode())
        self.shell.setsockopt(zmq.LINGER, 0)
        self.shell.connect(url(info["shell_port"]))
        self.iopub = ctx.socket(zmq.SUB)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.setsockopt(zmq.LINGER, 0)
        self.iopub.connect(url(info["iopub_port"]))
        self.poller = zmq.Poller()
        self.poller.register(self.shell, zmq.POLLIN)
        self.poller.register(self.iopub, zmq.POLLIN)
        self.pending = []
        self.nmsgs = 0
        self.bad_sig = 0
        self.marks = []     # (t received, t received, size, 1) of messages >= 1 MB

    def _sign(self, parts):
        h = hmac.new(self.key, digestmod=hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.hexdigest().encode()

    def send(self, msg_type, content, channel="shell"):
        h = new_msg(msg_type, self.session)["header"]
        parts = [json.dumps(h).encode(), b"{}", b"{}", json.dumps(content).encode()]
        self.shell.send_multipart([DELIM, self._sign(parts)] + parts)
        return h["msg_id"]

    def _parse(self, channel, frames):
        i = frames.index(DELIM)
        sig, parts = frames[i + 1], frames[i + 2:i + 6]
        if not hmac.compare_digest(sig, self._sign(parts)):
            self.bad_sig += 1
            raise BenchError("bad HMAC signature from the kernel")
        return {"channel": channel, "header": json.loads(parts[0]),
                "parent_header": json.loads(parts[1]), "metadata": json.loads(parts[2]),
                "content": json.loads(parts[3]), "buffers": frames[i + 6:]}

    def recv(self, deadline):
        while not self.pending:
            left = deadline - now()
            if left <= 0:
                raise TimeoutError("zmq receive timed out")
            for sock, _ in self.poller.poll(max(1, int(left * 1000))):
                ch = "shell" if sock is self.shell else "iopub"
                frames = sock.recv_multipart()
                size = sum(len(f) for f in frames)
                if size >= 1 << 20:
                    t = now()
                    self.marks.append((t, t, size, 1))
                self.pending.append((ch, frames))
        ch, frames = self.pending.pop(0)
        self.nmsgs += 1
        return self._parse(ch, frames)

    def close(self):
        self.shell.close(0)
        self.iopub.close(0)


def wait_reply(client, msg_id, reply_type, deadline):
    while True:
        m = client.recv(deadline)
        if m["channel"] == "shell" and m["header"]["msg_type"] == reply_type and \
                m["parent_header"].get("msg_id") == msg_id:
            return m


def wait_exec(client, msg_id, deadline, collect_stream=False):
    """Waits for execute_reply and iopub status idle of msg_id; returns (reply, stream texts)."""
    reply, idle, stream = None, False, []
    while reply is None or not idle:
        m = client.recv(deadline)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        mt = m["header"]["msg_type"]
        if m["channel"] == "shell" and mt == "execute_reply":
            reply = m
        elif m["channel"] == "iopub":
            if mt == "status" and m["content"].get("execution_state") == "idle":
                idle = True
            elif mt == "stream" and collect_stream:
                stream.append(m["content"]["text"])
    return reply, stream


def settle(client, deadline):
    """Kernel ready and iopub subscription proven: kernel_info until a reply and an iopub msg."""
    while True:
        if now() > deadline:
            raise BenchError("kernel not answering kernel_info_request")
        mid = client.send("kernel_info_request", {})
        shell_ok = iopub_ok = False
        step = min(now() + 0.5, deadline)
        try:
            while not (shell_ok and iopub_ok):
                m = client.recv(step)
                if m["parent_header"].get("msg_id") == mid:
                    shell_ok |= m["channel"] == "shell"
                    iopub_ok |= m["channel"] == "iopub"
        except TimeoutError:
            continue
        # drain the rest of this request (status idle)
        try:
            while True:
                client.recv(now() + 0.05)
        except TimeoutError:
            pass
        return


# ============================================================== the floor: kernels started here

class FloorKernel:
    def __init__(self, workdir, reaper, ctx):
        d = tempfile.mkdtemp(prefix="floor-", dir=workdir)
        self.km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(d, "k"),
                                connection_file=os.path.join(d, "kernel.json"))
        self.reaper, self.ctx = reaper, ctx
        self.t_start_call = now()
        self.km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.t_started = now()
        self.pid = self.km.provisioner.process.pid
        reaper.track(self.pid, "floor-kernel")
        self.info = self.km.get_connection_info()

    def client(self):
        return ZmqClient(self.ctx, self.info)

    def shutdown(self):
        try:
            self.km.shutdown_kernel(now=True)
        except Exception:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.km.cleanup_resources()
        except Exception:
            pass


# ============================================================== section 1: kernel start

def sec_start(R, gw, args, workdir, reaper, ctx):
    n = args.starts
    kgw_t, kgw_post, kgw_ws = [], [], []
    floor_t, floor_iopub, floor_call = [], [], []
    for i in range(n):
        # --- kgw: POST -> ws open -> kernel_info_reply on the websocket
        t0 = now()
        kid = gw.start_kernel()
        t1 = now()
        c = KgwClient(gw, kid, "legacy")
        mid = c.send("kernel_info_request", {})
        wait_reply(c, mid, "kernel_info_reply", now() + 30)
        t2 = now()
        kgw_t.append(t2 - t0)
        kgw_post.append(t1 - t0)
        kgw_ws.append(t2 - t1)
        c.close()
        gw.delete_kernel(kid)
        # --- floor: KernelManager.start_kernel -> first kernel_info_reply (100 ms nudges,
        # kgw's cadence while a kernel starts)
        t0 = now()
        fk = FloorKernel(workdir, reaper, ctx)
        zc = fk.client()
        first_reply = first_iopub = None
        deadline = now() + 60
        next_nudge = 0.0
        while first_reply is None or first_iopub is None:
            if now() >= next_nudge:
                zc.send("kernel_info_request", {})
                next_nudge = now() + 0.1
            try:
                m = zc.recv(min(next_nudge, deadline))
            except TimeoutError:
                if now() >= deadline:
                    raise BenchError("floor kernel did not answer kernel_info within 60 s")
                continue
            if m["channel"] == "shell" and m["header"]["msg_type"] == "kernel_info_reply" \
                    and first_reply is None:
                first_reply = now()
            elif m["channel"] == "iopub" and first_iopub is None:
                first_iopub = now()
        floor_t.append(first_reply - t0)
        floor_iopub.append(max(first_reply, first_iopub) - t0)
        floor_call.append(fk.t_started - fk.t_start_call)
        zc.close()
        fk.shutdown()
    R["start"] = dict(kgw=kgw_t, floor=floor_t)
    log(f"  kgw   total p50 {ms(pct(kgw_t, 50)):7.1f} ms  p90 {ms(pct(kgw_t, 90)):7.1f}"
        f"   (POST p50 {ms(pct(kgw_post, 50)):.1f} ms, ws open + kernel_info p50 "
        f"{ms(pct(kgw_ws, 50)):.2f} ms)")
    log(f"  floor first reply p50 {ms(pct(floor_t, 50)):7.1f} ms  p90 {ms(pct(floor_t, 90)):7.1f}"
        f"   (start_kernel() call p50 {ms(pct(floor_call, 50)):.1f} ms; reply + first iopub "
        f"p50 {ms(pct(floor_iopub, 50)):.1f} ms, what kgw waits for before answering the POST)")


# ============================================================== section 2: execute round trip

def rtt_once(client, deadline):
    t0 = now()
    mid = client.send("execute_request", exec_content("1+1"))
    reply, _ = wait_exec(client, mid, deadline)
    t1 = now()
    if reply["content"]["status"] != "ok":
        raise BenchError(f"execute 1+1 failed: {reply['content']}")
    return t1 - t0


def sec_rtt(R, gw, args, workdir, reaper, ctx, shared):
    # three idle kernels, one per client: the floor's, one kgw kernel for the legacy websocket
    # and one for the v1 websocket (so no websocket receives the other's iopub traffic); the
    # clients take turns round trip by round trip (order rotating), so load drift on the
    # machine hits all three alike
    kid_legacy = shared.kgw_kernel(gw)
    kid_v1 = gw.start_kernel()
    fk = shared.floor_kernel(workdir, reaper, ctx)
    names = ("floor", "legacy", "v1")
    res = {n: [] for n in names}
    cpu = {}
    clients = {}
    try:
        clients["floor"] = fk.client()
        clients["legacy"] = KgwClient(gw, kid_legacy, "legacy")
        clients["v1"] = KgwClient(gw, kid_v1, "v1")
        for c in clients.values():
            settle(c, now() + 30)
        deadline = now() + 300
        for i in range(args.rtt_warm + args.rtt_iters):
            for k in range(3):
                n = names[(i + k) % 3]
                dt = rtt_once(clients[n], deadline)
                if i >= args.rtt_warm:
                    res[n].append(dt)
        # kgw CPU per round trip, each protocol alone
        for n in ("legacy", "v1"):
            c0 = gw.cpu()
            for _ in range(args.rtt_cpu_iters):
                rtt_once(clients[n], deadline)
            cpu[n] = (gw.cpu() - c0) / args.rtt_cpu_iters
    finally:
        for c in clients.values():
            c.close()
        _try(gw.delete_kernel, kid_v1)
    R["rtt"] = res
    R["rtt_cpu"] = cpu
    fl = pct(res["floor"], 50)
    for name in names:
        xs = res[name]
        extra = ""
        if name != "floor":
            paired = statistics.median(a - b for a, b in zip(xs, res["floor"]))
            extra = (f"  added p50 {ms(pct(xs, 50) - fl):+.3f} ms (paired median "
                     f"{ms(paired):+.3f}), kgw CPU {cpu[name] * 1e6:.0f} us/round trip")
        label = "floor (raw pyzmq, ipc)" if name == "floor" else f"kgw {name}"
        log(f"  {label:24s} n={len(xs)} p50 {ms(pct(xs, 50)):.3f} ms  p90 {ms(pct(xs, 90)):.3f}"
            f"  p99 {ms(pct(xs, 99)):.3f}  min {ms(min(xs)):.3f}{extra}")


# ============================================================== section 3: iopub throughput

PRINT_N = 200_000
BIG_N = 50_000_000


def run_cell(client, code, deadline, expect_text):
    client.marks.clear()
    t0 = now()
    mid = client.send("execute_request", exec_content(code))
    reply, stream = wait_exec(client, mid, deadline, collect_stream=True)
    t1 = now()
    if reply["content"]["status"] != "ok":
        raise BenchError(f"cell failed: {reply['content']}")
    nmsg = len(stream)
    text = "".join(stream)
    ok = text == expect_text
    if not ok:
        raise BenchError(f"stdout mismatch for {code[:40]!r}: got {len(text)} chars in {nmsg} "
                         f"stream messages, expected {len(expect_text)}")
    marks = [(a - t0, b - t0, size, nfr) for a, b, size, nfr in client.marks]
    return t1 - t0, nmsg, marks


def sec_throughput(R, gw, args, workdir, reaper, ctx, shared):
    kid = shared.kgw_kernel(gw)
    fk = shared.floor_kernel(workdir, reaper, ctx)
    expect_print = "".join(f"{i}\n" for i in range(PRINT_N))
    expect_big = "x" * BIG_N + "\n"
    res = {"print": {"floor": [], "legacy": [], "v1": []},
           "big": {"floor": [], "legacy": [], "v1": []}}
    nmsgs, marks = {}, {}
    peak = {"sampled": 0.0, "hwm": 0.0, "before": float("nan"), "hwm_reset": None}
    zc = fk.client()
    settle(zc, now() + 30)
    clients = {}
    try:
        for proto in ("legacy", "v1"):
            clients[proto] = KgwClient(gw, kid, proto)
            settle(clients[proto], now() + 30)
            # only one websocket is connected at a time: close it and reopen with the same
            # session when its turn comes (kgw keeps the session's sockets meanwhile)
            clients[proto].close()
        for rep in range(args.tp_reps):
            for kind, code, expect in (("print", f"for i in range({PRINT_N}): print(i)", expect_print),
                                       ("big", f"print('x'*{BIG_N})", expect_big)):
                dt, n, mk = run_cell(zc, code, now() + 120, expect)
                res[kind]["floor"].append(dt)
                nmsgs[(kind, "floor")] = n
                marks.setdefault((kind, "floor"), []).append((dt, mk, None))
                for proto in ("legacy", "v1"):
                    c = KgwClient(gw, kid, proto, clients[proto].session)
                    try:
                        settle(c, now() + 30)
                        if kind == "big":
                            rss_before, _ = gw.rss()
                            peak["before"] = rss_before
                            peak["hwm_reset"] = reset_hwm(gw.pid)
                            c0 = gw.cpu()
                            with RssSampler(gw.pid) as s:
                                dt, n, mk = run_cell(c, code, now() + 120, expect)
                            kcpu = gw.cpu() - c0
                            _, hwm = gw.rss()
                            peak["sampled"] = max(peak["sampled"], s.peak)
                            peak["hwm"] = max(peak["hwm"], hwm)
                        else:
                            c0 = gw.cpu()
                            dt, n, mk = run_cell(c, code, now() + 120, expect)
                            kcpu = gw.cpu() - c0
                    finally:
                        c.close()
                    res[kind][proto].append(dt)
                    nmsgs[(kind, proto)] = n
                    marks.setdefault((kind, proto), []).append((dt, mk, kcpu))
    finally:
        zc.close()
    R["tp"] = res
    R["tp_nmsgs"] = nmsgs
    R["rss_peak"] = peak
    R["tp_marks"] = marks
    for kind, what in (("print", f"{PRINT_N} print lines"), ("big", "one 50 MB string")):
        size = len(expect_print if kind == "print" else expect_big) / 1e6
        fl = statistics.median(res[kind]["floor"])
        for name in ("floor", "legacy", "v1"):
            t = statistics.median(res[kind][name])
            label = "floor (raw pyzmq, ipc)" if name == "floor" else f"kgw {name}"
            log(f"  {what:18s} {label:24s} median {t:7.3f} s  {size / t:8.1f} MB/s  "
                f"{nmsgs[(kind, name)]:5d} stream msgs  rate vs direct {fl / t:5.2f}")
    log("  where the 50 MB run's time goes (median run; t=0 at send of execute_request):")
    for name in ("floor", "legacy", "v1"):
        runs = sorted(marks[("big", name)], key=lambda r: r[0])
        dt, mk, kcpu = runs[len(runs) // 2]
        label = "floor (raw pyzmq, ipc)" if name == "floor" else f"kgw {name}"
        if mk:
            a, b, size, nfr = mk[0]
            if name == "floor":
                detail = f"whole 50 MB message received at {a:.3f} s"
            else:
                detail = (f"first byte of the 50 MB message at {a:.3f} s, last at {b:.3f} s "
                          f"({nfr} ws frames, {size / 1e6 / max(b - a, 1e-9):.0f} MB/s on the wire)")
            detail += f", client decode + idle at {dt:.3f} s"
        else:
            detail = f"idle at {dt:.3f} s"
        if kcpu is not None:
            detail += f"; kgw CPU {kcpu:.2f} s"
        log(f"    {label:24s} {detail}")
    log(f"  kgw RSS during the 50 MB relay: before {peak['before']:.1f} MB, sampled peak "
        f"{peak['sampled']:.1f} MB, VmHWM {peak['hwm']:.1f} MB"
        f"{'' if peak['hwm_reset'] else ' (VmHWM reset failed: HWM since process start)'}")


# ============================================================== section 4: 20 kernels pipelined

async def _aconnect(gw, kid, proto, session):
    return await K.connect(f"ws://127.0.0.1:{gw.port}", gw.token, kid, proto, session,
                           compression=None, open_timeout=30)


def _adecode(proto, frame):
    if proto == "v1" and isinstance(frame, str):
        raise BenchError(f"v1 protocol: got a text frame {frame[:200]!r}")
    return K.decode(frame, proto)


async def _asend(ws, proto, session, msg_type, content):
    msg = new_msg(msg_type, session, content)
    await ws.send(K.encode(msg, proto))
    return msg["msg_id"]


async def _aready(ws, proto, session, timeout):
    deadline = now() + timeout
    mid = await _asend(ws, proto, session, "kernel_info_request", {})
    shell_ok = iopub_ok = False
    while not (shell_ok and iopub_ok):
        m = _adecode(proto, await asyncio.wait_for(ws.recv(), max(deadline - now(), 0.001)))
        if m["parent_header"].get("msg_id") == mid:
            shell_ok |= m["channel"] == "shell"
            iopub_ok |= m["channel"] == "iopub" and m["header"]["msg_type"] == "status" and \
                m["content"].get("execution_state") == "idle"
    return mid


async def _apipeline(idx, ws, proto, session, n, go, timeout, ignore):
    await go.wait()
    t0 = now()
    sent = []
    for j in range(n):
        sent.append(await _asend(ws, proto, session, "execute_request",
                                 exec_content(f"{idx}*1000+{j}")))
    index = {mid: j for j, mid in enumerate(sent)}
    replies, idles, results, stray = [], {}, {}, 0
    deadline = now() + timeout
    timed_out = False
    while len(replies) < n or len(idles) < n:
        left = deadline - now()
        try:
            frame = await asyncio.wait_for(ws.recv(), max(left, 0.001))
        except asyncio.TimeoutError:
            timed_out = True
            break
        m = _adecode(proto, frame)
        pid = m["parent_header"].get("msg_id")
        mt = m["header"]["msg_type"]
        if pid not in index:
            if pid not in ignore:
                stray += 1
            continue
        if m["channel"] == "shell" and mt == "execute_reply":
            replies.append((pid, m["content"].get("execution_count"), m["content"]["status"]))
        elif m["channel"] == "iopub" and mt == "status" and \
                m["content"].get("execution_state") == "idle":
            idles[pid] = idles.get(pid, 0) + 1
        elif m["channel"] == "iopub" and mt == "execute_result":
            results[pid] = m["content"]["data"].get("text/plain")
    t1 = now()
    counts = {}
    for pid, _, _ in replies:
        counts[pid] = counts.get(pid, 0) + 1
    lost = sum(1 for mid in sent if mid not in counts)
    dup = sum(c - 1 for c in counts.values())
    # misordered: a reply whose request was sent before one already answered, or whose
    # execution_count is not the previous reply's + 1
    mis_order = mis_count = 0
    hi, prev_ec = -1, None
    for pid, ec, _ in replies:
        j = index[pid]
        if j < hi:
            mis_order += 1
        hi = max(hi, j)
        if prev_ec is not None and ec != prev_ec + 1:
            mis_count += 1
        prev_ec = ec
    wrong = sum(1 for j, mid in enumerate(sent)
                if mid in results and results[mid] != str(idx * 1000 + j))
    no_result = sum(1 for mid in sent if mid in counts and mid not in results)
    not_ok = sum(1 for _, _, st in replies if st != "ok")
    idle_lost = sum(1 for mid in sent if mid not in idles)
    idle_dup = sum(c - 1 for c in idles.values())
    return dict(lost=lost, dup=dup, mis_order=mis_order, mis_count=mis_count, wrong=wrong,
                no_result=no_result, not_ok=not_ok, idle_lost=idle_lost, idle_dup=idle_dup,
                stray=stray, timed_out=timed_out, t0=t0, t1=t1, proto=proto,
                ecs=[ec for _, ec, _ in replies])


async def _pipeline_async(gw, kids, args, R):
    protos = ["legacy" if i % 2 == 0 else "v1" for i in range(len(kids))]
    sessions = [uuid.uuid4().hex for _ in kids]
    t0 = now()
    wss = await asyncio.gather(*[_aconnect(gw, k, p, s) for k, p, s in zip(kids, protos, sessions)])
    try:
        ready_ids = await asyncio.gather(*[_aready(ws, p, s, 60) for ws, p, s in zip(wss, protos, sessions)])
        R["pipe_connect_s"] = now() - t0
        await asyncio.sleep(0.3)
        R["rss_20k"] = gw.rss()
        R["helpers_20k"] = helper_procs(gw.pid)
        go = asyncio.Event()
        tasks = [asyncio.ensure_future(_apipeline(i, ws, p, s, args.pipe_n, go, args.pipe_timeout,
                                                  {rid}))
                 for i, (ws, p, s, rid) in enumerate(zip(wss, protos, sessions, ready_ids))]
        await asyncio.sleep(0)
        c0 = gw.cpu()
        go.set()
        results = await asyncio.gather(*tasks)
        R["pipe_cpu"] = gw.cpu() - c0
        R["rss_20k_after"] = gw.rss()
        return results
    finally:
        await asyncio.gather(*[ws.close() for ws in wss], return_exceptions=True)


def sec_pipeline(R, gw, args, workdir, reaper, ctx):
    nk = args.pipe_kernels
    t0 = now()
    with concurrent.futures.ThreadPoolExecutor(nk) as ex:
        futs = [ex.submit(gw.start_kernel) for _ in range(nk)]
        kids, errs = [], []
        for f in futs:
            try:
                kids.append(f.result())
            except Exception as e:       # noqa: BLE001
                errs.append(repr(e))
    R["pipe_start_s"] = now() - t0
    reaper.track_children(gw.pid, "kgw-kernel")
    if errs:
        for k in kids:
            try:
                gw.delete_kernel(k)
            except Exception:
                pass
        raise BenchError(f"{len(errs)} of {nk} concurrent kernel starts failed: {errs[:3]}")
    log(f"  {nk} kernels started concurrently in {R['pipe_start_s']:.1f} s")
    try:
        results = asyncio.run(asyncio.wait_for(_pipeline_async(gw, kids, args, R),
                                               args.pipe_timeout + 120))
    finally:
        t1 = now()
        def timed_delete(k):
            t = now()
            return _try(gw.delete_kernel, k), now() - t
        with concurrent.futures.ThreadPoolExecutor(nk) as ex:
            dels = list(ex.map(timed_delete, kids))
        R["pipe_delete_s"] = now() - t1
        R["pipe_delete_each"] = sorted(d[1] for d in dels)
        R["pipe_delete_errors"] = [d[0] for d in dels if d[0]]
    tot = {k: sum(r[k] for r in results) for k in
           ("lost", "dup", "mis_order", "mis_count", "wrong", "no_result", "not_ok",
            "idle_lost", "idle_dup", "stray", "timed_out")}
    total_t = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    R["pipe"] = dict(tot, total_s=total_t, n=nk * args.pipe_n,
                     per_proto={p: {k: sum(r[k] for r in results if r["proto"] == p)
                                    for k in ("lost", "dup", "mis_order", "mis_count")}
                                for p in ("legacy", "v1")})
    rss, hwm = R["rss_20k"]
    log(f"  connected + kernel_info on all {nk} websockets in {R['pipe_connect_s']:.2f} s; "
        f"kgw VmRSS {rss:.1f} MB (VmHWM {hwm:.1f})")
    hp = R.get("helpers_20k") or {}
    if hp:
        log("  kgw's helper processes (descendants other than the kernels): " + "; ".join(
            f"{n} x {name}: VmRSS {rss:.1f} MB, PSS {pss:.1f} MB in all"
            for name, (n, rss, pss) in sorted(hp.items())))
    else:
        log("  kgw has no helper processes besides the kernels")
    log(f"  {nk}x{args.pipe_n} pipelined executions: {total_t:.2f} s "
        f"({nk * args.pipe_n / total_t:.0f} exec/s), kgw CPU {R['pipe_cpu']:.2f} s")
    log(f"  lost {tot['lost']}  duplicate {tot['dup']}  misordered(msg_id) {tot['mis_order']}  "
        f"execution_count gaps/misorder {tot['mis_count']}  wrong result {tot['wrong']}  "
        f"missing execute_result {tot['no_result']}  status!=ok {tot['not_ok']}  "
        f"idle lost {tot['idle_lost']} dup {tot['idle_dup']}  stray {tot['stray']}  "
        f"kernels timed out {tot['timed_out']}")
    log(f"  after: kgw VmRSS {R['rss_20k_after'][0]:.1f} MB; {nk} DELETEs (concurrent) took "
        f"{R['pipe_delete_s']:.2f} s (each: min {R['pipe_delete_each'][0]:.2f}, median "
        f"{statistics.median(R['pipe_delete_each']):.2f}, max {R['pipe_delete_each'][-1]:.2f} s)"
        f"{'; errors: ' + str(R['pipe_delete_errors'][:3]) if R['pipe_delete_errors'] else ''}")


def _try(fn, *a):
    try:
        fn(*a)
        return None
    except Exception as e:       # noqa: BLE001
        return repr(e)


# ============================================================== section 5: warm pool

def pool_state(gw):
    st, body = gw.request("GET", "/api/status")
    return (body or {}).get("pool", {}).get("python3") or {}


def wait_pool(gw, n, timeout=120):
    deadline = now() + timeout
    while now() < deadline:
        p = pool_state(gw)
        if p.get("ready", 0) >= n:
            return
        time.sleep(0.05)
    raise BenchError(f"the pool did not reach {n} ready kernels within {timeout} s: {pool_state(gw)}")


def post_kernel(gw):
    """POST /api/kernels without the bookkeeping of Gateway.start_kernel (a process-tree walk
    that would add milliseconds to a figure measured in milliseconds)."""
    st, model = gw.request("POST", "/api/kernels", {"name": "python3"})
    if st != 201:
        raise BenchError(f"POST /api/kernels -> {st} {model}")
    return model["id"]


def ready_kernel(gw):
    """POST -> websocket open -> kernel_info_reply on it. Returns (kid, total s, POST s)."""
    t0 = now()
    kid = post_kernel(gw)
    t1 = now()
    c = KgwClient(gw, kid, "legacy")
    mid = c.send("kernel_info_request", {})
    wait_reply(c, mid, "kernel_info_reply", now() + 60)
    t2 = now()
    c.close()
    return kid, t2 - t0, t1 - t0


def ipykernels(pid):
    """kgw's kernel processes (an ipykernel whose parent is a sandbox's init, or kgw itself
    without a sandbox); not the fork server, whose argv is a kernel's too."""
    out = {}
    try:
        for c in psutil.Process(pid).children(recursive=True):
            try:
                if any("ipykernel" in a for a in c.cmdline()) and \
                        c.parent().cmdline() in (["init"], psutil.Process(pid).cmdline()):
                    out[c.pid] = c
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return out


def burst(gw, n):
    """n kernels at once (one thread each: POST, websocket, kernel_info_reply); seconds until
    the last is ready. Deletes them afterwards."""
    t0 = now()
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        res = list(ex.map(lambda _: ready_kernel(gw), range(n)))
    dt = now() - t0
    gw.reaper.track_children(gw.pid, "kgw-kernel")
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        list(ex.map(lambda r: _try(gw.delete_kernel, r[0]), res))
    return dt, [r[1] for r in res]


def starts(gw, n, pool=0):
    """n sequential starts (POST -> kernel_info_reply on the websocket), each deleted; with a
    pool, each from a full pool (steady state)."""
    tot = []
    for _ in range(n):
        if pool:
            wait_pool(gw, pool)
        kid, t, _ = ready_kernel(gw)
        tot.append(t)
        gw.delete_kernel(kid)
    return tot


def sustained(gw, seconds, clients):
    """clients threads, each repeating start, `1+1`, delete, for `seconds`: kernels/s."""
    st0 = pool_state(gw)
    stop_at = now() + seconds
    lat, lock = [], threading.Lock()

    def worker():
        n = 0
        while now() < stop_at:
            t0 = now()
            kid = post_kernel(gw)
            t1 = now()
            c = KgwClient(gw, kid, "legacy")
            mid = c.send("execute_request", exec_content("1+1"))
            reply, _ = wait_exec(c, mid, now() + 60)
            c.close()
            if reply["content"]["status"] != "ok":
                raise BenchError("1+1 failed")
            gw.delete_kernel(kid)
            with lock:
                lat.append(t1 - t0)
            n += 1
        return n
    t0 = now()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        counts = list(ex.map(lambda _: worker(), range(clients)))
    dt = now() - t0
    gw.reaper.track_children(gw.pid, "kgw-kernel")
    st1 = pool_state(gw)
    hits = st1.get("handouts", 0) - st0.get("handouts", 0)
    misses = st1.get("misses", 0) - st0.get("misses", 0)
    rate = sum(counts) / dt
    return rate, (f"{sum(counts)} kernels in {dt:.0f} s ({rate:.2f}/s), each started, `1+1`, "
                  f"deleted; from the pool {hits}, started on demand {misses}; POST p50 "
                  f"{ms(pct(lat, 50)):.1f} ms p90 {ms(pct(lat, 90)):.1f} ms")


PSS_CODE = "import numpy, pandas, matplotlib.pyplot"


def kernel_pss(gw, n=3):
    """Median PSS (MB) of n kernels that each imported numpy, pandas and matplotlib.pyplot."""
    before = set(ipykernels(gw.pid))
    kids = [post_kernel(gw) for _ in range(n)]
    try:
        for kid in kids:
            c = KgwClient(gw, kid, "legacy")
            mid = c.send("execute_request", exec_content(PSS_CODE))
            reply, _ = wait_exec(c, mid, now() + 120)
            c.close()
            if reply["content"]["status"] != "ok":
                raise BenchError(f"{PSS_CODE} failed")
        time.sleep(0.5)
        new = [p for p in ipykernels(gw.pid) if p not in before]
        gw.reaper.track_children(gw.pid, "kgw-kernel")
        return statistics.median(proc_pss_mb(p) for p in new) if new else float("nan")
    finally:
        for kid in kids:
            _try(gw.delete_kernel, kid)


def wait_log(gw, text, timeout=60):
    deadline = now() + timeout
    while now() < deadline:
        if text in gw.log_tail(400):
            return True
        time.sleep(0.05)
    return False


def sec_pool(R, gw_main, args, workdir, reaper, ctx):
    P = R["pool"] = {}
    preload = "numpy,pandas,matplotlib.pyplot"
    # -- the fork server alone (no pool): start latency, 20 at once, PSS
    gw = Gateway(args.kgw, workdir, reaper, ["--pool", "python3=0", "--fork-server",
                                              "--fork-server-preload", preload], name="kgw-fork")
    try:
        if not wait_log(gw, "fork server: ready"):
            raise BenchError("the fork server did not become ready:\n" + gw.log_tail())
        P["fork_start"] = starts(gw, args.pool_starts)
        log(f"  fork server, {len(P['fork_start'])} starts: POST -> kernel_info_reply on the "
            f"websocket p50 {ms(pct(P['fork_start'], 50)):.1f} ms p90 "
            f"{ms(pct(P['fork_start'], 90)):.1f} ms")
        P["burst_fork"], _ = burst(gw, 20)
        log(f"  20 kernels at once, fork server, no pool: {P['burst_fork']:.2f} s")
        P["pss_fork"] = kernel_pss(gw)
        log(f"  PSS per kernel after `{PSS_CODE}`, forked (server pre-loaded {preload}): "
            f"{P['pss_fork']:.1f} MB (median of 3 live kernels)")
    finally:
        gw.stop()
    P["pss_cold"] = kernel_pss(gw_main)
    log(f"  PSS per kernel after `{PSS_CODE}`, cold exec: {P['pss_cold']:.1f} MB (median of 3)")
    P["burst_cold"], _ = burst(gw_main, 20)
    reaper.track_children(gw_main.pid, "kgw-kernel")
    log(f"  20 kernels at once, cold exec, no pool: {P['burst_cold']:.2f} s")
    # -- pools of 4: exec path, and with the fork server
    for key, extra in (("exec", ["--no-fork-server"]), ("fork", ["--fork-server"])):
        gw = Gateway(args.kgw, workdir, reaper, ["--pool", "python3=4", *extra],
                     name=f"kgw-pool4-{key}")
        try:
            wait_pool(gw, 4)
            P[f"start_pool_{key}"] = starts(gw, args.pool_starts, pool=4)
            t = P[f"start_pool_{key}"]
            log(f"  pool of 4 ({key}), {len(t)} starts from a full pool: p50 "
                f"{ms(pct(t, 50)):.2f} ms p90 {ms(pct(t, 90)):.2f} ms")
            wait_pool(gw, 4)
            P[f"sustained_{key}"], line = sustained(gw, args.sustain_s, args.sustain_clients)
            log(f"  sustained, pool of 4 ({key}), {args.sustain_clients} clients: {line}")
            wait_pool(gw, pool_state(gw)["target"], timeout=180)
            P[f"burst_pool4_{key}"], _ = burst(gw, 20)
            log(f"  20 kernels at once, pool of 4 ({key}, full): {P[f'burst_pool4_{key}']:.2f} s")
        finally:
            gw.stop()
    # -- a pool as large as the burst
    gw = Gateway(args.kgw, workdir, reaper, ["--pool", "python3=20", "--fork-server"],
                 name="kgw-pool20")
    try:
        wait_pool(gw, 20, timeout=240)
        P["burst_pool20"], each = burst(gw, 20)
        log(f"  20 kernels at once, pool of 20 (full): {P['burst_pool20']:.3f} s to the last "
            f"ready (each: p50 {ms(pct(each, 50)):.1f} ms)")
    finally:
        gw.stop()


# ============================================================== shared kernels + driver

class Shared:
    """One kgw kernel and one floor kernel reused by rtt and throughput."""

    def __init__(self):
        self.kid = None
        self.fk = None

    def kgw_kernel(self, gw):
        if self.kid is None:
            self.kid = gw.start_kernel()
        return self.kid

    def floor_kernel(self, workdir, reaper, ctx):
        if self.fk is None:
            self.fk = FloorKernel(workdir, reaper, ctx)
        return self.fk

    def close(self, gw):
        if self.kid is not None and gw is not None and gw.alive():
            _try(gw.delete_kernel, self.kid)
        if self.fk is not None:
            self.fk.shutdown()


def fmt(x, unit="", nd=2):
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    return f"{x:.{nd}f}{unit}"


def table(R, args):
    rows = []   # (figure, kgw, floor, ratio, target, verdict)

    def add(fig, k, f="", ratio="", target="", verdict=""):
        rows.append((fig, k, f, ratio, target, verdict))

    busy = R.get("busy", False)

    def verdict(ok, timing=False):
        return ("PASS" if ok else "FAIL") + ("?" if busy and timing else "")

    if "start" in R:
        k, f = R["start"]["kgw"], R["start"]["floor"]
        for p in (50, 90):
            add(f"kernel start p{p} (ms)", fmt(ms(pct(k, p)), nd=1), fmt(ms(pct(f, p)), nd=1),
                fmt(pct(k, p) / pct(f, p), "x"))
    if "rtt" in R:
        f = R["rtt"]["floor"]
        for proto in ("legacy", "v1"):
            k = R["rtt"][proto]
            for p in (50, 99):
                add(f"execute RTT {proto} p{p} (ms)", fmt(ms(pct(k, p)), nd=3),
                    fmt(ms(pct(f, p)), nd=3), fmt(pct(k, p) / pct(f, p), "x"))
            added = ms(pct(k, 50) - pct(f, 50))
            add(f"gateway-added RTT {proto} p50 (ms)", fmt(added, nd=3), "0", "",
                f"< {TARGET_ADDED_P50_MS}", verdict(added < TARGET_ADDED_P50_MS, True))
    if "tp" in R:
        for kind, label, size in (("print", "200k prints", None), ("big", "50 MB string", BIG_N + 1)):
            fl = statistics.median(R["tp"][kind]["floor"])
            for proto in ("legacy", "v1"):
                t = statistics.median(R["tp"][kind][proto])
                if kind == "print":
                    add(f"{label} {proto}: time to idle (s)", fmt(t, nd=3), fmt(fl, nd=3),
                        fmt(fl / t, "", 2) + " rate")
                else:
                    ratio = fl / t
                    add(f"{label} {proto}: MB/s (req->idle)", fmt(size / 1e6 / t, nd=1),
                        fmt(size / 1e6 / fl, nd=1), fmt(ratio, "", 2),
                        f">= {TARGET_50MB_RATIO:.2f}", verdict(ratio >= TARGET_50MB_RATIO, True))
    if "pipe" in R:
        P = R["pipe"]
        bad = P["lost"] + P["dup"] + P["mis_order"] + P["mis_count"] + P["wrong"] + \
            P["idle_lost"] + P["idle_dup"] + P["timed_out"]
        add(f"{args.pipe_kernels}x{args.pipe_n} pipelined: lost/dup/misordered",
            f"{P['lost']}/{P['dup']}/{P['mis_order'] + P['mis_count']}", "", "", "0/0/0",
            verdict(bad == 0))
        add(f"{args.pipe_kernels}x{args.pipe_n} pipelined: total time (s)", fmt(P["total_s"], nd=2))
    if "rss_idle" in R:
        v = R["rss_idle"][0]
        add("kgw VmRSS idle, fresh (MB)", fmt(v, nd=1), "", "", f"< {TARGET_RSS_IDLE_MB:g}",
            verdict(v < TARGET_RSS_IDLE_MB))
    if "rss_20k" in R:
        v = R["rss_20k"][0]
        add(f"kgw VmRSS, {args.pipe_kernels} kernels connected (MB)", fmt(v, nd=1), "", "",
            f"< {TARGET_RSS_20K_MB:g}", verdict(v < TARGET_RSS_20K_MB))
        hp = R.get("helpers_20k") or {}
        if hp:
            add(f"kgw helper processes, {args.pipe_kernels} kernels: PSS (MB)",
                fmt(sum(v[2] for v in hp.values()), nd=1), "", "", "(info)")
        add("kgw VmRSS after the pipelined run (MB)", fmt(R["rss_20k_after"][0], nd=1))
    if "rss_peak" in R:
        pk = R["rss_peak"]
        add("kgw peak RSS during 50 MB relay (MB)", fmt(max(pk["hwm"], pk["sampled"]), nd=1),
            "", "", "(info)")
    if "pool" in R:
        P = R["pool"]
        cold = R.get("start", {}).get("kgw")
        if cold:
            for p in (50, 90):
                add(f"start p{p}, cold exec (ms; = kernel start)", fmt(ms(pct(cold, p)), nd=1))
        for key, label, target in (("fork_start", "fork server", TARGET_FORK_P50_MS),
                                   ("start_pool_exec", "warm pool (exec)", TARGET_POOL_P50_MS),
                                   ("start_pool_fork", "warm pool (fork)", TARGET_POOL_P50_MS)):
            if key in P:
                for p in (50, 90):
                    v = ms(pct(P[key], p))
                    add(f"start p{p}, {label} (ms)", fmt(v, nd=2), "", "",
                        f"< {target:g}" if p == 50 else "",
                        verdict(v < target, True) if p == 50 else "")
        for key, label in (("sustained_exec", "pool of 4, exec"),
                           ("sustained_fork", "pool of 4 + fork server")):
            if key in P:
                add(f"sustained kernels/s, {label}", fmt(P[key], nd=2), "", "",
                    f">= {TARGET_SUSTAINED_PER_S:g}", verdict(P[key] >= TARGET_SUSTAINED_PER_S, True))
        for key, label in (("burst_cold", "cold exec"), ("burst_fork", "fork server"),
                           ("burst_pool4_exec", "pool of 4, exec"),
                           ("burst_pool4_fork", "pool of 4 + fork"),
                           ("burst_pool20", "pool of 20")):
            if key in P:
                add(f"20 kernels ready at once, {label} (s)", fmt(P[key], nd=2), "", "",
                    f"< {TARGET_20_AT_ONCE_S:g}", verdict(P[key] < TARGET_20_AT_ONCE_S, True))
        if "pss_cold" in P:
            add("kernel PSS after numpy+pandas+mpl, cold (MB)", fmt(P["pss_cold"], nd=1))
        if "pss_fork" in P:
            ok = P["pss_fork"] <= P.get("pss_cold", 0) / 2
            add("kernel PSS after numpy+pandas+mpl, forked (MB)", fmt(P["pss_fork"], nd=1),
                "", fmt(P["pss_fork"] / P["pss_cold"], "x") if P.get("pss_cold") else "",
                "<= cold/2", verdict(ok))
    if "kernel_exits" in R:
        n, bad = R["kernel_exits"]
        add("kernels deleted: exit status != 0", f"{len(bad)} of {n}", "", "", "(info)")
    if "rss_end" in R:
        add("kgw VmRSS at the end, kernels deleted (MB)", fmt(R["rss_end"][0], nd=1))

    head = ("figure", "kgw", "floor", "ratio", "target", "verdict")
    w = [max(len(str(r[i])) for r in rows + [head]) for i in range(6)]
    line = "  ".join("-" * x for x in w)
    log(line)
    log("  ".join(str(h).ljust(w[i]) if i == 0 else str(h).rjust(w[i]) for i, h in enumerate(head)))
    log(line)
    for r in rows:
        log("  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i]) for i, c in enumerate(r)))
    log(line)
    if busy:
        log(f"?: other processes used more than {BUSY * 100:.0f}% of the CPUs during the run or "
            "a section: timings and their verdicts are not reliable; rerun on an idle machine")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kgw", default=os.path.join(REPO, "build", "kgw"), help="kgw binary (default: build/kgw)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations (smoke run, < 2 min)")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS) + ",rss")
    ap.add_argument("--kgw-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for kgw (repeatable), e.g. --kgw-arg=--no-sandbox")
    ap.add_argument("--check", action="store_true", help="exit 3 when a target is missed")
    ap.add_argument("--time-limit", type=int, default=0,
                    help="abort (and clean up) after this many seconds (default 1200; 480 with --quick)")
    args = ap.parse_args()

    only = set(s.strip() for s in args.only.split(",") if s.strip()) or set(SECTIONS)
    if "rss" in only:
        only |= {"pipeline", "throughput"}
        only.discard("rss")
    unknown = only - set(SECTIONS)
    if unknown:
        ap.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    if args.quick:
        args.starts, args.rtt_iters, args.rtt_warm, args.rtt_cpu_iters, args.tp_reps = 3, 150, 20, 50, 1
        args.pipe_kernels, args.pipe_n, args.pipe_timeout = 20, 50, 60
        args.pool_starts, args.sustain_s, args.sustain_clients = 5, 8, 4
        limit = 480
    else:
        args.starts, args.rtt_iters, args.rtt_warm, args.rtt_cpu_iters, args.tp_reps = 10, 300, 30, 200, 3
        args.pipe_kernels, args.pipe_n, args.pipe_timeout = 20, 50, 120
        args.pool_starts, args.sustain_s, args.sustain_clients = 20, 60, 4
        limit = 1200
    if args.time_limit > 0:
        limit = args.time_limit
    if not os.access(args.kgw, os.X_OK):
        ap.error(f"{args.kgw} is not an executable (build it: meson compile -C build)")

    def on_alarm(signum, frame):
        raise BenchTimeout(f"whole run exceeded its {limit} s limit")

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.alarm(limit)

    # jupyter_client resolves the native python3 kernelspec by importing ipykernel, which
    # imports debugpy, which prints a "frozen modules" warning on our stderr: keep it quiet
    with contextlib.redirect_stderr(io.StringIO()):
        from jupyter_client.kernelspec import KernelSpecManager
        KernelSpecManager().get_kernel_spec("python3")

    workdir = tempfile.mkdtemp(prefix="kgw-bench-")
    # kgw's runtime dir lives in here: sandboxed kernels (other uids) must be able to traverse it
    os.chmod(workdir, 0o711)
    reaper = Reaper()
    ctx = zmq.Context()
    R, errors = {}, []
    gw = None
    shared = Shared()
    t_run = now()
    cont_run = Contention()
    try:
        gw = Gateway(args.kgw, workdir, reaper, ["--pool", "python3=0", "--no-fork-server",
                                                 *args.kgw_arg])
        ver = subprocess.run([args.kgw, "--version"], capture_output=True, text=True).stdout.strip()
        rev = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip() or "?"
        mtime = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(args.kgw).st_mtime))
        log(f"binary {args.kgw} (built {mtime}; source tree {rev})")
        if args.kgw_arg:
            log(f"extra kgw arguments: {' '.join(args.kgw_arg)}")
        log(f"kgw {ver} pid {gw.pid} on 127.0.0.1:{gw.port}; {os.cpu_count()} CPUs; "
            f"{'quick' if args.quick else 'full'} run; sections: {', '.join(s for s in SECTIONS if s in only)}")
        load = os.getloadavg()
        log(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
            + ("  WARNING: the machine is busy; figures will be noisy" if load[0] > 1.0 else ""))
        time.sleep(0.5)
        log("kernels: " + ("UNSANDBOXED (kgw logs that kernels run without a sandbox)"
                           if "WITHOUT a sandbox" in gw.log_tail(200) else
                           "sandboxed (kgw logs no warning about running without one)"))
        R["rss_idle"] = gw.rss()
        c0 = gw.cpu()
        time.sleep(1.0)
        R["cpu_idle"] = gw.cpu() - c0
        log(f"kgw idle: VmRSS {R['rss_idle'][0]:.1f} MB, VmHWM {R['rss_idle'][1]:.1f} MB, "
            f"CPU {R['cpu_idle'] * 100:.1f}% over 1 s")
        plan = [
            ("start", f"1. kernel start latency ({args.starts} starts each, alternating)",
             lambda: sec_start(R, gw, args, workdir, reaper, ctx)),
            ("rtt", f"2. execute `1+1` round trip ({args.rtt_iters} per client after "
                    f"{args.rtt_warm} warm-up; the three clients take turns)",
             lambda: sec_rtt(R, gw, args, workdir, reaper, ctx, shared)),
            ("pipeline", f"4. {args.pipe_kernels} kernels x {args.pipe_n} pipelined executions "
                         "(even kernels legacy, odd v1)",
             lambda: sec_pipeline(R, gw, args, workdir, reaper, ctx)),
            ("throughput", f"3. iopub throughput (median of {args.tp_reps})",
             lambda: sec_throughput(R, gw, args, workdir, reaper, ctx, shared)),
            ("pool", f"5. warm pool and fork server ({args.pool_starts} starts each; "
                     f"{args.sustain_s} s sustained; 20 at once; PSS)",
             lambda: sec_pool(R, gw, args, workdir, reaper, ctx)),
        ]
        for name, title, fn in plan:
            if name not in only:
                continue
            log(f"\n== {title}")
            t0 = now()
            cont = Contention()
            try:
                fn()
            except (BenchTimeout, KeyboardInterrupt):
                raise
            except Exception as e:      # noqa: BLE001
                errors.append((name, e))
                log(f"  ERROR in {name}: {type(e).__name__}: {e}")
                traceback.print_exc(file=sys.stdout)
            oth = cont.others()
            R.setdefault("others", {})[name] = oth
            log(f"  ({now() - t0:.1f} s; other processes on this machine used {oth * 100:.0f}% "
                f"of its CPUs meanwhile{'  WARNING: figures disturbed' if oth > BUSY else ''})")
            if not gw.alive():
                errors.append(("died", BenchError(f"kgw died during section {name} "
                                                  f"(exit status {gw.proc.returncode})")))
                log(f"  kgw DIED with exit status {gw.proc.returncode}; log tail:\n{gw.log_tail()}")
                break
    except BenchTimeout as e:
        errors.append(("run", e))
        log(f"\nABORTED: {e}")
    except KeyboardInterrupt as e:
        errors.append(("run", e))
        log(f"\nINTERRUPTED: {e}")
    except Exception as e:      # noqa: BLE001
        errors.append(("run", e))
        log(f"\nERROR: {type(e).__name__}: {e}")
        traceback.print_exc(file=sys.stdout)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        shared.close(gw)
        if gw is not None:
            if gw.alive():
                reaper.track_children(gw.pid, "kgw-kernel")
                time.sleep(0.2)
                R["rss_end"] = gw.rss()
            rc, dt = gw.stop()
            log(f"\nkgw stopped: exit status {rc} after SIGTERM ({dt:.2f} s)")
            if rc not in (0, -signal.SIGTERM) and not any(n == "died" for n, _ in errors):
                errors.append(("stop", BenchError(f"kgw exit status {rc}")))
                log(gw.log_tail())
            # kgw's kernels should be gone with it (it shuts them down; PDEATHSIG as backstop)
            time.sleep(0.5)
            left = reaper.alive("kgw-kernel")
            if left:
                log(f"WARNING: {len(left)} kernel process(es) started by kgw still alive after "
                    f"kgw exited: {[p for p, _ in left]} (killed now)")
        killed = reaper.kill_all()
        if killed:
            log(f"killed leftover processes: {killed}")
        ctx.destroy(0)
        warn = ""
        if gw is not None:
            try:
                with open(gw.log_path, errors="replace") as f:
                    lines = [ln for ln in f if re.match(r"\d{4}-\d\d-\d\dT\S+ +(warn|error)", ln)
                             and "WITHOUT a sandbox" not in ln]
                if lines:
                    warn = "".join(lines[-15:])
            except OSError:
                pass
        if warn:
            log("kgw logged warnings/errors (last 15):\n" + warn.rstrip())
        if gw is not None:
            try:
                with open(gw.log_path, errors="replace") as f:
                    text = f.read()
                exits = re.findall(r"kernel=(\S+): shut down \(exited with status (\d+)\)", text)
                bad = [(k, st) for k, st in exits if st != "0"]
                R["kernel_exits"] = (len(exits), bad)
                if bad:
                    log(f"WARNING: {len(bad)} of {len(exits)} kernels shut down by kgw did not exit "
                        "with status 0 (143 = SIGTERM after the shutdown grace period, "
                        "134 = abort, 137 = SIGKILL): "
                        + ", ".join(f"{k[:8]} {st}" for k, st in bad[:10]))
            except OSError:
                pass
        shutil.rmtree(workdir, ignore_errors=True)

    oth = cont_run.others()
    R["busy"] = oth > BUSY or any(v > BUSY for v in R.get("others", {}).values())
    log(f"\n== summary ({'quick' if args.quick else 'full'} run, {now() - t_run:.0f} s; other "
        f"processes used {oth * 100:.0f}% of the CPUs during the run; "
        "ratio = kgw/floor for times, kgw rate/direct rate for MB/s)")
    rows = table(R, args)
    for name, e in errors:
        log(f"ERROR [{name}]: {type(e).__name__}: {e}")
    if errors:
        return 1
    if args.check and any(r[5].startswith("FAIL") for r in rows):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
