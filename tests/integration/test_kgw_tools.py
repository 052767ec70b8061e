"""kgw_tools on its own: the kernel-side module against a stand-in for the gateway's callback
socket (a thread answering canned frames). Its end-to-end behaviour with the real gateway and a
real kernel is in tests/unit/test_kmgr.c and test_sandbox_work.py."""
import json
import os
import socket
import struct
import sys
import threading

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.dont_write_bytecode = True  # nothing written into the source tree
import kgw_tools  # noqa: E402


class FakeGateway:
    """Accepts connections on a unix socket; answer(request) gives the reply object."""

    def __init__(self, path, answer):
        self.path, self.answer, self.requests = path, answer, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.sock.settimeout(0.05)
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(10)
            with c:
                n = struct.unpack(">I", self.recv(c, 4))[0]
                req = json.loads(self.recv(c, n))
                self.requests.append(req)
                reply = self.answer(req)
                if reply is None:
                    continue  # hang up without answering
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                c.sendall(struct.pack(">I", len(data)) + data)

    @staticmethod
    def recv(c, n):
        b = b""
        while len(b) < n:
            chunk = c.recv(n - len(b))
            if not chunk:
                raise OSError("eof")
            b += chunk
        return b

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    made = []

    def start(answer):
        path = str(tmp_path / "callback")
        monkeypatch.setenv("KGW_CALLBACK_SOCKET", path)
        g = FakeGateway(path, answer)
        made.append(g)
        return g

    yield start
    for g in made:
        g.close()


def test_value_and_request_shape(fake):
    g = fake(lambda req: {"value": {"got": req["name"]}})
    assert kgw_tools.call_function("display_chart_to_user", ("p",), {"title": "t"}) == {
        "got": "display_chart_to_user"}
    req = g.requests[0]
    assert req["args"] == ["p"] and req["kwargs"] == {"title": "t"}
    assert "parent" not in req  # not in a kernel: no hint


@pytest.mark.parametrize("etype, cls", [
    ("PermissionError", PermissionError), ("ValueError", ValueError),
    ("TimeoutError", TimeoutError), ("KeyError", KeyError), ("RuntimeError", RuntimeError),
])
def test_errors_are_mapped(fake, etype, cls):
    fake(lambda req: {"error": {"type": etype, "message": "because"}})
    with pytest.raises(cls) as ei:
        kgw_tools.call_function("f")
    assert "because" in str(ei.value)


@pytest.mark.parametrize("etype", ["SystemExit", "os.system", "__import__", "", None, 7])
def test_unknown_error_types_are_runtime_errors(fake, etype):
    fake(lambda req: {"error": {"type": etype, "message": "m"}})
    with pytest.raises(RuntimeError) as ei:
        kgw_tools.call_function("f")
    assert type(ei.value) is RuntimeError


def test_hang_up_and_garbage(fake):
    fake(lambda req: None)
    with pytest.raises(ConnectionError):
        kgw_tools.call_function("f")


def test_malformed_reply(fake):
    fake(lambda req: b"[1, 2]")
    with pytest.raises(RuntimeError):
        kgw_tools.call_function("f")


def test_no_socket(tmp_path, monkeypatch):
    monkeypatch.setenv("KGW_CALLBACK_SOCKET", str(tmp_path / "nothing-here"))
    with pytest.raises(RuntimeError, match="not available"):
        kgw_tools.call_function("f")


def test_arguments_checked_before_sending(fake):
    g = fake(lambda req: {"value": None})
    for bad in ([float("nan")], [object()]):
        with pytest.raises(TypeError, match="JSON-serialisable"):
            kgw_tools.call_function("f", bad)
    with pytest.raises(TypeError):
        kgw_tools.call_function("f", "not a list")
    with pytest.raises(TypeError):
        kgw_tools.call_function("f", [], {1: "non-str key"})
    with pytest.raises(TypeError):
        kgw_tools.call_function(b"f")
    assert g.requests == []


def test_safe_names():
    assert kgw_tools._safe_name("Sales Q1/2024", "d", ".csv") == "Sales_Q1_2024.csv"
    assert kgw_tools._safe_name("../../etc/passwd", "d", ".csv") == "etc_passwd.csv"
    assert kgw_tools._safe_name("...", "d", ".csv") == "d.csv"
    assert kgw_tools._safe_name("é" * 5, "d", ".csv") == "d.csv"
    assert len(kgw_tools._safe_name("x" * 500, "d", ".csv")) == 104


def test_dataframe(fake, tmp_path, monkeypatch):
    pd = pytest.importorskip("pandas")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(kgw_tools, "_output_dir", lambda: str(tmp_path))
    g = fake(lambda req: {"value": "shown"})
    df = pd.DataFrame({f"c{i}": range(100) for i in range(60)})
    df["c0"] = df["c0"].astype(float)
    df.loc[0, "c0"] = float("nan")
    df["c1"] = ["x" * 1000] * 100
    assert kgw_tools.display_dataframe_to_user("Big one", df) == "shown"
    kw = g.requests[0]["kwargs"]
    assert kw["path"] == str(tmp_path / "Big_one.csv") and kw["title"] == "Big one"
    p = kw["preview"]
    assert (p["total_rows"], p["total_columns"]) == (100, 60)
    assert len(p["columns"]) == 50 and len(p["rows"]) == 20 and len(p["rows"][0]) == 50
    assert p["rows"][0][0] is None and len(p["rows"][0][1]) == 200 and p["rows"][1][2] == 1
    back = pd.read_csv(tmp_path / "Big_one.csv")
    assert back.shape == (100, 60)
    with pytest.raises(TypeError):
        kgw_tools.display_dataframe_to_user("x", [1, 2])


def test_chart_and_image(fake, tmp_path, monkeypatch):
    g = fake(lambda req: {"value": None})
    kgw_tools.display_chart_to_user("/mnt/data/c.png", "T", "bar")
    kgw_tools.display_matplotlib_image_to_user("T", "why", (1, "e2"))
    assert g.requests[0]["kwargs"] == {"path": "/mnt/data/c.png", "title": "T", "chart_type": "bar"}
    assert g.requests[1]["kwargs"] == {"title": "T", "reason": "why", "exception_ids": ["1", "e2"]}
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(kgw_tools, "_output_dir", lambda: str(tmp_path))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.figure()
    plt.plot([1, 2], [3, 4])
    kgw_tools.display_chart_to_user(title="My chart", chart_type="line")
    assert g.requests[2]["kwargs"]["path"] == str(tmp_path / "My_chart.png")
    assert (tmp_path / "My_chart.png").read_bytes().startswith(b"\x89PNG")
