/* The fork-server wire: the messages between the gateway and kgw-zygote (a profile, an
 * environment and a payload, with the set-up pipes and the cgroup's directories passed as
 * descriptors), and the server's side, which forks the kernel's proxy (stages.c). */
#include "sandbox/private.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/filter.h"

#define FORK_MAGIC   0x4b47575aU /* "KGWZ" */
#define MOVE_MAGIC   0x4b47574dU /* "KGWM": move yourself into the cgroup of these fds */
#define FORK_MSG_MAX (64 * 1024)
#define FORK_STR_MAX 1024 /* environment and payload strings, each list */
#define FORK_FIXED   4    /* the profile's directories */
#define FORK_F_STDERR 1U  /* fork_wire.flags: the kernel's stderr is the 4th descriptor */
#define FORK_F_CTL    2U  /* ... init's command socket follows (sbxcmd.h) */
#define FORK_FDS_MAX (5 + SBX_CGROUP_MAX_DIRS)

struct fork_wire {
    uint32_t magic;
    int32_t gateway;
    uint32_t uid, root_uid;
    uint32_t nenv, npayload;
    uint32_t flags; /* FORK_F_* */
    struct sbx_limits lim;
    /* then NUL-terminated: runtime_dir, root_dir, workspace_dir, python_dir ("" = none),
     * env..., payload... */
};

struct sbx_fork_req {
    struct fork_wire w;
    char *buf;
    char **env, **payload;
    sbx_profile_t p;
    int efd, syncfd, gofd, errfd, ctlfd;
    int cgdirs[SBX_CGROUP_MAX_DIRS], ncgdirs;
};

/* One message with nfds descriptors (at most FORK_FDS_MAX) to the fork server,
 * without blocking: sendmsg's result. */
