/* A kernel's launch: its environment, argv and connection file, the spawn (plain, sandboxed
 * by exec, or through the fork server, which its owner lends: kernel_owner_ops), the
 * sandbox's set-up report, its egress proxy once ready, and what its process's end means. */
#include "kernelmgr/klaunch_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kcall_int.h"
#include "kernelmgr/kcmd_int.h"
#include "kernelmgr/kstderr_int.h"
#include "kernelmgr/private.h"
#include "sandbox/sbx.h"
#include "sandbox/spawn.h"

/* ---- process ---- */

char **klaunch__env(const kernel_t *k, json_t *req_env)
{
    const kspec_t *spec = k->spec;
    bool sandboxed = k->m->o.sandbox != NULL;
    json_t *env = json_object();
    const char *home = sandboxed ? SBX_HOME : getenv("HOME");
    const char *pypath = !k->m->pydir[0] ? NULL : sandboxed ? SBX_PYTHON_PATH : k->m->pydir;
    const char *key;
    json_t *v;
    if (!env)
        return NULL;
    json_object_set_new(env, "PATH",
                        json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
    json_object_set_new(env, "LANG", json_string("C.UTF-8"));
    if (home)
        json_object_set_new(env, "HOME", json_string(home));
    /* kgw_tools; sandboxed kernels find the callback socket at its default path */
    if (pypath)
        json_object_set_new(env, "PYTHONPATH", json_string(pypath));
    if (!sandboxed) {
        char cb[PATH_MAX + 16];
        snprintf(cb, sizeof(cb), "%s/%s", k->dir, KCALL_SOCKET_NAME);
        json_object_set_new(env, "KGW_CALLBACK_SOCKET", json_string(cb));
    }
    json_object_foreach(json_object_get(spec->spec, "env"), key, v) if (json_is_string(v))
    {
        if (pypath && !strcmp(key, "PYTHONPATH")) { /* the spec's entries after ours */
            char *both = NULL;
            if (asprintf(&both, "%s:%s", pypath, json_string_value(v)) >= 0)
                json_object_set_new(env, key, json_string(both));
            free(both);
            continue;
        }
        json_object_set(env, key, v);
    }
    json_object_foreach(req_env, key, v) if (json_is_string(v) && !strncmp(key, "KERNEL_", 7))
        json_object_set(env, key, v);
    if (k->egpol) { /* the kernel's egress proxy (kegress.c); nothing bypasses it */
        static const char *const proxy[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                                            "https_proxy"};
        for (size_t j = 0; j < sizeof(proxy) / sizeof(proxy[0]); j++)
            json_object_set_new(env, proxy[j], json_string(KEGRESS_URL));
        json_object_set_new(env, "NO_PROXY", json_string(""));
        json_object_set_new(env, "no_proxy", json_string(""));
        /* its secrets: placeholders only; the proxy holds the values */
        for (size_t j = 0; j < ksecret_count(k->secrets); j++)
            json_object_set_new(env, ksecret_name(k->secrets, j),
                                json_string(ksecret_placeholder(k->secrets, j)));
        /* the proxy reads HTTPS to its secrets' hosts: OpenSSL (urllib, ssl), requests, pip
         * and curl trust the egress CA besides the system's, from a read-only file */
        if (ksecret_count(k->secrets) && k->m->o.tls && k->m->o.ca_bundle && k->m->pydir[0]) {
            static const char *const ca[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
                                             "CURL_CA_BUNDLE", "PIP_CERT",
                                             "NODE_EXTRA_CA_CERTS"};
            for (size_t j = 0; j < sizeof(ca) / sizeof(ca[0]); j++)
                json_object_set_new(env, ca[j], json_string(KMGR_CA_BUNDLE));
        }
    }
    size_t n = json_object_size(env), i = 0;
    char **envp = calloc(n + 1, sizeof(char *));
    json_object_foreach(env, key, v)
    {
        if (!envp || asprintf(&envp[i], "%s=%s", key, json_string_value(v)) < 0) {
            for (size_t j = 0; envp && j < i; j++)
                free(envp[j]);
            free(envp);
            json_decref(env);
            return NULL;
        }
        i++;
    }
    json_decref(env);
    return envp;
}

int klaunch__conn_file(const kernel_t *k, const char *path, const char *view)
{
    char ip[PATH_MAX + 8];
    snprintf(ip, sizeof(ip), "%s/k", view);
    json_t *c = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s}", "shell_port",
                          KPORT_SHELL, "iopub_port", KPORT_IOPUB, "stdin_port", KPORT_STDIN,
                          "control_port", KPORT_CONTROL, "hb_port", KPORT_HB, "ip", ip, "key",
                          k->key, "transport", "ipc", "signature_scheme", "hmac-sha256",
                          "kernel_name", k->spec->name);
    char *s = c ? json_dumps(c, JSON_INDENT(1)) : NULL;
    json_decref(c);
    if (!s)
        return -ENOMEM;
    /* a new file, never through a symlink: the directory is the kernel's (or its parent's) */
    int r = 0, fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        r = -errno;
    else {
        size_t len = strlen(s);
        if (write(fd, s, len) != (ssize_t)len)
            r = -EIO;
        if (r == 0 && k->m->o.sandbox && fchown(fd, k->ws->uid, k->ws->uid) < 0)
            r = -errno;
        close(fd);
    }
    free(s);
    return r;
}

