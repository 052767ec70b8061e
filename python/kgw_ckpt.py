"""Checkpoints of this kernel's interpreter, taken and restored by the gateway
(docs/checkpoints.md).

Not for kernel code: the gateway installs these handlers (a silent execution of install()) and
is the only one that can send the requests they answer (it signs them with the kernel's key and
refuses clients' messages of these types).

A checkpoint is a child of the kernel, forked between two shell requests: it copies (on write)
the whole interpreter, then closes every descriptor it inherited (ZeroMQ sockets, the event
loop, files), keeps a copy of the workspace's files if asked, and waits, frozen, on a Unix
socket in the kernel's runtime directory. A rollback asks it to fork again: that grandchild
drops what is left of the old kernel (its threads did not survive the fork), builds a new
IPKernelApp around the same InteractiveShell, and binds the kernel's ipc endpoints again (the
gateway's sockets reconnect). The old kernel process then goes: the first one (the process the
gateway started, whose end ends the kernel) replaces itself with a small keeper that lives as
long as the current kernel process does; a later one exits.
"""
import gc
import json
import os
import re
import signal
import socket
import sys
import time

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_FILES = 10000  # files kept per checkpoint
MAX_CMD = 4096  # bytes of a command on a checkpoint's socket
_main_pid = None  # the process the gateway started (set by its first install())
_kids = {}  # checkpoint id -> pid, for those this process forked (reaped when dropped)
# Every earlier generation's application, kernel and loop (the process the gateway started,
# then each one revived): referenced for good, never finalised, since finalisers (a zmq
# Context's destroy, a loop's close) would close descriptor numbers a later generation reuses.
_graveyard = []
# The descriptors of this generation's own machinery (its loop, ZeroMQ context, sockets and
# connections, output pipes, history database: what _revive started, and what those opened
# since outside cells), worked out at each fork (_machinery); they are the /dev/null
# placeholders a kernel revived from that fork closes. None in the process the gateway
# started (not known: its placeholders stay, once). Descriptors opened during a cell are the
# user's: they stay placeholders for good (user objects may close "theirs" later).
_infra = None
_headroom_ref = None  # Python frames left at the first revival (see _keep_headroom)
_before = None  # the descriptors open when this generation began (None: the first)
# Those opened during this generation's cells: number -> (device, inode), so that a number a
# cell's descriptor held for a moment (closed since, and reused by the machinery) is not the
# user's at the next fork
_user = {}
_cell = None  # the descriptors open when the running cell began
_KEEPER = r"""
import json, os, select, socket, sys, time
path = sys.argv[1]
rundir = os.path.dirname(path)
try:  # the kernel's orphans (checkpoints whose live kernel ended) come here, not beyond
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
def live():
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0
def revive():
    # the live kernel died (no rollback replaced it): a new one from the newest checkpoint
    # that answers (the gateway sees the death, and waits for this one's answers)
    socks = []
    for name in os.listdir(rundir):
        if name.startswith(".c"):  # .ckpt-<id>, or .c<hash> (_sock_path)
            try:
                socks.append((os.lstat(os.path.join(rundir, name)).st_mtime_ns, name))
            except OSError:
                pass
    for _, name in sorted(socks, reverse=True):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(os.path.join(rundir, name))
            s.sendall(b'{"op": "spawn", "files": true}')
            ans = json.loads(s.recv(4096) or b"{}")
            s.close()
        except (OSError, ValueError):
            continue
        if ans.get("ok") and isinstance(ans.get("pid"), int):
            with open(path + ".tmp", "w") as f:
                f.write(str(ans["pid"]))
            os.replace(path + ".tmp", path)
            return True
    return False
revived = []  # when it revived the kernel: a kernel that dies at once is not revived forever
while True:
    pid = live()
    if pid <= 0:  # the live kernel ended as asked (a shutdown): so does the kernel
        sys.exit(0)
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        fd = -1
    # its end (a rollback's process writes the new pid before it goes): no polling, but a
    # look now and then at a replacement whose predecessor is slow to go
    while fd >= 0 and select.select([fd], [], [], 30.0)[0] == []:
        if live() != pid:
            break
    if fd >= 0:
        os.close(fd)
    if live() != pid:
        continue
    now = time.monotonic()
    revived = [t for t in revived if now - t < 30] + [now]
    if len(revived) > 3 or not revive():
        sys.exit(0)
"""


