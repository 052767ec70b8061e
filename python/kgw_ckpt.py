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
gateway started, whose end ends the kernel) replaces itself with a small keeper
(kgw_keeper.py) that lives as long as the current kernel process does; a later one exits.

Where ipykernel lacks an internal this relies on (_lacking), requests are refused with
UnsupportedError; past MAX_GENERATIONS, revivals with GenerationLimitError. Messages between
the kernel's processes are kgw_frame frames.
"""
import gc
import os
import re
import signal
import socket
import sys
import time

import kgw_frame

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_FILES = 10000  # files kept per checkpoint
# Generations: the process the gateway started is generation 0; a process revived from a
# checkpoint (a rollback, a revival after a death, a fork) is one past the process that
# checkpoint was taken of, and runs on top of its stack (never unwound: see _keep_headroom).
# No process is made past MAX_GENERATIONS: the rollback, revival or fork is refused
# (GenerationLimitError; the gateway answers 409), and a restart of the kernel starts again at
# 0 (docs/checkpoints.md, "Stack depth across generations").
MAX_GENERATIONS = 128
_generation = 0  # this process's
# The program the first process becomes at its first rollback (docs/checkpoints.md): next to
# this file, in the gateway's python directory (/opt/kgw/python in the sandbox)
KEEPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kgw_keeper.py")
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


class UnsupportedError(RuntimeError):
    """Checkpoints rely on internals of ipykernel, IPython, pyzmq, asyncio and logging (below);
    where one is missing they are refused, never half made (the gateway answers 501)."""


class GenerationLimitError(RuntimeError):
    """A rollback, revival or fork past MAX_GENERATIONS (the gateway answers 409): its name is
    the "ename" of the refusal (_at_limit), which crosses a socket or two as an answer."""


def _versions():
    """"ipykernel X.Y (IPython ..., pyzmq ..., Python ...)", for the refusal."""
    def version(name):
        mod = sys.modules.get(name)
        return str(getattr(mod, "__version__", "?")) if mod is not None else "?"
    ipk = ".".join(version("ipykernel").split(".")[:2])
    return "ipykernel %s (IPython %s, pyzmq %s, Python %s)" % (
        ipk, version("IPython"), version("zmq"), sys.version.split()[0])


def _lacking():
    """The internals this process lacks, of those checkpoints rely on (each named as the code
    reaches it): [] when every one is there. Checked by install(), before the first
    checkpoint of a process, and again by each request that forks or revives, so that a
    kernel whose ipykernel moved on refuses with a reason instead of failing half-way (a
    revived process that never answers, descriptors closed under the new generation, a
    history database written through a dead connection)."""
    out = []

    def need(ok, what):
        if not ok:
            out.append(what)

    try:
        import asyncio
        import logging

        import zmq
        from IPython.core import history
        from ipykernel.iostream import OutStream
        from ipykernel.kernelapp import IPKernelApp
    except ImportError as e:
        return ["a module: %s" % e]
    need(hasattr(os, "pidfd_open"), "os.pidfd_open")
    for name in ("instance", "initialized", "clear_instance"):
        need(callable(getattr(IPKernelApp, name, None)), "IPKernelApp.%s" % name)
    app = IPKernelApp.instance() if IPKernelApp.initialized() else None
    need(app is not None, "a running IPKernelApp")
    if app is None:
        return out
    for name in ("abs_connection_file", "iopub_thread", "argv", "cli_config",
                 "extra_args", "transport", "ip", "shell_port", "iopub_port", "stdin_port",
                 "control_port", "hb_port"):
        need(hasattr(app, name), "IPKernelApp.%s" % name)
    for name in ("initialize", "init_kernel", "parse_command_line", "update_config", "start"):
        need(callable(getattr(app, name, None)), "IPKernelApp.%s()" % name)
    pipes = getattr(getattr(app, "iopub_thread", None), "_event_pipes", None)
    need(pipes is not None and hasattr(pipes, "__iter__"), "IOPubThread._event_pipes")
    k = getattr(app, "kernel", None)
    need(k is not None, "IPKernelApp.kernel")
    if k is not None:
        need(isinstance(getattr(k, "shell_handlers", None), dict), "Kernel.shell_handlers")
        need(callable(getattr(getattr(k, "session", None), "send", None)), "Kernel.session.send")
        need(hasattr(k, "debugpy_stream"), "Kernel.debugpy_stream")
        need(callable(getattr(type(k), "clear_instance", None)), "Kernel.clear_instance")
        shell = getattr(k, "shell", None)
        need(shell is not None, "Kernel.shell")
        ev = getattr(shell, "events", None)
        need(callable(getattr(ev, "register", None)) and
             isinstance(getattr(ev, "callbacks", None), dict), "InteractiveShell.events")
        need(hasattr(shell, "execution_count"), "InteractiveShell.execution_count")
        hm = getattr(shell, "history_manager", None)
        need(hm is not None, "InteractiveShell.history_manager")
        if hm is not None:
            for name in ("db", "save_thread", "enabled", "save_flag", "db_input_cache_lock",
                         "db_output_cache_lock"):
                need(hasattr(hm, name), "HistoryManager.%s" % name)
            for name in ("init_db", "new_session"):
                need(callable(getattr(hm, name, None)), "HistoryManager.%s()" % name)
    need(isinstance(getattr(history, "HistorySavingThread", None), type),
         "IPython.core.history.HistorySavingThread")
    need(isinstance(getattr(history, "DummyDB", None), type), "IPython.core.history.DummyDB")
    for st in (sys.stdout, sys.stderr):
        # a stream that redirected its descriptor to its own pipe keeps the original's copy
        if isinstance(st, OutStream) and (getattr(st, "_should_watch", False) or
                                          getattr(st, "watch_fd_thread", None) is not None):
            need(isinstance(getattr(st, "_original_stdstream_copy", None), int),
                 "OutStream._original_stdstream_copy")
    need(hasattr(getattr(asyncio.get_event_loop_policy(), "_local", None), "_loop"),
         "asyncio's event loop policy's _local._loop")
    need(hasattr(zmq.Context, "_instance"), "zmq.Context._instance")
    need(isinstance(getattr(logging, "_handlerList", None), list), "logging._handlerList")
    return out


def _check():
    """UnsupportedError naming what is missing (see _lacking), or nothing."""
    if not os.path.isfile(KEEPER):
        raise UnsupportedError("an incomplete installation of kgw: checkpoints need %s" % KEEPER)
    lacking = _lacking()
    if lacking:
        raise UnsupportedError("unsupported %s: checkpoints rely on internals it lacks: %s" %
                               (_versions(), ", ".join(lacking)))


def install():
    """Registers the checkpoint handlers on this kernel's shell channel; UnsupportedError
    (before anything is registered) when an internal they rely on is missing."""
    global _main_pid
    _check()
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


def _refused(stream, ident, parent, msg_type):
    """Whether the request was refused (and answered) for an internal that is missing: for
    those that fork or revive (_lacking)."""
    try:
        _check()
    except UnsupportedError as e:
        _error(stream, ident, parent, msg_type, UnsupportedError.__name__, e)
        return True
    return False


def _at_limit():
    """The answer refusing a revival of this process (a checkpoint's, or the live kernel's
    for a fork) at MAX_GENERATIONS, or None when one more generation may be made."""
    if _generation < MAX_GENERATIONS:
        return None
    return {"ok": False, "ename": GenerationLimitError.__name__,
            "error": "the kernel is at its generation limit: each rollback, revival or fork "
                     "runs on the stack of the process it came from, and this state is %d deep "
                     "(at most %d); restart the kernel (its variables and checkpoints are lost), "
                     "or roll back to an older checkpoint" % (_generation, MAX_GENERATIONS)}


def _answer_ename(ans, default):
    """The error name a refusal from a checkpoint (or a fork) is answered with."""
    limit = GenerationLimitError.__name__
    return limit if ans.get("ename") == limit else default


def _ask(cid, cmd, timeout=10):
    """Sends cmd to the checkpoint cid's socket and returns its answer (kgw_frame: each read
    whole); OSError or ValueError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(_sock_path(cid))
        kgw_frame.send(s, cmd)
        return kgw_frame.recv(s, timeout)


