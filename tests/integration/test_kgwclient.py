"""examples/kgwclient.py without a gateway: both websocket encodings round trip, frames made by
hand per docs/protocol.md ("Websocket") decode, jupyter_server's own codec agrees where it is
installed, malformed frames raise ValueError, and the REST helpers against a local stub."""
import http.server
import json
import os
import struct
import subprocess
import sys
import threading

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "examples"))
import kgwclient as K  # noqa: E402

BUFFERS = [b"\x00\x01binary\xff", b"", b"x" * 70000]


def sample(buffers=(), channel="shell"):
    return K.make_msg("comm_msg", {"comm_id": "c1", "data": {"n": 1, "s": "é"}},
                      session="s1", channel=channel, parent={"msg_id": "p"},
                      metadata={"m": True}, buffers=buffers)


def same(a, b):
    for k in ("channel",) + K.PARTS:
        assert a[k] == b[k], k
    assert [bytes(x) for x in a["buffers"]] == [bytes(x) for x in b["buffers"]]


def u32(*xs):
    return struct.pack(f"!{len(xs)}I", *xs)


def u64(*xs):
    return struct.pack(f"<{len(xs)}Q", *xs)


def jb(obj):
    return json.dumps(obj).encode()


# ------------------------------------------------------------------ messages

def test_make_msg():
    m = K.make_msg("execute_request", {"code": "1"}, session="abc", header={"subshell_id": None})
    h = m["header"]
    assert m["msg_id"] == h["msg_id"] and m["msg_type"] == h["msg_type"] == "execute_request"
    assert h["session"] == "abc" and h["version"] == "5.3" and h["subshell_id"] is None
    assert h["date"].endswith("Z") and len(h["date"]) == len("2026-01-02T03:04:05.123456Z")
    assert (m["channel"], m["parent_header"], m["metadata"], m["buffers"]) == ("shell", {}, {}, [])
    assert K.make_msg("kernel_info_request", session="s")["content"] == {}
    assert K.make_msg("x", session="s")["msg_id"] != K.make_msg("x", session="s")["msg_id"]


# ------------------------------------------------------------------ round trips

def test_legacy_text_round_trip():
    m = sample()
    frame = K.encode_legacy(m)
    assert isinstance(frame, str)
    body = json.loads(frame)
    assert set(body) == {"channel", "header", "parent_header", "metadata", "content"}
    same(K.decode_legacy(frame), m)
    assert K.encode(m, "legacy") == frame and K.decode(frame, "legacy")["buffers"] == []


def test_legacy_binary_round_trip():
    m = sample(BUFFERS, channel="iopub")
    frame = K.encode_legacy(m)
    assert isinstance(frame, bytes)
    n = struct.unpack_from("!I", frame)[0]
    assert n == 1 + len(BUFFERS)
    offsets = struct.unpack_from(f"!{n}I", frame, 4)
    assert offsets[0] == 4 * (n + 1)
    assert "buffers" not in json.loads(frame[offsets[0]:offsets[1]])
    same(K.decode_legacy(frame), m)


@pytest.mark.parametrize("buffers", [[], BUFFERS], ids=["no-buffers", "buffers"])
def test_v1_round_trip(buffers):
    m = sample(buffers, channel="control")
    frame = K.encode_v1(m)
    assert isinstance(frame, bytes)
    n = struct.unpack_from("<Q", frame)[0]
    assert n == 6 + len(buffers)                       # channel, 4 JSON parts, buffers, end
    offsets = struct.unpack_from(f"<{n}Q", frame, 8)
    assert offsets[0] == 8 * (n + 1) and offsets[-1] == len(frame)
    assert frame[offsets[0]:offsets[1]] == b"control"
    same(K.decode_v1(frame), m)
    same(K.decode(bytearray(frame), "v1"), m)          # what a raw socket reader may hold


# ------------------------------------------------------------------ frames made by hand

HEADER = {"msg_id": "m1", "msg_type": "stream", "session": "k", "username": "u",
          "date": "2026-01-01T00:00:00.000000Z", "version": "5.3"}
PARENT = {"msg_id": "p1", "msg_type": "execute_request"}
CONTENT = {"name": "stdout", "text": "hi\n"}


