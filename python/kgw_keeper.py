"""The keeper of a kernel's checkpoints (docs/checkpoints.md, "A kernel that dies").

After a kernel's first rollback (or the revival its first checkpoint makes), its first process
(the one the gateway started, whose end ends the kernel and, in the sandbox, its pid namespace)
replaces itself with this program (kgw_ckpt._on_rollback: python3 -I -S kgw_keeper.py
<runtime dir>/.kgw-live). It follows the live interpreter (the pid that file names) with a
pidfd; when that process ends, and no rollback replaced it (a rollback writes the new pid
first) and it did not end as asked (a kernel that shuts down writes 0 there first), it asks the
newest checkpoint whose socket answers to spawn a new kernel process, and follows that one. It
exits, ending the kernel, when the live kernel ended as asked, when no checkpoint answers, when
the newest refuses at the cap on generations (kgw_ckpt.MAX_GENERATIONS: reviving from an older
one would not be the state the gateway announces), or at the fourth revival within 30 s (a
checkpoint whose kernel dies at once is not revived forever).

Small on purpose (a Python of about 8 MB): the standard library and kgw_frame only.
"""
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (-I leaves it out)
import kgw_frame  # noqa: E402

REVIVALS = 3  # revivals within REVIVAL_WINDOW_S; the next one is not made
REVIVAL_WINDOW_S = 30
SPAWN_TIMEOUT_S = 10  # for a checkpoint's answer
PR_SET_CHILD_SUBREAPER = 36


def note(text):
    """A line on the kernel's stderr (the gateway's log excerpts of it); best effort: a line
    that cannot be written is lost (nothing depends on it)."""
    try:
        print("kgw keeper: " + text, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # (no stderr, or closed)
        pass


def subreaper():
    """The kernel's orphans (checkpoints whose live kernel ended) come to this process, not
    beyond it. Best effort: without it they go to the sandbox's init (sandbox/init.c, pid 1 of
    the kernel's pid namespace, which reaps them), or unsandboxed to the gateway's or the
    host's subreaper, which reap them too."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as e:
        note("no libc to become the kernel's subreaper: %s" % e)
        return
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        note("PR_SET_CHILD_SUBREAPER: %s" % os.strerror(ctypes.get_errno()))


def live(path):
    """The pid the file names; 0 when it says the live kernel ended as asked, or is unreadable."""
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def set_live(path, pid):
    with open(path + ".tmp", "w") as f:
        f.write(str(pid))
    os.replace(path + ".tmp", path)


def checkpoints(rundir):
    """The checkpoints' socket names, newest first (.ckpt-<id>, or .c<hash>: kgw_ckpt's
    _sock_path)."""
    socks = []
    for name in os.listdir(rundir):
        if name.startswith(".c"):
            try:
                socks.append((os.lstat(os.path.join(rundir, name)).st_mtime_ns, name))
            except OSError:  # (dropped meanwhile)
                pass
    return [name for _, name in sorted(socks, reverse=True)]


def revive(path):
    """The live kernel died (no rollback replaced it): a new one from the newest checkpoint
    that answers (the gateway sees the death, and waits for this one's answers). True when
    one was spawned; False when none could be, or the newest refused at the cap on
    generations."""
    rundir = os.path.dirname(path)
    for name in checkpoints(rundir):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(SPAWN_TIMEOUT_S)
                s.connect(os.path.join(rundir, name))
                kgw_frame.send(s, {"op": "spawn", "files": True})
                ans = kgw_frame.recv(s, SPAWN_TIMEOUT_S)
        except (OSError, ValueError) as e:  # (gone, or not a checkpoint: the next one)
            note("checkpoint %s: %s" % (name, e))
            continue
        pid = ans.get("pid")
        if ans.get("ok") and isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            set_live(path, pid)
            return True
        note("checkpoint %s: %.300s" % (name, ans.get("error", "?")))
        if ans.get("ename") == "GenerationLimitError":
            return False
    return False


def main(path):
    subreaper()
    revived = []  # when it revived the kernel
    while True:
        pid = live(path)
        if pid <= 0:  # the live kernel ended as asked (a shutdown): so does the kernel
            return 0
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # (gone already)
            fd = -1
        # its end (a rollback's process writes the new pid before it goes): no polling, but a
        # look now and then at a replacement whose predecessor is slow to go
        while fd >= 0 and select.select([fd], [], [], 30.0)[0] == []:
            if live(path) != pid:
                break
        if fd >= 0:
            os.close(fd)
        if live(path) != pid:
            continue
        now = time.monotonic()
        revived = [t for t in revived if now - t < REVIVAL_WINDOW_S] + [now]
        if len(revived) > REVIVALS:
            note("the kernel died %d times within %d s: not revived" %
                 (len(revived), REVIVAL_WINDOW_S))
            return 0
        if not revive(path):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
