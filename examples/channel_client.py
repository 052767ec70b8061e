#!/usr/bin/python3
"""Run code through kgw's /channel RPC websocket, the way a code-interpreter backend does.

    channel_client.py --url ws://127.0.0.1:8888 --token KEY 'print(6*7)' 'import kgw_tools'

Starts a kernel (multi_kernel_manager.start_kernel), gets its kernel manager and a client,
waits for it to be ready, executes each CODE argument, prints the iopub stream until the
execution is idle, answers the kernel's callbacks (display_dataframe_to_user and friends are
printed and acknowledged) and shuts the kernel down at the end (unless --keep). Exit status 1
if a cell failed, 2 on usage or connection errors.

Needs only the standard library and `websockets` (Debian: python3-websockets, 10.x API).
`Channel` is meant to be lifted: `call()` is one call_request and its answer, and
`Channel.on_callback` answers the kernel's calls.
"""
import argparse
import asyncio
import json
import os
import sys
import uuid

import websockets


class RemoteError(Exception):
    """A call_exception: .type is the Python exception name the gateway reports."""

    def __init__(self, type_, message):
        super().__init__(f"{type_}: {message}")
        self.type = type_
        self.message = message


class Ref:
    """An object reference returned by the gateway: call its methods with `await ref.m(...)`."""

    def __init__(self, channel, type_, id_):
        self.channel, self.type, self.id = channel, type_, id_

    def __getattr__(self, method):
        async def call(*args, **kwargs):
            return await self.channel.call(self.type, self.id, method, *args, **kwargs)
        return call


class Channel:
    """One /channel websocket. Answers arrive in any order; each call waits for its own."""

    def __init__(self, ws):
        self.ws = ws
        self.pending = {}
        self.callbacks = []          # (method, args, kwargs) the kernel called
        self.on_callback = None      # fn(method, args, kwargs) -> value; None: acknowledge
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url, token, **kw):
        ws = await websockets.connect(url.rstrip("/") + "/channel", max_size=None,
                                      extra_headers={"Authorization": f"token {token}"}, **kw)
        return cls(ws)

    async def close(self):
        self.reader.cancel()
        await self.ws.close()

    async def _read(self):
        try:
            async for frame in self.ws:
                msg = json.loads(frame)
                kind = msg.get("message_type")
                if kind == "call_request":     # the kernel calls us back
                    await self._answer_callback(msg)
                    continue
                fut = self.pending.pop(msg.get("request_id"), None)
                if fut and not fut.done():
                    fut.set_result(msg)
        except websockets.ConnectionClosed as e:
            err = ConnectionError(f"websocket closed: {e.code} {e.reason}")
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(err)
            self.pending.clear()

    async def _answer_callback(self, msg):
        args, kwargs = msg.get("args") or [], msg.get("kwargs") or {}
        self.callbacks.append((msg["method"], args, kwargs))
        reply = {"request_id": msg["request_id"]}
        try:
            value = self.on_callback(msg["method"], args, kwargs) if self.on_callback else None
            reply.update(message_type="call_return_value", value=value)
        except Exception as e:  # reported to the kernel, which raises it
            reply.update(message_type="call_exception",
                         error={"type": type(e).__name__, "message": str(e)})
        await self.ws.send(json.dumps(reply))

    async def send_raw(self, obj):
        await self.ws.send(obj if isinstance(obj, (str, bytes)) else json.dumps(obj))

    async def call(self, type_, id_, method, *args, **kwargs):
        rid = str(uuid.uuid4())
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        await self.ws.send(json.dumps({
            "message_type": "call_request", "request_id": rid,
            "object_reference": {"type": type_, "id": id_},
            "method": method, "args": list(args), "kwargs": kwargs}))
        msg = await fut
        kind = msg["message_type"]
        if kind == "call_return_value":
            return msg.get("value")
        if kind == "call_return_object_reference":
            ref = msg["object_reference"]
            return Ref(self, ref["type"], ref["id"])
        raise RemoteError(msg["error"]["type"], msg["error"]["message"])

    @property
    def mkm(self):
        return Ref(self, "multi_kernel_manager", "")

    async def register_activity(self, kernel_id):
        await self.ws.send(json.dumps({"message_type": "register_activity_request",
                                       "kernel_id": kernel_id}))


async def run_cell(client, code, timeout=60, out=sys.stdout):
    """Executes code on a client ref and follows iopub until idle. Returns (status, outputs)."""
    msg_id = await client.execute(code, silent=False, store_history=True, allow_stdin=False)
    outputs = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError("the cell did not finish in time")
        try:
            m = await client.get_iopub_msg(timeout=left)
        except RemoteError as e:
            if e.type == "Empty":
                raise TimeoutError("the cell did not finish in time") from None
            raise
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = m["msg_type"], m["content"]
        outputs.append(m)
        if t == "stream" and out:
            out.write(c["text"])
        elif t in ("execute_result", "display_data") and out:
            out.write(c["data"].get("text/plain", "") + "\n")
        elif t == "error" and out:
            out.write(f"{c['ename']}: {c['evalue']}\n")
        elif t == "status" and c["execution_state"] == "idle":
            break
    while True:  # the execute_reply on shell
        reply = await client.get_shell_msg(timeout=max(deadline - loop.time(), 0.1))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"]["status"], outputs


async def main_async(a):
    ch = await Channel.connect(a.url, a.token)
    failed = False
    try:
        kid = await ch.mkm.start_kernel(kernel_name=a.kernel)
        km = await ch.mkm.get_kernel(kid)
        client = await km.client()
        await client.start_channels()
        await client.wait_for_ready(timeout=a.timeout)
        ch.on_callback = lambda m, args, kw: print(f"[callback] {m} {args} {kw}") or "ok"
        for code in a.code:
            status, _ = await run_cell(client, code, a.timeout)
            failed |= status != "ok"
        if not a.keep:
            await ch.mkm.shutdown_kernel(kid)
        else:
            print(f"kernel {kid} kept", file=sys.stderr)
    finally:
        await ch.close()
    return 1 if failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="ws://127.0.0.1:8888")
    p.add_argument("--token", default=os.environ.get("KGW_API_KEY", ""))
    p.add_argument("--kernel", default=None, help="kernelspec name (default: the gateway's)")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--keep", action="store_true", help="do not shut the kernel down")
    p.add_argument("code", nargs="+")
    a = p.parse_args()
    a.url = a.url.replace("http://", "ws://").replace("https://", "wss://")
    try:
        return asyncio.run(main_async(a))
    except (OSError, websockets.WebSocketException, RemoteError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