static char **build_argv(const kernel_t *k)
{
    json_t *a = json_object_get(k->spec->spec, "argv");
    size_t n = json_array_size(a);
    char **argv = calloc(n + 1, sizeof(char *));
    if (!argv)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!strcmp(s, "{connection_file}"))
            argv[i] = strdup(k->m->o.sandbox ? SBX_RUNTIME_PATH "/connection.json" : k->conn_file);
        else if (!strcmp(s, "{resource_dir}"))
            argv[i] = strdup(k->spec->dir);
        else
            argv[i] = strdup(s);
        if (!argv[i]) {
            for (size_t j = 0; j < i; j++)
                free(argv[j]);
            free(argv);
            return NULL;
        }
    }
    return argv;
}

void klaunch__free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

struct exec_args {
    char **argv, **envp;
};

static void exec_kernel(void *data)
{
    struct exec_args *a = data;
    execve(a->argv[0], a->argv, a->envp);
}

/* The sandbox's set-up (namespaces, mounts, exec) runs while the loop goes on; its report is
 * read when the process exits (a failed step makes it exit), and is moot once the kernel
 * answers. */
void klaunch__setup_end(kernel_t *k)
{
    if (k->setup_fd >= 0)
        close(k->setup_fd);
    k->setup_fd = -1;
}

/* An exec'd kernel's proxy has its user namespace (it moved itself into its cgroup before):
 * the rest of the gateway's half of the set-up, without the loop ever waiting for it. */
static void on_let_go(void *data)
{
    kernel_t *k = data;
    char why[256];
    /* the watch goes first: sbx_start_continue closes the fd once it has its answer, and a
     * watch must not outlive its fd (evl.h) */
    evl_io_destroy(k->m->evl, &k->pending_io);
    int r = sbx_start_continue(&k->pending, why, sizeof(why));
    if (r == -EAGAIN) { /* nothing to read yet: watch again */
        k->pending_io = k->m->evl->io_add(k->m->evl, sbx_pending_fd(k->pending), on_let_go, k);
        if (k->pending_io)
            return;
        snprintf(why, sizeof(why), "cannot watch the sandbox's set-up: %s", strerror(errno));
        klaunch__abandon(k); /* its proxy exits */
        r = -EIO;
    }
    if (r < 0 && why[0]) { /* the proxy was killed: this is why (on_exit_io says it) */
        snprintf(k->setup_why, sizeof(k->setup_why), "%s", why);
        klaunch__setup_end(k);
    }
}

void klaunch__abandon(kernel_t *k)
{
    evl_io_destroy(k->m->evl, &k->pending_io);
    sbx_pending_free(&k->pending);
}