def _app():
    from ipykernel.kernelapp import IPKernelApp
    return IPKernelApp.instance()


def _rundir():
    return os.path.dirname(os.path.abspath(_app().abs_connection_file))


def _sock_path(cid):
    """The checkpoint's socket: <runtime dir>/.ckpt-<id>; where that is over the 107 bytes a
    unix socket's path may have (an unsandboxed kernel under a long --runtime-dir: the
    gateway leaves its kernels room for <dir>/callback only), <runtime dir>/.c<6 hex digits
    of the id's SHA-256> (the keeper looks for both)."""
    d = _rundir()
    path = os.path.join(d, ".ckpt-" + cid)
    if len(os.fsencode(path)) <= 107:
        return path
    import hashlib
    return os.path.join(d, ".c" + hashlib.sha256(cid.encode()).hexdigest()[:6])


def install():
    """Registers the checkpoint handlers on this kernel's shell channel."""
    global _main_pid
    if _main_pid is None:
        _main_pid = os.getpid()
    k = _app().kernel
    ev = getattr(k.shell, "events", None)
    if ev is not None and _pre_cell not in ev.callbacks.get("pre_run_cell", []):
        ev.register("pre_run_cell", _pre_cell)
        ev.register("post_run_cell", _post_cell)
    k.shell_handlers["kgw_checkpoint_request"] = _on_checkpoint
    k.shell_handlers["kgw_rollback_request"] = _on_rollback
    k.shell_handlers["kgw_ckpt_drop_request"] = _on_drop
    k.shell_handlers["kgw_fork_request"] = _on_fork


def _reply(stream, ident, parent, msg_type, content):
    k = _app().kernel
    k.session.send(stream, msg_type, content, parent, ident=ident)


def _error(stream, ident, parent, msg_type, ename, evalue):
    _reply(stream, ident, parent, msg_type,
           {"status": "error", "ename": ename, "evalue": str(evalue)[:500]})


def _std_copies():
    """{1: fd, 2: fd}: the originals of descriptors 1 and 2 that ipykernel's streams saved
    when they redirected them to their own pipes."""
    out = {}
    for fd, st in ((1, sys.stdout), (2, sys.stderr)):
        copy = getattr(st, "_original_stdstream_copy", None)
        if isinstance(copy, int) and copy > 2:
            out[fd] = copy
    return out


def _reroute_logs(fds):
    """Log handlers that write to one of fds, the old kernel's copies of descriptors 1 and 2
    (ipykernel points its application's log at its copy of 2, a FileIO on that number, and the
    logger outlives the application): to sys.__stderr__ again, which the new application
    points at its own copy. The copies are closed next; a handler left on one would write its
    lines into whatever the new generation opens on that number (a ZeroMQ connection: its
    stream corrupted, the kernel cut off). The old stream is kept, never finalised: its FileIO
    would close that number."""
    import logging
    for ref in list(getattr(logging, "_handlerList", ())):
        h = ref()
        st = getattr(h, "stream", None)
        try:
            fd = st.fileno()
        except Exception:
            continue
        if fd in fds:
            _graveyard.append(st)
            h.stream = sys.__stderr__


def _forward(old, name):
    """The old generation's output stream, which user objects may hold (out = sys.stdout; a
    log handler made with it): what it is given goes to the current sys.<name>. Left as it
    was, its flush would send on the old I/O thread's ZeroMQ socket, whose libzmq signals
    its peers through descriptor numbers the new generation has reused (and the text would
    be lost)."""
    def write(s):
        return getattr(sys, name).write(s)

    def flush():
        getattr(sys, name).flush()

    def writelines(lines):
        for line in lines:
            write(line)

    try:
        from ipykernel.iostream import OutStream
        if not isinstance(old, OutStream):
            return  # (not ipykernel's: the user's own, left alone)
        old.write, old.flush, old.writelines = write, flush, writelines
        old._flush = lambda: None  # (its own timers and thread are gone)
    except Exception:
        pass


def _snapshot(root):
    """The workspace's files: [(relative path, mode, bytes or None for a directory)]."""
    out, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            out.append((rel, os.lstat(dirpath).st_mode & 0o7777, None))
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if not os.path.isfile(p) or os.path.islink(p):
                continue  # symlinks and special files are not kept
            if len(out) >= MAX_FILES:
                raise OSError("more than %d files in the workspace" % MAX_FILES)
            with open(p, "rb") as f:
                data = f.read()
            total += len(data)
            out.append((os.path.relpath(p, root), st.st_mode & 0o7777, data))
    return out, total


