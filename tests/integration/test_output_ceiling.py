"""Messages the output budget never drops for a kernel's share alone (status, clear_output,
execute_result, error, ...) are still bounded (docs/protocol.md "Output buffer limit"):

- over its share, a kernel's clear_output or status repeating the last message relayed is
  coalesced: a progress loop (`clear_output(wait=True); print(i)`) whose client does not read
  holds no more than the kernel's ceiling, and the client still gets its reply and idle;
- past the ceiling (twice the share), the clients holding the kernel's output are ended: a
  websocket or a /channel client that does not read while the kernel forges execute_result
  messages on iopub is closed with 1008, and the gateway does not hold the flood.

Meanwhile another kernel's client (B) runs code and gets its whole output. The tests fail on
the code before the ceiling: the flood was held whole (up to --max-ws-queue-bytes, 256 MiB,
per websocket; all of it in a /channel client's queue).
"""
import asyncio
import os
import re
import sys
import time
import urllib.request
import uuid

import pytest
import websockets.exceptions

import jclient as J
from conftest import REPO, start_gateway, stop_gateway

MiB = 1 << 20
BUDGET = 4 * MiB
MAX_KERNELS = 4
CEILING = 2 * BUDGET  # a lone busy kernel's: twice its share (common/obudget.h)

PROGRESS = r'''
from IPython.display import clear_output
for i in range(%d):
    clear_output(wait=True)
    print("step", i)
'''
FORGED_RESULTS = r'''
k = get_ipython().kernel
big = "r" * (1 << 20)
for i in range(%d):
    k.session.send(k.iopub_socket, "execute_result",
                   {"data": {"text/plain": big}, "metadata": {}, "execution_count": i},
                   parent=k.get_parent("shell"))
'''

pytestmark = pytest.mark.needs_sandbox


def metrics(gw):
    req = urllib.request.Request(f"{gw.url}/metrics", headers=gw.headers())
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(kgw_output_\w+) (\S+)$", text, re.M)}


def memory_mib(gw):
    st = open(f"/proc/{gw.proc.pid}/status").read()
    return tuple(int(re.search(rf"{k}:\s+(\d+) kB", st).group(1)) / 1024
                 for k in ("VmHWM", "VmRSS"))


def sanitized(gw):
    """ASan's allocator and quarantine keep freed memory: no memory bound holds under it."""
    return "libasan" in open(f"/proc/{gw.proc.pid}/maps").read()


@pytest.fixture
def gw():
    g = start_gateway(["--output-buffer-bytes", str(BUDGET), "--output-cap", "0",
                       "--max-kernels", str(MAX_KERNELS), "--pool", "python3=0"])
    yield g
    stop_gateway(g)


async def execution_state(gw, kid):
    def get():
        _, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        return model.get("execution_state") if isinstance(model, dict) else None
    return await asyncio.get_running_loop().run_in_executor(None, get)


async def unread_client(gw, kid):
    """A client that reads nothing of its own accord: one message read ahead at most and a
    small socket read buffer, so the gateway holds what it does not take."""
    session = uuid.uuid4().hex
    ws = await asyncio.wait_for(J.K.connect(gw.ws_url, gw.token, kid, "legacy", session,
                                            max_queue=1, read_limit=1 << 16), 30)
    c = J.KernelClient(ws, "legacy", session)
    await c.wait_ready(timeout=60)
    return c


async def honest_b(gw, kid, stop):
    """B: prints and computes over and over while A floods; every output must come whole."""
    c = await J.connect(gw, kid)
    await c.wait_ready(timeout=60)
    runs, wrong = 0, []
    while not stop.is_set() or runs == 0:
        n = 300 + runs % 5
        ex = await c.execute('print("\\n".join(str(i) for i in range(%d)))\n%d * 3' % (n, n),
                             timeout=60)
        res = ex.of_type("execute_result")
        if ex.status != "ok" or ex.stdout != "".join(f"{i}\n" for i in range(n)) or not res \
                or res[0]["content"]["data"]["text/plain"] != str(3 * n):
            wrong.append((ex.status, len(ex.stdout), ex.types))
        runs += 1
        await asyncio.sleep(0.05)
    await c.close()
    return runs, wrong


async def flood_unread(gw, kid_a, kid_b, code, peak_every=0.2):
    """Runs code on A with a client that does not read until A is idle again, B alongside.
    Returns (the most held seen while A ran, A's reply and iopub or the close, B's result)."""
    a = await unread_client(gw, kid_a)
    stop = asyncio.Event()
    b = asyncio.ensure_future(honest_b(gw, kid_b, stop))
    loop = asyncio.get_running_loop()
    msg_id = await a.request("execute_request", {"code": code, "silent": False,
                                                 "store_history": False, "allow_stdin": False})
    held = 0
    deadline = time.monotonic() + 60
    await asyncio.sleep(0.5)
    while await execution_state(gw, kid_a) != "idle" and time.monotonic() < deadline:
        m = await loop.run_in_executor(None, metrics, gw)
        held = max(held, m["kgw_output_buffer_bytes"])
        await asyncio.sleep(peak_every)
    stop.set()
    try:
        reply, iopub = await a.collect(msg_id, timeout=60)
        outcome = ("done", reply, iopub)
    except websockets.exceptions.ConnectionClosed as e:
        outcome = ("closed", e.rcvd.code if e.rcvd else None, e.rcvd.reason if e.rcvd else "")
    await a.close()
    return held, outcome, await b


