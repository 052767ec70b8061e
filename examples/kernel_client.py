#!/usr/bin/python3
"""Run code in a kgw (Jupyter Kernel Gateway API) kernel from the command line.

    kernel_client.py --url http://127.0.0.1:8888 --token KEY 'print(6*7)' '1/0'

Creates a kernel, executes each CODE argument in order over the kernel's websocket, streams
stdout/stderr, prints results and errors, saves PNG images, answers input() from the terminal
(--allow-stdin) and deletes the kernel at the end (unless --keep). Exit status 1 if any cell
failed (error, timeout, kernel died), 2 on usage, connection or HTTP errors.

Needs only the standard library, `websockets` (Debian: python3-websockets, 10.x API) and
kgwclient.py from this directory (messages, the two websocket encodings, `rest()`, `connect()`).
The functions are meant to be lifted: `Kernel.wait_ready()` and `run_cell()` (one execute
request to completion).
"""
import argparse
import asyncio
import base64
import getpass
import os
import re
import sys
import threading
import uuid

import websockets.exceptions  # websockets 10 exports its submodules lazily

from kgwclient import V1, connect, decode, encode, make_msg, rest


class CellError(Exception):
    """A cell could not be completed (timeout, kernel died or restarted)."""


# ---------------------------------------------------------------- options

def parse_size(text):
    """'512M' -> 536870912; plain integers pass through (limits are integers, see README)."""
    m = re.fullmatch(r"(\d+)([KMGT]?)i?B?", text.strip(), re.I)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())


# ---------------------------------------------------------------- output handling

def out(text, stream=None):
    stream = stream or sys.stdout
    stream.write(text)
    stream.flush()


def strip_ansi(text):
    return text if sys.stderr.isatty() else re.sub(r"\x1b\[[0-9;]*m", "", text)


def save_png(data_b64, save_dir, name):
    os.makedirs(save_dir, exist_ok=True)
    path = os.path.join(save_dir, name)
    with open(path, "wb") as f:
        f.write(base64.b64decode(data_b64))
    return path


def read_terminal_line(prompt, loop, password=False):
    """Read one line from stdin in a daemon thread (never blocks exit); returns a future.
    Passwords are read without echo when stdin is a terminal."""
    fut = loop.create_future()

    def reader():
        if password and sys.stdin.isatty():
            line = getpass.getpass(prompt)
        else:
            out(prompt)
            line = sys.stdin.readline()
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(line.rstrip("\n")))
    threading.Thread(target=reader, daemon=True).start()
    return fut


# ---------------------------------------------------------------- execution

class Kernel:
    """One websocket connection to a kernel's channels, in either encoding."""

    def __init__(self, ws, protocol, session):
        self.ws, self.protocol, self.session = ws, protocol, session

    async def send(self, msg_type, content, channel="shell", parent=None):
        msg = make_msg(msg_type, content, session=self.session, channel=channel, parent=parent,
                       username="kernel_client")
        await self.ws.send(encode(msg, self.protocol))
        return msg["header"]["msg_id"]

    async def recv(self, timeout):
        """Next message (asyncio.TimeoutError after `timeout` s); CellError if the kernel died
        or restarted (the gateway then sends iopub status "restarting"/"dead" with no parent)."""
        msg = decode(await asyncio.wait_for(self.ws.recv(), timeout), self.protocol)
        if msg["header"].get("msg_type") == "status" and not msg["parent_header"] and \
                msg["content"].get("execution_state") in ("restarting", "dead"):
            raise CellError(f"kernel {msg['content']['execution_state']}")
        return msg

    async def wait_ready(self, timeout):
        """Send kernel_info_request until one is answered (the kernel may still be starting)."""
        loop = asyncio.get_running_loop()
        deadline, sent = loop.time() + timeout, set()
        while loop.time() < deadline:
            sent.add(await self.send("kernel_info_request", {}))
            step = min(loop.time() + 1.0, deadline)
            while (left := step - loop.time()) > 0:
                try:
                    m = await self.recv(left)
                except (asyncio.TimeoutError, CellError):
                    break
                if m["channel"] == "shell" and m["parent_header"].get("msg_id") in sent:
                    return m["content"]
        raise CellError(f"kernel did not answer within {timeout}s")


async def interrupt_later(seconds, interrupt):
    await asyncio.sleep(seconds)
    out(f"kernel_client: interrupting after {seconds:g}s\n", sys.stderr)
    try:
        await interrupt()
    except (RuntimeError, OSError) as e:
        out(f"kernel_client: interrupt failed: {e}\n", sys.stderr)


