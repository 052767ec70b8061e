"""The README's run command, checked as a new user meets it: starts ./scripts/run.sh on a free
loopback port, building into a build directory of its own (build-run: what run.sh alone builds,
not what the test build left behind), waits for /api, requires the start-up log to report the fork server ready and
the warm pool filled, creates a kernel, runs 1+1 through its websocket, deletes it and stops
the gateway (SIGTERM to the PID this script started). Exit status 0 only if all of it held."""
import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "examples"))
import kgwclient as K  # noqa: E402  (the example client's messages, encoding, REST, connect)

DEADLINE_S = 120  # after the build


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_plus_one(base, token, kid):
    session = uuid.uuid4().hex
    async with K.connect(base, token, kid, "legacy", session) as ws:
        msg = K.make_msg("execute_request", {
            "code": "1+1", "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True}, session=session, username="ci")
        msg_id = msg["msg_id"]
        await ws.send(K.encode_legacy(msg))
        result, reply = None, None
        while result is None or reply is None:
            m = K.decode_legacy(await asyncio.wait_for(ws.recv(), 30))
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "execute_result":
                result = m["content"]["data"]["text/plain"]
            elif m["msg_type"] == "execute_reply":
                reply = m["content"]["status"]
        return result, reply


def wait_for(pred, what, log_path, proc):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"check_run: kgw exited ({proc.returncode}) while waiting for {what}:\n"
                     + open(log_path, errors="replace").read())
        if pred():
            return
        time.sleep(0.1)
    sys.exit(f"check_run: no {what} after {DEADLINE_S} s:\n"
             + open(log_path, errors="replace").read())


def stop(proc, timeout):
    """SIGTERM to proc if it still runs, SIGKILL if it has not ended within timeout seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    port, token = free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="kgw-run-", suffix=".log", delete=False)
    env = dict(os.environ, KGW_API_KEY=token, KGW_BUILD_DIR="build-run")
    proc = subprocess.Popen([os.path.join(REPO, "scripts", "run.sh"), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    text = lambda: open(log.name, errors="replace").read()  # noqa: E731
    try:
        def api_up():
            try:
                with urllib.request.urlopen(base + "/api", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_for(api_up, "answer from /api", log.name, proc)
        wait_for(lambda: "fork server: ready" in text(), "'fork server: ready' in the log",
                 log.name, proc)
        wait_for(lambda: "pool: python3 filled" in text(), "'pool: python3 filled' in the log",
                 log.name, proc)
        for bad in ("cannot open", "kernels start with exec", "sandbox: disabled"):
            if bad in text():
                sys.exit(f"check_run: the start-up log says '{bad}':\n" + text())
        status, model = K.request(base, token, "POST", "/api/kernels", {"name": "python3"})
        assert status == 201, (status, model)
        result, reply = asyncio.run(one_plus_one(base, token, model["id"]))
        if (result, reply) != ("2", "ok"):
            sys.exit(f"check_run: 1+1 gave {result!r} ({reply})\n" + text())
        status, _ = K.request(base, token, "DELETE", f"/api/kernels/{model['id']}")
        assert status == 204, status
    finally:
        stop(proc, 30)
    if proc.returncode not in (0, -signal.SIGTERM):
        sys.exit(f"check_run: kgw exited with {proc.returncode}:\n" + text())
    print(f"check_run: ./scripts/run.sh started kgw with the fork server and a filled pool; "
          f"1+1 = 2; stopped cleanly (log {log.name})")


if __name__ == "__main__":
    main()
