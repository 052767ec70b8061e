/* kgw-sandbox-init: pid 1 of every sandbox. It is exec'd from a sealed memfd with the argv
 * "init" and an empty environment (so /proc/1/cmdline, /proc/1/environ and /proc/1/exe show
 * nothing of the host), after privileges were dropped and the seccomp filter loaded. It reaps
 * every process of the sandbox, forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the kernel's
 * process group, and exits with the kernel's status — which ends the pid namespace and so
 * kills whatever the kernel left behind.
 *
 * It also runs commands for the gateway (sandbox/sbxcmd.h): its one descriptor above 2 is
 * the gateway's command socket, when the gateway gave it one. A command is forked from init,
 * so it has everything init has: the namespaces, the cgroup, the rlimits, no privileges, the
 * seccomp filter. Init never waits on anything but its poll: the exec of a command is
 * reported through a close-on-exec pipe (a few milliseconds). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/sbxcmd.h"

#define KERNEL_PID 2 /* the first child of pid 1; it leads its own process group */
#define NO_ID      0xffffffffU

extern char **environ;

static struct {
    uint32_t id;
    pid_t pid; /* 0: free */
} cmds[SBXCMD_CMDS_MAX];
static int ctl = -1;
static char msg[SBXCMD_MSG_MAX + 1];
static char *vec[2 * SBXCMD_STR_MAX + 2];

static void forward(int sig)
{
    kill(-KERNEL_PID, sig);
}

static void say(uint32_t type, uint32_t id, pid_t pid, int err, int status)
{
    struct sbxcmd_event e = {SBXCMD_MAGIC, type, id, pid, err, status};
    /* a failure means the gateway is gone: its death ends this sandbox */
    ssize_t w = ctl >= 0 ? send(ctl, &e, sizeof(e), MSG_NOSIGNAL) : 0;
    (void)w;
}

/* The child of a command: only async-signal-safe calls until exec. */
static _Noreturn void cmd_child(const struct sbxcmd_req *q, const int *fds, int nfds, int ep)
{
    sigset_t none;
    int err;
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0)
        goto fail;
    int in = nfds == 3 ? fds[0] : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0 || dup2(in, 0) < 0 || dup2(fds[nfds - 2], 1) < 0 || dup2(fds[nfds - 1], 2) < 0)
        goto fail;
    if (chdir(q->cwd) < 0)
        goto fail;
    environ = q->env;
    execvp(q->argv[0], q->argv); /* PATH from the command's environment */
fail:
    err = errno;
    if (write(ep, &err, sizeof(err)) < 0)
        _exit(127);
    _exit(127);
}

static void cmd_spawn(const struct sbxcmd_req *q, const int *fds, int nfds)
{
    int slot = -1, ep[2], err = 0;
    for (int i = 0; i < SBXCMD_CMDS_MAX && slot < 0; i++)
        if (!cmds[i].pid)
            slot = i;
    if (slot < 0)
        return say(SBXCMD_FAILED, q->h.id, 0, EAGAIN, 0);
    if (pipe2(ep, O_CLOEXEC) < 0)
        return say(SBXCMD_FAILED, q->h.id, 0, errno, 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(ep[0]);
        cmd_child(q, fds, nfds, ep[1]);
    }
    if (pid < 0)
        err = errno;
    close(ep[1]);
    ssize_t n = 0;
    if (pid > 0)
        while ((n = read(ep[0], &err, sizeof(err))) < 0 && errno == EINTR)
            ;
    close(ep[0]);
    if (pid > 0 && n == (ssize_t)sizeof(err)) { /* the exec failed: reaped by the loop */
        cmds[slot].id = NO_ID;                  /* no EXITED for a command that never ran */
        cmds[slot].pid = pid;
        return say(SBXCMD_FAILED, q->h.id, pid, err ? err : EIO, 0);
    }
    if (pid < 0)
        return say(SBXCMD_FAILED, q->h.id, 0, err, 0);
    cmds[slot].id = q->h.id;
    cmds[slot].pid = pid;
    say(SBXCMD_STARTED, q->h.id, pid, 0, 0);
}

static void cmd_signal(uint32_t id, int sig)
{
    for (int i = 0; i < SBXCMD_CMDS_MAX; i++)
        if (cmds[i].pid && cmds[i].id == id && kill(-cmds[i].pid, sig) < 0)
            kill(cmds[i].pid, sig);
}

/* One request from the gateway; false once it closed its end. */
static int on_ctl(void)
{
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {msg, SBXCMD_MSG_MAX};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    int fds[3], nfds = 0;
    ssize_t n = recvmsg(ctl, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR;
    if (n == 0)
        return 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + (size_t)i * sizeof(int), sizeof(fd));
                if (nfds < 3)
                    fds[nfds++] = fd;
                else
                    close(fd);
            }
        }
    struct sbxcmd_req q;
    if (!(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
        sbxcmd_parse(msg, (size_t)n, vec, sizeof(vec) / sizeof(vec[0]), &q) == 0) {
        int want = q.h.flags & SBXCMD_F_STDIN ? 3 : 2;
        if (q.h.op == SBXCMD_SIGNAL)
            cmd_signal(q.h.id, q.h.sig);
        else if (nfds == want)
            cmd_spawn(&q, fds, nfds);
        else
            say(SBXCMD_FAILED, q.h.id, 0, EBADMSG, 0);
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    memset(msg, 0, (size_t)n); /* the command's environment: gone from init's memory */
    return 1;
}

/* Reaps what exited; returns when the kernel did (with its status) or nothing is left. */
static int reap(int *ret_status)
{
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
            return errno == ECHILD ? 1 : 0;
        if (si.si_pid == 0)
            return 0;
        int slot = -1;
        for (int i = 0; i < SBXCMD_CMDS_MAX && slot < 0; i++)
            if (cmds[i].pid == si.si_pid)
                slot = i;
        /* a command's leader is gone: so is the rest of its process group (killed while the
         * leader is not yet reaped, so the group's id cannot have been reused) */
        if (slot >= 0)
            kill(-si.si_pid, SIGKILL);
        int st = 0;
        while (waitpid(si.si_pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (si.si_pid == KERNEL_PID) {
            *ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return 2;
        }
        if (slot >= 0) {
            if (cmds[slot].id != NO_ID)
                say(SBXCMD_EXITED, cmds[slot].id, si.si_pid, 0, st);
            cmds[slot].pid = 0;
        }
    }
}

int main(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    /* init runs with the kernel's uid: without this, kernel code could read or write its
     * memory through /proc/1/mem (exec made it dumpable again), or take its descriptors */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return 127;
    /* the gateway's command socket: the one descriptor above 2 left open across the exec */
    for (int fd = 3; fd < 1024 && ctl < 0; fd++)
        if (fcntl(fd, F_SETFD, FD_CLOEXEC) == 0)
            ctl = fd;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward;
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        return 127;
    for (;;) {
        int st = 0, r = reap(&st);
        if (r == 2)
            return st;
        if (r == 1)
            return 0; /* no children left */
        struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ctl, .events = POLLIN}};
        if (poll(p, ctl >= 0 ? 2 : 1, -1) < 0)
            continue; /* EINTR: a forwarded signal */
        if (p[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                ;
        }
        if (ctl >= 0 && p[1].revents && !on_ctl()) {
            /* the gateway let go of this sandbox's commands: they end */
            close(ctl);
            ctl = -1;
            for (int i = 0; i < SBXCMD_CMDS_MAX; i++)
                if (cmds[i].pid)
                    kill(-cmds[i].pid, SIGKILL);
        }
    }
}