def _restore(root, files):
    """Makes root hold exactly these files (its directory itself stays)."""
    keep = {rel for rel, _, _ in files}
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            p = os.path.join(dirpath, name)
            if os.path.relpath(p, root) in keep and not os.path.islink(p):
                continue
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p) if not os.listdir(p) else None
            else:
                os.unlink(p)
    for rel, mode, data in files:
        p = os.path.join(root, rel)
        if data is None:
            os.makedirs(p, exist_ok=True)
            os.chmod(p, mode)
            continue
        tmp = os.path.join(os.path.dirname(p), ".kgw-restore-" + str(os.getpid()))
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, p)


def _fork(shell):
    """Forks this kernel between requests: (pid, r, w) with a pipe for the child's answer, or
    OSError. Its output is flushed first (its I/O thread then idle), and the history manager's
    locks are held across the fork, so that the child finds none held by a thread it lacks;
    the descriptors of this generation's machinery are worked out (_machinery)."""
    for st in (sys.stdout, sys.stderr):
        try:
            st.flush()
        except Exception:
            pass
    hm = getattr(shell, "history_manager", None)
    locks = [l for l in (getattr(hm, "db_input_cache_lock", None),
                         getattr(hm, "db_output_cache_lock", None)) if l is not None]
    _machinery()
    r, w = os.pipe()
    for l in locks:
        l.acquire()
    try:
        return os.fork(), r, w
    except OSError:
        os.close(r)
        os.close(w)
        raise
    finally:
        for l in locks:
            l.release()


def _on_checkpoint(stream, ident, parent):
    c = parent.get("content", {})
    cid, files_dir = c.get("id", ""), c.get("files_dir") or None
    t = "kgw_checkpoint_reply"
    if not isinstance(cid, str) or not _ID.match(cid):
        return _error(stream, ident, parent, t, "ValueError", "bad checkpoint id")
    path = _sock_path(cid)
    shell = _app().kernel.shell
    count = shell.execution_count
    # Python's random module reseeds itself in every forked child: its state as it is now,
    # restored in each kernel revived from the checkpoint (a rollback restores it exactly)
    rstate = sys.modules["random"].getstate() if "random" in sys.modules else None
    # the kernel's other threads as quiet as they can be made at the fork: its output sent
    # (the I/O thread idle) and the history thread's locks held by this one
    try:
        pid, r, w = _fork(shell)
    except OSError as e:
        return _error(stream, ident, parent, t, "ForkError", e)
    if pid == 0:
        os.close(r)
        _frozen(path, files_dir, w, rstate)  # never returns
    os.close(w)
    raw = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        raw += b
    os.close(r)
    try:
        ans = json.loads(raw)
    except ValueError:
        ans = {"ok": False, "error": "the checkpoint process ended at once"}
    if not ans.get("ok"):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        return _error(stream, ident, parent, t, "CheckpointError", ans.get("error", "?"))
    _kids[cid] = pid
    _reply(stream, ident, parent, t, {"status": "ok", "id": cid, "execution_count": count,
                                      "pid": pid,
                                      "files_bytes": ans.get("files_bytes", 0),
                                      "files": files_dir is not None})


def _scrub(keep):
    """Every inherited descriptor but 0-2, ipykernel's copies of 1 and 2 and those in keep is
    closed, but its number stays taken (by /dev/null): objects of the old kernel that close
    theirs later, in a kernel revived from here, must not close what that kernel opened since."""
    keep = set(keep) | {0, 1, 2} | set(_std_copies().values())
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    # (_fds: not the descriptor that listed them, which dup2 would make a placeholder of)
    fds = _fds() or range(3, 4096)
    for fd in fds:
        if fd not in keep and fd != null:
            try:
                os.dup2(null, fd)
            except OSError:
                pass
    os.close(null)


def _pre_cell(*_):
    global _cell
    _cell = _fds()


def _post_cell(*_):
    if _cell is not None:
        for fd in _fds() - _cell:
            ident = _ident(fd)
            if ident is not None:
                _user[fd] = ident