async def run_cell(kernel, code, *, cell_no, args, interrupt):
    """Execute one cell; print its output as it arrives. Returns True if it succeeded.
    Waits for both the execute_reply and the iopub status idle of this request.
    stop_on_error is False: with True, ipykernel also aborts a request that arrives just
    after a failed one (even though this client waits for the failed one to finish)."""
    loop = asyncio.get_running_loop()
    msg_id = await kernel.send("execute_request", {
        "code": code, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": args.allow_stdin, "stop_on_error": False})
    timer = asyncio.create_task(interrupt_later(args.interrupt_after, interrupt)) \
        if args.interrupt_after else None
    reply, idle, images, ok = None, False, 0, True
    deadline = loop.time() + args.timeout
    try:
        while reply is None or not idle:
            m = await kernel.recv(max(deadline - loop.time(), 0))
            if m["parent_header"].get("msg_id") != msg_id:
                continue                                 # another client's or a stale message
            kind, c = m["header"]["msg_type"], m["content"]
            if m["channel"] == "shell":
                reply = m
                ok = c.get("status") == "ok"
                if c.get("status") == "aborted":
                    out(f"kernel_client: cell {cell_no} was aborted by the kernel\n", sys.stderr)
            elif m["channel"] == "stdin" and kind == "input_request":
                asked = loop.time()
                line = await read_terminal_line(c.get("prompt", ""), loop, c.get("password"))
                deadline += loop.time() - asked        # a human's typing time is not counted
                await kernel.send("input_reply", {"value": line}, "stdin", m["header"])
            elif kind == "status":
                idle = c["execution_state"] == "idle"
            elif kind == "stream":
                out(c["text"], sys.stderr if c["name"] == "stderr" else sys.stdout)
            elif kind in ("execute_result", "display_data", "update_display_data"):
                data = c.get("data", {})
                if "image/png" in data:
                    images += 1
                    path = save_png(data["image/png"], args.save_dir,
                                    f"cell{cell_no}-{images}.png")
                    out(f"[image/png saved to {path}]\n")
                elif "text/plain" in data:
                    out(data["text/plain"] + "\n")
            elif kind == "error":
                tb = "\n".join(c.get("traceback") or []) or f"{c['ename']}: {c['evalue']}"
                out(strip_ansi(tb) + "\n", sys.stderr)
    except asyncio.TimeoutError:
        raise CellError(f"cell {cell_no}: no result within {args.timeout:g}s") from None
    except CellError as e:
        raise CellError(f"cell {cell_no}: {e}") from None
    finally:
        if timer:
            timer.cancel()
    return ok


async def run(args, code_cells):
    """Create the kernel, run every cell, delete the kernel. Returns the exit status."""
    body = {"name": args.kernel}
    if args.env:
        body["env"] = dict(kv.split("=", 1) for kv in args.env)
    if args.limit:
        body["limits"] = {k: (parse_size(v) if k in ("memory", "workspace", "output_bytes")
                              else int(v)) for k, v in (kv.split("=", 1) for kv in args.limit)}

    def call(method, path, body=None):
        return asyncio.to_thread(rest, args.url, args.token, method, path, body)

    kid = (await call("POST", "/api/kernels", body))["id"]
    session = uuid.uuid4().hex
    failed = False
    try:
        async with connect(args.url, args.token, kid, args.protocol, session) as ws:
            kernel = Kernel(ws, args.protocol, session)
            await kernel.wait_ready(args.timeout)
            for n, code in enumerate(code_cells, 1):
                ok = await run_cell(kernel, code, cell_no=n, args=args,
                                    interrupt=lambda: call("POST", f"/api/kernels/{kid}/interrupt"))
                failed |= not ok
                if failed and args.stop_on_error and n < len(code_cells):
                    out(f"kernel_client: skipping {len(code_cells) - n} cell(s) after an error\n",
                        sys.stderr)
                    break
    except (CellError, websockets.exceptions.WebSocketException) as e:
        out(f"kernel_client: {e}\n", sys.stderr)
        failed = True
    finally:
        if args.keep:
            out(f"kernel_client: kept kernel {kid}\n", sys.stderr)
        else:
            await call("DELETE", f"/api/kernels/{kid}")
    return 1 if failed else 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("code", nargs="+", metavar="CODE", help="cells to execute, in order")
    p.add_argument("--url", default="http://127.0.0.1:8888", help="gateway base URL")
    p.add_argument("--token", default=os.environ.get("KGW_API_KEY"),
                   help="API key (default: $KGW_API_KEY)")
    p.add_argument("--kernel", default="python3", help="kernelspec name")
    p.add_argument("--protocol", choices=("legacy", "v1"), default="legacy",
                   help="websocket encoding (v1 = %s)" % V1)
    p.add_argument("--env", action="append", metavar="KERNEL_X=VALUE",
                   help="kernel environment variable (only KERNEL_* are applied)")
    p.add_argument("--limit", action="append", metavar="NAME=VALUE",
                   help="lower a sandbox limit: memory, cpu, pids, workspace, exec_timeout, "
                        "output_bytes (sizes accept K/M/G)")
    p.add_argument("--save-dir", default=".", help="where image/png outputs are written")
    p.add_argument("--allow-stdin", action="store_true", help="answer input() from stdin")
    p.add_argument("--timeout", type=float, default=120, help="seconds per cell")
    p.add_argument("--interrupt-after", type=float, metavar="SECONDS",
                   help="interrupt a cell still running after SECONDS")
    p.add_argument("--stop-on-error", action="store_true",
                   help="skip the remaining cells after a failed one")
    p.add_argument("--keep", action="store_true", help="do not delete the kernel at the end")
    args = p.parse_args(argv)
    if not args.token:
        p.error("no API key: pass --token or set KGW_API_KEY")
    for kv in (args.env or []) + (args.limit or []):
        if "=" not in kv:
            p.error(f"expected NAME=VALUE, got {kv!r}")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        return asyncio.run(run(args, args.code))
    except (RuntimeError, OSError, ValueError) as e:
        out(f"kernel_client: {e}\n", sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
