"""A small asyncio Jupyter websocket client for the integration tests.

Speaks both kernel websocket protocols served on /api/kernels/{id}/channels:

* legacy (no subprotocol): JSON text frames carrying a "channel" key; a message with
  buffers is a binary frame: uint32 BE count n, n uint32 BE offsets (first one points
  at the JSON part), then the JSON message followed by the buffers.
* ``v1.kernel.websocket.jupyter.org``: every frame is binary: uint64 LE offset_number,
  offset_number uint64 LE offsets, then channel, header, parent_header, metadata,
  content, buffers...; the last offset is the end of the frame.

Only the standard library and ``websockets`` are used.
"""
import asyncio
import base64
import json
import os
import socket
import struct
import time
import uuid
from datetime import datetime, timezone

import websockets
import websockets.exceptions  # lazily exported by websockets 10: import it explicitly

V1 = "v1.kernel.websocket.jupyter.org"
PROTOCOLS = ("legacy", "v1")
DEFAULT_TIMEOUT = 10.0


def iso_now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_msg(msg_type, content=None, *, session, channel="shell", buffers=(), metadata=None,
             parent=None, header=None):
    """A client message dict: header, parent_header, metadata, content, buffers, channel."""
    h = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "kgw-test",
         "session": session, "date": iso_now(), "version": "5.3"}
    if header:
        h.update(header)
    return {"header": h, "msg_id": h["msg_id"], "msg_type": msg_type,
            "parent_header": parent or {}, "metadata": metadata or {},
            "content": {} if content is None else content,
            "buffers": [bytes(b) for b in buffers], "channel": channel}


# ---------------------------------------------------------------- legacy protocol

def encode_legacy(msg):
    """Text frame (str) without buffers, binary frame (bytes) with buffers."""
    body = {k: msg[k] for k in ("header", "parent_header", "metadata", "content", "channel")}
    buffers = list(msg.get("buffers") or [])
    if not buffers:
        return json.dumps(body)
    parts = [json.dumps(body).encode()] + buffers
    n = len(parts)
    offsets = [4 * (n + 1)]
    for p in parts[:-1]:
        offsets.append(offsets[-1] + len(p))
    return struct.pack(f"!{n + 1}I", n, *offsets) + b"".join(parts)


def decode_legacy(frame):
    if isinstance(frame, str):
        msg = json.loads(frame)
        msg["buffers"] = []
        msg["_binary"] = False
        return msg
    (n,) = struct.unpack_from("!I", frame, 0)
    assert 0 < n < 1024 and len(frame) >= 4 * (n + 1), f"bad legacy binary header {frame[:16]!r}"
    offsets = list(struct.unpack_from(f"!{n}I", frame, 4))
    assert offsets[0] == 4 * (n + 1), offsets
    assert offsets == sorted(offsets) and offsets[-1] <= len(frame), (offsets, len(frame))
    ends = offsets[1:] + [len(frame)]
    parts = [frame[a:b] for a, b in zip(offsets, ends)]
    msg = json.loads(parts[0])
    msg["buffers"] = parts[1:]
    msg["_binary"] = True
    return msg


# ---------------------------------------------------------------- v1 protocol

def encode_v1(msg):
    parts = [msg["channel"].encode()] + [
        json.dumps(msg[k]).encode() for k in ("header", "parent_header", "metadata", "content")
    ] + list(msg.get("buffers") or [])
    n = len(parts) + 1                       # one offset per part plus the end offset
    offsets = [8 * (1 + n)]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    return struct.pack(f"<{n + 1}Q", n, *offsets) + b"".join(parts)


def decode_v1(frame):
    assert isinstance(frame, bytes), f"v1 frames must be binary, got text {frame[:200]!r}"
    (n,) = struct.unpack_from("<Q", frame, 0)
    assert 6 <= n < 1024 and len(frame) >= 8 * (n + 1), f"bad v1 header {frame[:24]!r}"
    offsets = list(struct.unpack_from(f"<{n}Q", frame, 8))
    assert offsets[0] == 8 * (n + 1), offsets
    assert offsets == sorted(offsets) and offsets[-1] == len(frame), (offsets, len(frame))
    parts = [frame[a:b] for a, b in zip(offsets, offsets[1:])]
    msg = {"channel": parts[0].decode()}
    for key, raw in zip(("header", "parent_header", "metadata", "content"), parts[1:5]):
        msg[key] = json.loads(raw)
    msg["buffers"] = parts[5:]
    msg["_binary"] = True
    return msg


