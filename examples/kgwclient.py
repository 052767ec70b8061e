"""The pieces every kgw client needs: Jupyter messages, their two websocket encodings, and
authenticated REST calls. Used by kernel_client.py, kgw's tests and its benchmark.

A kernel's websocket (``/api/kernels/{id}/channels``) speaks one of two encodings
(docs/protocol.md, "Websocket"):

* **legacy** (no subprotocol): a message without buffers is a JSON text frame carrying the
  message plus ``"channel"``; a message with buffers is a binary frame: ``uint32 BE n`` (1 +
  the number of buffers), ``n`` ``uint32 BE`` offsets from the start of the frame, the JSON
  (without buffers), then each buffer.
* **v1** (subprotocol ``v1.kernel.websocket.jupyter.org``): every frame is binary:
  ``uint64 LE n``, ``n`` ``uint64 LE`` offsets (the last one is the end of the frame), then the
  channel name, header, parent_header, metadata, content and each buffer.

A message here is a dict with ``channel``, ``header``, ``parent_header``, ``metadata``,
``content`` and ``buffers`` (a list of bytes).  Decoding a frame that is not a well-formed
message raises ValueError.

The codec and REST parts need only the standard library; ``connect()`` needs ``websockets``
(Debian: python3-websockets, 10.x API), imported when it is called.
"""
import http.client
import json
import struct
import urllib.parse
import uuid
from datetime import datetime, timezone

V1 = "v1.kernel.websocket.jupyter.org"
PARTS = ("header", "parent_header", "metadata", "content")


# ---------------------------------------------------------------- messages

def iso_now():
    """The current UTC time as a Jupyter header date: 2026-01-02T03:04:05.123456Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_msg(msg_type, content=None, *, session, channel="shell", parent=None, metadata=None,
             buffers=(), header=None, username="kgwclient"):
    """A new client message.  ``header`` entries are merged into the generated header;
    ``msg["msg_id"]`` and ``msg["msg_type"]`` repeat the header's for convenience (they are
    not sent)."""
    h = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": username,
         "session": session, "date": iso_now(), "version": "5.3"}
    if header:
        h.update(header)
    return {"header": h, "msg_id": h["msg_id"], "msg_type": msg_type,
            "parent_header": parent or {}, "metadata": metadata or {},
            "content": {} if content is None else content,
            "buffers": [bytes(b) for b in buffers], "channel": channel}


def _checked(msg):
    """msg if it has a string channel and the four JSON objects, else ValueError."""
    if not isinstance(msg, dict) or not isinstance(msg.get("channel"), str) or \
            not all(isinstance(msg.get(k), dict) for k in PARTS):
        raise ValueError("not a Jupyter message: channel, header, parent_header, metadata "
                         "and content are required")
    return msg


def _split(frame, fmt, what):
    """The parts of a binary frame laid out as a count n, n offsets (both in struct format
    ``fmt``), then the data.  The first offset must be the end of the offset table; offsets
    must not go backwards or past the end of the frame."""
    if not isinstance(frame, (bytes, bytearray)):
        raise ValueError(f"{what}: expected a binary frame, got {type(frame).__name__}")
    size = struct.calcsize(fmt)
    if len(frame) < size:
        raise ValueError(f"{what}: frame of {len(frame)} bytes is too short")
    (n,) = struct.unpack_from(fmt, frame)
    if n < 1 or size * (n + 1) > len(frame):
        raise ValueError(f"{what}: {n} offsets do not fit in {len(frame)} bytes")
    offsets = list(struct.unpack_from(f"{fmt[0]}{n}{fmt[1]}", frame, size))
    if offsets[0] != size * (n + 1) or offsets != sorted(offsets) or offsets[-1] > len(frame):
        raise ValueError(f"{what}: bad offsets {offsets} in a frame of {len(frame)} bytes")
    return [frame[a:b] for a, b in zip(offsets, offsets[1:] + [len(frame)])]


# ---------------------------------------------------------------- legacy encoding

def encode_legacy(msg):
    """A text frame (str) for a message without buffers, a binary frame (bytes) with them."""
    body = json.dumps({k: msg[k] for k in PARTS + ("channel",)})
    buffers = list(msg.get("buffers") or [])
    if not buffers:
        return body
    parts = [body.encode()] + buffers
    offsets = [4 * (len(parts) + 1)]
    for p in parts[:-1]:
        offsets.append(offsets[-1] + len(p))
    return struct.pack(f"!{len(parts) + 1}I", len(parts), *offsets) + b"".join(parts)


def decode_legacy(frame):
    """A text frame (str) or a binary frame (bytes) to a message."""
    if isinstance(frame, str):
        msg = _checked(json.loads(frame))
        msg["buffers"] = []
        return msg
    parts = _split(frame, "!I", "legacy")
    msg = _checked(json.loads(parts[0]))
    msg["buffers"] = parts[1:]
    return msg


# ---------------------------------------------------------------- v1 encoding

def encode_v1(msg):
    """A binary frame (bytes)."""
    parts = [msg["channel"].encode()] + [json.dumps(msg[k]).encode() for k in PARTS]
    parts += list(msg.get("buffers") or [])
    offsets = [8 * (len(parts) + 2)]            # count, one offset per part, the end offset
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    return struct.pack(f"<{len(offsets) + 1}Q", len(offsets), *offsets) + b"".join(parts)


def decode_v1(frame):
    """A binary frame (bytes) to a message; text frames are a ValueError."""
    parts = _split(frame, "<Q", "v1")
    if len(parts) < 6 or parts[-1]:
        raise ValueError(f"v1: {len(parts) - 1} parts (at least 5), or the last offset is "
                         "not the end of the frame")
    msg = {"channel": parts[0].decode()}
    msg.update({k: json.loads(p) for k, p in zip(PARTS, parts[1:5])})
    msg["buffers"] = parts[5:-1]
    return _checked(msg)


def encode(msg, protocol):
    """encode_v1 for protocol "v1", encode_legacy otherwise."""
    return encode_v1(msg) if protocol == "v1" else encode_legacy(msg)


def decode(frame, protocol):
    """decode_v1 for protocol "v1", decode_legacy otherwise."""
    return decode_v1(frame) if protocol == "v1" else decode_legacy(frame)


# ---------------------------------------------------------------- REST

def request(url, token, method, path, body=None, timeout=60):
    """One authenticated request to the gateway at ``url`` (http or https, with an optional
    path prefix); ``body`` is sent as JSON.  Returns (HTTP status, answer): the parsed JSON,
    the text if it is not JSON, or None if empty."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https", "ws", "wss") or not u.hostname:
        raise ValueError(f"not a gateway URL: {url!r}")
    https = u.scheme in ("https", "wss")
    conn = (http.client.HTTPSConnection if https else http.client.HTTPConnection)(
        u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, u.path.rstrip("/") + path,
                     body=None if body is None else json.dumps(body).encode(),
                     headers={"Authorization": f"token {token}",
                              "Content-Type": "application/json"})
        r = conn.getresponse()
        status, payload = r.status, r.read()
    finally:
        conn.close()
    if not payload:
        return status, None
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode(errors="replace")


