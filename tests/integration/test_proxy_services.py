"""Real-client test: @jupyterlab/services (the library JupyterLab uses) from Node, against the
server under test.  The client itself lives in tests/node/services_client.mjs; it lists
kernelspecs, starts a python3 kernel, executes, answers stdin, exchanges display_data and comm
messages, interrupts, restarts and shuts down, and exits 0 only if every check passed.

Needs `node` (>= 20) and `npm ci` run in tests/node (CI does that); skipped otherwise.
"""
import os
import shutil
import signal
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(os.path.dirname(HERE), "node")
CLIENT = os.path.join(NODE_DIR, "services_client.mjs")
NODE = shutil.which("node")
CLIENT_TIMEOUT_S = 45  # the client is given a 35 s global timeout (its default is 60 s)


def _node_skip_reason():
    if NODE is None:
        return "node is not on PATH"
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@jupyterlab", "services")) or \
            not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ws")):
        return f"tests/node/node_modules missing: run `npm ci` in {NODE_DIR}"
    return None


pytestmark = pytest.mark.skipif(_node_skip_reason() is not None,
                                reason=_node_skip_reason() or "")


def run_services_client(base_url, token, protocol="auto"):
    """Run the Node client; returns (returncode, combined output). Always reaps the process."""
    env = dict(os.environ, KGW_WS_PROTOCOL=protocol, KGW_CLIENT_TIMEOUT_MS="35000")
    env.pop("KGW_URL", None)
    env.pop("KGW_TOKEN", None)
    proc = subprocess.Popen([NODE, CLIENT, base_url, token], cwd=NODE_DIR, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=CLIENT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out += f"\n[test] services_client.mjs killed after {CLIENT_TIMEOUT_S}s"
        return -signal.SIGKILL, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out


# auto: offer v1.kernel.websocket.jupyter.org as JupyterLab 4 does (server may pick it or fall
#       back to legacy); legacy: offer no subprotocol (JSON text frames with "channel").
@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_jupyterlab_services_client(gateway, protocol):
    rc, out = run_services_client(gateway.url, gateway.token, protocol)
    print(out)
    assert rc == 0 and "PASS:" in out, (
        f"services_client.mjs ({protocol}) exited {rc}:\n{out}\n----- server log (tail) -----\n"
        + gateway.log()[-15000:])
    # The client shut its kernel down; nothing may be left behind.
    status, kernels, _ = gateway.request("GET", "/api/kernels")
    assert status == 200 and kernels == [], (status, kernels)


def test_services_client_rejects_bad_token(gateway):
    """Sanity check of the harness: a wrong token must make the client fail, quickly."""
    rc, out = run_services_client(gateway.url, "not-the-token")
    assert rc == 1 and "FAIL" in out, (rc, out)
