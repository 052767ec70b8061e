"""Websocket upgrades as real clients see them: every refusal, on every websocket route, is a
well-formed HTTP/1.1 answer (status, JSON body with "message", Content-Length,
Connection: close) that Python `websockets` and node `ws` report as that status; an offer of
only unknown subprotocols falls back to none selected and the legacy JSON protocol."""
import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import uuid

import pytest
import websockets
import websockets.exceptions

import jclient as J
from conftest import keygen, start_gateway, stop_gateway
from jclient import run

pytestmark = pytest.mark.kgw_only

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(os.path.dirname(HERE), "node")
NODE = shutil.which("node")
HAVE_NODE_WS = NODE is not None and os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ws"))

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def gw():
    """A gateway with the default key (gw.token) and a second tenant, "other"."""
    key, line = keygen("other")
    with tempfile.NamedTemporaryFile("w", prefix="kgw-keys-", delete=False) as f:
        f.write(line + "\n")
    g = start_gateway([f"--key-file={f.name}"])
    g.other_key = key
    yield g
    stop_gateway(g)
    os.unlink(f.name)


@pytest.fixture(scope="module")
def kid(gw):
    model = gw.start_kernel()
    yield model["id"]
    gw.delete_kernel(model["id"])


@pytest.fixture(scope="module")
def deleted_kid(gw):
    model = gw.start_kernel()
    assert gw.delete_kernel(model["id"]) == 204
    return model["id"]


def raw_upgrade(port, path, headers=()):
    """The answer to a hand-written upgrade request, read until the server closes (or, for a
    101, to the end of its head): (status line, {header: value}, body bytes)."""
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", *headers]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk or (data + chunk).startswith(b"HTTP/1.1 101 ") and \
                    b"\r\n\r\n" in data + chunk:
                data += chunk
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *hlines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for h in hlines:
        k, _, v = h.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status_line, hdrs, body


def refusal_cases(gw, kid, deleted_kid):
    """(name, path, headers, expected status) for every kind of refusal on every websocket
    route. Headers are given as a dict."""
    tok = {"Authorization": f"token {gw.token}"}
    chan = lambda k: f"/api/kernels/{k}/channels?session_id={uuid.uuid4().hex}"  # noqa: E731
    return [
        ("channels-no-token", chan(kid), {}, 401),
        ("channels-wrong-token", chan(kid), {"Authorization": "token wrong"}, 401),
        ("channels-wrong-query-token", chan(kid) + "&token=wrong", {}, 401),
        ("channels-unknown-kernel", chan(UNKNOWN_ID), tok, 404),
        ("channels-deleted-kernel", chan(deleted_kid), tok, 404),
        ("channels-malformed-kernel-id", "/api/kernels/not-a-kernel/channels", tok, 404),
        ("channels-other-tenants-kernel", chan(kid),
         {"Authorization": f"token {gw.other_key}"}, 404),
        ("channels-foreign-origin", chan(kid), {**tok, "Origin": "http://evil.example"}, 403),
        ("channel-no-token", "/channel", {}, 401),
        ("channel-wrong-token", "/channel", {"Authorization": "token wrong"}, 401),
        ("channel-foreign-origin", "/channel", {**tok, "Origin": "http://evil.example"}, 403),
        ("unknown-route", "/api/nothing/here", tok, 404),
        ("not-a-websocket-route", "/api/kernels", tok, 400),
    ]


def assert_wellformed(status_line, hdrs, body, status):
    assert status_line.startswith(f"HTTP/1.1 {status} "), status_line
    assert hdrs.get("connection", "").lower() == "close", hdrs
    assert hdrs.get("content-type") == "application/json", hdrs
    assert int(hdrs["content-length"]) == len(body), (hdrs, body)
    doc = json.loads(body)
    assert isinstance(doc.get("message"), str) and doc["message"], doc
    assert "sec-websocket-accept" not in hdrs


def test_refusals_are_wellformed_http11(gw, kid, deleted_kid):
    for name, path, headers, status in refusal_cases(gw, kid, deleted_kid):
        status_line, hdrs, body = raw_upgrade(gw.port, path,
                                              [f"{k}: {v}" for k, v in headers.items()])
        try:
            assert_wellformed(status_line, hdrs, body, status)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_python_websockets_reports_each_status(gw, kid, deleted_kid):
    async def status_of(path, headers):
        try:
            ws = await websockets.connect(gw.ws_url + path, extra_headers=headers,
                                          open_timeout=10)
        except websockets.exceptions.InvalidStatusCode as e:
            return e.status_code
        await ws.close()
        return 101

    async def go():
        return {name: (await status_of(path, headers), status)
                for name, path, headers, status in refusal_cases(gw, kid, deleted_kid)}
    got = run(go())
    assert all(a == b for a, b in got.values()), got