static int spawn_sandboxed(kernel_t *k, char **argv, int errfd, int ctlfd, char *why,
                           size_t whysz)
{
    const struct kmgr_sandbox *sb = k->m->o.sandbox;
    struct exec_args a = {argv, k->envp};
    sbx_profile_t p = {
        .runtime_dir = k->dir,
        .root_dir = k->root_dir,
        .workspace_dir = k->ws->path,
        .python_dir = k->m->pydir[0] ? k->m->pydir : NULL,
        .uid = k->ws->uid,
        .root_uid = k->ws->uid - 1,
        .lim = &k->lim,
        .cgroup = k->cgroup,
        .init_fd = sb->init_fd,
        .envp = k->envp,
        .stderr_fd = errfd, /* never the gateway's log: a kernel could read it back or forge
                               lines; a pipe the gateway reads (kstderr.c), or /dev/null */
        .ctl_fd = ctlfd,    /* init's command socket (kcmd.c) */
    };
    if (argv[0][0] != '/') {
        snprintf(why, whysz, "kernelspec argv[0] must be an absolute path in the sandbox");
        return -EINVAL;
    }
    k->setup_why[0] = '\0';
    k->forked = false;
    int zfd = k->own->fork_fd(k);
    if (zfd >= 0) {
        /* forkable specs are `python -m ipykernel_launcher -f {connection_file}` (kzygote.c) */
        char *payload[] = {"-f", SBX_RUNTIME_PATH "/connection.json", NULL};
        bool adopted = k->own->fork_adopt(k);
        int dirfds[SBX_CGROUP_MAX_DIRS];
        p.cgroup = k->cgroup;
        p.ncgroup_dirfds = adopted ? 0 : k->own->fork_lend(k, dirfds);
        p.cgroup_dirfds = dirfds;
        struct sbx_start_opts o = {.profile = &p, .server = zfd, .payload = payload,
                                   .timeout_ms = 2000};
        int r = sbx_start_forked(&o, &k->pid, &k->pidfd, &k->setup_fd, why, whysz);
        for (int i = 0; i < p.ncgroup_dirfds; i++)
            close(dirfds[i]);
        if (r < 0)
            k->own->fork_take_back(k);
        if (adopted)
            k->own->fork_adopted(k);
        /* the server's own trouble (no answer, gone, its proxy not re-parented): restart it */
        k->own->forked(k, !(r == -ETIMEDOUT || r == -EPIPE || r == -ECONNRESET ||
                              r == -ENOTCONN || r == -ESRCH || r == -EIO));
        if (r == 0) {
            k->forked = true;
            return 0;
        }
        log_warn("kernel=%s: the fork server failed (%s); starting it with exec", k->id,
                 why[0] ? why : strerror(-r));
        why[0] = '\0';
    }
    struct sbx_start_opts o = {.profile = &p, .fn = exec_kernel, .arg = &a};
    int r = sbx_start_begin(&o, &k->pid, &k->pidfd, &k->setup_fd, &k->pending, why, whysz);
    if (r == 0 && !(k->pending_io = k->m->evl->io_add(k->m->evl, sbx_pending_fd(k->pending),
                                                        on_let_go, k))) {
        r = -errno;
        klaunch__abandon(k);
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
        if (k->pidfd >= 0)
            close(k->pidfd);
        k->pidfd = -1;
        klaunch__setup_end(k);
    }
    return r;
}

