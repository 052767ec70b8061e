"""Helpers for the sandbox suites (test_escape.py, test_sandbox_work.py).

Every piece of attack code goes through ``kcall``/``kexec`` with ``guard=True`` (the default):
the cell then starts with a containment check (uid 1000, pid 1 is our ``init``, hostname
``sandbox``) that raises before anything else runs, and the helper turns that into a test
failure.  So attack code never runs outside a sandbox, e.g. against a gateway started with
``--no-sandbox`` by mistake.

``kcall`` runs ``code`` that fills a dict ``R`` and returns ``R`` (JSON round trip).
"""
import json
import re
import statistics
import subprocess
import sys
import threading
import time

import pytest

import conftest
import jclient as J
from jclient import run

RESULT_TAG = "@@KGW-RESULT@@"
NOT_CONTAINED = "KGW-NOT-CONTAINED"

# Runs first in every attack cell. Names are underscored and deleted: they must not collide
# with the attack code.
GUARD = r'''
import os as _kg_os, socket as _kg_socket
_kg_p = []
if (_kg_os.getuid(), _kg_os.geteuid(), _kg_os.getgid(), _kg_os.getegid()) != (1000,) * 4:
    _kg_p.append("ids %r" % ((_kg_os.getuid(), _kg_os.geteuid(), _kg_os.getgid()),))
try:
    _kg_c = open("/proc/1/cmdline", "rb").read()
except OSError as _kg_e:
    _kg_c = repr(_kg_e)
if _kg_c != b"init\x00":
    _kg_p.append("pid 1 is %r" % (_kg_c,))
if _kg_socket.gethostname() != "sandbox":
    _kg_p.append("hostname %r" % (_kg_socket.gethostname(),))
if _kg_p:
    raise RuntimeError("KGW-NOT-CONTAINED: " + "; ".join(_kg_p))
del _kg_os, _kg_socket, _kg_p, _kg_c
'''


def wrap(code, guard=True, result=False):
    parts = [GUARD] if guard else []
    if result:
        parts.append("R = {}")
    parts.append(code)
    if result:
        parts.append(f"print({RESULT_TAG!r} + __import__('json').dumps(R, default=repr))")
    return "\n".join(parts)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def errors_of(ex):
    out = []
    for m in ex.of_type("error"):
        c = m["content"]
        tb = ANSI.sub("", "\n".join(c.get("traceback", [])))
        out.append(f"{c.get('ename')}: {c.get('evalue')}\n" + tb)
    if ex.reply and ex.reply["content"].get("status") == "error":
        c = ex.reply["content"]
        out.append(f"reply: {c.get('ename')}: {c.get('evalue')}")
    return "\n".join(out)


def check_contained(ex):
    # only the exception itself: a traceback of any other error shows the guard's source lines
    for m in ex.of_type("error") + ([ex.reply] if ex.reply else []):
        if str(m["content"].get("evalue", "")).startswith(NOT_CONTAINED):
            pytest.fail("kernel is NOT contained; attack code was not run:\n" +
                        m["content"]["evalue"])


async def aexec(c, code, timeout=30, guard=True, result=False):
    ex = await c.execute(wrap(code, guard, result), timeout=timeout)
    if guard:
        check_contained(ex)
    return ex


def kexec(gw, kid, code, timeout=30, guard=True):
    """Execute a cell on a fresh websocket; returns jclient.Execution."""
    async def go():
        c = await J.connect(gw, kid)
        try:
            return await aexec(c, code, timeout, guard)
        finally:
            await c.close()
    return run(go(), timeout + 30)


def parse_result(ex):
    for line in ex.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    raise AssertionError(f"no result from the kernel; status={ex.reply['content'].get('status')}"
                         f"\nstdout={ex.stdout[-3000:]!r}\nerrors={errors_of(ex)[-6000:]}")


def kcall(gw, kid, code, timeout=30, guard=True):
    """Run code that fills the dict R inside the kernel; return R."""
    async def go():
        c = await J.connect(gw, kid)
        try:
            return await aexec(c, code, timeout, guard, result=True)
        finally:
            await c.close()
    return parse_result(run(go(), timeout + 30))


async def acall(c, code, timeout=30, guard=True):
    return parse_result(await aexec(c, code, timeout, guard, result=True))


