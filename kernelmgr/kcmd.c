/* Commands in a kernel's sandbox (kcmd.h). Sandboxed, a command is forked by the sandbox's
 * init on a request over its command socket (sandbox/sbxcmd.h), which carries the command's
 * pipe ends; init answers with its pid, and with its wait status once it reaped it.
 * Unsandboxed, the gateway forks it (sbx_spawn) and watches its pidfd. Either way the gateway
 * holds the other pipe ends, non-blocking, on its loop. */
#include "kernelmgr/kcmd_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kcmd.h"
#include "sandbox/sbx.h"
#include "sandbox/sbxcmd.h"
#include "sandbox/spawn.h"

/* A kernel's commands (k->cmds): the gateway's end of its sandbox init's command socket, its
 * watch, the commands running. Allocated by the first start that needs it (a sandboxed process's
 * socket, an unsandboxed kernel's first command), kept with the kernel (kcmd__free). */
struct kcmds {
    int fd; /* -1: none */
    evl_io_t *io;
    struct list list; /* struct kcmd.link */
    int n;
    uint32_t next_id;
};

struct kcmd {
    kernel_t *k;      /* NULL once off its kernel (ended, or its kernel's process gone) */
    struct list link; /* on k->cmds->list while k is set */
    evl_t *evl;
    uint32_t id;
    struct kcmd_cbs cb;
    bool sandboxed;
    int fd[3];       /* [0] stdin's write end, [1] stdout's and [2] stderr's read ends */
    evl_io_t *io[3]; /* [1], [2] */
    pid_t pid;
    int pidfd; /* unsandboxed */
    evl_io_t *pid_io;
    evl_timer_t *timer;
    double timeout_s;
    uint64_t start_us;
    long long out_max, out_bytes;
    bool paused, exited, ended, released, kernel_gone, failed;
    int in_cb;
    int wait_status;
    bool asked;     /* reason is why it was stopped */
    long long oom0; /* its kernel's cgroup's OOM kills when it started (-1: no cgroup) */
    enum kcmd_status reason;
    char what[64]; /* argv[0], for messages */
    char sha[65];  /* sha256 of its argv (each string and its NUL), hex, for the audit log */
    char tenant[KMGR_TENANT_MAX + 1], kernel[40];
    long long mem_limit;
    uint64_t *counts; /* its kernel manager's commands ended, by status */
    char fail_msg[160];
};

static const char *const status_names[KCMD_STATUS_N] = {
    [KCMD_OK] = "ok",
    [KCMD_ERROR] = "error",
    [KCMD_KILLED] = "killed",
    [KCMD_TIMEOUT] = "timeout",
    [KCMD_CANCELLED] = "cancelled",
    [KCMD_OUTPUT_LIMIT] = "output_limit",
    [KCMD_KERNEL_GONE] = "kernel_died",
    [KCMD_OUT_OF_MEMORY] = "out_of_memory",
};

_Static_assert(KCMD_STATUS_N == KMGR_CMD_STATUS_N, "the counters of commands (kmgr.h)");

const char *kcmd_status_name(enum kcmd_status s)
{
    return s < KCMD_STATUS_N ? status_names[s] : "error";
}

static void close_fd(kcmd_t *c, int i)
{
    if (c->io[i])
        evl_io_destroy(c->evl, &c->io[i]);
    if (c->fd[i] >= 0)
        close(c->fd[i]);
    c->fd[i] = -1;
}

/* k's commands, allocated on first use (NULL: no memory). */
static struct kcmds *cmds(kernel_t *k)
{
    struct kcmds *s = k->cmds;
    if (s)
        return s;
    if (!(s = calloc(1, sizeof(*s))))
        return NULL;
    s->fd = -1;
    list_init(&s->list);
    k->cmds = s;
    return s;
}

/* c leaves its kernel's list. */
static void off_kernel(kcmd_t *c)
{
    list_remove(&c->link);
    c->k->cmds->n--;
    c->k = NULL;
}