def _event_pipes():
    """The descriptors of ipykernel's pipes to its I/O thread: one per thread that wrote
    output, opened at its first output (the threads that forward what reaches descriptors 1
    and 2 may do that during any cell, and list it a moment after it is open)."""
    out = set()
    try:
        pipes = list(_app().iopub_thread._event_pipes)
    except Exception:
        return out
    for pipe in pipes:
        try:
            out.add(pipe.FD)  # (the mailbox's descriptor: read only, whichever thread owns it)
        except Exception:
            pass
    return out


def _ident(fd):
    """What fd refers to (device, inode), None if it is closed."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _kernel_conn(fd):
    """Whether fd is a connection libzmq accepted on one of the kernel's own endpoints (a
    client's socket reconnecting while a cell ran): the machinery's, not the user's."""
    try:
        app = _app()
        ports = {app.shell_port, app.iopub_port, app.stdin_port, app.control_port, app.hb_port}
        s = socket.socket(fileno=fd)
    except Exception:
        return False
    try:
        name = s.getsockname()
    except OSError:
        return False
    finally:
        s.detach()
    if app.transport == "ipc":
        return isinstance(name, str) and name in {"%s-%d" % (app.ip, p) for p in ports}
    return isinstance(name, tuple) and len(name) >= 2 and name[1] in ports


def _machinery():
    """Sets _infra, before a fork: the descriptors this generation's machinery opened."""
    global _infra
    if _before is not None:
        # the user's: opened during a cell, still the same file, and not one the machinery
        # opened meanwhile (told apart now, between cells, when none is half made)
        pipes = _event_pipes()
        user = {fd for fd, ident in _user.items()
                if _ident(fd) == ident and fd not in pipes and not _kernel_conn(fd)}
        _infra = _fds() - _before - user


def _headroom():
    """How many more Python calls this point of the stack can make before RecursionError."""
    n = 0

    def down():
        nonlocal n
        n += 1
        down()

    try:
        down()
    except RecursionError:
        pass
    return n


def _keep_headroom():
    """A revived process runs on top of the stack of the generation it came from (that stack
    is never unwound: its frames hold the old objects), some 13 frames more per generation in
    a line of rollbacks; the recursion limit grows by as much, so that code keeps the room it
    had (without this a line of some 230 rollbacks ended in RecursionError). The C stack
    grows by about 2 KiB per generation: some 4000 generations in 8 MiB."""
    global _headroom_ref
    have = _headroom()
    if _headroom_ref is None:
        _headroom_ref = have
    elif have < _headroom_ref:
        sys.setrecursionlimit(sys.getrecursionlimit() + _headroom_ref - have)


