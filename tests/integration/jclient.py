"""A small asyncio Jupyter websocket client for the integration tests.

Speaks both kernel websocket encodings served on /api/kernels/{id}/channels (legacy JSON and
``v1.kernel.websocket.jupyter.org``); the messages and their encodings are the ones of
examples/kgwclient.py, re-exported here.  Decoded messages also carry ``_binary``: whether
the frame was binary.  Only the standard library and ``websockets`` are used.
"""
import asyncio
import base64
import os
import socket
import sys
import time
import uuid

import websockets.exceptions  # lazily exported by websockets 10: import it explicitly

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "examples"))
import kgwclient as K  # noqa: E402

V1 = K.V1
iso_now, make_msg, encode_legacy, encode_v1 = K.iso_now, K.make_msg, K.encode_legacy, K.encode_v1

PROTOCOLS = ("legacy", "v1")
DEFAULT_TIMEOUT = 10.0


def decode_legacy(frame):
    """kgwclient.decode_legacy, plus ``_binary``."""
    msg = K.decode_legacy(frame)
    msg["_binary"] = not isinstance(frame, str)
    return msg


def decode_v1(frame):
    """kgwclient.decode_v1, plus ``_binary``."""
    msg = K.decode_v1(frame)
    msg["_binary"] = True
    return msg


# ---------------------------------------------------------------- client

def channels_url(gateway, kernel_id, session_id=None, query=""):
    return K.channels_url(gateway.ws_url, kernel_id, session_id, query)


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
    ws = await asyncio.wait_for(K.connect(
        gateway.ws_url, gateway.token if auth_header else None, kernel_id, protocol, session_id,
        query=query, subprotocols=subprotocols, open_timeout=None, close_timeout=2),
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
        await self.ws.send(K.encode(msg, self.protocol))
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
