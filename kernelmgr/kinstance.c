/* A kernel instance's set-up and teardown: its runtime directory (a tmpfs of its own when
 * sandboxed), cgroup, limits, keys, environment and connection file; and a pooled kernel's
 * hand-out to a request (kinstance__adopt: its limits and KERNEL_* variables, which kenv.c
 * applies). It builds the kernel (kernel.c); the owner frees it here (kinstance__free) once the
 * kernel says it is gone (kernel_owner_ops.gone). */
#include "kernelmgr/kinstance_int.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
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

kernel_t *kinstance__build(kmgr_t *m, const kspec_t *spec, json_t *env,
                        const struct kmgr_limits *lim, wspace_t *ws, struct kpool *pool,
                        const egpol_t *egress, const char *const *secrets, size_t nsecrets,
                        const struct kernel_owner_ops *own)
{
    int r;
    kernel_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    list_init(&k->conns);
    list_init(&k->waiters);
    list_init(&k->fired);
    k->m = m;
    k->own = own;
    k->stats = &m->stats;
    k->spec = spec;
    k->pidfd = -1;
    k->setup_fd = -1;
    k->ws = ws;
    wspace__attach(ws);
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

void kinstance__free(kernel_t *k)
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
    if (k->dir) {
        char p[PATH_MAX + 16];
        for (int port = KPORT_SHELL; port <= KPORT_HB; port++) {
            snprintf(p, sizeof(p), "%s/k-%d", k->dir, port);
            unlink(p);
        }
        unlink(k->conn_file);
        /* the unmount waits for an RCU grace period: the cgroup worker does it */
        sbx_cgroups_remove_dirs(k->m->cgroups, k->dir, k->dir_mounted,
                                k->root_dir && k->root_dir[0] ? k->root_dir : NULL);
    } else if (k->root_dir && k->root_dir[0]) {
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
    sbx_cgroup_destroy(&k->cgroup);
    if (k->ws)
        wspace__detach(k->ws);
    free(k);
}
