/* A kernel instance's set-up and teardown: its runtime directory (a tmpfs of its own when
 * sandboxed), cgroup, limits, keys, environment and connection file; and a pooled kernel's
 * hand-out to a request (kinstance__adopt: its limits and KERNEL_* variables, which kenv.c
 * applies). It builds the kernel (kernel.c); the owner frees it here (kinstance__free) once the
 * kernel says it is gone (kernel_owner_ops.gone). */
#include "kernelmgr/kinstance_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "kernelmgr/kcall_int.h"
#include "kernelmgr/kckpt_int.h"
#include "kernelmgr/kcmd_int.h"
#include "kernelmgr/kenv_int.h"
#include "kernelmgr/kernel_int.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/klaunch_int.h"
#include "kernelmgr/kstderr_int.h"
#include "kernelmgr/private.h"
#include "kernelmgr/wspace_int.h"
#include "sandbox/sbx.h"

static void apply_limits(kernel_t *k, const struct kmgr_limits *lim)
{
    if (!lim)
        return;
#define OVERRIDE(dst, v)                                                                           \
    if ((v) > 0)                                                                                   \
        (dst) = (v)
    OVERRIDE(k->lim.mem_bytes, lim->mem_bytes);
    OVERRIDE(k->lim.cpu_millis, lim->cpu_millis);
    OVERRIDE(k->lim.pids, lim->pids);
    OVERRIDE(k->lim.workspace_bytes, lim->workspace_bytes);
    OVERRIDE(k->exec_timeout_ms, (int)lim->exec_timeout_ms);
    OVERRIDE(k->output_cap, lim->output_cap);
#undef OVERRIDE
}

int kinstance__adopt(kernel_t *k, json_t *env, const struct kmgr_limits *lim)
{
    char **envp = klaunch__env(k, env);
    if (!envp)
        return -ENOMEM;
    struct kenv *e = kenv__new(env);
    if (!e && errno) {
        klaunch__free_strv(envp);
        return -ENOMEM;
    }
    klaunch__free_strv(k->envp);
    k->envp = envp; /* for restarts */
    apply_limits(k, lim); /* the sandbox's are equal to the pooled kernel's (kmgr_start) */
    k->pool = NULL;
    k->ws->pooled = false;
    kernel_touch(k);
    kenv__free(k);
    k->env = e;
    if (kenv__due(k) && k->state == KERNEL_RUNNING) {
        k->state = KERNEL_STARTING;
        snprintf(k->exec_state, sizeof(k->exec_state), "starting");
        kernel__own_shell(k);
        kenv__send(k);
    }
    return 0;
}

