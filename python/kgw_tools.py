"""Show results to the user of this kernel: callbacks from kernel code to the gateway's client.

    import kgw_tools
    kgw_tools.display_dataframe_to_user("Sales by region", df)
    kgw_tools.display_chart_to_user(title="Monthly revenue", chart_type="bar")  # current figure
    kgw_tools.call_function("display_chart_to_user", ["/mnt/data/plot.png"], {"title": "t"})

Each call blocks until the client that started the running execution answers, and returns its
answer (or raises the exception it sent). The gateway forwards only the callback names on its
allowlist (by default the three display_* functions below), checks that the arguments are JSON
of bounded size, and gives up after its timeout (TimeoutError). Outside a kgw kernel, or when
no client listens, the call raises an exception; nothing here is needed for the kernel to work.

Shipped with kgw and importable in every kgw kernel. Standard library only at import; pandas
and matplotlib are imported when a function needs them.
"""
import json
import math
import os
import re
import socket
import struct

__all__ = [
    "call_function",
    "display_dataframe_to_user",
    "display_chart_to_user",
    "display_matplotlib_image_to_user",
]

#: The callback socket in kgw's sandbox (the kernel's private runtime directory); the gateway
#: sets KGW_CALLBACK_SOCKET for kernels it runs unsandboxed.
SOCKET_PATH = "/run/kernel/callback"
#: Largest reply accepted from the gateway (its own limit is lower).
MAX_REPLY_BYTES = 256 * 1024 * 1024
#: Rows, columns and characters per cell of the preview sent with a dataframe.
PREVIEW_ROWS, PREVIEW_COLUMNS, PREVIEW_CELL_CHARS = 20, 50, 200

# Exceptions the gateway or the client may name. Anything else becomes a RuntimeError: a
# name from the other side is never looked up anywhere.
_EXCEPTIONS = {
    e.__name__: e
    for e in (
        ArithmeticError, AssertionError, AttributeError, ConnectionError, FileExistsError,
        FileNotFoundError, IndexError, KeyError, LookupError, NotImplementedError, OSError,
        OverflowError, PermissionError, RuntimeError, TimeoutError, TypeError, ValueError,
    )
}

_HEADER = struct.Struct(">I")


def _raise(error):
    etype = error.get("type") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        message = "callback failed"
    cls = _EXCEPTIONS.get(etype) if isinstance(etype, str) else None
    if cls is None:
        cls = RuntimeError
        if isinstance(etype, str) and etype:
            message = f"{etype[:64]}: {message}"
    raise cls(message)


def _recv_exact(sock, n):
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("the gateway closed the callback connection without a reply")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _parent_msg_id():
    """The execution this kernel believes it is running: a hint the gateway uses only to wait
    for its own view of the kernel to catch up, never to route the call."""
    try:
        from IPython import get_ipython
        ip = get_ipython()
        msg_id = ip.kernel.get_parent("shell")["header"]["msg_id"]
    except Exception:
        return None
    return msg_id if isinstance(msg_id, str) and 0 < len(msg_id) <= 127 else None