static ssize_t send_fds(int server, const void *buf, size_t len, const int *fds, int nfds)
{
    union {
        char buf[CMSG_SPACE(FORK_FDS_MAX * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {(void *)buf, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    return sendmsg(server, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int sbx_start_forked(const struct sbx_start_opts *opts, pid_t *ret_pid, int *ret_pidfd,
                     int *ret_setupfd, char *why, size_t whysz)
{
    const sbx_profile_t *p = opts->profile;
    char *const *payload = opts->payload;
    int server = opts->server;
    int efd[2] = {-1, -1}, syncp[2] = {-1, -1}, gop[2] = {-1, -1}, r;
    struct fork_wire w = {.magic = FORK_MAGIC, .gateway = (int32_t)getpid(), .uid = p->uid,
                          .root_uid = p->root_uid, .lim = *p->lim,
                          .flags = (p->stderr_fd >= 0 ? FORK_F_STDERR : 0) |
                                   (p->ctl_fd > 2 ? FORK_F_CTL : 0)};
    const char *fixed[FORK_FIXED] = {p->runtime_dir, p->root_dir,
                                     p->workspace_dir ? p->workspace_dir : "",
                                     p->python_dir ? p->python_dir : ""};
    size_t len = sizeof(w);
    char *msg = NULL;

    why[0] = '\0';
    for (int i = 0; i < FORK_FIXED; i++)
        len += strlen(fixed[i]) + 1;
    for (; p->envp[w.nenv]; w.nenv++)
        len += strlen(p->envp[w.nenv]) + 1;
    for (; payload && payload[w.npayload]; w.npayload++)
        len += strlen(payload[w.npayload]) + 1;
    if (p->ncgroup_dirfds < 0 || p->ncgroup_dirfds > SBX_CGROUP_MAX_DIRS)
        return -EINVAL;
    if (len > FORK_MSG_MAX || w.nenv > FORK_STR_MAX || w.npayload > FORK_STR_MAX) {
        snprintf(why, whysz, "the kernel's environment is too large for the fork server");
        return -E2BIG;
    }
    if (!(msg = malloc(len)))
        return -ENOMEM;
    char *o = msg + sizeof(w);
    memcpy(msg, &w, sizeof(w));
    for (int i = 0; i < FORK_FIXED; i++)
        o = stpcpy(o, fixed[i]) + 1;
    for (uint32_t i = 0; i < w.nenv; i++)
        o = stpcpy(o, p->envp[i]) + 1;
    for (uint32_t i = 0; i < w.npayload; i++)
        o = stpcpy(o, payload[i]) + 1;
    if (pipe2(efd, O_CLOEXEC) < 0 || pipe2(syncp, O_CLOEXEC) < 0 || pipe2(gop, O_CLOEXEC) < 0) {
        r = -errno;
        goto fail;
    }
    int fds[FORK_FDS_MAX] = {efd[1], syncp[1], gop[0], p->stderr_fd};
    int nfixed = p->stderr_fd >= 0 ? 4 : 3;
    if (p->ctl_fd > 2)
        fds[nfixed++] = p->ctl_fd;
    for (int i = 0; i < p->ncgroup_dirfds; i++)
        fds[nfixed + i] = p->cgroup_dirfds[i];
    if (send_fds(server, msg, len, fds, nfixed + p->ncgroup_dirfds) != (ssize_t)len) {
        r = errno == EAGAIN ? -ETIMEDOUT : -errno;
        snprintf(why, whysz, "cannot reach the fork server: %s", strerror(-r));
        goto fail;
    }
    free(msg);
    close(efd[1]);
    close(syncp[1]);
    close(gop[0]);
    return sbx__handshake(0, efd[0], syncp[0], gop[1], opts->timeout_ms, p, ret_pid, ret_pidfd,
                          ret_setupfd, why, whysz);
fail:
    free(msg);
    sbx__close_pipes(efd, syncp, gop);
    return r;
}

int sbx_fork_server_move(int server, sbx_cgroup_t *cg, uid_t uid)
{
    int fds[SBX_CGROUP_MAX_DIRS];
    int n = sbx_cgroup_delegate(cg, uid, fds);
    if (n < 0)
        return n;
    uint32_t magic = MOVE_MAGIC;
    ssize_t w = send_fds(server, &magic, sizeof(magic), fds, n);
    int err = w == (ssize_t)sizeof(magic) ? 0 : w < 0 ? -errno : -EIO;
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return err;
}

/* Server side of sbx_fork_server_move: the write is the kernel's cgroup_attach, which on
 * cgroup v1 waits for an RCU grace period (about 10 ms here), paid now, while no kernel
 * waits, instead of when the next kernel starts. dirs: the cgroup's directories (O_PATH).
 * -EPERM when a move failed after an earlier one worked: the server may be left in the last
 * kernel's cgroup, and must not stay there (it exits; the gateway starts another). A first
 * move that fails leaves it where the gateway started it: harmless (the gateway then moves
 * each kernel itself). */
static int move_self(const int *dirs, int n)
{
    static bool moved;
    int err = 0;
    for (int i = 0; i < n; i++) {
        int fd = openat(dirs[i], "cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1)
            err = errno ? errno : EIO;
        if (fd >= 0)
            close(fd);
        close(dirs[i]);
    }
    if (err) {
        fprintf(stderr, "kgw-zygote: cannot move into a kernel's cgroup: %s\n", strerror(err));
        return moved ? -EPERM : 0;
    }
    moved = moved || n > 0;
    return 0;
}

void sbx_fork_req_free(sbx_fork_req_t **pr)
{
    sbx_fork_req_t *r = *pr;
    if (!r)
        return;
    /* the next kernels are forked from this heap: nothing of this one's request (its
     * environment, its paths) may remain in freed memory */
    if (r->buf)
        explicit_bzero(r->buf, FORK_MSG_MAX + 1);
    if (r->efd >= 0)
        close(r->efd);
    if (r->syncfd >= 0)
        close(r->syncfd);
    if (r->gofd >= 0)
        close(r->gofd);
    if (r->errfd >= 0)
        close(r->errfd);
    if (r->ctlfd >= 0)
        close(r->ctlfd);
    for (int i = 0; i < r->ncgdirs; i++)
        close(r->cgdirs[i]);
    free(r->buf);
    free(r->env);
    free(r->payload);
    free(r);
    *pr = NULL;
}

int sbx_fork_req_recv(int server, int init_fd, sbx_fork_req_t **ret)
{
    sbx_fork_req_t *r = calloc(1, sizeof(*r));
    union {
        char buf[CMSG_SPACE(FORK_FDS_MAX * sizeof(int))];
        struct cmsghdr align;
    } u;
    int err = EBADMSG;
    if (!r)
        return -ENOMEM;
    r->efd = r->syncfd = r->gofd = r->errfd = r->ctlfd = -1;
    if (!(r->buf = malloc(FORK_MSG_MAX + 1))) {
        free(r);
        return -ENOMEM;
    }
    struct iovec iov = {r->buf, FORK_MSG_MAX};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    while ((n = recvmsg(server, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (n <= 0) {
        err = n == 0 ? EPIPE : errno;
        goto fail;
    }
    int fds[FORK_FDS_MAX], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && !nfds &&
            c->cmsg_len >= CMSG_LEN(sizeof(int)) && c->cmsg_len <= CMSG_LEN(sizeof(fds))) {
            nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            memcpy(fds, CMSG_DATA(c), (size_t)nfds * sizeof(int));
        }
    uint32_t magic = 0;
    if ((size_t)n >= sizeof(magic))
        memcpy(&magic, r->buf, sizeof(magic));
    if (magic == MOVE_MAGIC && (size_t)n == sizeof(magic) && !(mh.msg_flags & MSG_CTRUNC) &&
        nfds <= SBX_CGROUP_MAX_DIRS) {
        int moved = move_self(fds, nfds);
        sbx_fork_req_free(&r);
        return moved < 0 ? moved : SBX_FORK_MOVED;
    }
    uint32_t flags = 0;
    if ((size_t)n >= sizeof(r->w))
        memcpy(&flags, r->buf + offsetof(struct fork_wire, flags), sizeof(flags));
    int nfixed = 3 + !!(flags & FORK_F_STDERR) + !!(flags & FORK_F_CTL);
    if (nfds >= nfixed && nfds - nfixed <= SBX_CGROUP_MAX_DIRS && magic == FORK_MAGIC) {
        r->efd = fds[0];
        r->syncfd = fds[1];
        r->gofd = fds[2];
        r->errfd = flags & FORK_F_STDERR ? fds[3] : -1;
        r->ctlfd = flags & FORK_F_CTL ? fds[nfixed - 1] : -1;
        r->ncgdirs = nfds - nfixed; /* the kernel's cgroup, for its proxy to move into */
        memcpy(r->cgdirs, fds + nfixed, (size_t)r->ncgdirs * sizeof(int));
    } else {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    }
    if (r->efd < 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n < sizeof(r->w))
        goto fail;
    memcpy(&r->w, r->buf, sizeof(r->w));
    r->buf[n] = '\0';
    if (r->w.magic != FORK_MAGIC || r->w.nenv > FORK_STR_MAX || r->w.npayload > FORK_STR_MAX)
        goto fail;
    size_t nstr = FORK_FIXED + r->w.nenv + r->w.npayload;
    char **strs = calloc(nstr, sizeof(char *));
    if (!strs) {
        err = ENOMEM;
        goto fail;
    }
    char *q = r->buf + sizeof(r->w), *end = r->buf + n;
    for (size_t i = 0; i < nstr; i++) {
        char *z = memchr(q, '\0', (size_t)(end - q));
        if (q >= end || !z) {
            free(strs);
            goto fail;
        }
        strs[i] = q;
        q = z + 1;
    }
    r->env = calloc(r->w.nenv + 1, sizeof(char *));
    r->payload = calloc(r->w.npayload + 1, sizeof(char *));
    if (!r->env || !r->payload) {
        free(strs);
        err = ENOMEM;
        goto fail;
    }
    memcpy(r->env, strs + FORK_FIXED, r->w.nenv * sizeof(char *));
    memcpy(r->payload, strs + FORK_FIXED + r->w.nenv, r->w.npayload * sizeof(char *));
    r->p = (sbx_profile_t){.runtime_dir = strs[0], .root_dir = strs[1],
                           .workspace_dir = strs[2][0] ? strs[2] : NULL,
                           .python_dir = strs[3][0] ? strs[3] : NULL, .uid = r->w.uid,
                           .root_uid = r->w.root_uid, .lim = &r->w.lim, .cgroup = NULL,
                           .cgroup_dirfds = r->cgdirs, .ncgroup_dirfds = r->ncgdirs,
                           .init_fd = init_fd, .envp = r->env, .stderr_fd = r->errfd,
                           .ctl_fd = r->ctlfd};
    free(strs);
    *ret = r;
    return 0;
fail:
    sbx_fork_req_free(&r);
    return -err;
}

void sbx_fork_req_wipe(sbx_fork_req_t *r)
{
    explicit_bzero(r->buf, FORK_MSG_MAX + 1);
}

char *const *sbx_fork_req_payload(const sbx_fork_req_t *r)
{
    return r->payload;
}

char *const *sbx_fork_req_env(const sbx_fork_req_t *r)
{
    return r->env;
}

/* The fork server's child, the gateway's child too (CLONE_PARENT): a proxy. */
static void forked_proxy(sbx_fork_req_t *r, int server, void (*fn)(void *), void *arg)
{
    pid_t gw = (pid_t)r->w.gateway;
    sbx__reset_signals();
    close(server);
    if (setsid() < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != gw)
        sbx__fail(r->efd, ST_FORK, errno ? errno : ESRCH);
    sbx__proxy_stage(r->efd, r->syncfd, r->gofd, &r->p, fn, arg);
}

int sbx_fork_req_spawn(sbx_fork_req_t *r, int server, void (*fn)(void *arg), void *arg)
{
    int r_ = sbx_filter_prepare();
    if (r_ < 0) {
        sbx__report(r->efd, ST_SECCOMP, -r_);
        return r_;
    }
    /* CLONE_PARENT: the proxy is the gateway's child at once (one fork of this large process
     * instead of two, and no wait for a re-parenting). A raw clone leaves the child's
     * thread-library descriptor with our thread id: the proxy is single-threaded, uses no
     * pthread call that needs its own id, and every process after it is created by fork() or
     * vfork(). */
    pid_t px = (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), NULL, NULL,
                              NULL, 0UL);
    if (px < 0) {
        int err = errno;
        sbx__report(r->efd, ST_FORK, err);
        return -err;
    }
    if (px == 0)
        forked_proxy(r, server, fn, arg);
    return 0;
}
