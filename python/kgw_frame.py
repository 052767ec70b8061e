"""The frames of checkpoints' sockets and pipes (docs/checkpoints.md, "The mechanism").

kgw_ckpt.py (the live kernel, its checkpoint processes, the processes they revive) and
kgw_keeper.py (the keeper) talk over Unix stream sockets and pipes, where one recv() or read()
may return part of a message, or parts of two. Every message is one frame: a 4-byte big-endian
length, then that many bytes of UTF-8 JSON, an object. A frame is read whole (a loop until it
is complete), and refused past MAX_FRAME bytes, before anything is read into memory.

The gateway reads none of these: its requests to the kernel are Jupyter messages on the
shell channel (ZeroMQ delivers them whole), and the one file it reads, <runtime dir>/.kgw-live,
it reads to its end (kernelmgr/kckpt.c, live_read).
"""
import json
import os
import struct
import time

MAX_FRAME = 4096  # bytes of a frame's JSON: a command (a connection file's path), an answer
_HEAD = struct.Struct(">I")


class FrameError(ValueError):
    """A frame that is not one: cut short, over MAX_FRAME, or not a JSON object."""


def encode(obj):
    """obj (a dict) as a frame's bytes; FrameError when it is over MAX_FRAME."""
    body = json.dumps(obj).encode()
    if len(body) > MAX_FRAME:
        raise FrameError("a frame of %d bytes (at most %d)" % (len(body), MAX_FRAME))
    return _HEAD.pack(len(body)) + body


def send(dst, obj):
    """Writes obj as one frame to dst: a socket, or a descriptor (a pipe's write end), every
    byte of it (a pipe may take part of a write)."""
    data = encode(obj)
    if not isinstance(dst, int):
        dst.sendall(data)
        return
    view = memoryview(data)
    while view:
        view = view[os.write(dst, view):]


def _read(src, n, deadline):
    """Exactly n bytes from src (a socket: each recv within what is left of the deadline; a
    descriptor: blocking reads). FrameError at the end of the stream before n."""
    chunks, got = [], 0
    while got < n:
        if isinstance(src, int):
            b = os.read(src, n - got)
        else:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no whole frame in time")
                src.settimeout(left)
            b = src.recv(n - got)
        if not b:
            raise FrameError("the stream ended %s" % ("before a frame" if got == 0 and
                                                       n == _HEAD.size else "inside a frame"))
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def recv(src, timeout=None):
    """The next frame's object from src (a socket or a descriptor), read whole. timeout: seconds
    for the whole frame on a socket (None: the socket's own timeout for each recv). Raises
    FrameError (a ValueError), or OSError (TimeoutError included)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (n,) = _HEAD.unpack(_read(src, _HEAD.size, deadline))
    if n > MAX_FRAME:
        raise FrameError("a frame of %d bytes announced (at most %d)" % (n, MAX_FRAME))
    try:
        obj = json.loads(_read(src, n, deadline))
    except UnicodeDecodeError as e:  # (a ValueError, not a JSONDecodeError)
        raise FrameError("a frame that is not UTF-8: %s" % e) from None
    except json.JSONDecodeError as e:
        raise FrameError("a frame that is not JSON: %s" % e) from None
    if not isinstance(obj, dict):
        raise FrameError("a frame that is not a JSON object")
    return obj