/* A new string of the path fmt gives, sized to it (NULL: no memory, errno set). */
static char *path_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *path_of(const char *fmt, ...)
{
    char *p;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&p, fmt, ap);
    va_end(ap);
    if (n < 0) {
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

kernel_t *kinstance__new(kmgr_t *m, const kspec_t *spec, json_t *env,
                      const struct kmgr_limits *lim, wspace_t *ws, struct kpool *pool,
                      const egpol_t *egress, const char *const *secrets, size_t nsecrets,
                      const struct kernel_owner_ops *own)
{
    kernel_t *k = kinstance__build(m, spec, env, lim, ws, pool, egress, secrets, nsecrets, own);
    if (!k)
        return NULL;
    kernel__launch(k);
    if (k->state == KERNEL_DEAD) {
        kinstance__free(k);
        errno = ECHILD;
        return NULL;
    }
    return k;
}

/* A kernel with nothing set up yet but its links: k->ws attached. NULL: no memory. */
static kernel_t *alloc_kernel(kmgr_t *m, wspace_t *ws, const struct kernel_owner_ops *own)
{
    kernel_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    list_init(&k->conns);
    list_init(&k->waiters);
    list_init(&k->fired);
    k->m = m;
    k->own = own;
    k->stats = &m->stats;
    k->pidfd = -1;
    k->setup_fd = -1;
    k->ws = ws;
    wspace__attach(ws);
    return k;
}

kernel_t *kinstance__build(kmgr_t *m, const kspec_t *spec, json_t *env,
                        const struct kmgr_limits *lim, wspace_t *ws, struct kpool *pool,
                        const egpol_t *egress, const char *const *secrets, size_t nsecrets,
                        const struct kernel_owner_ops *own)
{
    int r;
    kernel_t *k = alloc_kernel(m, ws, own);
    if (!k)
        return NULL;
    k->spec = spec;
    k->exec_timeout_ms = m->o.exec_timeout_ms;
    k->output_cap = m->o.output_cap;
    k->pool = pool;
    if (m->o.sandbox)
        k->lim = m->o.sandbox->lim;
    apply_limits(k, lim);
    shardid_mint(k->id);
    util_uuid(k->session);
    util_random_hex(k->key, 32);
    kernel_touch(k);
    snprintf(k->exec_state, sizeof(k->exec_state), "starting");
    /* unix socket paths are limited to 108 bytes: <dir>/k-N and <dir>/callback */
    if (strlen(m->rundir) + 1 + strlen(k->id) + sizeof("/" KCALL_SOCKET_NAME) > 108) {
        errno = ENAMETOOLONG;
        goto fail;
    }
    if (!(k->dir = path_of("%s/%s", m->rundir, k->id)) ||
        !(k->conn_file = path_of("%s/connection.json", k->dir)) ||
        !(k->root_dir = m->o.sandbox ? path_of("%s.root", k->dir) : strdup("")))
        goto fail;
    if (mkdir(k->dir, 0700) < 0)
        goto fail;
    if (m->o.sandbox) {
        uid_t uid = ws->uid;
        uid_t ruid = uid - 1;
        /* the kernel (uid inside 1000) creates its sockets here; the sandbox's set-up
         * (inside root) mounts the new root on root_dir */
        /* a tmpfs of its own, so the kernel's mountinfo shows "/" as the bind source rather
         * than a host path (the gateway runs in a private mount namespace: see main.c) */
        char opts[128];
        snprintf(opts, sizeof(opts), "size=1m,nr_inodes=64,mode=0700,uid=%u,gid=%u",
                 (unsigned)uid, (unsigned)uid);
        /* nosymfollow: the kernel can replace its socket files with symlinks; the gateway's
         * reconnects must never follow them to a host socket */
        if (mount("tmpfs", k->dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | KGW_MS_NOSYMFOLLOW,
                  opts) < 0)
            goto fail;
        k->dir_mounted = true;
        if (mkdir(k->root_dir, 0700) < 0 || chown(k->root_dir, ruid, ruid) < 0)
            goto fail;
        k->cgroup = sbx_cgroup_new(m->cgroups, k->id, k->lim.mem_bytes, k->lim.pids,
                                   k->lim.cpu_millis);
        if (!k->cgroup)
            goto fail;
    }
    if (!(k->sign = jsign_new(k->key, strlen(k->key))))
        goto fail;
    if (egress && egress->n && m->o.sandbox) { /* unsandboxed kernels have the host's network */
        if (!(k->egpol = malloc(sizeof(*k->egpol))))
            goto fail;
        *k->egpol = *egress;
        if (nsecrets && !(k->secrets = ksecret_new(ws->tenant, secrets, nsecrets,
                                                   m->o.secrets, &m->stats.secrets)))
            goto fail;
    }
    if (!(k->envp = klaunch__env(k, env)))
        goto fail;
    if ((r = klaunch__conn_file(k, k->conn_file, m->o.sandbox ? SBX_RUNTIME_PATH : k->dir)) < 0) {
        errno = -r;
        goto fail;
    }
    if (!(k->calls = kcall__new(k)))
        goto fail;
    if ((r = kernel__watch(k)) < 0) {
        errno = -r;
        goto fail;
    }
    k->state = KERNEL_STARTING;
    return k;
fail:
    r = errno;
    kinstance__free(k);
    errno = r;
    return NULL;
}

/* What kinstance__free and kinstance__let_go share; keep: the process, its runtime directory,
 * cgroup and workspace stay as they are (a restart in place). */
static void release(kernel_t *k, bool keep);

void kinstance__free(kernel_t *k)
{
    release(k, false);
}

void kinstance__let_go(kernel_t *k)
{
    if (k)
        k->pid = 0; /* not signalled nor reaped: the next image's */
    release(k, true);
}

static void release(kernel_t *k, bool keep)
{
    if (!k)
        return;
    evl_t *l = k->m->evl;
    kckpt__destroy(k);
    while (!list_empty(&k->waiters)) {
        kwait_t *w = list_first(&k->waiters, kwait_t, link);
        kwait_cancel(&w);
    }
    while (!list_empty(&k->fired)) {
        kwait_t *w = list_first(&k->fired, kwait_t, link);
        kwait_cancel(&w);
    }
    while (!list_empty(&k->conns)) {
        kconn_t *c = list_first(&k->conns, kconn_t, link);
        kconn_destroy(&c);
    }
    if (k->pid > 1 && k->adopted) { /* a fork: not our child (its sandbox's init reaps it) */
        klaunch__signal(k, SIGKILL);
    } else if (k->pid > 1) {
        klaunch__signal(k, SIGKILL);
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
    }
    evl_io_destroy(l, &k->pid_io);
    klaunch__abandon(k);
    k->own->fork_take_back(k);
    kegress_destroy(&k->egress);
    free(k->egpol);
    ksecret_destroy(&k->secrets);
    if (k->pidfd >= 0)
        close(k->pidfd);
    klaunch__setup_end(k);
    kcmd__free(k);
    kstderr__free(k);
    kernel__unwatch(k);
    kcall__destroy(&k->calls);
    kexec__free(k); /* after its sessions (kexec__forget) and sockets */
    kenv__free(k);
    jsign_destroy(&k->sign);
    klaunch__free_strv(k->envp);
    if (k->dir && !keep) {
        char p[PATH_MAX + 16];
        for (int port = KPORT_SHELL; port <= KPORT_HB; port++) {
            snprintf(p, sizeof(p), "%s/k-%d", k->dir, port);
            unlink(p);
        }
        unlink(k->conn_file);
        /* the unmount waits for an RCU grace period: the cgroup worker does it */
        sbx_cgroups_remove_dirs(k->m->cgroups, k->dir, k->dir_mounted,
                                k->root_dir && k->root_dir[0] ? k->root_dir : NULL);
    } else if (k->root_dir && k->root_dir[0] && !keep) {
        rmdir(k->root_dir);
    }
    kernel__drop_ipc_dir(k);
    free(k->dir);
    free(k->conn_file);
    free(k->root_dir);
    if (k->cgroup) { /* what it used stays in the CPU time of all kernels (kmgr_usage) */
        struct sbx_cgroup_usage u;
        sbx_cgroup_usage(k->cgroup, &u);
        if (u.cpu_ns > 0)
            k->stats->cpu_ns_gone += (uint64_t)u.cpu_ns;
    }
    if (keep) {
        sbx_cgroup_forget(&k->cgroup);
    } else {
        sbx_cgroup_destroy(&k->cgroup);
        if (k->ws)
            wspace__detach(k->ws);
    }
    free(k);
}

/* ---- a restart in place (gateway/handover.h) ---- */

/* A copy of fd above the descriptors the exec's listening sockets take, left open across the
 * exec; -1 for none (-errno on failure). */
static int keep_fd(int fd)
{
    if (fd < 0)
        return -1;
    int c = fcntl(fd, F_DUPFD, KINSTANCE_FD_MIN); /* F_DUPFD: not close-on-exec */
    return c < 0 ? -errno : c;
}

int kinstance__export(kernel_t *k, json_t **ret)
{
    char pol[EGPOL_TEXT_MAX];
    json_t *env = json_array();
    for (char **e = k->envp; env && e && *e; e++)
        json_array_append_new(env, json_string(*e));
    if (k->egpol && egpol_format(k->egpol, pol, sizeof(pol)) < 0) {
        json_decref(env);
        return -ENOSPC;
    }
    int efd = keep_fd(kstderr__fd(k));
    int cfd = efd < -1 ? -1 : keep_fd(kcmd__fd(k));
    json_t *rec = NULL;
    if (env && efd >= -1 && cfd >= -1)
        rec = json_pack("{s:s, s:s, s:s, s:s, s:o, s:[I,I,I,I,I,I,I], s:i, s:I, s:s, s:s*, s:s, "
                        "s:b, s:s*, s:i, s:i, s:i, s:i, s:b, s:I}",
                        "id", k->id, "spec", k->spec->name, "key", k->key, "session", k->session,
                        "env", env, "lim", (json_int_t)k->lim.mem_bytes,
                        (json_int_t)k->lim.cpu_millis, (json_int_t)k->lim.pids,
                        (json_int_t)k->lim.workspace_bytes, (json_int_t)k->lim.tmp_bytes,
                        (json_int_t)k->lim.fsize_bytes, (json_int_t)k->lim.nofile,
                        "exec_timeout_ms", k->exec_timeout_ms, "output_cap",
                        (json_int_t)k->output_cap, "workspace", k->ws->id, "cgroup",
                        k->cgroup ? sbx_cgroup_name(k->cgroup) : NULL, "root_dir", k->root_dir,
                        "dir_mounted", k->dir_mounted, "egress", k->egpol ? pol : NULL,
                        "restarts", k->restarts, "pid", (int)k->pid, "err_fd", efd, "cmd_fd", cfd,
                        "forked", k->forked, "cpu_shares", (json_int_t)k->cpu_shares);
    else
        json_decref(env);
    if (!rec) {
        if (efd >= 0)
            close(efd);
        if (cfd >= 0)
            close(cfd);
        return efd < -1 ? efd : cfd < -1 ? cfd : -ENOMEM;
    }
    *ret = rec;
    return 0;
}

/* A kernel id fit to be a file name in the runtime directory. */
static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= sizeof(((kernel_t *)0)->id) || id[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)id[i]) && !strchr("-_.:", id[i]))
            return false;
    return true;
}