int klaunch__start(kernel_t *k, char *msg, size_t msgsz)
{
    char why[256] = "";
    char **argv = build_argv(k);
    int r;
    /* a fresh callback socket for every process: the last one may have replaced the file */
    uid_t owner = k->m->o.sandbox ? k->ws->uid : (uid_t)-1;
    if ((r = kcall__listen(k->calls, owner)) < 0)
        log_warn("kernel=%s: no callbacks: cannot listen on %s/%s: %s", k->id, k->dir,
                 KCALL_SOCKET_NAME, strerror(-r));
    k->spawn_us = util_now_us();
    int errfd = -1;
    if ((r = kstderr__open(k, &errfd)) < 0)
        log_warn("kernel=%s: its stderr goes to /dev/null: no pipe: %s", k->id, strerror(-r));
    if (!argv) {
        r = -ENOMEM;
    } else if (k->m->o.sandbox) {
        int ctlfd = -1, rc;
        if ((rc = kcmd__open(k, &ctlfd)) < 0)
            log_warn("kernel=%s: no commands: cannot make its command socket: %s", k->id,
                     strerror(-rc));
        r = spawn_sandboxed(k, argv, errfd, ctlfd, why, sizeof(why));
        if (ctlfd >= 0)
            close(ctlfd); /* init has its own copy */
        if (r < 0)
            kcmd__detach(k);
    } else {
        struct sbx_spawn_opts so = {.argv = argv,
                                    .envp = k->envp,
                                    .cwd = k->m->o.kernel_cwd ? k->m->o.kernel_cwd : k->ws->path,
                                    .stdout_fd = -1,
                                    .stderr_fd = errfd};
        r = sbx_spawn(&so, &k->pid, &k->pidfd);
    }
    if (errfd >= 0)
        close(errfd); /* the process has its own copy */
    klaunch__free_strv(argv);
    if (r < 0) {
        snprintf(msg, msgsz, "could not start the kernel process: %s",
                 why[0] ? why : strerror(-r));
        k->pid = 0;
        kstderr__drain(k);
        snprintf(k->last_cause, sizeof(k->last_cause), "%s", msg);
        return r;
    }
    if (k->m->o.sandbox)
        k->cgroup_used = true;
    log_debug("kernel=%s: spawned pid %d", k->id, (int)k->pid);
    return 0;
}

#define EXCERPT_MAX 300 /* bytes of stderr quoted in a cause */
static enum kernel_outcome death_outcome(kernel_t *k, enum kmgr_death d, int st, char *cause,
                                         size_t sz);