static void cmd_free(kcmd_t *c)
{
    for (int i = 0; i < 3; i++)
        close_fd(c, i);
    evl_io_destroy(c->evl, &c->pid_io);
    if (c->pidfd >= 0)
        close(c->pidfd);
    evl_timer_destroy(c->evl, &c->timer);
    if (c->k)
        off_kernel(c);
    free(c);
}

/* A signal to the command's process group. */
static int send_signal(kcmd_t *c, int sig)
{
    if (!c->sandboxed) {
        if (c->pid <= 1)
            return -ESRCH;
        if (kill(-c->pid, sig) < 0 && kill(c->pid, sig) < 0)
            return -errno;
        return 0;
    }
    if (!c->k || c->k->cmds->fd < 0)
        return -ESRCH;
    struct sbxcmd_head h = {.magic = SBXCMD_MAGIC, .op = SBXCMD_SIGNAL, .id = c->id, .sig = sig};
    if (send(c->k->cmds->fd, &h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(h))
        return -errno;
    return 0;
}

static void stop(kcmd_t *c, enum kcmd_status why)
{
    if (!c->asked) {
        c->asked = true;
        c->reason = why;
    }
    send_signal(c, SIGKILL);
}

static void end(kcmd_t *c)
{
    struct kcmd_end e = {.exit_code = -1, .message = ""};
    char msg[256] = "";
    int st = c->wait_status;
    c->ended = true;
    bool oom = false;
    if (c->k && c->k->cgroup && c->oom0 >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL &&
        !c->asked) {
        /* the OOM killer's: and not to be put down to the kernel when it dies next
         * (klaunch.c's death causes compare the count with what it saw last) */
        struct sbx_cgroup_events ev;
        sbx_cgroup_events(c->k->cgroup, &ev);
        oom = ev.oom_kills > c->oom0 && ev.oom_kills > c->k->oom_seen;
        if (oom)
            c->k->oom_seen = ev.oom_kills;
    }
    for (int i = 0; i < 3; i++)
        close_fd(c, i);
    evl_io_destroy(c->evl, &c->pid_io);
    evl_timer_destroy(c->evl, &c->timer);
    if (c->k)
        off_kernel(c);
    e.duration_us = (int64_t)(util_now_us() - c->start_us);
    if (c->kernel_gone && !c->exited) {
        e.status = KCMD_KERNEL_GONE;
        snprintf(msg, sizeof(msg), "the kernel's process ended, and the command with it");
    } else if (c->failed) {
        e.status = KCMD_ERROR;
        e.exit_code = 127;
        snprintf(msg, sizeof(msg), "%s", c->fail_msg);
    } else {
        if (WIFEXITED(st))
            e.exit_code = WEXITSTATUS(st);
        else if (WIFSIGNALED(st))
            e.signal = WTERMSIG(st);
        e.status = c->asked           ? c->reason
                   : oom              ? KCMD_OUT_OF_MEMORY
                   : e.signal         ? KCMD_KILLED
                   : e.exit_code == 0 ? KCMD_OK
                                      : KCMD_ERROR;
        if (c->kernel_gone && c->asked && c->reason == KCMD_KERNEL_GONE)
            snprintf(msg, sizeof(msg), "the kernel's process ended, and the command with it");
        else if (e.status == KCMD_TIMEOUT)
            snprintf(msg, sizeof(msg), "the command ran over its timeout (%g s) and was killed",
                     c->timeout_s);
        else if (e.status == KCMD_OUTPUT_LIMIT)
            snprintf(msg, sizeof(msg),
                     "the command's output went over its cap (%lld bytes) and it was stopped; "
                     "the rest was discarded",
                     c->out_max);
        else if (e.status == KCMD_CANCELLED)
            snprintf(msg, sizeof(msg), "the command was cancelled");
        else if (e.status == KCMD_OUT_OF_MEMORY)
            snprintf(msg, sizeof(msg),
                     "the command was killed: out of memory (the kernel's limit, %lld bytes, "
                     "counts the kernel and its commands together)",
                     c->mem_limit);
        else if (e.status == KCMD_KILLED)
            snprintf(msg, sizeof(msg), "the command was killed by signal %d (SIG%s)", e.signal,
                     sigabbrev_np(e.signal) ? sigabbrev_np(e.signal) : "?");
    }
    if (c->counts)
        c->counts[e.status]++;
    e.message = msg;
    audit_event("command", "s:s, s:s, s:o, s:s, s:s, s:i, s:i, s:f", "tenant", c->tenant, "kernel",
                c->kernel, "program", audit_str(c->what, strlen(c->what)), "command_sha256", c->sha,
                "status", kcmd_status_name(e.status), "exit_code", e.exit_code, "signal", e.signal,
                "duration_ms", (double)e.duration_us / 1000.0);
    if (!c->released && c->cb.end) {
        c->in_cb++;
        c->cb.end(c->cb.ud, &e);
        c->in_cb--;
    }
    if (c->released && !c->in_cb)
        cmd_free(c);
}

/* Reads what a pipe holds, up to rounds reads: 0 when it is empty now, 1 when it may hold
 * more, -1 at its end (or when it is closed, paused or released). */
static int read_pipe(kcmd_t *c, int i, int rounds)
{
    char buf[KCMD_READ_MAX];
    for (int r = 0; r < rounds; r++) {
        if (c->fd[i] < 0 || c->paused || c->released)
            return -1;
        ssize_t n = read(c->fd[i], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0) {
            close_fd(c, i);
            return -1;
        }
        size_t take = (size_t)n;
        if (c->out_max > 0 && c->out_bytes + n > c->out_max)
            take = (size_t)(c->out_max - c->out_bytes);
        c->out_bytes += (long long)take;
        if (take && c->cb.output && !c->released) {
            c->in_cb++;
            c->cb.output(c->cb.ud, i, buf, take);
            c->in_cb--;
        }
        if (take < (size_t)n) { /* over its cap: the rest is discarded, and it is stopped */
            stop(c, KCMD_OUTPUT_LIMIT);
            close_fd(c, 1);
            close_fd(c, 2);
            return -1;
        }
    }
    return 1;
}

#define DRAIN_ROUNDS                                                      \
    64 /* reads per pipe once it exited (4 MiB): a process it left behind \
          may go on writing */

/* Once it exited: what its pipes still hold (everything it wrote before it exited is there),
 * then the end. A process it left in another session may keep a pipe open: not waited for. */
static void try_end(kcmd_t *c)
{
    if (c->ended || !c->exited || c->in_cb)
        return;
    for (int i = 1; i <= 2; i++)
        read_pipe(c, i, DRAIN_ROUNDS);
    if (c->paused && !c->released)
        return; /* kcmd_pause(false) comes back here */
    end(c);
}

/* try_end on the next turn of the loop (its timer, no longer needed for a timeout) */
static void on_timeout(void *data);
static void soon(kcmd_t *c)
{
    if (!c->timer && !(c->timer = c->evl->timer_new(c->evl, on_timeout, c))) {
        end(c); /* out of memory: at once, without what its pipes hold */
        return;
    }
    c->evl->timer_arm(c->evl, c->timer, 0);
}

static void let_go(kcmd_t *c);

static void on_out(kcmd_t *c, int i)
{
    read_pipe(c, i, 4);
    if (c->released)
        let_go(c); /* kcmd_release in its output callback */
}

static void on_stdout(void *data)
{
    on_out(data, 1);
}

static void on_stderr(void *data)
{
    on_out(data, 2);
}

static int watch(kcmd_t *c)
{
    for (int i = 1; i <= 2; i++)
        if (c->fd[i] >= 0 && !c->io[i] &&
            !(c->io[i] = c->evl->io_add(c->evl, c->fd[i], i == 1 ? on_stdout : on_stderr, c)))
            return -errno;
    return 0;
}

static void on_timeout(void *data)
{
    kcmd_t *c = data;
    if (c->exited) /* it could not start (start_plain): the end, on the turn after the start */
        return try_end(c);
    stop(c, KCMD_TIMEOUT); /* its exit comes as from any other kill */
}

static void exited(kcmd_t *c, int status)
{
    c->exited = true;
    c->wait_status = status;
    try_end(c);
}

/* Unsandboxed: its pidfd is readable. */
static void on_pidfd(void *data)
{
    kcmd_t *c = data;
    siginfo_t si;
    int st = 0;
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
        return;
    kill(-c->pid, SIGKILL); /* its process group goes with it (the leader not yet reaped) */
    if (waitpid(c->pid, &st, WNOHANG) != c->pid)
        st = 0;
    evl_io_destroy(c->evl, &c->pid_io);
    close(c->pidfd);
    c->pidfd = -1;
    c->pid = 0;
    exited(c, st);
}

static kcmd_t *find(kernel_t *k, uint32_t id)
{
    kcmd_t *c;
    list_for_each(c, &k->cmds->list, link) if (c->id == id) return c;
    return NULL;
}

/* init's answers */
static void on_ctl(void *data)
{
    kernel_t *k = data;
    for (int i = 0; i < 64 && k->cmds->fd >= 0; i++) {
        struct sbxcmd_event e;
        ssize_t n = recv(k->cmds->fd, &e, sizeof(e), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) { /* init is gone: the sandbox with it */
            kcmd__detach(k);
            return;
        }
        if (n != (ssize_t)sizeof(e) || e.magic != SBXCMD_MAGIC)
            continue;
        kcmd_t *c = find(k, e.id);
        if (!c)
            continue;
        if (e.type == SBXCMD_STARTED) {
            c->pid = e.pid;
        } else if (e.type == SBXCMD_FAILED) {
            c->failed = true;
            snprintf(c->fail_msg, sizeof(c->fail_msg), "cannot run '%s': %s", c->what,
                     strerror(e.err > 0 && e.err < 4096 ? e.err : EIO));
            exited(c, 127 << 8);
        } else if (e.type == SBXCMD_EXITED) {
            exited(c, e.status);
        }
    }
}

int kcmd__open(kernel_t *k, int *ret_init)
{
    int sv[2];
    struct kcmds *s;
    kcmd__detach(k);
    if (!(s = cmds(k)))
        return -ENOMEM;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    if (!(s->io = k->m->evl->io_add(k->m->evl, sv[0], on_ctl, k))) {
        int r = -errno;
        close(sv[0]);
        close(sv[1]);
        return r;
    }
    s->fd = sv[0];
    *ret_init = sv[1];
    return 0;
}

int kcmd__resume(kernel_t *k, int fd)
{
    struct kcmds *s;
    kcmd__detach(k);
    if (!(s = cmds(k)))
        return -ENOMEM;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
        return -errno;
    if (!(s->io = k->m->evl->io_add(k->m->evl, fd, on_ctl, k)))
        return errno ? -errno : -ENOMEM;
    s->fd = fd;
    return 0;
}

int kcmd__fd(const kernel_t *k)
{
    return k->cmds ? k->cmds->fd : -1;
}

int kcmd__running(const kernel_t *k)
{
    return k->cmds ? k->cmds->n : 0;
}

void kcmd__detach(kernel_t *k)
{
    struct kcmds *s = k->cmds;
    if (!s)
        return;
    evl_io_destroy(k->m->evl, &s->io);
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    kcmd_t *c, *tmp;
    list_for_each_safe(c, tmp, &s->list, link)
    {
        c->kernel_gone = true;
        if (!c->sandboxed) {
            /* killed; it ends when reaped (its pidfd), off its kernel now */
            stop(c, KCMD_KERNEL_GONE);
            off_kernel(c);
            continue;
        }
        end(c);
    }
}

void kcmd__free(kernel_t *k)
{
    kcmd__detach(k);
    free(k->cmds);
    k->cmds = NULL;
}

/* envp with env's variables set over it: a new vector of borrowed strings. */
static const char **merge_env(char *const *envp, const char *const *env, int *ret_err)
{
    size_t n = 0, m = 0;
    while (envp && envp[n])
        n++;
    while (env && env[m]) {
        const char *eq = strchr(env[m], '=');
        if (!eq || eq == env[m]) {
            *ret_err = -EINVAL;
            return NULL;
        }
        m++;
    }
    const char **v = calloc(n + m + 1, sizeof(*v));
    size_t o = 0;
    if (!v) {
        *ret_err = -ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(envp[i], '=');
        size_t len = eq ? (size_t)(eq - envp[i]) + 1 : strlen(envp[i]);
        bool over = false;
        for (size_t j = 0; j < m && !over; j++)
            over = !strncmp(env[j], envp[i], len);
        if (!over)
            v[o++] = envp[i];
    }
    for (size_t j = 0; j < m; j++)
        v[o++] = env[j];
    return v;
}

/* The command's working directory in out: cwd when absolute, relative to the workspace ws
 * when not (as a shell in the workspace would take it), dflt when none. 0, or -ENAMETOOLONG. */
static int cmd_cwd(char *out, size_t sz, const char *cwd, const char *ws, const char *dflt)
{
    int n = !cwd || !cwd[0]   ? snprintf(out, sz, "%s", dflt)
            : cwd[0] == '/' ? snprintf(out, sz, "%s", cwd)
                            : snprintf(out, sz, "%s/%s", ws, cwd);
    return n < 0 || (size_t)n >= sz ? -ENAMETOOLONG : 0;
}

static int start_sandboxed(kcmd_t *c, kernel_t *k, const struct kcmd_opts *o, const char **env,
                           const int *child, int nchild)
{
    char cwd[4096], *msg = NULL;
    size_t len = 0;
    int r = cmd_cwd(cwd, sizeof(cwd), o->cwd, SBX_WORKSPACE_PATH, SBX_WORKSPACE_PATH);
    if (r < 0)
        return r;
    r = sbxcmd_encode_spawn(c->id, o->stdin_open ? SBXCMD_F_STDIN : 0, cwd, o->argv, env, &msg,
                                &len);
    if (r < 0)
        return r;
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {msg, len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE((size_t)nchild * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)nchild * sizeof(int));
    memcpy(CMSG_DATA(cm), child, (size_t)nchild * sizeof(int));
    ssize_t n = sendmsg(k->cmds->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    r = n == (ssize_t)len ? 0 : n < 0 ? (errno == EAGAIN ? -EAGAIN : -errno) : -EIO;
    explicit_bzero(msg, len);
    free(msg);
    return r;
}

static int start_plain(kcmd_t *c, kernel_t *k, const struct kcmd_opts *o, const char **env,
                       const int *child, int nchild)
{
    char cwd[4096];
    /* a relative cwd is the workspace's, as in the sandbox (not the gateway's own) */
    int r = cmd_cwd(cwd, sizeof(cwd), o->cwd, k->ws->path,
                    k->m->o.kernel_cwd ? k->m->o.kernel_cwd : k->ws->path);
    if (r < 0)
        return r;
    struct sbx_spawn_opts so = {.argv = (char *const *)o->argv,
                                .envp = (char *const *)env,
                                .cwd = cwd,
                                .stdin_fd = nchild == 3 ? child[0] : -1,
                                .stdout_fd = child[nchild - 2],
                                .stderr_fd = child[nchild - 1]};
    r = sbx_spawn(&so, &c->pid, &c->pidfd);
    if (r < 0) {
        /* as a shell says it: the command ends at once with status 127 */
        c->failed = true;
        snprintf(c->fail_msg, sizeof(c->fail_msg), "cannot run '%s': %s", c->what, strerror(-r));
        c->exited = true;
        c->wait_status = 127 << 8;
        return 0;
    }
    if (c->pidfd < 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        return -ENOSYS;
    }
    if (!(c->pid_io = c->evl->io_add(c->evl, c->pidfd, on_pidfd, c))) {
        r = -errno;
        kill(-c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        return r;
    }
    return 0;
}

int kcmd_start(kernel_t *k, const struct kcmd_opts *o, const struct kcmd_cbs *cb, kcmd_t **ret)
{
    int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}, r = 0;
    bool sandboxed = k->m->o.sandbox != NULL;
    if (!o->argv || !o->argv[0] || !o->argv[0][0])
        return -EINVAL;
    if (!k->pid || k->state == KERNEL_DEAD || k->state == KERNEL_TERMINATING ||
        (sandboxed && (!k->cmds || k->cmds->fd < 0)))
        return -ESRCH;
    struct kcmds *s = cmds(k);
    if (!s)
        return -ENOMEM;
    int max = k->m->o.max_commands > 0 ? k->m->o.max_commands : KCMD_PER_KERNEL_MAX;
    if (s->n >= (max < SBXCMD_CMDS_MAX ? max : SBXCMD_CMDS_MAX))
        return -EAGAIN;
    kcmd_t *c = calloc(1, sizeof(*c));
    const char **env = merge_env(k->envp, o->env, &r);
    if (!c || !env) {
        free(c);
        free(env);
        return r < 0 ? r : -ENOMEM;
    }
    list_init(&c->link);
    c->evl = k->m->evl;
    c->sandboxed = sandboxed;
    c->cb = *cb;
    c->fd[0] = c->fd[1] = c->fd[2] = -1;
    c->pidfd = -1;
    c->start_us = util_now_us();
    c->timeout_s = o->timeout_s;
    c->out_max = o->output_max > 0 ? o->output_max : o->output_max < 0 ? 0 : k->output_cap;
    snprintf(c->what, sizeof(c->what), "%s", o->argv[0]);
    for (char *q = c->what; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    crypto_hash_sha256_state hs;
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_init(&hs);
    for (size_t i = 0; o->argv[i]; i++)
        crypto_hash_sha256_update(&hs, (const unsigned char *)o->argv[i], strlen(o->argv[i]) + 1);
    crypto_hash_sha256_final(&hs, h);
    sodium_bin2hex(c->sha, sizeof(c->sha), h, sizeof(h));
    snprintf(c->tenant, sizeof(c->tenant), "%s", k->ws->tenant);
    c->oom0 = -1;
    c->mem_limit = k->lim.mem_bytes;
    c->counts = k->stats->commands;
    if (k->cgroup) {
        struct sbx_cgroup_events ev;
        sbx_cgroup_events(k->cgroup, &ev);
        c->oom0 = ev.oom_kills;
    }
    snprintf(c->kernel, sizeof(c->kernel), "%s", k->id);
    do
        c->id = ++s->next_id;
    while (!c->id || c->id == 0xffffffffU || find(k, c->id));
    for (int i = o->stdin_open ? 0 : 1; i < 3; i++)
        if (pipe2(p[i], O_CLOEXEC) < 0) {
            r = -errno;
            goto fail;
        }
    /* the gateway's ends: stdin's write end, the outputs' read ends */
    int child[3], nchild = 0;
    for (int i = o->stdin_open ? 0 : 1; i < 3; i++) {
        c->fd[i] = p[i][i == 0 ? 1 : 0];
        child[nchild++] = p[i][i == 0 ? 0 : 1];
        fcntl(c->fd[i], F_SETFL, O_NONBLOCK);
    }
    r = sandboxed ? start_sandboxed(c, k, o, env, child, nchild)
                  : start_plain(c, k, o, env, child, nchild);
    for (int i = 0; i < nchild; i++)
        close(child[i]);
    memset(p, -1, sizeof(p));
    if (r < 0)
        goto fail;
    if ((r = watch(c)) < 0)
        goto kill;
    if (o->timeout_s > 0 || c->exited) {
        if (!(c->timer = c->evl->timer_new(c->evl, on_timeout, c))) {
            r = -errno;
            goto kill;
        }
        double ms = c->exited ? 0 : o->timeout_s * 1000.0;
        c->evl->timer_arm(c->evl, c->timer, ms > 1e12 ? (uint64_t)1e12 : (uint64_t)ms);
    }
    free(env);
    audit_event("command_start", "s:s, s:s, s:o, s:s", "tenant", c->tenant, "kernel", c->kernel,
                "program", audit_str(c->what, strlen(c->what)), "command_sha256", c->sha);
    c->k = k;
    list_append(&s->list, &c->link);
    s->n++;
    *ret = c;
    return 0;
kill:
    /* started, but not watched: it goes (sandboxed, init reaps it; else we do) */
    c->k = k; /* (send_signal's way to init) */
    send_signal(c, SIGKILL);
    if (!c->sandboxed && c->pid > 1)
        waitpid(c->pid, NULL, 0); /* SIGKILLed: at once */
fail:
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            if (p[i][j] >= 0)
                close(p[i][j]);
    free(env);
    c->k = NULL;
    cmd_free(c);
    return r;
}

int kcmd_write_stdin(kcmd_t *c, const void *buf, size_t n)
{
    if (c->fd[0] < 0)
        return c->ended || c->exited ? -EPIPE : -EBADF;
    ssize_t w = write(c->fd[0], buf, n);
    if (w < 0)
        return errno == EAGAIN ? 0 : -errno; /* EPIPE: it closed its stdin, or ended */
    return (int)w;
}

int kcmd_close_stdin(kcmd_t *c)
{
    if (c->fd[0] < 0)
        return -EBADF;
    close_fd(c, 0);
    return 0;
}

int kcmd_signal(kcmd_t *c, int sig)
{
    if (c->ended || c->exited)
        return -ESRCH;
    if (sig < 1 || sig > 64)
        return -EINVAL;
    if (sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
        if (!c->asked) {
            c->asked = true;
            c->reason = KCMD_CANCELLED;
        }
    }
    return send_signal(c, sig);
}

void kcmd_pause(kcmd_t *c, bool paused)
{
    if (c->ended || c->paused == paused)
        return;
    c->paused = paused;
    if (paused) {
        evl_io_destroy(c->evl, &c->io[1]);
        evl_io_destroy(c->evl, &c->io[2]);
        return;
    }
    if (watch(c) < 0) /* no watch: nothing more is read, it is stopped */
        stop(c, KCMD_OUTPUT_LIMIT);
    if (c->exited)
        soon(c);
}

int kcmd_pid(const kcmd_t *c)
{
    return (int)c->pid;
}

int kcmd_running(const kernel_t *k)
{
    return k->cmds ? k->cmds->n : 0;
}

bool kcmd_ended(const kcmd_t *c)
{
    return c->ended;
}

void kcmd_release(kcmd_t **pc)
{
    kcmd_t *c = *pc;
    if (!c)
        return;
    *pc = NULL;
    c->released = true;
    if (!c->in_cb) /* else when its callback returns (end, on_out) */
        let_go(c);
}

static void let_go(kcmd_t *c)
{
    if (c->ended) {
        cmd_free(c);
        return;
    }
    /* still running: killed; freed once it is known to have ended (its exit, the kernel's
     * end), without callbacks. Its pipes go now: what it writes next gets EPIPE. */
    for (int i = 0; i < 3; i++)
        close_fd(c, i);
    if (!c->asked) {
        c->asked = true;
        c->reason = KCMD_CANCELLED;
    }
    send_signal(c, SIGKILL);
    if (c->exited) /* its end was due on the next turn: now, silently */
        end(c);
}