def rest(url, token, method, path, body=None, timeout=60):
    """request() that returns only the answer, and raises RuntimeError with the gateway's
    {"reason", "message"} on an HTTP error."""
    status, answer = request(url, token, method, path, body, timeout)
    if status >= 400:
        detail = answer if isinstance(answer, str) else json.dumps(answer)
        raise RuntimeError(f"{method} {path}: HTTP {status}: {detail}")
    return answer


# ---------------------------------------------------------------- websocket

def channels_url(url, kernel_id, session_id=None, query=""):
    """The websocket URL of a kernel's channels; http(s) base URLs become ws(s)."""
    base = url.rstrip("/")
    if base.startswith("http"):
        base = "ws" + base[len("http"):]
    params = ([f"session_id={session_id}"] if session_id else []) + ([query] if query else [])
    return f"{base}/api/kernels/{kernel_id}/channels" + ("?" + "&".join(params) if params else "")


def connect(url, token, kernel_id, protocol="legacy", session_id=None, *, query="",
            subprotocols=None, **options):
    """Open a kernel's channels websocket: ``async with connect(...) as ws`` or
    ``ws = await connect(...)``.  Protocol "v1" offers the v1 subprotocol (``subprotocols``
    overrides the offer); ``token`` None sends no Authorization header.  ``options`` go to
    websockets.connect (default: no size limit, no keepalive pings)."""
    import websockets                           # only needed here
    if subprotocols is None:
        subprotocols = [V1] if protocol == "v1" else None
    headers = {"Authorization": f"token {token}"} if token else {}
    options = {"max_size": None, "ping_interval": None, **options}
    return websockets.connect(channels_url(url, kernel_id, session_id, query),
                              subprotocols=subprotocols, extra_headers=headers, **options)