static void describe_exit(int st, char *out, size_t outsz)
{
    if (WIFEXITED(st))
        snprintf(out, outsz, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(out, outsz, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(out, outsz, "ended (status 0x%x)", st);
}

/* Why a process ended that nobody asked to end (setup_failed: its sandbox's set-up report
 * says a step failed). Also notes the cgroup's counters, so a later death is not put down to
 * an earlier OOM kill. */
static enum kmgr_death death_cause(kernel_t *k, int st, bool setup_failed)
{
    bool oom = false, pids = false;
    if (k->cgroup) {
        struct sbx_cgroup_events ev;
        sbx_cgroup_events(k->cgroup, &ev);
        oom = ev.oom_kills > k->oom_seen;
        pids = ev.pids_max > k->pids_seen;
        k->oom_seen = ev.oom_kills;
        k->pids_seen = ev.pids_max;
    }
    if (setup_failed)
        return KMGR_DEATH_SANDBOX;
    if (k->exit_status == -ETIMEDOUT)
        return k->hb_killed ? KMGR_DEATH_HEARTBEAT : KMGR_DEATH_TIMEOUT;
    if (oom)
        return KMGR_DEATH_OOM;
    if (pids)
        return KMGR_DEATH_PIDS;
    /* a sandboxed kernel's proxy exits with 128 + the signal that ended the kernel
     * (sandbox/stages.c) */
    if (WIFSIGNALED(st) ||
        (k->m->o.sandbox && WIFEXITED(st) && WEXITSTATUS(st) > 128 && WEXITSTATUS(st) <= 128 + 64))
        return KMGR_DEATH_SIGNAL;
    return KMGR_DEATH_EXIT;
}

enum kmgr_start_fail klaunch__start_fail(enum kmgr_death d)
{
    switch (d) {
    case KMGR_DEATH_SANDBOX:
        return KMGR_FAIL_SANDBOX;
    case KMGR_DEATH_TIMEOUT:
        return KMGR_FAIL_TIMEOUT;
    default:
        return KMGR_FAIL_DIED;
    }
}

/* "512 MiB", "1.5 GiB", "1000 bytes" */
static void fmt_bytes(long long n, char *out, size_t outsz)
{
    if (n >= (1LL << 30) && n % (1LL << 20) == 0 && n % (1LL << 30) != 0)
        snprintf(out, outsz, "%lld MiB", n >> 20);
    else if (n >= (1LL << 30))
        snprintf(out, outsz, "%.3g GiB", (double)n / (double)(1LL << 30));
    else if (n >= (1LL << 20))
        snprintf(out, outsz, "%.3g MiB", (double)n / (double)(1LL << 20));
    else
        snprintf(out, outsz, "%lld bytes", n);
}

/* cause, then what the kernel's stderr said last (a short excerpt), where it explains a death */
static void add_excerpt(const kernel_t *k, char *cause, size_t sz)
{
    char ex[EXCERPT_MAX + 1];
    size_t len = strlen(cause), room = sz - len;
    if (room < 40) /* "; its stderr ended: " and a few words */
        return;
    if (kstderr__excerpt(k, ex, room - 20 < sizeof(ex) ? room - 20 : sizeof(ex)) > 0)
        snprintf(cause + len, room, "; its stderr ended: %s", ex);
}

/* What a death nobody asked for means for the requests in flight, in one line. */
enum kernel_outcome klaunch__death_outcome(kernel_t *k, enum kmgr_death d, int st, char *cause,
                                           size_t sz)
{
    enum kernel_outcome o = death_outcome(k, d, st, cause, sz);
    if (d == KMGR_DEATH_EXIT || d == KMGR_DEATH_SIGNAL || d == KMGR_DEATH_TIMEOUT ||
        d == KMGR_DEATH_SANDBOX)
        add_excerpt(k, cause, sz);
    return o;
}

enum kernel_outcome klaunch__live_death(kernel_t *k, int st, bool known, char *cause, size_t sz)
{
    enum kmgr_death d = death_cause(k, st, false);
    k->stats->deaths[d]++;
    if (!known && d == KMGR_DEATH_EXIT) {
        snprintf(cause, sz, "the kernel's process ended");
        add_excerpt(k, cause, sz);
        return KERNEL_OUT_KERNEL_DIED;
    }
    return klaunch__death_outcome(k, d, st, cause, sz);
}

static enum kernel_outcome death_outcome(kernel_t *k, enum kmgr_death d, int st, char *cause,
                                         size_t sz)
{
    char lim[32];
    int sig = WIFSIGNALED(st) ? WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) - 128 : 0;
    switch (d) {
    case KMGR_DEATH_OOM:
        fmt_bytes(k->lim.mem_bytes, lim, sizeof(lim));
        snprintf(cause, sz, "the kernel was killed: out of memory (limit %s)", lim);
        return KERNEL_OUT_OUT_OF_MEMORY;
    case KMGR_DEATH_PIDS:
        snprintf(cause, sz, "the kernel ended after reaching its process limit (%lld)",
                 k->lim.pids);
        return KERNEL_OUT_PIDS_LIMIT;
    case KMGR_DEATH_SIGNAL:
        snprintf(cause, sz, "the kernel was killed by signal %d (%s)", sig,
                 sig > 0 && sig < 65 ? sigabbrev_np(sig) ? sigabbrev_np(sig) : "?" : "?");
        return KERNEL_OUT_KILLED;
    case KMGR_DEATH_HEARTBEAT:
        snprintf(cause, sz, "the kernel stopped answering (%d heartbeats missed) and was killed",
                 k->m->o.hb_misses);
        return KERNEL_OUT_KERNEL_DIED;
    case KMGR_DEATH_EXIT:
        if (k->adopted) {
            snprintf(cause, sz,
                     "the forked kernel's process ended (a fork lives in the sandbox of the "
                     "kernel %s it was forked from, and ends with it)", k->fork_of);
            return KERNEL_OUT_KERNEL_DIED;
        }
        if (WIFEXITED(st)) {
            snprintf(cause, sz, "the kernel exited with status %d", WEXITSTATUS(st));
            return KERNEL_OUT_KERNEL_DIED;
        }
        break;
    default:
        break;
    }
    snprintf(cause, sz, "the kernel died");
    return KERNEL_OUT_KERNEL_DIED;
}

/* Whether an adopted process (not the gateway's child: no wait status) has ended: its pidfd
 * is readable. */
static bool adopted_ended(const kernel_t *k)
{
    struct pollfd p = {.fd = k->pidfd, .events = POLLIN};
    return k->pidfd < 0 || (poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP)));
}

