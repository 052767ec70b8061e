#!/usr/bin/python3
"""How many idle kernels one kgw holds, and what they cost it (docs/operations.md, capacity).

Two runs, each against its own kgw on a free loopback port:

  density   forked kernels (fork server, no pool), created in steps (--steps, then on in steps of
            --step-after until the gateway refuses one: the 503 and its reason are printed, a 500
            is an error). Nobody is connected but one probe client on the first kernel. After
            each step, with every kernel idle: the gateway's CPU over --idle-seconds, the probe's
            `1+1` round trip p50/p99 (and the ratio to the first step's, same run), the
            gateway's descriptors and RSS (absolute, and per kernel over the first step),
            MemAvailable used per kernel, and the step's create rate.
  hostile   --hostile-runs fresh gateways, each with six hostile kernels of tenant A (two each:
            one 250 MB display message; 40 writes of 8 MiB to stdout; 200 000 lines to stderr),
            each read by a python3-websockets client as fast as it reads, while tenant B runs
            `1+1` round trips on a kernel of its own: the gateway's peak RSS (VmHWM), every
            hostile execution's outcome, and whether B lost anything.

Standard library plus python3-websockets and python3-psutil (Debian): run with /usr/bin/python3.
Everything it starts is stopped by PID at the end (SIGTERM to kgw, then SIGKILL to anything of
its own left). Loopback only.
"""
import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import websockets

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench as B  # noqa: E402  (Gateway, KgwClient, Reaper, round trips, /proc readers)

now = time.perf_counter
DEFAULT_STEPS = "10,250,500,1000"
HOSTILE = {
    "display_250MB": "from IPython.display import display\n"
                     "display({'text/plain': 'x' * 250_000_000}, raw=True)",
    "stdout_40x8MiB": "import sys\n"
                      "for _ in range(40):\n"
                      "    sys.stdout.write('y' * (8 << 20)); sys.stdout.flush()",
    "stderr_200k_lines": "import sys\n"
                         "for i in range(200_000):\n"
                         "    print(i, file=sys.stderr)",
}