# ---------------------------------------------------------------- client

def channels_url(gateway, kernel_id, session_id=None, query=""):
    url = f"{gateway.ws_url}/api/kernels/{kernel_id}/channels"
    params = []
    if session_id:
        params.append(f"session_id={session_id}")
    if query:
        params.append(query)
    return url + ("?" + "&".join(params) if params else "")


def handshake_status(gateway, kernel_id, session_id="auto", *, query="", auth_header=True,
                     subprotocols=None, path=None, headers=()):
    """Send a websocket upgrade request by hand and return the HTTP status code of the answer
    (always HTTP/1.1: websocket clients reject an HTTP/1.0 answer outright). path replaces the
    kernel's channels path (kernel_id and session_id are then unused)."""
    if session_id == "auto":
        session_id = uuid.uuid4().hex
    if path is None:
        url = channels_url(gateway, kernel_id, session_id, query)
        path = url[len(gateway.ws_url):]
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{gateway.port}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)).decode()]
    if auth_header:
        lines.append(f"Authorization: token {gateway.token}")
    if subprotocols:
        lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
    lines.extend(headers)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=DEFAULT_TIMEOUT) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            assert chunk, f"connection closed without an HTTP status line: {data!r}"
            data += chunk
    status_line = data.split(b"\r\n", 1)[0].decode("latin-1")
    version, code = status_line.split(" ", 2)[:2]
    assert version == "HTTP/1.1", status_line
    return int(code)


async def connect(gateway, kernel_id, protocol="legacy", session_id="auto", *, query="",
                  auth_header=True, subprotocols=None):
    """Open a channels websocket; returns a KernelClient.

    ``session_id="auto"`` picks a fresh one, None omits it.  ``subprotocols`` overrides what
    is offered (default: [V1] for protocol "v1", nothing for "legacy").
    """
    if session_id == "auto":
        session_id = uuid.uuid4().hex
    if subprotocols is None:
        subprotocols = [V1] if protocol == "v1" else None
    headers = {"Authorization": f"token {gateway.token}"} if auth_header else {}
    ws = await asyncio.wait_for(websockets.connect(
        channels_url(gateway, kernel_id, session_id, query), subprotocols=subprotocols,
        extra_headers=headers, max_size=None, open_timeout=None, ping_interval=None,
        close_timeout=2),
        DEFAULT_TIMEOUT * 3)
    return KernelClient(ws, protocol, session_id or uuid.uuid4().hex)


