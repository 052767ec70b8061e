"""Noisy neighbours: one tenant's hostile kernels cannot degrade another tenant's service.

Tenant A runs 16 kernels of hostile code at once (messages over the gateway's per-message
limit, output floods, fork and memory bombs, stderr floods, a restart loop) while tenant B runs
a steady `1+1` loop on its own kernel over the Jupyter websocket. B's round trips are measured
quiet first, in the same run, then under the attack: B loses nothing, its median stays within
twice its quiet median and its p99 within ten times its quiet p99; every A execution ends with
an outcome; the gateway's peak resident memory stays under the bound that
docs/operations.md states. Everything is on loopback and stops by itself (about a minute).
"""
import asyncio
import copy
import json
import os
import re
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

import jclient as J
import sbxutil as S
from conftest import key_file, start_gateway, stop_gateway

MiB = 1 << 20
HOSTILE_KERNELS = 16
ATTACK_SECONDS = 25
# docs/operations.md "Noisy neighbours": the gateway's peak resident memory under this attack,
# whose executions the execute API keeps (up to --execution-budget-bytes per tenant)
EXEC_BUDGET_MIB = 64
RSS_BOUND_MIB = 192
# B under attack, against its quiet self in the same run: the median within twice the quiet
# median (plus scheduler granularity), the p99 within P99_RATIO times the quiet p99. On this
# 2-core host, with the attackers' and the test's own clients on the same CPUs, B's p99 under
# attack measures 3-6 times its quiet p99 (docs/operations.md "Noisy neighbours"); without
# per-tenant CPU weights it was over 40 times.
ALLOWANCE_S = 0.005
P99_RATIO = 10

pytestmark = pytest.mark.needs_sandbox

BIG_MESSAGES = r'''
k = get_ipython().kernel
big = b"\xa5" * (80 << 20)
for i in range(2):
    k.session.send(k.iopub_socket, "display_data", {"data": {"text/plain": "x"}, "metadata": {}},
                   parent=k.get_parent("shell"), buffers=[big])
del big
'''
OUTPUT_FLOOD = r'''
import sys
line = "x" * 65535 + "\n"
while True:
    sys.stdout.write(line)
'''
FORK_BOMB = r'''
import os, time
kids = []
try:
    while len(kids) < 2000:
        p = os.fork()
        if p == 0:
            time.sleep(20)
            os._exit(0)
        kids.append(p)
except OSError as e:
    print("forks refused after", len(kids), e)
finally:
    for p in kids:
        os.kill(p, 9)
    for p in kids:
        os.waitpid(p, 0)
'''
MEMORY_BOMB = r'''
x = []
while True:
    x.append(bytearray(32 << 20))
'''
STDERR_FLOOD = r'''
import os
chunk = b"e" * 65536
for i in range(4000):
    os.write(2, chunk)
'''
WORKLOADS = [("big_messages", BIG_MESSAGES), ("output_flood", OUTPUT_FLOOD),
             ("fork_bomb", FORK_BOMB), ("memory_bomb", MEMORY_BOMB),
             ("stderr_flood", STDERR_FLOOD), ("restart_loop", None)]


def as_tenant(gw, key):
    g = copy.copy(gw)
    g.token = key
    return g


def execute(g, kid, code, timeout):
    """One execution through the execute API, streamed (NDJSON): (HTTP status, its end event,
    or the JSON error body of a refusal)."""
    req = urllib.request.Request(
        f"{g.url}/api/kernels/{kid}/execute", method="POST",
        data=json.dumps({"code": code, "timeout": timeout}).encode(), headers=g.headers())
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            last = None
            for line in r:
                if line.strip():
                    last = line
            end = json.loads(last) if last else None
            return r.status, end if end and end.get("type") == "end" else None
    except urllib.error.HTTPError as e:
        body = e.read()
        return e.code, json.loads(body) if body else None


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def gateway_memory_mib(gw):
    st = open(f"/proc/{gw.proc.pid}/status").read()
    return tuple(int(re.search(rf"{k}:\s+(\d+) kB", st).group(1)) // 1024
                 for k in ("VmHWM", "VmRSS"))