@pytest.mark.skipif(not HAVE_NODE_WS, reason="node or tests/node/node_modules/ws missing")
def test_node_ws_reports_each_status(gw, kid, deleted_kid):
    cases = refusal_cases(gw, kid, deleted_kid)
    inp = [{"url": gw.ws_url + path, "headers": headers} for _, path, headers, _ in cases]
    p = subprocess.run([NODE, os.path.join(NODE_DIR, "ws_upgrade.mjs")], cwd=NODE_DIR,
                       input=json.dumps(inp), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    for (name, _, _, status), r in zip(cases, out):
        assert r.get("status") == status, (name, r)
        assert r["httpVersion"] == "1.1", (name, r)
        assert json.loads(r["body"])["message"], (name, r)


def test_locked_out_address_gets_429_with_retry_after(gateway_factory):
    g = gateway_factory("--auth-fail-limit=2")
    for _ in range(2):
        assert J.handshake_status(g, None, path="/channel", auth_header=False,
                                  headers=["Authorization: token wrong"]) == 401
    for path in ("/channel", f"/api/kernels/{UNKNOWN_ID}/channels"):
        status_line, hdrs, body = raw_upgrade(g.port, path, [f"Authorization: token {g.token}"])
        assert_wellformed(status_line, hdrs, body, 429)
        assert int(hdrs["retry-after"]) > 0

    async def go():
        with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
            await websockets.connect(g.ws_url + "/channel",
                                     extra_headers={"Authorization": f"token {g.token}"})
        return e.value.status_code
    assert run(go()) == 429


def test_websockets_over_the_connection_cap_get_503(gateway_factory):
    g = gateway_factory("--max-connections=16")
    hdr = {"Authorization": f"token {g.token}"}

    async def go():
        held = [await websockets.connect(g.ws_url + "/channel", extra_headers=hdr)
                for _ in range(16)]
        try:
            with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
                await websockets.connect(g.ws_url + "/channel", extra_headers=hdr)
            over = e.value.status_code
            status_line, hdrs, body = await asyncio.get_running_loop().run_in_executor(
                None, raw_upgrade, g.port, "/channel", [f"Authorization: token {g.token}"])
        finally:
            for ws in held:
                await ws.close()
        return over, status_line, hdrs, body
    over, status_line, hdrs, body = run(go())
    assert over == 503
    assert_wellformed(status_line, hdrs, body, 503)
    assert int(hdrs["retry-after"]) > 0

    async def again():  # closed ones make room
        for _ in range(50):
            try:
                ws = await websockets.connect(g.ws_url + "/channel", extra_headers=hdr)
                await ws.close()
                return True
            except websockets.exceptions.InvalidStatusCode:
                await asyncio.sleep(0.1)
        return False
    assert run(again())


# ---- subprotocol fallback ----

@pytest.mark.parametrize("offered", [["foo"], ["v2.kernel.websocket.jupyter.org"],
                                     ["foo", "bar.baz"]])
def test_unknown_subprotocols_fall_back_to_legacy_json(gw, kid, offered):
    """jupyter_server accepts such an offer, selects none and speaks the legacy protocol."""
    status_line, hdrs, _ = raw_upgrade(
        gw.port, f"/api/kernels/{kid}/channels",
        [f"Authorization: token {gw.token}", "Sec-WebSocket-Protocol: " + ", ".join(offered)])
    assert status_line.startswith("HTTP/1.1 101"), status_line
    assert "sec-websocket-protocol" not in hdrs, hdrs

    async def go():
        c = await J.connect(gw, kid, "legacy", subprotocols=offered)
        assert c.ws.subprotocol is None
        assert (await c.execute("print(6 * 7)")).stdout == "42\n"
        await c.close()
    run(go())


def test_v1_is_selected_when_offered_among_unknown_ones(gw, kid):
    async def go():
        c = await J.connect(gw, kid, "v1",
                            subprotocols=["v2.kernel.websocket.jupyter.org", J.V1, "foo"])
        assert c.ws.subprotocol == J.V1
        assert (await c.execute("print('v1')")).stdout == "v1\n"
        await c.close()
    run(go())


def test_channel_route_falls_back_too(gw):
    status_line, hdrs, _ = raw_upgrade(gw.port, "/channel",
                                       [f"Authorization: token {gw.token}",
                                        "Sec-WebSocket-Protocol: foo"])
    assert status_line.startswith("HTTP/1.1 101"), status_line
    assert "sec-websocket-protocol" not in hdrs, hdrs


def test_unreadable_subprotocol_offers_get_400(gw, kid):
    """Offers libwebsockets cannot read are answered 400, not dropped."""
    for offer in ("x" * 80, ", ".join(["p%d" % i for i in range(40)]), '"quoted"'):
        status_line, hdrs, body = raw_upgrade(
            gw.port, f"/api/kernels/{kid}/channels",
            [f"Authorization: token {gw.token}", f"Sec-WebSocket-Protocol: {offer}"])
        assert_wellformed(status_line, hdrs, body, 400)