def log(msg=""):
    print(msg, flush=True)


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def mem_available_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def keyfile(binary, workdir, tenants):
    """A key file with one key per tenant: {tenant: key}, path."""
    keys, lines = {}, []
    for t in tenants:
        out = subprocess.run([binary, "keygen", "--tenant", t], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        keys[t] = out[0].strip()
        lines.append(out[1].strip())
    path = os.path.join(workdir, "keys")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return keys, path


def create(gw, token=None):
    """(status, answer, seconds) of one POST /api/kernels."""
    t0 = now()
    st, body = B.K.request(f"http://127.0.0.1:{gw.port}", token or gw.token, "POST",
                           "/api/kernels", {"name": "python3"}, timeout=120)
    return st, body, now() - t0


# ------------------------------------------------------------------------------ density

def density(args, workdir, reaper):
    extra = ["--pool", "python3=0", "--fork-server", "--max-kernels", str(args.max),
             "--rate-limit", "0", "--auth-fail-limit", "0", "--log-level", "warn",
             *args.kgw_arg]
    gw = B.Gateway(args.kgw, workdir, reaper, extra, name="kgw-density")
    log(f"density: kgw pid {gw.pid}, descriptor limit {soft_nofile(gw.pid)}, "
        f"{' '.join(extra)}")
    rows, kids, probe, refusal, base = [], [], None, None, None
    steps = [int(s) for s in args.steps.split(",")]
    try:
        while refusal is None:
            target = steps.pop(0) if steps else len(kids) + args.step_after
            if target > args.max:
                break
            t0, made = now(), 0
            with ThreadPoolExecutor(args.concurrency) as ex:
                while len(kids) < target and refusal is None:
                    n = min(args.concurrency, target - len(kids))
                    for st, body, _ in ex.map(lambda _: create(gw), range(n)):
                        if st == 201:
                            kids.append(body["id"])
                            made += 1
                        elif st == 503 and refusal is None:
                            refusal = body
                        elif st != 503:
                            raise B.BenchError(f"POST /api/kernels -> {st} {body}")
                    reaper.track_children(gw.pid, "kgw-kernel")
            rate = made / (now() - t0) if made else float("nan")
            if not kids:
                raise B.BenchError(f"the first kernel was refused: {refusal}")
            if probe is None:
                probe = B.KgwClient(gw, kids[0], "legacy")
                B.settle(probe, now() + 30)
            time.sleep(args.settle)
            c0, w0 = gw.cpu(), now()
            time.sleep(args.idle_seconds)
            cpu = (gw.cpu() - c0) / (now() - w0) * 100
            lat = [B.rtt_once(probe, now() + 30) for _ in range(args.rtt)]
            rss, _ = gw.rss()
            row = {"kernels": len(kids), "cpu": cpu, "p50": B.pct(lat, 50) * 1e3,
                   "p99": B.pct(lat, 99) * 1e3, "fds": fds(gw.pid), "rss": rss,
                   "avail": mem_available_mb(), "rate": rate}
            if base is None:
                base = row
            dk = row["kernels"] - base["kernels"]
            row["fd_k"] = (row["fds"] - base["fds"]) / dk if dk else row["fds"] / row["kernels"]
            row["rss_k"] = (row["rss"] - base["rss"]) / dk if dk else float("nan")
            row["avail_k"] = (base["avail"] - row["avail"]) / dk if dk else float("nan")
            row["ratio"] = row["p50"] / base["p50"]
            rows.append(row)
            print_row(row, len(rows) == 1)
            if not gw.alive():
                raise B.BenchError("kgw died:\n" + gw.log_tail())
        if refusal is None and kids:  # one over --max: the gateway's own refusal
            st, body, _ = create(gw)
            if st == 201:
                kids.append(body["id"])
                log(f"  kernel {len(kids)} (over --max) was accepted")
            elif st == 503:
                refusal = body
            else:
                raise B.BenchError(f"POST /api/kernels over --max -> {st} {body}")
    finally:
        if probe:
            probe.close()
        rc, took = gw.stop()
        log(f"  kgw stopped (rc {rc}) in {took:.1f} s with {len(kids)} kernels")
    if refusal is not None:
        log(f"  kernel {len(kids) + 1} refused: 503 {json.dumps(refusal)[:300]}")
    else:
        log(f"  no refusal up to --max {args.max} and one more")
    return rows, refusal


def soft_nofile(pid):
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return -1


def print_row(r, head):
    if head:
        log(f"  {'kernels':>7} {'idle CPU':>9} {'rtt p50':>8} {'p99':>7} {'x step1':>7} "
            f"{'fds':>6} {'fd/k':>5} {'RSS MiB':>8} {'MiB/k':>6} {'avail/k':>7} {'create/s':>8}")
    log(f"  {r['kernels']:7d} {r['cpu']:8.2f}% {r['p50']:7.2f}ms {r['p99']:6.2f}ms "
        f"{r['ratio']:6.2f}x {r['fds']:6d} {r['fd_k']:5.1f} {r['rss']:8.1f} {r['rss_k']:6.3f} "
        f"{r['avail_k']:7.1f} {r['rate']:8.1f}")


# ------------------------------------------------------------------------------ hostile

async def run_hostile(port, token, kid, code, timeout):
    """Runs code on kernel kid through a websocket read as fast as the client reads: the
    execute_reply status (or ename) and whether the idle came, bytes received."""
    session = uuid.uuid4().hex
    url = f"ws://127.0.0.1:{port}/api/kernels/{kid}/channels?session_id={session}"
    msg = B.new_msg("execute_request", session, B.exec_content(code))
    got, reply, idle = 0, None, False
    async with websockets.connect(url, max_size=None, extra_headers={
            "Authorization": f"token {token}"}, open_timeout=30) as ws:
        await ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                return "no outcome (timeout)", got
            data = await asyncio.wait_for(ws.recv(), left)
            got += len(data)
            m = json.loads(data)
            if m.get("parent_header", {}).get("msg_id") != msg["msg_id"]:
                continue
            mt = m["header"]["msg_type"]
            if mt == "execute_reply":
                c = m["content"]
                reply = c["status"] if c["status"] == "ok" else f"{c['status']}:{c.get('ename')}"
            elif mt == "status" and m["content"].get("execution_state") == "idle":
                idle = True
    return reply, got


def quiet_tenant(gw, token, kid, stop, out):
    """Tenant B's round trips while the attack runs: latencies, and any that failed."""
    gw_b = type("G", (), {"port": gw.port, "token": token})()
    c = B.KgwClient(gw_b, kid, "legacy")
    try:
        B.settle(c, now() + 30)
        while not stop.is_set():
            try:
                out["lat"].append(B.rtt_once(c, now() + 30))
            except Exception as e:  # noqa: BLE001  (counted, reported)
                out["lost"].append(repr(e)[:200])
                break
    finally:
        c.close()


def hostile(args, workdir, reaper, run):
    keys, path = keyfile(args.kgw, workdir, ["a", "b"])
    extra = ["--key-file", path, "--pool", "python3=0", "--fork-server", "--rate-limit", "0",
             "--log-level", "warn", *args.kgw_arg]
    gw = B.Gateway(args.kgw, workdir, reaper, extra, name=f"kgw-hostile-{run}")
    try:
        kids = []
        for _ in range(2 * len(HOSTILE)):
            st, body, _ = create(gw, keys["a"])
            if st != 201:
                raise B.BenchError(f"tenant a: POST /api/kernels -> {st} {body}")
            kids.append(body["id"])
        st, body, _ = create(gw, keys["b"])
        if st != 201:
            raise B.BenchError(f"tenant b: POST /api/kernels -> {st} {body}")
        kid_b = body["id"]
        reaper.track_children(gw.pid, "kgw-kernel")
        B.reset_hwm(gw.pid)
        stop, quiet = threading.Event(), {"lat": [], "lost": []}
        qt = threading.Thread(target=quiet_tenant, args=(gw, keys["b"], kid_b, stop, quiet))
        qt.start()
        time.sleep(1)
        codes = [c for c in HOSTILE.values() for _ in range(2)]
        names = [n for n in HOSTILE for _ in range(2)]

        async def attack():
            return await asyncio.gather(
                *(run_hostile(gw.port, keys["a"], k, c, args.hostile_timeout)
                  for k, c in zip(kids, codes)), return_exceptions=True)
        t0 = now()
        results = asyncio.run(attack())
        took = now() - t0
        time.sleep(1)
        stop.set()
        qt.join(60)
        _, hwm = gw.rss()
        outcomes = []
        for n, r in zip(names, results):
            if isinstance(r, BaseException):
                outcomes.append((n, f"client error {r!r}"[:120], 0))
            else:
                outcomes.append((n, r[0], r[1]))
        lat = quiet["lat"]
        log(f"  run {run}: gateway VmHWM {hwm:.0f} MiB; attack {took:.1f} s; quiet tenant "
            f"{len(lat)} round trips, p50 {B.pct(lat, 50) * 1e3 if lat else float('nan'):.1f} ms "
            f"p99 {B.pct(lat, 99) * 1e3 if lat else float('nan'):.1f} ms, "
            f"{'lost: ' + '; '.join(quiet['lost']) if quiet['lost'] else 'nothing lost'}")
        for n, o, got in outcomes:
            log(f"      {n:18s} {o:32s} {got / 2**20:8.1f} MiB received")
        ok = all(o and not o.startswith(("no outcome", "client error")) for _, o, _ in outcomes)
        return hwm, ok and not quiet["lost"]
    finally:
        rc, t = gw.stop()
        log(f"      kgw stopped (rc {rc}) in {t:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgw", default=os.path.join(B.REPO, "build", "kgw"))
    ap.add_argument("--kgw-arg", action="append", default=[], help="extra kgw argument")
    ap.add_argument("--only", default="density,hostile")
    ap.add_argument("--steps", default=DEFAULT_STEPS, help="kernel counts to measure at")
    ap.add_argument("--step-after", type=int, default=200,
                    help="after --steps, add this many kernels a step until refused")
    ap.add_argument("--max", type=int, default=1500, help="stop here even if not refused")
    ap.add_argument("--concurrency", type=int, default=4, help="creates in flight")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before measuring idle")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--rtt", type=int, default=200, help="round trips per step")
    ap.add_argument("--hostile-runs", type=int, default=5)
    ap.add_argument("--hostile-timeout", type=float, default=180.0)
    ap.add_argument("--time-limit", type=float, default=1800.0)
    args = ap.parse_args()
    only = set(args.only.split(","))
    reaper = B.Reaper()
    workdir = tempfile.mkdtemp(prefix="kgw-density-")
    os.chmod(workdir, 0o711)  # sandboxed kernels (other uids) reach the runtime directory

    def on_alarm(*_):
        raise B.BenchTimeout()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_alarm)
    signal.alarm(int(args.time_limit))
    rc = 0
    try:
        if "density" in only:
            density(args, workdir, reaper)
        if "hostile" in only:
            log(f"hostile output: {args.hostile_runs} runs")
            hwms, good = [], True
            for run in range(1, args.hostile_runs + 1):
                hwm, ok = hostile(args, workdir, reaper, run)
                hwms.append(hwm)
                good &= ok
            log(f"  gateway VmHWM per run (MiB): {', '.join(f'{h:.0f}' for h in hwms)}; "
                f"max {max(hwms):.0f}, median {statistics.median(hwms):.0f}; "
                f"{'every execution had an outcome, B lost nothing' if good else 'NOT all outcomes / B lost some'}")
            rc = 0 if good else 3
    except B.BenchTimeout:
        log(f"time limit ({args.time_limit:.0f} s) reached")
        rc = 1
    except B.BenchError as e:
        log(f"error: {e}")
        rc = 1
    finally:
        signal.alarm(0)
        left = reaper.kill_all()
        if left:
            log(f"killed {len(left)} leftover processes of this run")
    return rc


if __name__ == "__main__":
    sys.exit(main())