def test_decode_gateway_legacy_text():
    """The gateway's text frames also carry top-level msg_id, msg_type and buffers."""
    frame = json.dumps({"header": HEADER, "msg_id": "m1", "msg_type": "stream",
                        "parent_header": PARENT, "metadata": {}, "content": CONTENT,
                        "buffers": [], "channel": "iopub"})
    m = K.decode_legacy(frame)
    assert (m["channel"], m["header"], m["parent_header"], m["content"], m["buffers"]) == \
        ("iopub", HEADER, PARENT, CONTENT, [])
    assert m["msg_type"] == "stream"


def test_decode_handmade_legacy_binary():
    js = jb({"header": HEADER, "parent_header": PARENT, "metadata": {}, "content": CONTENT,
             "channel": "iopub"})
    head = 4 * 4                                       # n = 3: the JSON and two buffers
    frame = u32(3, head, head + len(js), head + len(js) + 2) + js + b"ab" + b"cde"
    m = K.decode_legacy(frame)
    assert m["channel"] == "iopub" and m["content"] == CONTENT
    assert m["buffers"] == [b"ab", b"cde"]
    no_buffers = u32(1, 8) + js                        # a binary frame may have none
    assert K.decode_legacy(no_buffers)["buffers"] == []


def test_decode_handmade_v1():
    parts = [b"iopub", jb(HEADER), jb(PARENT), b"{}", jb(CONTENT), b"", b"\x00buf"]
    n = len(parts) + 1
    offsets = [8 * (n + 1)]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    m = K.decode_v1(u64(n, *offsets) + b"".join(parts))
    assert (m["channel"], m["header"], m["parent_header"], m["metadata"], m["content"]) == \
        ("iopub", HEADER, PARENT, {}, CONTENT)
    assert m["buffers"] == [b"", b"\x00buf"]


def _zmqhandlers():
    """jupyter_server's own websocket codec, where it is installed (1.x or 2.x layout)."""
    for name in ("jupyter_server.services.kernels.connection.base",
                 "jupyter_server.base.zmqhandlers"):
        try:
            mod = __import__(name, fromlist=["x"])
        except ImportError:
            continue
        if hasattr(mod, "serialize_msg_to_ws_v1"):
            return mod
    pytest.skip("jupyter_server is not installed")


def test_agrees_with_jupyter_server():
    js = _zmqhandlers()
    m = sample(BUFFERS, channel="iopub")
    # v1, both ways
    channel, parts = js.deserialize_msg_from_ws_v1(K.encode_v1(m))
    assert channel == "iopub" and [json.loads(p) for p in parts[:4]] == [m[k] for k in K.PARTS]
    assert parts[4:] == BUFFERS
    frame = js.serialize_msg_to_ws_v1([jb(m[k]) for k in K.PARTS] + BUFFERS, "iopub")
    same(K.decode_v1(frame), m)
    # legacy binary, both ways
    same(K.decode_legacy(js.serialize_binary_message(dict(m))), m)
    back = js.deserialize_binary_message(K.encode_legacy(m))
    assert back["content"] == m["content"] and back["channel"] == "iopub"
    assert back["buffers"] == BUFFERS


# ------------------------------------------------------------------ malformed frames

def _v1(parts, n=None, first=None, end=None):
    n = len(parts) + 1 if n is None else n
    offsets = [8 * (len(parts) + 2) if first is None else first]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    if end is not None:
        offsets[-1] = end
    return u64(n, *offsets) + b"".join(parts)


GOOD_PARTS = [b"shell", b"{}", b"{}", b"{}", b"{}"]
LEGACY_JS = jb({"header": {}, "parent_header": {}, "metadata": {}, "content": {},
                "channel": "shell"})

MALFORMED_LEGACY = {
    "text-not-json": "{",
    "text-array": "[]",
    "text-no-header": json.dumps({"parent_header": {}, "metadata": {}, "content": {},
                                  "channel": "shell"}),
    "text-no-channel": json.dumps({"header": {}, "parent_header": {}, "metadata": {},
                                   "content": {}}),
    "text-null-content": json.dumps({"header": {}, "parent_header": {}, "metadata": {},
                                     "content": None, "channel": "shell"}),
    "empty": b"",
    "short": b"\x00\x00\x01",
    "zero-parts": u32(0),
    "count-too-large": u32(1000, 8) + LEGACY_JS,
    "count-huge": u32(0xFFFFFFFF, 8),
    "first-offset-not-header-end": u32(1, 12) + b"xxxx" + LEGACY_JS,
    "offsets-backwards": u32(2, 12, 11) + LEGACY_JS,
    "offset-past-end": u32(2, 12, 12 + len(LEGACY_JS) + 1) + LEGACY_JS,
    "json-not-utf8": u32(1, 8) + b'{"\xff": 1}',
    "json-invalid": u32(1, 8) + b"{nope",
}