def _fds():
    """This process's open descriptors (without the one listing them, closed since)."""
    try:
        listed = [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        return set()
    out = set()
    for fd in listed:
        try:
            os.fstat(fd)
            out.add(fd)
        except OSError:
            pass
    return out


def _close_placeholders(fds):
    """Closes those of fds that are /dev/null placeholders (_scrub's): the previous
    generation's machinery, which nothing will use or close again (its objects are kept in
    _graveyard). A user's descriptors stay placeholders: the user's objects may close them."""
    for fd in sorted(fds or ()):
        try:
            if os.readlink("/proc/self/fd/%d" % fd) == os.devnull:
                os.close(fd)
        except OSError:
            pass


def _frozen(path, files_dir, w, rstate):
    """The checkpoint process: keeps the state, serves its socket. Never returns."""
    try:
        gc.disable()  # nothing of the old kernel may be collected (its sockets) while frozen
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for the live kernel
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernels it forks are reaped
        files, total = _snapshot(files_dir) if files_dir else (None, 0)
        try:
            main = os.pidfd_open(_main_pid)
        except OSError:
            main = -1
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ls.bind(path)
        ls.listen(4)
        _scrub({w, ls.fileno()} | ({main} if main >= 0 else set()))
        os.write(w, json.dumps({"ok": True, "files_bytes": total}).encode())
        os.close(w)
    except BaseException as e:
        try:
            os.write(w, json.dumps({"ok": False, "error": repr(e)[:300]}).encode())
        finally:
            os._exit(1)
    import select
    while True:
        try:
            rd = select.select([ls] + ([main] if main >= 0 else []), [], [], None)[0]
            if main in rd:  # the kernel is gone: so is its checkpoint
                os._exit(0)
            conn, _ = ls.accept()
            conn.settimeout(5)
            cmd = json.loads(conn.recv(MAX_CMD) or b"{}")
        except BaseException:
            continue
        op = cmd.get("op")
        if op == "drop":
            try:
                os.unlink(path)
            except OSError:
                pass
            os._exit(0)
        if op != "spawn":
            conn.close()
            continue
        try:
            pid = os.fork()
        except OSError as e:
            conn.sendall(json.dumps({"ok": False, "error": "fork: %s" % e}).encode())
            conn.close()
            continue
        if pid == 0:
            ls.close()
            if main >= 0:
                os.close(main)
            cf = cmd.get("connection_file")
            try:
                if cf is not None:  # a fork: a new kernel, out of this one's process group
                    os.setsid()
                    _revive(conn, None, None, None, cf)
                _revive(conn, files if cmd.get("files") else None, files_dir, rstate)
            except BaseException:
                import traceback
                traceback.print_exc()
            os._exit(1)
        conn.close()


def _tell(conn, ans):
    """The answer to whoever asked for this process: a socket, or a pipe's write end."""
    data = json.dumps(ans).encode()
    if isinstance(conn, int):
        os.write(conn, data)
    else:
        conn.sendall(data)


def _argv_for(conn_file):
    """This kernel's command line with its connection file replaced by conn_file."""
    out, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if a in ("-f", "--f", "--connection-file", "--IPKernelApp.connection_file"):
            skip = True
            continue
        if a.startswith(("-f=", "--f=", "--connection-file=", "--IPKernelApp.connection_file=")):
            continue
        out.append(a)
    return out + ["-f", conn_file]


def _reseed():
    """A fork's own random streams: Python's and numpy's global generators from the system's
    entropy (two forks of one kernel must not draw the same numbers)."""
    sys.modules["random"].seed() if "random" in sys.modules else None
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:
            pass


def _end_with(pid):
    """Ends this process when pid ends: the process the gateway started for this kernel (a
    rollback), or for the kernel a fork came from. In the sandbox (whose kernel is pid 2 of its
    pid namespace, sandbox/init.c) that end ends the namespace and everything in it; without
    one nothing else would end a revived or forked kernel whose gateway was killed (the first
    process has PR_SET_PDEATHSIG, its descendants do not). A small child does it, forked while
    this process is still single-threaded: a thread here would be one more thread the kernel
    forks with at its next checkpoint, and a loop reader would wait for a running cell."""
    if pid is None or pid == os.getpid() or pid == 2:
        return
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        os._exit(1)  # gone already
    me = os.getpid()
    if os.fork() == 0:
        try:
            import ctypes
            import select
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            # in the kernel's process group: its interrupts (SIGINT) are not for this one
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if os.getppid() == me:
                os.closerange(0, fd)
                os.closerange(fd + 1, 1 << 16)
                select.select([fd], [], [])
                os.kill(me, signal.SIGKILL)
        finally:
            os._exit(0)
    os.close(fd)


def _revive(conn, files, files_dir, rstate, conn_file=None):
    """A kernel again, from the checkpoint's state (conn_file: a fork, a new kernel on this
    connection file; else the same kernel). Never returns."""
    global _main_pid, _before, _cell
    if rstate is not None:
        sys.modules["random"].setstate(rstate)
    if conn_file is not None:
        _reseed()
    try:
        if files is not None:
            _restore(files_dir, files)
        _tell(conn, {"ok": True, "pid": os.getpid()})
    except BaseException as e:
        try:
            _tell(conn, {"ok": False, "error": repr(e)[:300]})
        finally:
            os._exit(1)
    os.close(conn) if isinstance(conn, int) else conn.close()
    _keep_headroom()
    owner = _main_pid
    if conn_file is not None:
        # a kernel of its own: its first process (whose end ends it) is this one, and the
        # checkpoints of the kernel it came from are not its own
        _main_pid = os.getpid()
        _kids.clear()
    # the old kernel's streams write to its I/O thread, which did not survive the fork, and
    # its descriptors 1 and 2 to pipes that thread read: the original ones back
    copies = _std_copies()
    _reroute_logs(set(copies.values()))
    for fd, copy in copies.items():
        os.dup2(copy, fd)
        os.close(copy)
    old_streams = [("stdout", sys.stdout), ("stderr", sys.stderr)]
    _graveyard.extend(st for _, st in old_streams)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    for name, st in old_streams:
        _forward(st, name)
    _close_placeholders(_infra)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import asyncio
    from ipykernel.kernelapp import IPKernelApp
    old = IPKernelApp.instance()
    shell = old.kernel.shell
    argv = list(sys.argv[1:]) if conn_file is None else _argv_for(conn_file)
    IPKernelApp.clear_instance()
    type(old.kernel).clear_instance()  # a singleton too: the new app makes its own
    _before, _cell = _fds(), None
    _user.clear()
    _end_with(owner)
    loop = asyncio.new_event_loop()
    prev = getattr(getattr(asyncio.get_event_loop_policy(), "_local", None), "_loop", None)
    _graveyard.extend([old, old.kernel, prev])
    zmq = sys.modules.get("zmq")
    if zmq is not None:  # the global context (pyzmq makes a new one in a forked process)
        _graveyard.append(getattr(zmq.Context, "_instance", None))
    asyncio.set_event_loop(loop)
    gc.enable()
    app = IPKernelApp.instance()
    init_kernel = app.init_kernel

    def adopting_init_kernel():
        init_kernel()
        shell.parent = app.kernel
        shell.kernel = app.kernel

    app.init_kernel = adopting_init_kernel
    if conn_file is None and getattr(old, "cli_config", None) is not None and \
            list(getattr(old, "argv", None) or ()) == argv:
        # the same command line as the old application's: its parsed form is reused
        # (traitlets builds an argparse parser of every configurable class to parse it again:
        # about a third of initialize())
        import copy

        def reuse_command_line(argv=None):
            app.argv = list(old.argv)
            app.cli_config = copy.deepcopy(old.cli_config)
            app.update_config(app.cli_config)
            app.extra_args = list(getattr(old, "extra_args", None) or ())

        app.parse_command_line = reuse_command_line
    app.initialize(argv)
    app.__dict__.pop("init_kernel", None)
    app.__dict__.pop("parse_command_line", None)
    if conn_file is not None:
        sys.argv[1:] = argv  # what a rollback of the fork revives
    # the debugger's stream: debugpy's state (its threads, its sockets) is the old process's
    app.kernel.debugpy_stream = None
    hm = shell.history_manager
    try:
        if hm is not None:
            # its database connections (its own and its saving thread's): replaced below, and
            # if finalised they would close descriptor numbers this generation may have reused
            _graveyard.extend([hm.db, hm.save_thread, getattr(hm.save_thread, "db", None)])
            # locks its saving thread may have held when the kernel forked: taken for good here
            import threading
            hm.save_flag = threading.Event()
            hm.db_input_cache_lock = threading.Lock()
            hm.db_output_cache_lock = threading.Lock()
        if hm is not None and hm.enabled and hm.save_thread is not None:
            from IPython.core.history import HistorySavingThread
            hm.init_db()  # its own connection, and a history session of its own
            hm.new_session()
            hm.save_thread = HistorySavingThread(hm)
            hm.save_thread.start()
            # its own database connection, opened as it starts: before the first cell, not in
            # it (where it would count as the user's, a placeholder for good); a few
            # milliseconds at most
            deadline = time.monotonic() + 0.5
            while getattr(hm.save_thread, "db", None) is None and hm.save_thread.is_alive() \
                    and time.monotonic() < deadline:
                time.sleep(0.0005)
    except Exception:
        pass
    install()

    try:
        app.start()
    finally:
        _ended()
        os._exit(0)


def _ended():
    """This live kernel ends as asked (a shutdown, not a death): its keeper is not to revive
    it, and the gateway not to take its end for a death."""
    try:
        with open(_live_path()) as f:
            if f.read().strip() != str(os.getpid()):
                return
        _set_live(0)
    except (OSError, ValueError):
        pass


def _live_path():
    return os.path.join(_rundir(), ".kgw-live")


def _set_live(pid):
    """<runtime dir>/.kgw-live names the live interpreter (0: it ended as asked), replaced
    whole: the keeper and the gateway read it at any moment."""
    live = _live_path()
    with open(live + ".tmp", "w") as f:
        f.write(str(pid))
    os.replace(live + ".tmp", live)


def _on_rollback(stream, ident, parent):
    c = parent.get("content", {})
    cid = c.get("id", "")
    t = "kgw_rollback_reply"
    if not isinstance(cid, str) or not _ID.match(cid):
        return _error(stream, ident, parent, t, "ValueError", "bad checkpoint id")
    # reached late (behind a long cell): the gateway has given up on it, and told its caller
    # so; replacing the state now would go unannounced (the same CLOCK_MONOTONIC as the
    # gateway's)
    exp = c.get("expires")
    if isinstance(exp, int) and not isinstance(exp, bool) and \
            time.monotonic() * 1000 > exp:
        return _error(stream, ident, parent, t, "ExpiredError",
                      "the request expired before the kernel reached it: not rolled back")
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(_sock_path(cid))
        s.sendall(json.dumps({"op": "spawn", "files": bool(c.get("files"))}).encode())
        ans = json.loads(s.recv(MAX_CMD) or b"{}")
        s.close()
    except (OSError, ValueError) as e:
        return _error(stream, ident, parent, t, "CheckpointError", e)
    if not ans.get("ok"):
        return _error(stream, ident, parent, t, "CheckpointError", ans.get("error", "?"))
    _set_live(ans["pid"])
    # this process goes; the new one has bound the kernel's endpoints already or will soon
    if os.getpid() == _main_pid:
        # its descriptors are all close-on-exec (Python's and libzmq's): the gateway's sockets
        # reconnect to the new process
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (kept across exec)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its checkpoints are reaped when they end
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _KEEPER, _live_path()])
    os._exit(0)


