/* The gateway's side of a sandbox: forking the proxy, the handshake that maps its uids and
 * moves it into its cgroup, a pending start for an event loop, the set-up report, dry runs. */
#include "sandbox/private.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "sandbox/filter.h"

static const char *const step_names[ST_N] = {
    [ST_USERNS] = "create a user namespace",
    [ST_CGROUP] = "move into the kernel's cgroup",
    [ST_MAPS] = "map uids into the user namespace",
    [ST_NAMESPACES] = "create mount/pid/network/ipc/uts/cgroup namespaces",
    [ST_FORK] = "fork the sandbox init",
    [ST_ROOT] = "mount the tmpfs root",
    [ST_USR] = "bind /usr read-only",
    [ST_ETC] = "populate /etc",
    [ST_PROC] = "mount /proc",
    [ST_DEV] = "populate /dev",
    [ST_TMPFS] = "mount /tmp, home and the workspace",
    [ST_RUNTIME] = "bind the runtime directory",
    [ST_PYTHON] = "bind the gateway's Python modules",
    [ST_PIVOT] = "pivot_root",
    [ST_HOSTNAME] = "set the hostname",
    [ST_LOOPBACK] = "bring up the loopback interface",
    [ST_PRIVS] = "drop privileges",
    [ST_RLIMITS] = "set rlimits",
    [ST_SECCOMP] = "load the seccomp filter",
    [ST_EXEC_INIT] = "start the sandbox init",
    [ST_EXEC_KERNEL] = "start the kernel",
};

static int write_map(pid_t pid, const char *file, const char *map)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, file);
    return util_write_small(p, map);
}

static void describe(const struct sbx__failure *f, char *why, size_t whysz)
{
    snprintf(why, whysz, "sandbox: cannot %s: %s",
             f->step > 0 && f->step < ST_N ? step_names[f->step] : "set up", strerror(f->err));
}

static bool is_our_child(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    int ppid = -1;
    char state;
    return rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == (int)getpid();
}

/* Once a proxy has its user namespace: writes its uid maps, moves it into its cgroup unless
 * it is there already, and lets it go on. 0, or a failure (with why when it is the gateway's). */
static struct sbx__failure let_go(pid_t pid, int gofd, uid_t root_uid, uid_t uid,
                                  sbx_cgroup_t *cg, char *why, size_t whysz)
{
    char map[128];
    int r;
    snprintf(map, sizeof(map), "0 %u 1\n%u %u 1\n", (unsigned)root_uid, SBX_UID, (unsigned)uid);
    r = write_map(pid, "uid_map", map);
    if (r == 0)
        r = write_map(pid, "gid_map", map);
    if (r < 0)
        return (struct sbx__failure){ST_MAPS, -r};
    if (cg && !sbx_cgroup_has(cg, pid) && (r = sbx_cgroup_attach(cg, pid)) < 0) {
        snprintf(why, whysz, "cannot move the kernel into its cgroup: %s", strerror(-r));
        return (struct sbx__failure){ST_NONE, -r};
    }
    if (write(gofd, "g", 1) != 1)
        return (struct sbx__failure){ST_MAPS, errno};
    return (struct sbx__failure){0, 0};
}

/* The gateway's half of the set-up, once a proxy runs: it says its pid (expect: the pid we
 * forked, or 0 for a fork server's proxy, which must have become our child) after creating
 * its user namespace; let_go does the rest. The descriptors are the read end of efd and syncp
 * and the write end of gop (all closed here but efd, returned as the set-up report on
 * success). */