def _std_copies():
    """{1: fd, 2: fd}: the originals of descriptors 1 and 2 that ipykernel's streams saved
    when they redirected them to their own pipes."""
    out = {}
    for fd, st in ((1, sys.stdout), (2, sys.stderr)):
        copy = getattr(st, "_original_stdstream_copy", None)
        if isinstance(copy, int) and copy > 2:
            out[fd] = copy
    return out


def _note(text):
    """A line for the kernel's own stderr (the gateway shows it in its log excerpts), written to
    the original descriptor 2: ipykernel redirected 2 to a pipe its I/O thread reads, a thread
    a checkpoint or a process being revived does not have, and sys.stderr may be the old
    generation's stream. Best effort: a note that cannot be written is lost (nothing depends
    on it)."""
    fd = _std_copies().get(2, 2)
    try:
        os.write(fd, ("kgw_ckpt: %s\n" % text.rstrip("\n")).encode(errors="replace"))
    except OSError:
        pass


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
        except (AttributeError, OSError, ValueError):  # no stream, not a file's, or closed
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

    from ipykernel.iostream import OutStream  # (_lacking checked it)
    if not isinstance(old, OutStream):
        return  # (not ipykernel's: the user's own, left alone)
    old.write, old.flush, old.writelines = write, flush, writelines
    old._flush = lambda: None  # (its own timers and thread are gone)


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
        except (OSError, ValueError):
            # (a stream closed or broken, by code: what it held is lost either way; the fork
            # goes on, as a flush is only there to leave the I/O thread idle)
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
    if _refused(stream, ident, parent, t):
        return
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
    try:
        ans = kgw_frame.recv(r)
    except (OSError, ValueError) as e:
        ans = {"ok": False, "error": "the checkpoint process ended at once (%s)" % e}
    finally:
        os.close(r)
    if not ans.get("ok"):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:  # (gone, or reaped already)
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
    import zmq
    out = set()
    pipes = _app().iopub_thread._event_pipes  # (a WeakSet: _lacking checked it)
    for _ in range(10):
        try:
            pipes = list(pipes)
            break
        except RuntimeError:  # (a thread added its pipe meanwhile: "changed size")
            time.sleep(0.001)
    else:
        pipes = []  # (then it counts as the user's: one placeholder kept, as before this list)
    for pipe in pipes:
        try:
            out.add(pipe.FD)  # (the mailbox's descriptor: read only, whichever thread owns it)
        except zmq.ZMQError:  # (closed: no descriptor of it to tell apart)
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
    except OSError:  # (not a socket, or closed: no connection of libzmq's)
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
        kgw_frame.send(w, {"ok": True, "files_bytes": total})
        os.close(w)
    except BaseException as e:
        try:
            kgw_frame.send(w, {"ok": False, "error": repr(e)[:300]})
        finally:
            os._exit(1)
    try:
        _serve(ls, main, path, files, files_dir, rstate)
    except BaseException:  # (never back into the kernel's code: this is its frozen copy)
        import traceback
        _note(traceback.format_exc())
    os._exit(1)