def _on_drop(stream, ident, parent):
    c = parent.get("content", {})
    cid = c.get("id", "")
    t = "kgw_ckpt_drop_reply"
    if not isinstance(cid, str) or not _ID.match(cid):
        return _error(stream, ident, parent, t, "ValueError", "bad checkpoint id")
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(_sock_path(cid))
        s.sendall(b'{"op": "drop"}')
        while s.recv(MAX_CMD):  # until it has exited (its end of the connection closed)
            pass
        s.close()
    except OSError as e:
        return _error(stream, ident, parent, t, "CheckpointError", e)
    pid = _kids.pop(cid, None)
    if pid is not None:  # this process's child: reaped (others are their keeper's or init's)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    _reply(stream, ident, parent, t, {"status": "ok", "id": cid})


def _fork_now(conn_file):
    """Forks this kernel as it is into a new kernel on conn_file: {"ok", "pid"} or {"ok":
    False, "error"}. The new kernel is a grandchild that leads a session of its own (this
    kernel's interrupts and its process group's signals do not reach it) and is reparented at
    once (to the sandbox's init, which reaps it): this process keeps no zombie of it."""
    try:
        pid, r, w = _fork(_app().kernel.shell)
    except OSError as e:
        return {"ok": False, "error": "fork: %s" % e}
    if pid == 0:
        try:
            os.close(r)
            if os.fork() != 0:
                os._exit(0)
            os.setsid()  # (the grandchild leads no group yet: it can)
            gc.disable()  # nothing of the old kernel may be finalised before _revive
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _scrub({w})
        except BaseException as e:
            try:
                os.write(w, json.dumps({"ok": False, "error": repr(e)[:300]}).encode())
            finally:
                os._exit(1)
        try:
            _revive(w, None, None, None, conn_file)
        except BaseException:
            import traceback
            traceback.print_exc()
        os._exit(1)
    os.close(w)
    try:
        os.waitpid(pid, 0)  # the intermediate process, which exits at once
    except ChildProcessError:
        pass
    raw = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        raw += b
    os.close(r)
    try:
        return json.loads(raw)
    except ValueError:
        return {"ok": False, "error": "the forked process ended at once"}


def _on_fork(stream, ident, parent):
    c = parent.get("content", {})
    cid, cf = c.get("checkpoint"), c.get("connection_file")
    t = "kgw_fork_reply"
    if cid is not None and (not isinstance(cid, str) or not _ID.match(cid)):
        return _error(stream, ident, parent, t, "ValueError", "bad checkpoint id")
    if not isinstance(cf, str) or not cf.startswith("/") or len(cf) > 1024 or "\0" in cf \
            or not os.path.isfile(cf):
        return _error(stream, ident, parent, t, "ValueError", "bad connection file")
    if cid is None:
        ans = _fork_now(cf)
    else:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(_sock_path(cid))
            s.sendall(json.dumps({"op": "spawn", "connection_file": cf}).encode())
            ans = json.loads(s.recv(MAX_CMD) or b"{}")
            s.close()
        except (OSError, ValueError) as e:
            return _error(stream, ident, parent, t, "CheckpointError", e)
    if not ans.get("ok"):
        return _error(stream, ident, parent, t, "ForkError", ans.get("error", "?"))
    _reply(stream, ident, parent, t, {"status": "ok", "pid": ans["pid"],
                                      "checkpoint": cid})