def test_clear_output_loop_is_coalesced(gw):
    """A progress loop of 30 000 clear_output + print to a client that does not read: the
    gateway holds at most the kernel's ceiling (on the old code: every clear_output, ~17 MiB),
    the client is not disconnected and finds its reply and idle, the last step's output
    among what it gets; B loses nothing."""
    kid_a, kid_b = gw.start_kernel()["id"], gw.start_kernel()["id"]
    _, base_rss = memory_mib(gw)
    held, outcome, (runs, wrong) = asyncio.run(flood_unread(gw, kid_a, kid_b, PROGRESS % 30000))
    m = metrics(gw)
    hwm, _ = memory_mib(gw)
    print(f"held at most {held / MiB:.1f} MiB, VmHWM {hwm:.0f} MiB (base {base_rss:.0f}); "
          f"B {runs} runs; metrics {m}")  # (held: sampled)
    assert m["kgw_output_buffer_peak_bytes"] <= CEILING + MiB, m  # old code: ~17 MiB
    assert outcome[0] == "done", outcome
    _, reply, iopub = outcome
    assert reply["content"]["status"] == "ok", reply
    assert iopub[-1]["content"]["execution_state"] == "idle"
    assert not wrong, wrong[:3]
    assert m["kgw_output_coalesced_messages_total"] > 0
    assert sanitized(gw) or hwm < base_rss + 48, hwm
    assert gw.alive()


def test_forged_results_end_the_unread_client(gw):
    """A kernel forges 300 execute_result messages of 1 MiB on iopub to a client that does not
    read: past the kernel's ceiling the client is closed with 1008 and the flood is not held
    (on the old code: held up to --max-ws-queue-bytes, 256 MiB, then closed); B loses
    nothing and the kernel still answers."""
    kid_a, kid_b = gw.start_kernel()["id"], gw.start_kernel()["id"]
    _, base_rss = memory_mib(gw)
    held, outcome, (runs, wrong) = asyncio.run(
        flood_unread(gw, kid_a, kid_b, FORGED_RESULTS % 300))
    m = metrics(gw)
    hwm, _ = memory_mib(gw)
    print(f"held at most {held / MiB:.1f} MiB, VmHWM {hwm:.0f} MiB (base {base_rss:.0f}); "
          f"B {runs} runs; A {outcome[:3]}; metrics {m}")
    assert m["kgw_output_buffer_peak_bytes"] <= CEILING + 2 * MiB, m  # old code: 256 MiB
    assert outcome[0] == "closed" and outcome[1] == 1008, outcome
    assert "output share" in outcome[2], outcome
    assert m["kgw_output_clients_ended_total"] >= 1
    assert sanitized(gw) or hwm < base_rss + 64, hwm
    assert not wrong, wrong[:3]
    assert "ended" in gw.log() and "past its ceiling" in gw.log()

    async def again():  # A's kernel still answers a new client
        c = await J.connect(gw, kid_a)
        await c.wait_ready(timeout=60)
        ex = await c.execute("6 * 7", timeout=60)
        await c.close()
        return ex
    ex = asyncio.run(again())
    assert ex.status == "ok" and ex.of_type("execute_result")[0]["content"]["data"][
        "text/plain"] == "42", ex.types
    assert gw.alive()


def test_forged_results_close_the_unread_channel_client(gw):
    """The same forgery to a /channel client that collects iopub (start_channels) but does not
    read it: its connection is closed with 1008 past the ceiling, its queue let go (on the old
    code the queue held all 100 MiB)."""
    sys.path.insert(0, os.path.join(REPO, "examples"))
    from channel_client import Channel

    kid = gw.start_kernel()["id"]

    async def go():
        ch = await Channel.connect(gw.ws_url, gw.token)
        try:
            km = await ch.mkm.get_kernel(kid)
            client = await km.client()
            await client.start_channels()
            await client.wait_for_ready(timeout=60)
            await client.execute(FORGED_RESULTS % 100, silent=False, store_history=False,
                                 allow_stdin=False)
            await asyncio.sleep(0.5)
            deadline = time.monotonic() + 60
            while await execution_state(gw, kid) != "idle" and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            try:
                await asyncio.wait_for(client.get_shell_msg(timeout=10), 20)
                return "open", ch.ws.close_code
            except (ConnectionError, websockets.exceptions.ConnectionClosed) as e:
                return str(e), ch.ws.close_code
        finally:
            await ch.close()

    got, code = asyncio.run(go())
    m = metrics(gw)
    print(f"{got!r} {code}; metrics {m}")
    assert m["kgw_output_buffer_peak_bytes"] <= CEILING + 2 * MiB, m  # old code: 100 MiB
    assert code == 1008 and "output share" in got, (got, code)
    assert m["kgw_output_clients_ended_total"] >= 1
    assert "channel: " in gw.log() and "is not reading its kernel's output" in gw.log()
    assert gw.alive()