def assert_sandboxed_gateway(gw):
    status, body, _ = gw.request("GET", "/api")
    assert status == 200 and body.get("sandbox") == "enabled", \
        f"the gateway does not report an enabled sandbox: {body}"


def start_sandboxed(*args, env=None):
    gw = conftest.start_gateway(args, env=env)
    try:
        assert_sandboxed_gateway(gw)
    except BaseException:
        conftest.stop_gateway(gw)
        raise
    return gw


def new_kernel(gw, env=None):
    model = gw.start_kernel(env=env)
    return model["id"]


class Background(threading.Thread):
    """Run fn() in a thread; .result / .error afterwards."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result, self.error = fn, None, None

    def run(self):
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def value(self, timeout):
        self.join(timeout)
        assert not self.is_alive(), f"background work did not finish within {timeout}s"
        if self.error:
            raise self.error
        return self.result


PROBE = r"""
import http.client, json, select, sys, time
port, every, limit = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
# one untimed request first: the first one pays for this process's lazy imports (the idna
# codec of getaddrinfo, the header parser), not for the gateway
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("GET", "/api"); c.getresponse().read(); c.close()
lat, end = [], time.monotonic() + limit
while time.monotonic() < end:
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/api")
    r = c.getresponse(); r.read(); c.close()
    lat.append(time.monotonic() - t0 if r.status == 200 else -r.status)
    if select.select([sys.stdin], [], [], every)[0] and not sys.stdin.read(1):
        break                          # the test closed our stdin: done
print(json.dumps(lat))
"""


def api_latencies(gw, while_alive, max_seconds, every=0.05):
    """GET /api repeatedly while the thread is alive; returns the latencies in seconds.

    Measured from a separate process: in this one the GIL is shared with the threads that
    drive the attack, which would add their own delays to the numbers."""
    p = subprocess.Popen([sys.executable, "-c", PROBE, str(gw.port), str(every), str(max_seconds)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        while_alive.join(max_seconds)
    finally:
        p.stdin.close()
        out = p.stdout.read()
        p.wait(timeout=15)
    lat = json.loads(out)
    assert all(x >= 0 for x in lat), f"GET /api failed: {[x for x in lat if x < 0]}"
    return lat


def describe(lat):
    if not lat:
        return "no samples"
    s = sorted(lat)
    return (f"n={len(s)} median={statistics.median(s) * 1000:.1f}ms "
            f"p95={s[int(0.95 * (len(s) - 1))] * 1000:.1f}ms max={s[-1] * 1000:.1f}ms")


def wait_for(pred, timeout, every=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def status_of(m):
    return m["header"]["msg_type"] == "status" and m["content"]["execution_state"]


async def launch(c, code, guard=True):
    """Send an attack cell without waiting for its reply (it may never come); returns msg_id."""
    return await c.request("execute_request", {
        "code": wrap(code, guard), "silent": False, "store_history": False,
        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})


# The errors kgw answers in the kernel's name when it ends with requests in flight
# (docs/protocol.md, "Outcomes"): they come before the "restarting" status.
GATEWAY_ENAMES = {"OutOfMemory", "PidsLimit", "KernelKilled", "KernelDied", "TimeLimit",
                  "KernelRestarted", "KernelShutdown"}


async def await_status_or_reply(c, msg_id, state, timeout):
    """Wait for iopub status `state` (e.g. "restarting"); an execute_reply to msg_id that comes
    first means the cell ended (the guard may have refused to run it): fail with its error --
    unless it is the gateway's answer for a kernel that ended, which comes first."""
    deadline = time.monotonic() + timeout
    while True:
        m = await c.recv(lambda m: (m["channel"] == "iopub" and status_of(m) == state) or
                         (m["channel"] == "shell" and
                          m["parent_header"].get("msg_id") == msg_id),
                         max(deadline - time.monotonic(), 0.001))
        if m["channel"] != "shell" or m["content"].get("ename") not in GATEWAY_ENAMES:
            break
    if m["channel"] == "shell":
        fake = J.Execution(msg_id, m, [])
        check_contained(fake)
        raise AssertionError(f"the cell ended ({m['content'].get('status')}) instead of status "
                             f"{state!r}: {m['content'].get('ename')} {m['content'].get('evalue')}")
    return m