/* Whether pid is this process's child (not reaped: its pid cannot have been reused). */
static bool our_child(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return pid > 1 && waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

static char **strv_of(const json_t *a)
{
    size_t n = json_array_size(a);
    char **v = calloc(n + 1, sizeof(*v));
    for (size_t i = 0; v && i < n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s || !(v[i] = strdup(s))) {
            klaunch__free_strv(v);
            return NULL;
        }
    }
    return v;
}

kernel_t *kinstance__resume(kmgr_t *m, const json_t *rec, wspace_t *ws,
                            const struct kernel_owner_ops *own, char *why, size_t whysz)
{
    const char *id = "", *spec = "", *key = "", *session = "", *cg = NULL, *root = "", *pol = NULL;
    json_t *env = NULL;
    json_int_t lim[7] = {0}, output_cap = 0, shares = 0;
    int exec_timeout = 0, restarts = 0, pid = 0, efd = -1, cfd = -1, mounted = 0, forked = 0;
    char err[256];
    int r;
    if (json_unpack((json_t *)rec, "{s:s, s:s, s:s, s:s, s:o, s:[I,I,I,I,I,I,I], s:i, s:I, s?s, "
                                  "s:s, s:b, s?s, s:i, s:i, s:i, s:i, s:b, s:I}",
                    "id", &id, "spec", &spec, "key", &key, "session", &session, "env", &env,
                    "lim", &lim[0], &lim[1], &lim[2], &lim[3], &lim[4], &lim[5], &lim[6],
                    "exec_timeout_ms", &exec_timeout, "output_cap", &output_cap, "cgroup", &cg,
                    "root_dir", &root, "dir_mounted", &mounted, "egress", &pol, "restarts",
                    &restarts, "pid", &pid, "err_fd", &efd, "cmd_fd", &cfd, "forked", &forked,
                    "cpu_shares", &shares) < 0 ||
        !id_ok(id)) {
        snprintf(why, whysz, "its record is not one this gateway reads");
        errno = EINVAL;
        return NULL;
    }
    kernel_t *k = alloc_kernel(m, ws, own);
    if (!k)
        return NULL;
    snprintf(k->id, sizeof(k->id), "%s", id);
    /* what it leaves behind, first: a failure below removes it (kinstance__free) */
    k->pid = our_child(pid) ? pid : 0;
    k->dir_mounted = mounted;
    if (!(k->dir = path_of("%s/%s", m->rundir, k->id)) ||
        !(k->conn_file = path_of("%s/connection.json", k->dir)) ||
        !(k->root_dir = root[0] ? path_of("%s.root", k->dir) : strdup("")))
        goto fail;
    if (cg && m->cgroups && !(k->cgroup = sbx_cgroup_open(m->cgroups, cg))) {
        snprintf(why, whysz, "its cgroup %s is gone: %s", cg, strerror(errno));
        goto fail_why;
    }
    if (!k->pid) {
        snprintf(why, whysz, "its process %d is not the gateway's child", pid);
        goto fail_why;
    }
    if ((m->o.sandbox != NULL) != (cg != NULL)) {
        snprintf(why, whysz, "it was %ssandboxed, the gateway is not", cg ? "" : "not ");
        goto fail_why;
    }
    if (!(k->spec = kspecs_find(m->specs, spec))) {
        snprintf(why, whysz, "its kernelspec %.64s is gone", spec);
        goto fail_why;
    }
    k->cgroup_used = k->cgroup != NULL;
    k->cpu_shares = (unsigned)shares;
    k->lim = (struct sbx_limits){lim[0], lim[1], lim[2], lim[3], lim[4], lim[5], lim[6]};
    k->exec_timeout_ms = exec_timeout;
    k->output_cap = output_cap;
    k->restarts = restarts;
    k->forked = forked;
    snprintf(k->key, sizeof(k->key), "%s", key);
    snprintf(k->session, sizeof(k->session), "%s", session);
    kernel_touch(k);
    snprintf(k->exec_state, sizeof(k->exec_state), "starting");
    if (!(k->sign = jsign_new(k->key, strlen(k->key))) || !(k->envp = strv_of(env)))
        goto fail;
    if (pol) {
        if (!(k->egpol = malloc(sizeof(*k->egpol))))
            goto fail;
        if (egpol_parse(pol, strlen(pol), k->egpol, err, sizeof(err)) < 0) {
            snprintf(why, whysz, "its egress policy: %s", err);
            goto fail_why;
        }
    }
    if (!(k->calls = kcall__new(k)))
        goto fail;
    if ((r = kcall__listen(k->calls, m->o.sandbox ? ws->uid : (uid_t)-1)) < 0)
        log_warn("kernel=%s: no callbacks: cannot listen on %s/%s: %s", k->id, k->dir,
                 KCALL_SOCKET_NAME, strerror(-r));
    if ((r = kernel__watch(k)) < 0) {
        errno = -r;
        goto fail;
    }
    if (efd >= 0 && (r = kstderr__resume(k, efd)) < 0)
        log_warn("kernel=%s: its stderr is lost: %s", k->id, strerror(-r));
    else
        efd = -1;
    if (cfd >= 0 && (r = kcmd__resume(k, cfd)) < 0)
        log_warn("kernel=%s: no commands: %s", k->id, strerror(-r));
    else
        cfd = -1;
    if (efd >= 0)
        close(efd);
    if (cfd >= 0)
        close(cfd);
    int pidfd = (int)syscall(SYS_pidfd_open, k->pid, 0);
    k->state = KERNEL_STARTING;
    k->pid = 0;
    kernel__resume(k, pid, pidfd);
    return k;
fail:
    snprintf(why, whysz, "%s", strerror(errno ? errno : ENOMEM));
fail_why:
    if (efd >= 0)
        close(efd);
    if (cfd >= 0)
        close(cfd);
    kinstance__free(k); /* kills what is left of it and removes its directories and cgroup */
    errno = EINVAL;
    return NULL;
}
