"""kgw restarted behind a listening socket it is given (systemd's socket activation, as a
kgw.socket unit does it): the socket outlives each kgw, so connections made while none runs
wait in its backlog and no client is refused, whether kgw stopped by SIGTERM or was killed."""
import errno
import http.client
import os
import secrets
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import conftest
from conftest import Gateway, _wait_ready

pytestmark = pytest.mark.kgw_only

# LISTEN_PID must be kgw's own pid: the shell's, which kgw keeps through the execs
ACTIVATE = ["/bin/sh", "-c", 'export LISTEN_FDS=1 LISTEN_PID=$$; exec "$@"', "sh"]


def listening_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


def start_activated(sock, token, extra=()):
    """kgw with sock as its descriptor 3, as the service manager passes it."""
    port = sock.getsockname()[1]
    log = tempfile.NamedTemporaryFile(prefix="kgw-test-", suffix=".log", delete=False)
    argv = [*ACTIVATE, *shlex.split(os.environ.get("KGW_WRAPPER", "")), conftest.KGW_BIN,
            "--ip", "127.0.0.1", "--port", str(port), "--api-key", token,
            "--log-level", "info", "--pool", "python3=0",
            *shlex.split(os.environ.get("KGW_EXTRA_ARGS", "")), *extra]
    fd = sock.fileno()

    def as_fd3():
        os.dup2(fd, 3)  # dup2 clears close-on-exec on the copy

    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, pass_fds=(fd, 3),
                            preexec_fn=as_fd3, start_new_session=True)
    gw = Gateway(proc, port, token, log.name)
    _wait_ready(gw)
    return gw


class Loop(threading.Thread):
    """GET /api in a loop on new connections; counts answers, refusals and other failures."""

    def __init__(self, port, token):
        super().__init__(daemon=True)
        self.port, self.token = port, token
        self.stop = threading.Event()
        self.ok, self.refused, self.other = 0, 0, []

    def run(self):
        while not self.stop.is_set():
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                c.request("GET", "/api", headers={"Authorization": f"token {self.token}"})
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    self.ok += 1
                else:
                    self.other.append(r.status)
            except ConnectionRefusedError:
                self.refused += 1
            except OSError as e:
                # a connection the stopping kgw had taken but not answered: reset or closed;
                # the client sends it again, as HTTP clients do on an idempotent request
                self.other.append(errno.errorcode.get(e.errno, str(e)))
            except http.client.HTTPException as e:
                self.other.append(type(e).__name__)
            finally:
                c.close()
            time.sleep(0.005)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_restart_refuses_no_connection(how):
    sock = listening_socket()
    token = secrets.token_hex(16)
    gws = [start_activated(sock, token)]
    try:
        assert "the socket kgw was given" in gws[0].log(), gws[0].log()
        loop = Loop(sock.getsockname()[1], token)
        loop.start()
        time.sleep(0.5)
        before = loop.ok
        assert before > 0
        gws[0].proc.send_signal(getattr(signal, how))
        gws[0].proc.wait(timeout=30)
        # a moment with no kgw at all: connections wait in the socket's backlog
        time.sleep(0.5)
        during = loop.ok
        gws.append(start_activated(sock, token))
        time.sleep(0.5)
        loop.stop.set()
        loop.join(60)
        assert loop.refused == 0, f"{loop.refused} connections refused"
        assert loop.ok > during >= before, (before, during, loop.ok)
        # at most the one connection the first kgw held when it went
        assert len(loop.other) <= 1, loop.other
    finally:
        for g in gws:
            conftest.stop_gateway(g) if g.proc.poll() is None else None
        sock.close()


def test_socket_for_another_address_is_closed():
    """A socket passed in that is not for --ip/--port is closed (logged), and kgw listens on
    its own."""
    other = listening_socket()
    token = secrets.token_hex(16)
    port = conftest.free_port()
    log = tempfile.NamedTemporaryFile(prefix="kgw-test-", suffix=".log", delete=False)
    fd = other.fileno()
    proc = subprocess.Popen([*ACTIVATE, conftest.KGW_BIN, "--ip", "127.0.0.1", "--port", str(port),
                             "--api-key", token, "--pool", "python3=0",
                             *shlex.split(os.environ.get("KGW_EXTRA_ARGS", ""))],
                            stdout=log, stderr=subprocess.STDOUT, pass_fds=(fd, 3),
                            preexec_fn=lambda: os.dup2(fd, 3), start_new_session=True)
    gw = Gateway(proc, port, token, log.name)
    try:
        _wait_ready(gw)
        assert "is not for --ip/--port" in gw.log(), gw.log()
        assert gw.request("GET", "/api")[0] == 200
    finally:
        conftest.stop_gateway(gw)
        other.close()