int sbx__handshake(pid_t expect, int efd, int syncfd, int gofd, int timeout_ms,
                   const sbx_profile_t *p, pid_t *ret_pid, int *ret_pidfd, int *ret_setupfd,
                   char *why, size_t whysz)
{
    struct sbx__failure f = {0, 0};
    pid_t pid = 0;
    int r;
    struct pollfd pfd = {.fd = syncfd, .events = POLLIN};
    while ((r = poll(&pfd, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    if (r == 0) {
        snprintf(why, whysz, "the fork server did not answer within %d ms", timeout_ms);
        close(efd);
        close(syncfd);
        close(gofd);
        return -ETIMEDOUT;
    }
    if (read(syncfd, &pid, sizeof(pid)) == sizeof(pid) && pid > 1 &&
        (expect ? pid == expect : is_our_child(pid))) {
        /* an exec'd proxy (expect) moved itself into its cgroup, or failed (its report); a
         * fork server's that was lent the cgroup moves itself after this */
        f = let_go(pid, gofd, p->root_uid, p->uid,
                   expect || p->ncgroup_dirfds ? NULL : p->cgroup, why, whysz);
    } else {
        /* the proxy (or the fork server) failed before the user namespace existed: its report
         * is in efd */
        ssize_t n;
        if (!expect && pid > 0 && !is_our_child(pid))
            pid = 0; /* not ours: never signal it */
        do {
            n = read(efd, &f, sizeof(f));
        } while (n < 0 && errno == EINTR);
        if (n != sizeof(f) || !f.err)
            f = (struct sbx__failure){ST_USERNS, EIO};
    }
    close(gofd);
    close(syncfd);
    if (!pid)
        pid = expect;
    if (f.err) {
        if (pid > 1) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        if (!why[0])
            describe(&f, why, whysz);
        close(efd);
        return -f.err;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0 && errno != ENOSYS) {
        r = -errno;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(efd);
        return r;
    }
    if (pidfd >= 0)
        fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    fcntl(efd, F_SETFL, O_NONBLOCK);
    *ret_pid = pid;
    *ret_pidfd = pidfd;
    *ret_setupfd = efd;
    return 0;
}

/* The set-up pipes of a start that failed (-1: never opened). */
void sbx__close_pipes(int efd[2], int syncp[2], int gop[2])
{
    for (int i = 0; i < 2; i++) {
        if (efd[i] >= 0)
            close(efd[i]);
        if (syncp[i] >= 0)
            close(syncp[i]);
        if (gop[i] >= 0)
            close(gop[i]);
    }
}

/* Forks the proxy of sbx_start_async; the parent's ends of the pipes stay open (efd[0],
 * syncp[0], gop[1]). */
static int fork_proxy(const struct sbx_start_opts *o, int efd[2], int syncp[2], int gop[2],
                      pid_t *ret_pid, char *why, size_t whysz)
{
    int r;
    why[0] = '\0';
    if ((r = sbx_filter_prepare()) < 0) {
        snprintf(why, whysz, "cannot compile the seccomp filter: %s", strerror(-r));
        return r;
    }
    if (pipe2(efd, O_CLOEXEC) < 0 || pipe2(syncp, O_CLOEXEC) < 0 || pipe2(gop, O_CLOEXEC) < 0)
        return -errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        sbx__reset_signals();
        util_sched_slice(0); /* a kernel gets the default slice, not the gateway's */
        close(efd[0]);
        close(syncp[0]);
        close(gop[1]);
        if (setsid() < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(127);
        sbx__proxy_stage(efd[1], syncp[1], gop[0], o->profile, o->fn, o->arg);
    }
    close(efd[1]);
    close(syncp[1]);
    close(gop[0]);
    efd[1] = syncp[1] = gop[0] = -1;
    *ret_pid = pid;
    return 0;
}

int sbx_start_async(const struct sbx_start_opts *o, pid_t *ret_pid, int *ret_pidfd,
                    int *ret_setupfd, char *why, size_t whysz)
{
    int efd[2] = {-1, -1}, syncp[2] = {-1, -1}, gop[2] = {-1, -1};
    pid_t pid = -1;
    int r = fork_proxy(o, efd, syncp, gop, &pid, why, whysz);
    if (r < 0) {
        sbx__close_pipes(efd, syncp, gop);
        return r;
    }
    return sbx__handshake(pid, efd[0], syncp[0], gop[1], -1, o->profile, ret_pid, ret_pidfd,
                          ret_setupfd, why, whysz);
}

struct sbx_pending {
    pid_t pid;
    int syncfd, gofd;
    uid_t uid, root_uid;
};

int sbx_start_begin(const struct sbx_start_opts *o, pid_t *ret_pid, int *ret_pidfd,
                    int *ret_setupfd, sbx_pending_t **ret, char *why, size_t whysz)
{
    int efd[2] = {-1, -1}, syncp[2] = {-1, -1}, gop[2] = {-1, -1};
    sbx_pending_t *pd = calloc(1, sizeof(*pd));
    pid_t pid = 0;
    int r = pd ? fork_proxy(o, efd, syncp, gop, &pid, why, whysz) : -ENOMEM;
    int pidfd = r < 0 ? -1 : (int)syscall(SYS_pidfd_open, pid, 0);
    if (r == 0 && pidfd < 0 && errno != ENOSYS)
        r = -errno;
    if (r < 0) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        sbx__close_pipes(efd, syncp, gop);
        free(pd);
        return r;
    }
    if (pidfd >= 0)
        fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    fcntl(efd[0], F_SETFL, O_NONBLOCK);
    fcntl(syncp[0], F_SETFL, O_NONBLOCK);
    /* no cgroup to check: the proxy moves itself in, or fails with its report (stages.c) */
    *pd = (sbx_pending_t){.pid = pid, .syncfd = syncp[0], .gofd = gop[1],
                          .uid = o->profile->uid, .root_uid = o->profile->root_uid};
    *ret_pid = pid;
    *ret_pidfd = pidfd;
    *ret_setupfd = efd[0];
    *ret = pd;
    return 0;
}

int sbx_pending_fd(const sbx_pending_t *pd)
{
    return pd->syncfd;
}

int sbx_start_continue(sbx_pending_t **pp, char *why, size_t whysz)
{
    sbx_pending_t *pd = *pp;
    pid_t pid = 0;
    why[0] = '\0';
    ssize_t n = read(pd->syncfd, &pid, sizeof(pid));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return -EAGAIN;
    struct sbx__failure f = {0, ESRCH}; /* it failed before its user namespace: see its report */
    if (n == sizeof(pid) && pid == pd->pid) {
        f = let_go(pid, pd->gofd, pd->root_uid, pd->uid, NULL, why, whysz);
        if (f.err) {
            kill(pid, SIGKILL);
            if (!why[0])
                describe(&f, why, whysz);
        }
    }
    sbx_pending_free(pp);
    return -f.err;
}

void sbx_pending_free(sbx_pending_t **pp)
{
    sbx_pending_t *pd = *pp;
    if (!pd)
        return;
    close(pd->syncfd);
    close(pd->gofd); /* a proxy still waiting for it exits */
    free(pd);
    *pp = NULL;
}

int sbx_setup_result(int setupfd, char *why, size_t whysz)
{
    struct sbx__failure f = {0, 0};
    ssize_t n;
    do {
        n = read(setupfd, &f, sizeof(f));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return -EINPROGRESS;
    if (n == 0)
        return 0; /* every end closed on exec: init and the kernel started */
    if (n != sizeof(f) || !f.err)
        f = (struct sbx__failure){ST_NONE, n < 0 ? errno : EIO};
    describe(&f, why, whysz);
    return -f.err;
}

int sbx_start(const struct sbx_start_opts *o, pid_t *ret_pid, int *ret_pidfd, char *why,
              size_t whysz)
{
    pid_t pid = -1;
    int pidfd, setupfd;
    int r = sbx_start_async(o, &pid, &pidfd, &setupfd, why, whysz);
    if (r < 0)
        return r;
    struct pollfd pfd = {.fd = setupfd, .events = POLLIN};
    while ((r = sbx_setup_result(setupfd, why, whysz)) == -EINPROGRESS)
        poll(&pfd, 1, -1);
    close(setupfd);
    if (r < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (pidfd >= 0)
            close(pidfd);
        return r;
    }
    *ret_pid = pid;
    *ret_pidfd = pidfd;
    return 0;
}

static void probe_fn(void *arg)
{
    _exit(0);
}

int sbx_probe(const sbx_profile_t *p, char *why, size_t whysz)
{
    pid_t pid = -1;
    int pidfd, st;
    int r = sbx_start(&(struct sbx_start_opts){.profile = p, .fn = probe_fn}, &pid, &pidfd, why,
                      whysz);
    if (r < 0)
        return r;
    waitpid(pid, &st, 0);
    if (pidfd >= 0)
        close(pidfd);
    return 0;
}
