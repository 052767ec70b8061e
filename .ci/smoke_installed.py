"""The Debian package's kgw, run from where `dpkg-deb -x` unpacked it (ROOT): its helpers and
kgw_tools are named by the variables the service's /etc/default/kgw would hold, since the tree
is not at its prefix. As the unit runs it: a key file made by the installed `kgw keygen`, a
NOTIFY_SOCKET (READY=1 once listening, STOPPING=1 at SIGTERM), SIGHUP to reload the keys. It
waits for the fork server and the warm pool, creates a kernel, runs 1+1 through its websocket,
scrapes GET /metrics with a key (it must answer 200), and stops kgw by its PID.
Usage: smoke_installed.py ROOT. Exit status 0 only if all of it held."""
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_run import free_port, one_plus_one, stop  # noqa: E402  as the run check does

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE_S = 120


def fail(msg, log_path=None):
    if log_path:
        msg += "\n--- kgw's log ---\n" + open(log_path, errors="replace").read()
    sys.exit("smoke_installed: " + msg)


def get(url, key=None, method="GET", body=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, method=method, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def keygen(kgw, tenant):
    out = subprocess.run([kgw, "keygen", "--tenant", tenant], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    if len(out) != 2 or not out[1].startswith(tenant + " "):
        fail(f"kgw keygen printed {out!r}")
    return out[0], out[1]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    kgw = os.path.join(root, "usr/bin/kgw")
    for f in ("usr/bin/kgw", "usr/libexec/kgw/kgw-sandbox-init", "usr/libexec/kgw/kgw-zygote",
              "usr/share/kgw/python/kgw_tools.py", "usr/share/kgw/python/kgw_ckpt.py",
              "usr/share/kgw/python/kgw_keeper.py", "usr/share/kgw/python/kgw_frame.py",
              "usr/share/kgw/python/kgw_e2b.py",
              "usr/share/man/man1/kgw.1.gz",
              "lib/systemd/system/kgw.service", "etc/default/kgw"):
        if not os.path.exists(os.path.join(root, f)):
            fail(f"the package has no /{f}")
    version = subprocess.run([kgw, "--version"], capture_output=True, text=True).stdout.strip()

    scratch = tempfile.mkdtemp(prefix="kgw-smoke-")
    key, line = keygen(kgw, "ci")
    key_file = os.path.join(scratch, "keys")
    with open(key_file, "w") as f:
        f.write(line + "\n")
    notify_path = os.path.join(scratch, "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(DEADLINE_S)

    port = free_port()
    base, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGW_")}
    env.update(KGW_KEY_FILE=key_file, NOTIFY_SOCKET=notify_path, KGW_PORT=str(port),
               KGW_SANDBOX_INIT=os.path.join(root, "usr/libexec/kgw/kgw-sandbox-init"),
               KGW_FORK_SERVER_EXE=os.path.join(root, "usr/libexec/kgw/kgw-zygote"),
               KGW_PYTHON_PATH=os.path.join(root, "usr/share/kgw/python"))
    log_path = os.path.join(scratch, "kgw.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([kgw], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    text = lambda: open(log_path, errors="replace").read()  # noqa: E731

    def wait_for(pred, what):
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                fail(f"kgw exited ({proc.returncode}) while waiting for {what}", log_path)
            if pred():
                return
            time.sleep(0.1)
        fail(f"no {what} after {DEADLINE_S} s", log_path)

    try:
        ready = notify.recv(4096).decode()
        if not ready.startswith("READY=1"):
            fail(f"the service manager was told {ready!r}, not READY=1", log_path)
        if get(base + "/api")[0] != 200:
            fail("READY=1 came before GET /api answered", log_path)
        wait_for(lambda: "fork server: ready" in text(), "'fork server: ready' in the log")
        wait_for(lambda: "pool: python3 filled" in text(), "'pool: python3 filled' in the log")
        for bad in ("cannot open", "kernels start with exec", "sandbox: disabled",
                    "sandbox unavailable"):
            if bad in text():
                fail(f"the start-up log says '{bad}'", log_path)

        status, _, body = get(base + "/api/kernels", key, "POST", {"name": "python3"})
        if status != 201:
            fail(f"POST /api/kernels: {status} {body[:200]!r}", log_path)
        kid = json.loads(body)["id"]
        result, reply = asyncio.run(one_plus_one(ws_url, key, kid))
        if (result, reply) != ("2", "ok"):
            fail(f"1+1 gave {result!r} ({reply})", log_path)
        status, _, _ = get(f"{base}/api/kernels/{kid}", key, "DELETE")
        if status != 204:
            fail(f"DELETE /api/kernels/{kid}: {status}", log_path)

        # ExecReload: a key added to the file works after SIGHUP
        key2, line2 = keygen(kgw, "ops")
        if get(base + "/api/kernels", key2)[0] != 401:
            fail("a key not yet in the key file was accepted", log_path)
        with open(key_file, "a") as f:
            f.write(line2 + "\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: get(base + "/api/kernels", key2)[0] == 200, "the reloaded key")

        # what Prometheus scrapes (deploy/prometheus/kgw-alerts.yml)
        status, headers, body = get(base + "/metrics", key)
        if status != 200:
            fail(f"GET /metrics with a key answered {status}, not 200: {body[:200]!r}", log_path)
        metrics = body.decode(errors="replace")
        if not headers.get("Content-Type", "").startswith("text/plain") or "kgw_" not in metrics:
            fail(f"GET /metrics is not Prometheus text: {headers.get('Content-Type')!r} "
                 f"{metrics[:200]!r}", log_path)
        with open(os.path.join(REPO, "deploy/prometheus/kgw-alerts.yml")) as f:
            alerted = set(re.findall(r"\b(kgw_[a-z_]+?)(?:_bucket)?\b", f.read()))
        absent = sorted(m for m in alerted if m not in metrics)
        if absent:
            fail(f"metrics the alert rules name are not in /metrics: {absent}", log_path)

        proc.send_signal(signal.SIGTERM)
        stopping = notify.recv(4096).decode()
        if not stopping.startswith("STOPPING=1"):
            fail(f"after SIGTERM the service manager was told {stopping!r}", log_path)
        try:
            rc = proc.wait(timeout=60)  # the unit's TimeoutStopSec
        except subprocess.TimeoutExpired:
            fail("kgw did not stop within 60 s of SIGTERM", log_path)
        if rc != 0:
            fail(f"kgw exited with {rc} after SIGTERM", log_path)
    finally:
        stop(proc, 60)  # after a failed check: as the unit would, SIGTERM then SIGKILL
        notify.close()
    print(f"smoke_installed: {version} from {root}: READY=1, fork server and pool ready, "
          f"1+1 = 2, a key reloaded by SIGHUP, /metrics 200, STOPPING=1 and exit 0 on SIGTERM "
          f"(log {log_path})")


if __name__ == "__main__":
    main()