CMD_TIMEOUT_S = 5  # for a command on a checkpoint's socket, whole


def _serve(ls, main, path, files, files_dir, rstate):
    """A checkpoint's socket: commands, one per connection ({"op": "drop"}, {"op": "spawn",
    "files"?, "connection_file"?}), each a kgw_frame frame. Returns only by an exception."""
    import select
    while True:
        rd = select.select([ls] + ([main] if main >= 0 else []), [], [], None)[0]
        if main in rd:  # the kernel is gone: so is its checkpoint
            os._exit(0)
        try:
            conn, _ = ls.accept()
        except OSError:  # (the peer went before it was accepted)
            continue
        try:
            cmd = kgw_frame.recv(conn, CMD_TIMEOUT_S)
        except (OSError, ValueError) as e:
            # (no whole command in time, or not one: only the kernel's own code can connect
            # here, and the checkpoint serves the next one)
            _note("checkpoint %s: a command refused: %s" % (os.path.basename(path), e))
            conn.close()
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
        refusal = _at_limit()
        pid = -1
        if refusal is None:
            try:
                pid = os.fork()
            except OSError as e:
                refusal = {"ok": False, "error": "fork: %s" % e}
        if refusal is not None:
            try:
                kgw_frame.send(conn, refusal)
            except OSError:  # (the peer went: it hears nothing either way)
                pass
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
                _note(traceback.format_exc())
            os._exit(1)
        conn.close()