int klaunch__reap(kernel_t *k, int *ret_status)
{
    int st = 0;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (k->adopted) {
        /* a fork: reaped by its sandbox's init (or the host's); its status is not ours to
         * read. Its process group goes with it when it still has members (their group id
         * cannot be reused while they live; an empty group's kill fails with ESRCH) */
        if (!adopted_ended(k))
            return -EAGAIN;
        if (k->pid > 1)
            kill(-k->pid, SIGKILL);
    } else if (waitid(P_PID, (id_t)k->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
               si.si_pid == 0) {
        return -EAGAIN;
    } else {
        /* children the kernel left in its process group go with it: signalled while the
         * exited leader is not yet reaped, so its pid (and group) cannot have been reused */
        klaunch__signal(k, SIGKILL);
        if (waitpid(k->pid, &st, 0) < 0)
            st = 0;
    }
    evl_io_destroy(k->m->evl, &k->pid_io);
    kstderr__drain(k); /* its last words: what the pipe still holds */
    kcmd__detach(k);   /* its commands end with it */
    klaunch__abandon(k);
    k->own->fork_take_back(k);
    kegress_destroy(&k->egress); /* a new process gets a new namespace, and a new proxy */
    if (k->pidfd >= 0)
        close(k->pidfd);
    k->pidfd = -1;
    k->pid = 0;
    if (k->setup_fd >= 0) { /* it died during the set-up: the report is there by now */
        if (sbx_setup_result(k->setup_fd, k->setup_why, sizeof(k->setup_why)) >= 0)
            k->setup_why[0] = '\0';
        klaunch__setup_end(k);
    }
    *ret_status = st;
    return 0;
}

enum kmgr_death klaunch__death(kernel_t *k, int st, bool asked, char *why, size_t whysz)
{
    bool setup_failed = k->setup_why[0] != '\0';
    enum kmgr_death death = death_cause(k, st, setup_failed);
    k->stats->sandbox_setup_failures += setup_failed;
    if (!asked)
        k->stats->deaths[death]++;
    describe_exit(st, why, whysz);
    if (k->adopted) /* no status to read: whose fork it is says most (a websocket close too) */
        snprintf(why, whysz, "the fork's process ended (forked from %s)", k->fork_of);
    if (asked && k->stop_end && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
        snprintf(why, whysz, "%s", k->stop_end);
    if (k->setup_why[0]) {
        snprintf(why, whysz, "could not start the kernel process: %s", k->setup_why);
        k->setup_why[0] = '\0';
    }
    if (k->exit_status == -ETIMEDOUT)
        snprintf(why + strlen(why), whysz - strlen(why), " (unresponsive)");
    if (k->cgroup) {
        char cause[96];
        sbx_cgroup_explain(k->cgroup, cause, sizeof(cause));
        if (cause[0])
            snprintf(why + strlen(why), whysz - strlen(why), ": %s", cause);
    }
    return death;
}

/* The kernel's egress proxy, listening inside its network namespace: from the moment its
 * process is ready, before any client code runs in it. Without it the kernel has no network,
 * as without a policy. */
void klaunch__egress_start(kernel_t *k)
{
    int fd, r;
    if (!k->egpol || k->egress || k->adopted) /* a fork: its parent's proxy, in its netns */
        return;
    if ((r = sbx_listen_in(k->pid, k->pidfd, KEGRESS_PORT, &fd)) < 0) {
        log_warn("kernel=%s: no egress proxy: cannot listen in its network namespace: %s", k->id,
                 strerror(-r));
        return;
    }
    k->egress = kegress_new(k->m->evl, fd, k->egpol, &k->m->o.egress, &k->stats->egress,
                            k->ws->tenant, k->id);
    if (!k->egress)
        log_warn("kernel=%s: no egress proxy: %s", k->id, strerror(errno));
    else if (k->secrets)
        kegress_set_secrets(k->egress, k->secrets, k->m->o.tls);
}

void klaunch__signal(kernel_t *k, int sig)
{
    /* pid 1 would make kill(-1) signal every process we may signal: never */
    if (k->pid <= 1)
        return;
    if (k->adopted) { /* not our child: the pid is only trusted while its pidfd says it runs */
        if (adopted_ended(k))
            return;
        if (kill(-k->pid, sig) < 0 && errno == ESRCH)
            syscall(SYS_pidfd_send_signal, k->pidfd, sig, NULL, 0);
        return;
    }
    if (kill(-k->pid, sig) < 0 && errno == ESRCH)
        kill(k->pid, sig);
}