MALFORMED_V1 = {
    "text": "{}",
    "empty": b"",
    "short": b"\x06\x00\x00",
    "zero-offsets": u64(0),
    "count-huge": u64(1 << 60, 8),
    "too-few-parts": _v1(GOOD_PARTS[:4]),
    "first-offset-wrong": _v1(GOOD_PARTS, first=8 * 7 + 1),
    "end-before-frame-end": _v1(GOOD_PARTS) + b"trailing",
    "end-past-frame-end": _v1(GOOD_PARTS, end=1000),
    "channel-not-utf8": _v1([b"\xff"] + GOOD_PARTS[1:]),
    "json-not-object": _v1(GOOD_PARTS[:4] + [b"[]"]),
    "json-invalid": _v1(GOOD_PARTS[:4] + [b"{"]),
}


@pytest.mark.parametrize("frame", MALFORMED_LEGACY.values(), ids=MALFORMED_LEGACY.keys())
def test_malformed_legacy_raises_value_error(frame):
    with pytest.raises(ValueError):
        K.decode_legacy(frame)


@pytest.mark.parametrize("frame", MALFORMED_V1.values(), ids=MALFORMED_V1.keys())
def test_malformed_v1_raises_value_error(frame):
    with pytest.raises(ValueError):
        K.decode_v1(frame)


def test_handmade_baselines_are_valid():
    """The malformed frames above are each one change away from these."""
    K.decode_v1(_v1(GOOD_PARTS))
    K.decode_legacy(u32(1, 8) + LEGACY_JS)


# ------------------------------------------------------------------ URLs, REST, imports

def test_channels_url():
    assert K.channels_url("http://h:1/", "k") == "ws://h:1/api/kernels/k/channels"
    assert K.channels_url("https://h/pre", "k", "s", "x=1") == \
        "wss://h/pre/api/kernels/k/channels?session_id=s&x=1"
    assert K.channels_url("ws://h", "k", None, "x=1") == "ws://h/api/kernels/k/channels?x=1"


class _Stub(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/pre/api/kernels":
            self._answer(201, jb({"auth": self.headers["Authorization"],
                                  "type": self.headers["Content-Type"],
                                  "got": json.loads(body)}))
        elif self.path == "/pre/text":
            self._answer(200, b"not json")
        else:
            self._answer(404, jb({"reason": "Not Found", "message": "no such path"}))

    def do_DELETE(self):
        self._answer(204, b"")

    def _answer(self, status, payload):
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_rest_against_a_stub():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Stub)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/pre/"
        status, answer = K.request(url, "KEY", "POST", "/api/kernels", {"name": "python3"})
        assert status == 201
        assert answer == {"auth": "token KEY", "type": "application/json",
                          "got": {"name": "python3"}}
        assert K.request(url, "KEY", "DELETE", "/api/kernels/x") == (204, None)
        assert K.request(url, "KEY", "POST", "/text", {}) == (200, "not json")
        with pytest.raises(RuntimeError, match="POST /nope: HTTP 404: .*no such path"):
            K.rest(url, "KEY", "POST", "/nope", {})
        assert K.rest(url, "KEY", "DELETE", "/api/kernels/x") is None
        with pytest.raises(ValueError):
            K.request("ftp://h/", "KEY", "GET", "/api")
    finally:
        server.shutdown()
        server.server_close()


def test_codec_imports_without_websockets():
    code = ("import sys; sys.modules['websockets'] = None; import kgwclient as K; "
            "m = K.make_msg('x', session='s', buffers=[b'1']); "
            "assert K.decode_v1(K.encode_v1(m))['buffers'] == [b'1']")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30,
                   cwd=os.path.join(REPO, "examples"))