class KernelClient:
    def __init__(self, ws, protocol, session):
        self.ws = ws
        self.protocol = protocol
        self.session = session
        self.frames = []          # (is_binary, msg_type, n_buffers) of every frame received
        self.backlog = []         # received but not yet consumed messages

    # -- raw I/O
    def msg(self, msg_type, content=None, channel="shell", **kw):
        return make_msg(msg_type, content, session=self.session, channel=channel, **kw)

    async def send(self, msg):
        frame = encode_v1(msg) if self.protocol == "v1" else encode_legacy(msg)
        await self.ws.send(frame)
        return msg["header"]["msg_id"]

    async def send_raw(self, frame):
        await self.ws.send(frame)

    async def _recv_frame(self, timeout):
        frame = await asyncio.wait_for(self.ws.recv(), timeout)
        msg = decode_v1(frame) if self.protocol == "v1" else decode_legacy(frame)
        self.frames.append((isinstance(frame, bytes), msg["header"].get("msg_type"),
                            len(msg["buffers"])))
        return msg

    async def recv(self, pred=lambda m: True, timeout=DEFAULT_TIMEOUT):
        """Next message matching pred (earlier non-matching messages stay in the backlog)."""
        for i, m in enumerate(self.backlog):
            if pred(m):
                return self.backlog.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError(f"no matching message within {timeout}s")
            m = await self._recv_frame(left)
            if pred(m):
                return m
            self.backlog.append(m)

    async def drain(self, duration):
        """Collect everything that arrives within `duration` seconds (or until closed)."""
        got = []
        deadline = time.monotonic() + duration
        while (left := deadline - time.monotonic()) > 0:
            try:
                got.append(await self._recv_frame(left))
            except (asyncio.TimeoutError, websockets.exceptions.ConnectionClosed):
                break
        self.backlog.extend(got)
        return got

    async def close(self):
        await self.ws.close()

    # -- requests
    async def request(self, msg_type, content=None, channel="shell", **kw):
        return await self.send(self.msg(msg_type, content, channel, **kw))

    async def reply(self, msg_id, channel="shell", timeout=DEFAULT_TIMEOUT):
        return await self.recv(lambda m: m["channel"] == channel and
                               m["parent_header"].get("msg_id") == msg_id, timeout)

    async def collect(self, msg_id, reply_channel="shell", timeout=DEFAULT_TIMEOUT):
        """Wait for the reply to msg_id and for iopub status idle with that parent.

        Returns (reply, iopub) where iopub lists the iopub messages of that request in order.
        """
        def mine(m):
            return m["parent_header"].get("msg_id") == msg_id and \
                m["channel"] in ("iopub", reply_channel)

        reply, iopub = None, []
        deadline = time.monotonic() + timeout
        while reply is None or not (iopub and iopub[-1]["header"]["msg_type"] == "status"
                                    and iopub[-1]["content"]["execution_state"] == "idle"):
            try:
                m = await self.recv(mine, max(deadline - time.monotonic(), 0.001))
            except asyncio.TimeoutError:
                got = [m["header"]["msg_type"] for m in iopub] + ([reply["header"]["msg_type"]]
                                                                   if reply else [])
                raise asyncio.TimeoutError(
                    f"request {msg_id}: no reply and iopub idle within {timeout}s; got {got}; "
                    f"other messages: {[m['header']['msg_type'] for m in self.backlog]}") from None
            if m["channel"] == "iopub":
                iopub.append(m)
            else:
                reply = m
        return reply, iopub

    async def wait_ready(self, timeout=DEFAULT_TIMEOUT, every=0.5):
        """Send kernel_info_request every `every` s until one gets a shell reply and one an
        iopub message.  After a restart jupyter_server can lose shell requests and iopub
        output until zmq has reconnected (jupyter_server "nudges" the same way on connect)."""
        sent, shell_ok, iopub_ok = set(), False, False

        def ours(m):
            return m["channel"] in ("shell", "iopub") and m["parent_header"].get("msg_id") in sent

        deadline = time.monotonic() + timeout
        while not (shell_ok and iopub_ok):
            if time.monotonic() >= deadline:
                raise asyncio.TimeoutError(f"kernel not answering within {timeout}s")
            sent.add(await self.request("kernel_info_request"))
            step = min(time.monotonic() + every, deadline)
            while not (shell_ok and iopub_ok) and (left := step - time.monotonic()) > 0:
                try:
                    m = await self.recv(ours, left)
                except asyncio.TimeoutError:
                    break
                shell_ok |= m["channel"] == "shell"
                iopub_ok |= m["channel"] == "iopub"
        await self.drain(every)             # let the replies to the other requests arrive
        self.backlog = [m for m in self.backlog if not ours(m)]

    async def execute(self, code, timeout=DEFAULT_TIMEOUT, **content):
        body = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True}
        body.update(content)
        msg_id = await self.request("execute_request", body)
        reply, iopub = await self.collect(msg_id, timeout=timeout)
        return Execution(msg_id, reply, iopub)


class Execution:
    def __init__(self, msg_id, reply, iopub):
        self.msg_id, self.reply, self.iopub = msg_id, reply, iopub

    def of_type(self, msg_type):
        return [m for m in self.iopub if m["header"]["msg_type"] == msg_type]

    @property
    def types(self):
        return [m["header"]["msg_type"] for m in self.iopub]

    @property
    def stdout(self):
        return "".join(m["content"]["text"] for m in self.of_type("stream")
                       if m["content"]["name"] == "stdout")

    @property
    def status(self):
        return self.reply["content"]["status"]


def run(coro, timeout=60):
    """Run a coroutine from a synchronous test with an overall time limit."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