async def round_trips(c, seconds, every=0.02):
    """`1+1` over and over for `seconds`: the latency of each (execute_request to its
    execute_reply and its idle) and what was wrong with any answer."""
    lat, wrong = [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        ex = await c.execute("1+1", timeout=30)
        lat.append(time.monotonic() - t0)
        res = ex.of_type("execute_result")
        if ex.reply["content"]["status"] != "ok" or not res or \
                res[0]["content"]["data"]["text/plain"] != "2":
            wrong.append(ex.reply["content"])
        await asyncio.sleep(every)
    return lat, wrong


async def steady(url, token, kid, quiet_s, loud_s):
    """Tenant B's client, in a process of its own (the attackers' threads share nothing with
    it, not even an interpreter lock): warms up, measures quiet_s seconds, says so on stdout,
    then measures loud_s seconds while the parent attacks."""
    g = type("G", (), {"ws_url": url.replace("http://", "ws://"), "token": token})()
    c = await J.connect(g, kid)
    await c.wait_ready(timeout=30)
    await round_trips(c, 2)
    quiet, wrong = await round_trips(c, quiet_s)
    print("quiet-done", flush=True)
    loud, wrong2 = await round_trips(c, loud_s)
    await c.close()
    print(json.dumps({"quiet": quiet, "loud": loud, "wrong": wrong + wrong2}), flush=True)


def gateway_args():
    return ["--mem-limit", str(512 * MiB), "--output-cap", str(8 * MiB), "--pids-limit", "128",
            "--max-kernels", "24", "--shutdown-grace-ms", "1000",
            "--execution-budget-bytes", str(EXEC_BUDGET_MIB * MiB)]


def scenario(gw, keys, attack_seconds=ATTACK_SECONDS, quiet_seconds=8, workloads=WORKLOADS):
    """Tenant B's quiet round trips, then B's round trips while tenant A's HOSTILE_KERNELS
    kernels attack (one workload each, round robin). Returns what happened: B's latencies
    (s), what B got wrong, A's outcomes and anything that ended without one, attackers that
    never finished, the gateway's CPU share during the attack and its peak RSS (MiB)."""
    a, b = as_tenant(gw, keys["hostile"]), as_tenant(gw, keys["steady"])
    bkid = b.start_kernel()["id"]
    akids = [a.start_kernel()["id"] for _ in range(HOSTILE_KERNELS)]
    for kid in akids:                      # all up before anything is measured
        st, end = execute(a, kid, "1+1", 30)
        assert st == 201 and end["status"] == "ok", (st, end)
    outcomes, problems = [], []
    stop = threading.Event()

    def attacker(kid, name, code):
        deadline = time.monotonic() + attack_seconds
        while time.monotonic() < deadline and not stop.is_set():
            if code is None:
                st, body, _ = a.request("POST", f"/api/kernels/{kid}/restart")
                outcomes.append((name, st, "restart"))
                if st >= 500:
                    problems.append(f"{name}: restart answered {st}: {body}")
                time.sleep(0.2)
                continue
            st, end = execute(a, kid, code, 4)
            if st == 404 and any(n == name for n, _, _ in outcomes):
                outcomes.append((name, st, "gone"))  # given up after too many deaths
                return
            if st == 201 and end and end.get("status"):
                outcomes.append((name, st, end["status"]))
            elif st in (409, 429, 503) and isinstance(end, dict) and end.get("reason"):
                outcomes.append((name, st, end["reason"]))   # refused, with a reason
                time.sleep(0.2)
            else:
                problems.append(f"{name}: HTTP {st} without an outcome: {end}")

    def cpu_s():
        f = open(f"/proc/{gw.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    threads = [threading.Thread(target=attacker, args=(kid, *workloads[i % len(workloads)]),
                                daemon=True) for i, kid in enumerate(akids)]
    child = subprocess.Popen(
        ["/usr/bin/python3", os.path.abspath(__file__), b.url, b.token, bkid,
         str(quiet_seconds), str(attack_seconds)],
        stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
        start_new_session=True)  # not the attackers' session: their scheduler autogroup
    try:
        assert child.stdout.readline().strip() == "quiet-done"
        cpu0, t0 = cpu_s(), time.monotonic()
        for t in threads:
            t.start()
        out, _ = child.communicate(timeout=attack_seconds + 120)
        cpu = (cpu_s() - cpu0) / (time.monotonic() - t0)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        stop.set()
        for t in threads:
            if t.ident:
                t.join(timeout=150)
    res = json.loads(out)
    res.update(outcomes=outcomes, problems=problems, gateway_cpu=cpu,
               stuck=sum(t.is_alive() for t in threads), peak_rss_mib=gateway_memory_mib(gw)[0])
    b.request("DELETE", f"/api/kernels/{bkid}")
    for kid in akids:
        a.request("DELETE", f"/api/kernels/{kid}")
    return res


def describe(res):
    kinds = sorted({f"{n}={s}" for n, _, s in res["outcomes"]})
    return (f"B quiet: {S.describe(res['quiet'])} p99={p99(res['quiet']) * 1e3:.1f}ms\n"
            f"B under attack: {S.describe(res['loud'])} p99={p99(res['loud']) * 1e3:.1f}ms\n"
            f"A: {len(res['outcomes'])} outcomes ({', '.join(kinds)})\n"
            f"gateway: {res['gateway_cpu']:.0%} CPU during the attack, "
            f"peak RSS {res['peak_rss_mib']} MiB")


@pytest.fixture
def two_tenants():
    path, keys = key_file(("hostile", "steady"))
    gw = start_gateway([f"--key-file={path}", *gateway_args()])
    yield gw, keys
    stop_gateway(gw)
    os.unlink(path)


def test_hostile_tenant_cannot_degrade_its_neighbour(two_tenants):
    gw, keys = two_tenants
    S.assert_sandboxed_gateway(gw)
    res = scenario(gw, keys)
    print(describe(res))
    assert not res["wrong"], res["wrong"][:5]          # B lost nothing, got every answer right
    assert not res["stuck"], f"{res['stuck']} attackers never finished"
    assert not res["problems"], res["problems"][:10]   # every A execution had an outcome
    assert len(res["outcomes"]) >= HOSTILE_KERNELS, res["outcomes"]
    quiet, loud = statistics.median(res["quiet"]), statistics.median(res["loud"])
    assert loud <= 2 * quiet + ALLOWANCE_S, \
        f"B's median {loud * 1e3:.1f} ms under attack, {quiet * 1e3:.1f} ms quiet"
    quiet, loud = p99(res["quiet"]), p99(res["loud"])
    assert loud <= P99_RATIO * quiet, \
        f"B's p99 {loud * 1e3:.1f} ms under attack, {quiet * 1e3:.1f} ms quiet"
    assert res["peak_rss_mib"] < RSS_BOUND_MIB, f"gateway peak RSS {res['peak_rss_mib']} MiB"
    assert gw.alive()

if __name__ == "__main__":
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    asyncio.run(steady(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]),
                       float(sys.argv[5])))