def call_function(name, args=None, kwargs=None):
    """Calls the callback `name` on the client of the running execution and returns its answer.

    args (a list) and kwargs (a dict with str keys) must be JSON-serialisable. Raises
    PermissionError for a name the gateway does not allow, ValueError for arguments that are
    too large, TimeoutError when the client does not answer in time, and the exception the
    client sent back when it fails.
    """
    if not isinstance(name, str):
        raise TypeError("name must be a str")
    args = [] if args is None else args
    kwargs = {} if kwargs is None else kwargs
    if isinstance(args, tuple):
        args = list(args)
    if not isinstance(args, list):
        raise TypeError("args must be a list")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError("kwargs must be a dict with str keys")
    request = {"name": name, "args": args, "kwargs": kwargs}
    parent = _parent_msg_id()
    if parent:
        request["parent"] = parent
    try:
        payload = json.dumps(request, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise TypeError(f"callback arguments must be JSON-serialisable: {e}") from None
    if len(payload) > 0xFFFFFFFF:
        raise ValueError("callback arguments are too large")

    path = os.environ.get("KGW_CALLBACK_SOCKET") or SOCKET_PATH
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
        except OSError as e:
            raise RuntimeError(
                f"kgw callbacks are not available here (cannot connect to {path}: "
                f"{e.strerror or e})"
            ) from None
        try:
            sock.sendall(_HEADER.pack(len(payload)) + payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway may have answered before it closed: read that
        (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
        if n > MAX_REPLY_BYTES:
            raise ConnectionError(f"callback reply of {n} bytes is too large")
        reply = json.loads(_recv_exact(sock, n).decode("utf-8"))
    finally:
        sock.close()
    if not isinstance(reply, dict):
        raise RuntimeError("malformed callback reply")
    if "error" in reply:
        _raise(reply["error"])
    return reply.get("value")


# ---- the display callbacks ----


def _output_dir():
    """The workspace (/mnt/data in kgw's sandbox), else the working directory."""
    return "/mnt/data" if os.path.isdir("/mnt/data") else os.getcwd()


def _safe_name(text, default, suffix):
    """A file name made of [A-Za-z0-9._-] from text, at most 100 characters before suffix."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._-")[:100].rstrip("._-")
    return (base or default) + suffix


def _cell(v):
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        try:
            v = v.item()
        except Exception:
            pass
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else str(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        return v[:PREVIEW_CELL_CHARS]
    return str(v)[:PREVIEW_CELL_CHARS]


def _preview(df):
    ncols = len(df.columns)
    head = df.iloc[:PREVIEW_ROWS, :PREVIEW_COLUMNS]
    return {
        "columns": [str(c)[:PREVIEW_CELL_CHARS] for c in head.columns],
        "rows": [[_cell(v) for v in row] for row in head.itertuples(index=False, name=None)],
        "total_rows": int(len(df)),
        "total_columns": int(ncols),
    }


def display_dataframe_to_user(name, dataframe):
    """Shows a pandas DataFrame to the user: writes it as CSV into the workspace (file name
    derived from `name`) and calls the display_dataframe_to_user callback with
    {"path", "title", "preview"} (preview: columns and the first rows, bounded)."""
    if not isinstance(name, str):
        raise TypeError("name must be a str")
    if not (hasattr(dataframe, "to_csv") and hasattr(dataframe, "iloc")):
        raise TypeError("dataframe must be a pandas DataFrame")
    path = os.path.join(_output_dir(), _safe_name(name, "dataframe", ".csv"))
    index = type(dataframe.index).__name__ != "RangeIndex"
    dataframe.to_csv(path, index=index)
    return call_function(
        "display_dataframe_to_user",
        [],
        {"path": path, "title": name, "preview": _preview(dataframe)},
    )


def display_chart_to_user(path=None, title="", chart_type=""):
    """Shows a chart image to the user. path: an image file; None saves the current
    matplotlib figure as a PNG in the workspace (file name derived from the title)."""
    if not isinstance(title, str) or not isinstance(chart_type, str):
        raise TypeError("title and chart_type must be str")
    if path is None:
        import matplotlib.pyplot as plt

        path = os.path.join(_output_dir(), _safe_name(title, "chart", ".png"))
        plt.gcf().savefig(path)
    path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError("path must be a str")
    return call_function(
        "display_chart_to_user", [], {"path": path, "title": title, "chart_type": chart_type}
    )


def display_matplotlib_image_to_user(title, reason="", exception_ids=()):
    """Tells the user about the matplotlib image just shown (title, why it was made, and the
    ids of exceptions it relates to)."""
    if not isinstance(title, str) or not isinstance(reason, str):
        raise TypeError("title and reason must be str")
    ids = [str(i) for i in exception_ids]
    return call_function(
        "display_matplotlib_image_to_user",
        [],
        {"title": title, "reason": reason, "exception_ids": ids},
    )