def _tell(conn, ans):
    """The answer to whoever asked for this process: a socket, or a pipe's write end."""
    kgw_frame.send(conn, ans)


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
        except Exception as e:
            # (numpy, or what code put in its place, as it is: the fork then draws what its
            # parent would, which it says; nothing of the fork's machinery depends on it)
            _note("numpy's global generator not reseeded: %r" % e)


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
    connection file; else the same kernel): one generation past this process (the refusal at
    MAX_GENERATIONS came before the fork, _at_limit). Never returns."""
    global _main_pid, _before, _cell, _generation
    _generation += 1
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
    # the old loop, and pyzmq's global context (pyzmq makes a new one in a forked process):
    # both internals, checked by _lacking before the fork
    import zmq
    _graveyard.extend([old, old.kernel, asyncio.get_event_loop_policy()._local._loop,
                       zmq.Context._instance])
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
    _renew_history(shell.history_manager)
    install()

    try:
        app.start()
    finally:
        _ended()
        os._exit(0)


def _renew_history(hm):
    """The history manager (checked by _lacking) in a revived process: its own database
    connections, saving thread and locks; the old generation's are kept, never finalised."""
    import sqlite3
    import threading

    from IPython.core.history import DummyDB, HistorySavingThread
    # its database connections (its own and its saving thread's): replaced below, and if
    # finalised they would close descriptor numbers this generation may have reused
    _graveyard.extend([hm.db, hm.save_thread, getattr(hm.save_thread, "db", None)])
    # locks its saving thread may have held when the kernel forked: taken for good here
    hm.save_flag = threading.Event()
    hm.db_input_cache_lock = threading.Lock()
    hm.db_output_cache_lock = threading.Lock()
    if not hm.enabled or hm.save_thread is None:
        return
    try:
        hm.init_db()  # its own connection, and a history session of its own
        hm.new_session()
    except (sqlite3.Error, OSError) as e:
        # (a full disk, a locked or broken file): this process keeps no history, rather than
        # write through the old generation's connection, whose descriptor is closed
        _note("the history database cannot be opened (%r): no history in this process" % e)
        hm.db, hm.save_thread, hm.enabled = DummyDB(), None, False
        return
    hm.save_thread = HistorySavingThread(hm)
    hm.save_thread.start()
    # its own database connection, opened as it starts: before the first cell, not in it
    # (where it would count as the user's, a placeholder for good); a few milliseconds at most
    deadline = time.monotonic() + 0.5
    while getattr(hm.save_thread, "db", None) is None and hm.save_thread.is_alive() \
            and time.monotonic() < deadline:
        time.sleep(0.0005)


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
    if _refused(stream, ident, parent, t):
        return
    try:
        ans = _ask(cid, {"op": "spawn", "files": bool(c.get("files"))})
    except (OSError, ValueError) as e:
        return _error(stream, ident, parent, t, "CheckpointError", e)
    pid = ans.get("pid")
    if not ans.get("ok") or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return _error(stream, ident, parent, t, _answer_ename(ans, "CheckpointError"),
                      ans.get("error", "no new process"))
    _set_live(pid)
    # this process goes; the new one has bound the kernel's endpoints already or will soon
    if os.getpid() == _main_pid:
        # its descriptors are all close-on-exec (Python's and libzmq's): the gateway's sockets
        # reconnect to the new process. 1 and 2: the originals again (ipykernel's pipes have
        # no reader left), for the keeper's own lines
        for fd, copy in _std_copies().items():
            os.dup2(copy, fd)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (kept across exec)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its checkpoints are reaped when they end
        try:
            os.execv(sys.executable, [sys.executable, "-I", "-S", KEEPER, _live_path()])
        except OSError as e:
            # (no Python to run it): the first process ends, and the kernel with it, rather
            # than stay a second live kernel beside the new one
            _note("cannot become the keeper: %s" % e)
            os._exit(1)
    os._exit(0)


def _on_drop(stream, ident, parent):
    c = parent.get("content", {})
    cid = c.get("id", "")
    t = "kgw_ckpt_drop_reply"
    if not isinstance(cid, str) or not _ID.match(cid):
        return _error(stream, ident, parent, t, "ValueError", "bad checkpoint id")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(_sock_path(cid))
            kgw_frame.send(s, {"op": "drop"})
            # no answer: it exits, which closes its end (reads until then, whatever comes)
            while s.recv(kgw_frame.MAX_FRAME):
                pass
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
    once (to the sandbox's init, which reaps it): this process keeps no zombie of it. Refused
    at MAX_GENERATIONS (the fork would run on this process's stack)."""
    refusal = _at_limit()
    if refusal is not None:
        return refusal
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
                kgw_frame.send(w, {"ok": False, "error": repr(e)[:300]})
            finally:
                os._exit(1)
        try:
            _revive(w, None, None, None, conn_file)
        except BaseException:
            import traceback
            _note(traceback.format_exc())
        os._exit(1)
    os.close(w)
    try:
        os.waitpid(pid, 0)  # the intermediate process, which exits at once
    except ChildProcessError:
        pass
    try:
        return kgw_frame.recv(r)
    except (OSError, ValueError) as e:
        return {"ok": False, "error": "the forked process ended at once (%s)" % e}
    finally:
        os.close(r)


def _on_fork(stream, ident, parent):
    c = parent.get("content", {})
    cid, cf = c.get("checkpoint"), c.get("connection_file")
    t = "kgw_fork_reply"
    if cid is not None and (not isinstance(cid, str) or not _ID.match(cid)):
        return _error(stream, ident, parent, t, "ValueError", "bad checkpoint id")
    if not isinstance(cf, str) or not cf.startswith("/") or len(cf) > 1024 or "\0" in cf \
            or not os.path.isfile(cf):
        return _error(stream, ident, parent, t, "ValueError", "bad connection file")
    if _refused(stream, ident, parent, t):
        return
    if cid is None:
        ans = _fork_now(cf)
    else:
        try:
            ans = _ask(cid, {"op": "spawn", "connection_file": cf})
        except (OSError, ValueError) as e:
            return _error(stream, ident, parent, t, "CheckpointError", e)
    pid = ans.get("pid")
    if not ans.get("ok") or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return _error(stream, ident, parent, t, _answer_ename(ans, "ForkError"),
                      ans.get("error", "no new process"))
    _reply(stream, ident, parent, t, {"status": "ok", "pid": pid, "checkpoint": cid})
