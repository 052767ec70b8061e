#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kcapacity_int.h"
#include "kernelmgr/kernel_int.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/kfork_int.h"
#include "kernelmgr/khandover_int.h"
#include "kernelmgr/kinstance_int.h"
#include "kernelmgr/klaunch_int.h"
#include "kernelmgr/kpool_int.h"
#include "kernelmgr/kwatchdog_int.h"
#include "kernelmgr/kwire_int.h"
#include "kernelmgr/kzygote_int.h"
#include "kernelmgr/private.h"
#include "kernelmgr/wspace_int.h"
#include "protocol/kcallmsg.h"

#define PY_MAX_FILES 64
/* seconds: a start from the pool (ms), forked (tens of ms), exec'd (0.5 s and more) */
static const double start_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                      1,     2.5,  5,     10,   30,  60};
/* seconds: from 1+1 to the default wall-time limit (an hour) */
static const double exec_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                     2.5,   5,    10,    30,   60,  300,  1800, 3600};
#define PY_MAX_BYTES (1024 * 1024)
#define PY_TMPFS_OPTS "size=8m,nr_inodes=128,mode=0755"
#define KGW_MS_NOSYMFOLLOW 256 /* MS_NOSYMFOLLOW, Linux 5.10 */

static void on_cull(void *data)
{
    kmgr_t *m = data;
    int64_t now = util_wall_us();
    int64_t idle_us = (int64_t)m->o.cull_idle_timeout_s * 1000000;
    for (size_t i = 0; i < m->n; i++) {
        kernel_t *k = m->v[i];
        if (k->state != KERNEL_RUNNING || strcmp(k->exec_state, "idle") != 0 || k->paused)
            continue;
        if (k->connections > 0 && !m->o.cull_connected)
            continue;
        if (now - k->last_activity_us < idle_us)
            continue;
        log_info("kernel=%s: culling after %d s idle", k->id, m->o.cull_idle_timeout_s);
        char cause[96];
        snprintf(cause, sizeof(cause), "the kernel was culled after %d s idle",
                 m->o.cull_idle_timeout_s);
        kernel_shutdown(k, cause);
    }
    m->evl->timer_arm(m->evl, m->cull, (uint64_t)m->o.cull_interval_s * 1000);
}

/* A kernel's start ends, or a kernel goes, in bursts: what they freed lies in holes between
 * what the kernels that stay hold (the loop's heap and libzmq's I/O threads' arenas), counted
 * in the gateway's RSS until malloc reuses it. KMGR_TRIM_MS after the first of a burst, those
 * pages go back to the system (malloc_trim walks the free chunks; logged at debug with its
 * time). docs/operations.md "Capacity". */
#define KMGR_TRIM_MS 2000

static void on_trim(void *data)
{
    kmgr_t *m = data;
    uint64_t t0 = util_now_us();
    m->trim_armed = false;
    malloc_trim(0);
    log_debug("malloc_trim: %llu us", (unsigned long long)(util_now_us() - t0));
}

static void trim_soon(kmgr_t *m)
{
    if (m->trim && !m->trim_armed) { /* a burst of starts or renewals trims once */
        m->trim_armed = true;
        m->evl->timer_arm(m->evl, m->trim, KMGR_TRIM_MS);
    }
}

/* The heartbeats of all running kernels, pooled ones too, in one sweep (kwatchdog.c): one
 * wake-up per --hb-interval-ms for all, not one per kernel, and the answers come in a burst
 * the loop reads in a few turns. */
static void on_hb_sweep(void *data)
{
    kmgr_t *m = data;
    bool renewed = false;
    for (size_t i = 0; i < m->n; i++)
        renewed |= kwatchdog__beat(m->v[i]);
    for (size_t i = 0; i < m->pn; i++)
        renewed |= kwatchdog__beat(m->pv[i]);
    m->evl->timer_arm(m->evl, m->hb_sweep, (uint64_t)m->o.hb_interval_ms);
    if (renewed)
        trim_soon(m);
}

/* Unlinks the files of directory dfd (not its subdirectories or dot-names); closes dfd. */
static void unlink_files(int dfd)
{
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    if (!d) {
        close(dfd);
        return;
    }
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            unlinkat(dfd, e->d_name, 0);
    closedir(d);
}

#define TREE_DEPTH_MAX 16 /* the fork server's scratch directory holds an IPython profile */

/* Removes name under parentfd and everything in it, never following a symbolic link (the
 * fork server, an unprivileged uid, writes in its scratch directory). Depth-bounded. */
static void remove_tree(int parentfd, const char *name, int depth)
{
    int dfd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        unlinkat(parentfd, name, 0); /* a file, a link, or already gone */
        return;
    }
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    if (!d) {
        close(dfd);
        return;
    }
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (unlinkat(dfd, e->d_name, 0) < 0 && errno == EISDIR && depth < TREE_DEPTH_MAX)
            remove_tree(dfd, e->d_name, depth + 1);
    }
    closedir(d);
    unlinkat(parentfd, name, AT_REMOVEDIR);
}

#define STALE_UNLOCKED_S 600 /* an instance directory without its lock this old is stale */

static void ws_remove(kmgr_t *m, wspace_t *w);
static void tenant_weights(kmgr_t *m, const char *tenant);
static void remove_kernel(kmgr_t *m, kernel_t *k);
static const struct wspace_ops ws_ops;
static const struct kpool_ops pool_ops;

/* Each running gateway holds an exclusive lock on <its dir>/.lock; a directory whose lock can
 * be taken belongs to a gateway that died without cleaning up (SIGKILL, crash). */
static void sweep_stale(const char *runtime_dir)
{
    int basefd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (basefd < 0)
        return;
    DIR *d = fdopendir(dup(basefd));
    struct dirent *e;
    char lockpath[300];
    while (d && (e = readdir(d))) {
        struct stat st;
        if (strncmp(e->d_name, "gw-", 3) != 0)
            continue;
        snprintf(lockpath, sizeof(lockpath), "%s/.lock", e->d_name);
        int lfd = openat(basefd, lockpath, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (lfd < 0) {
            /* no lock: a gateway that lost it half-way out (earlier versions left their fork
             * server's scratch directory behind), or one just starting: only when old */
            if (errno == ENOENT && fstatat(basefd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISDIR(st.st_mode) && st.st_mtime + STALE_UNLOCKED_S < time(NULL)) {
                log_info("removing stale runtime directory %s/%s", runtime_dir, e->d_name);
                remove_tree(basefd, e->d_name, 0); /* nothing in it is followed */
                sbx_cgroups_remove_stale(e->d_name);
            }
            continue;
        }
        if (flock(lfd, LOCK_EX | LOCK_NB) == 0) {
            log_info("removing stale runtime directory %s/%s", runtime_dir, e->d_name);
            remove_tree(basefd, e->d_name, 0); /* nothing in it is followed */
            sbx_cgroups_remove_stale(e->d_name);
        }
        close(lfd);
    }
    if (d)
        closedir(d);
    close(basefd);
}

/* A gateway instance is alive while it holds the lock in its runtime directory. One whose
 * directory is not under ours may be a live gateway with another --runtime-dir: it counts as
 * alive (its empty cgroups, such as the cgroup worker's spares, are its own to remove). */
static bool instance_alive(const char *inst, void *data)
{
    kmgr_t *m = data;
    char lock[PATH_MAX];
    snprintf(lock, sizeof(lock), "%s/%s/.lock", m->o.runtime_dir, inst);
    if (strcmp(inst, strrchr(m->rundir, '/') + 1) == 0)
        return true;
    int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return true;
    bool alive = flock(fd, LOCK_EX | LOCK_NB) < 0;
    close(fd);
    return alive;
}

/* Secure by default: a dry run of the whole sandbox, or kernels are refused with the reason. */
static void sandbox_setup(kmgr_t *m)
{
    char why[256] = "", dir[PATH_MAX + 16], root[PATH_MAX + 24];
    const char *inst = strrchr(m->rundir, '/') + 1;
    m->nslots = (size_t)m->o.max_workspaces + 1; /* a uid slot per workspace */
    m->slots = calloc(m->nslots, 1);
    if (!m->slots) {
        snprintf(m->sandbox_error, sizeof(m->sandbox_error), "out of memory");
        return;
    }
    /* the sandbox's set-up runs as an unprivileged host uid: it must reach the runtime dir */
    char up[PATH_MAX];
    snprintf(up, sizeof(up), "%s", m->o.runtime_dir);
    for (char *slash = strrchr(up, '/'); slash; slash = strrchr(up, '/')) {
        struct stat st;
        *slash = '\0';
        const char *d = up[0] ? up : "/";
        if (stat(d, &st) == 0 && !(st.st_mode & S_IXOTH)) {
            snprintf(m->sandbox_error, sizeof(m->sandbox_error),
                     "%s (a parent of the runtime directory %s) is not searchable by other "
                     "users, and sandboxed kernels run as unprivileged uids (chmod o+x, or "
                     "choose another --runtime-dir)",
                     d, m->o.runtime_dir);
            goto out;
        }
    }
    sbx_cgroups_sweep(instance_alive, m);
    m->cgroups = sbx_cgroups_new(inst, why, sizeof(why));
    if (!m->cgroups) {
        snprintf(m->sandbox_error, sizeof(m->sandbox_error), "%s", why);
        goto out;
    }
    /* probe with the uids of the last slot, which kernels use last */
    long slot = (long)m->nslots - 1;
    m->slots[slot] = 1;
    uid_t uid = m->o.sandbox->uid_base + 2 * (unsigned)slot + 1;
    snprintf(dir, sizeof(dir), "%s/probe", m->rundir);
    snprintf(root, sizeof(root), "%s/probe.root", m->rundir);
    sbx_cgroup_t *cg = sbx_cgroup_new(m->cgroups, "probe", m->o.sandbox->lim.mem_bytes,
                                      m->o.sandbox->lim.pids, m->o.sandbox->lim.cpu_millis);
    if (!cg || mkdir(dir, 0700) < 0 || chown(dir, uid, uid) < 0 || mkdir(root, 0700) < 0 ||
        chown(root, uid - 1, uid - 1) < 0) {
        snprintf(m->sandbox_error, sizeof(m->sandbox_error), "cannot prepare the sandbox: %s",
                 cg ? strerror(errno) : "cannot create a cgroup");
    } else {
        char *envp[] = {NULL};
        sbx_profile_t p = {.runtime_dir = dir, .root_dir = root, .uid = uid,
                           .python_dir = m->pydir[0] ? m->pydir : NULL,
                           .root_uid = uid - 1, .lim = &m->o.sandbox->lim, .cgroup = cg,
                           .init_fd = m->o.sandbox->init_fd, .envp = envp, .stderr_fd = -1};
        uint64_t t0 = util_now_us();
        if (sbx_probe(&p, why, sizeof(why)) < 0)
            snprintf(m->sandbox_error, sizeof(m->sandbox_error), "%s", why);
        else
            log_debug("sandbox: dry run took %.1f ms", (double)(util_now_us() - t0) / 1000.0);
    }
    sbx_cgroup_destroy(&cg);
    rmdir(dir);
    rmdir(root);
out:
    if (m->sandbox_error[0]) {
        log_error("sandbox unavailable: %s. Kernels will be refused; --no-sandbox runs them "
                  "unsandboxed (development only).",
                  m->sandbox_error);
        snprintf(m->sandbox_mode, sizeof(m->sandbox_mode), "unavailable");
    } else {
        snprintf(m->sandbox_mode, sizeof(m->sandbox_mode), "enabled");
        log_info("sandbox: enabled (namespaces, seccomp, cgroup %s)",
                 sbx_cgroups_version(m->cgroups));
    }
}

const char *kmgr_sandbox_mode(const kmgr_t *m)
{
    return m->sandbox_mode;
}

const char *kmgr_sandbox_error(const kmgr_t *m)
{
    return m->sandbox_error[0] ? m->sandbox_error : NULL;
}

static int copy_file(int sfd, int dfd, const char *name)
{
    char buf[16384];
    struct stat st;
    int r = 0;
    int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return -errno;
    if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > PY_MAX_BYTES) {
        close(in);
        return -EINVAL;
    }
    int out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0) {
        r = -errno;
        close(in);
        return r;
    }
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n <= 0) {
            r = n < 0 ? -errno : 0;
            break;
        }
        if (write(out, buf, (size_t)n) != n) {
            r = -EIO;
            break;
        }
    }
    if (r == 0 && fchmod(out, 0644) < 0)
        r = -errno;
    close(in);
    close(out);
    if (r < 0)
        unlinkat(dfd, name, 0);
    return r;
}

static int write_ca_bundle(int dfd, const char *pem)
{
    int r = 0, fd = openat(dfd, KMGR_CA_BUNDLE_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                                                         O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    size_t n = strlen(pem);
    if (write(fd, pem, n) != (ssize_t)n)
        r = -EIO;
    if (r == 0 && fchmod(fd, 0644) < 0)
        r = -errno;
    close(fd);
    return r;
}

/* Removes <rundir>/python (its tmpfs, or the regular files in it). */
static void remove_python(const char *rundir)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof(dir), "%s/python", rundir);
    umount2(dir, MNT_DETACH);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    unlink_files(dfd);
    rmdir(dir);
}

/* The modules kernels import (kgw_tools). Sandboxed kernels get a copy in this instance's
 * directory, taken now: the sandbox's set-up runs as an unprivileged uid that may not reach
 * the original (under /root, say), and kernels then see the same files for the gateway's
 * life. The copy is a small read-only tmpfs of its own (in the gateway's private mount
 * namespace), so a kernel's mountinfo shows "/" as the source rather than a host path. The
 * *.py files of the directory are copied, not subdirectories. */
static void python_setup(kmgr_t *m, const char *src)
{
    char real[PATH_MAX], dst[PATH_MAX + 8];
    int n = 0, r = 0;
    if (!realpath(src, real)) {
        log_warn("python modules for kernels (kgw_tools): %s: %s; callbacks from kernel code "
                 "will not be importable",
                 src, strerror(errno));
        return;
    }
    if (!m->o.sandbox) {
        snprintf(m->pydir, sizeof(m->pydir), "%s", real);
        return;
    }
    snprintf(dst, sizeof(dst), "%s/python", m->rundir);
    int sfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool mounted = false;
    if (sfd < 0 || mkdir(dst, 0755) < 0 || chmod(dst, 0755) < 0) {
        r = -errno;
    } else {
        unsigned long fl = MS_NOSUID | MS_NODEV | MS_NOEXEC | KGW_MS_NOSYMFOLLOW;
        mounted = mount("tmpfs", dst, "tmpfs", fl, PY_TMPFS_OPTS) == 0;
        if (!mounted)
            log_debug("python modules: no tmpfs at %s (%s): a plain directory", dst,
                      strerror(errno));
        int dfd = open(dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = dfd < 0 ? NULL : fdopendir(dup(sfd));
        struct dirent *e;
        while (d && (e = readdir(d)) && r == 0) {
            size_t len = strlen(e->d_name);
            if (e->d_name[0] == '.' || len < 4 || strcmp(e->d_name + len - 3, ".py") != 0)
                continue;
            if (++n > PY_MAX_FILES)
                r = -E2BIG;
            else
                r = copy_file(sfd, dfd, e->d_name);
        }
        if (!d)
            r = -errno;
        else
            closedir(d);
        if (r == 0 && m->o.ca_bundle) /* the CAs kernels with secrets trust, read-only too */
            r = write_ca_bundle(dfd, m->o.ca_bundle);
        if (dfd >= 0)
            close(dfd);
        if (r == 0 && mounted &&
            mount(NULL, dst, NULL, MS_REMOUNT | MS_RDONLY | fl, PY_TMPFS_OPTS) < 0)
            r = -errno;
    }
    if (sfd >= 0)
        close(sfd);
    if (r < 0 || n == 0) {
        log_warn("python modules for kernels (kgw_tools): cannot copy %s: %s; callbacks from "
                 "kernel code will not be importable",
                 real, r < 0 ? strerror(-r) : "no *.py files");
        remove_python(m->rundir);
        return;
    }
    snprintf(m->pydir, sizeof(m->pydir), "%s", dst);
}

const char *kmgr_instance(const kmgr_t *m)
{
    const char *slash = strrchr(m->rundir, '/');
    return slash ? slash + 1 : m->rundir;
}

/* ---- listeners ---- */

int kmgr_listen(kmgr_t *m, struct kmgr_listener *l, const struct kmgr_listener_ops *ops,
                void *user)
{
    int slot = 0;
    while (slot < KMGR_LISTENERS_MAX && (m->slots_used & (1u << slot)))
        slot++;
    if (slot == KMGR_LISTENERS_MAX)
        return -ENOSPC;
    m->slots_used |= 1u << slot;
    *l = (struct kmgr_listener){.ops = ops, .user = user, .slot = slot};
    list_append(&m->listeners, &l->link);
    return 0;
}

void kmgr_unlisten(kmgr_t *m, struct kmgr_listener *l)
{
    if (!l->ops)
        return;
    list_remove(&l->link);
    m->slots_used &= ~(1u << l->slot);
    for (size_t i = 0; i < m->n; i++)
        kernel_set_data(m->v[i], l->slot, NULL);
    l->ops = NULL;
}

void kmgr_on_call(kmgr_t *m, kmgr_call_fn fn, void *user)
{
    m->call_fn = fn;
    m->call_user = user;
}

/* A listener may unlisten itself from its op: the next one is taken before the call. */
#define EACH_LISTENER(m, l, tmp) list_for_each_safe(l, tmp, &(m)->listeners, link)

/* Tells every listener (kernels out of the warm pool only). */
static void emit(kmgr_t *m, kernel_t *k, enum kernel_event ev, const char *detail)
{
    struct kmgr_listener *l, *tmp;
    if (k->pool)
        return;
    EACH_LISTENER(m, l, tmp)
    {
        if (l->ops->event)
            l->ops->event(l->user, k, ev, detail);
    }
}

static void emit_iopub(kmgr_t *m, kernel_t *k, const jmsg_t *msg, const jhdr_t *h)
{
    struct kmgr_listener *l, *tmp;
    if (k->pool)
        return;
    EACH_LISTENER(m, l, tmp)
    {
        if (l->ops->iopub)
            l->ops->iopub(l->user, k, msg, h);
    }
}

static void emit_notice(kmgr_t *m, kernel_t *k, jspan_t parent, const char *text)
{
    struct kmgr_listener *l, *tmp;
    if (k->pool)
        return;
    EACH_LISTENER(m, l, tmp)
    {
        if (l->ops->notice)
            l->ops->notice(l->user, k, parent, text);
    }
}

static unsigned emit_overflow(kmgr_t *m, kernel_t *k, size_t min)
{
    struct kmgr_listener *l, *tmp;
    unsigned n = 0;
    if (k->pool)
        return 0;
    EACH_LISTENER(m, l, tmp)
    {
        if (l->ops->overflow)
            n += l->ops->overflow(l->user, k, min);
    }
    return n;
}

static void emit_exec_end(kmgr_t *m, kernel_t *k, const struct kernel_exec_end *e)
{
    struct kmgr_listener *l, *tmp;
    if (k->pool)
        return;
    EACH_LISTENER(m, l, tmp)
    {
        if (l->ops->exec_end)
            l->ops->exec_end(l->user, k, e);
    }
}

/* ---- the owner of every kernel (kernel_owner_ops): kernel.c reports here ---- */

static void own_event(kernel_t *k, enum kernel_event ev, const char *detail)
{
    emit(k->m, k, ev, detail);
}

static void own_iopub(kernel_t *k, const jmsg_t *msg, const jhdr_t *h)
{
    emit_iopub(k->m, k, msg, h);
}

static void own_relay(kernel_t *k, const jmsg_t *msg, const jhdr_t *h)
{
    if (k->pool) /* no client sees a pooled kernel's messages */
        return;
    kwire__count(k, KMGR_TO_CLIENT, msg);
    emit_iopub(k->m, k, msg, h);
}

static void own_notice(kernel_t *k, jspan_t parent, const char *text)
{
    emit_notice(k->m, k, parent, text);
}

static unsigned own_overflow(kernel_t *k, size_t min)
{
    return emit_overflow(k->m, k, min);
}

static void own_exec_end(kernel_t *k, const struct kernel_exec_end *e)
{
    emit_exec_end(k->m, k, e);
}

/* A client's start is over: ready, counted by how it started and how long it took... */
static void own_start_ok(kernel_t *k)
{
    if (!k->req_us)
        return;
    enum kmgr_start_path p = k->req_pool ? KMGR_START_POOL
                             : k->forked ? KMGR_START_FORK
                                         : KMGR_START_EXEC;
    k->m->stats.starts[p]++;
    hist_observe(&k->m->stats.start_seconds[p], (double)(util_now_us() - k->req_us) / 1e6);
    k->req_us = 0;
}

/* ... or failed, counted by why. */
static void own_start_failed(kernel_t *k, enum kmgr_start_fail why)
{
    if (!k->req_us)
        return;
    k->m->stats.start_failures[why]++;
    k->req_us = 0;
}

/* A client's start of k (kmgr_start, at since_us) is in progress: it is counted in the
 * statistics once ready, or as a failure (at once if k is ready already). */
static void start_begin(kernel_t *k, uint64_t since_us, bool pooled)
{
    k->req_us = since_us ? since_us : 1;
    k->req_pool = pooled;
    if (k->state == KERNEL_RUNNING)
        own_start_ok(k);
}

static void own_ready(kernel_t *k)
{
    if (k->pool)
        kpool__ready(k->m, k);
}

static bool own_lost(kernel_t *k, const char *why)
{
    kfork__parent_ended(k->m, k);
    if (!k->pool)
        return false;
    log_warn("kernel=%s: pooled kernel ended: %s", k->id, why);
    kpool__lost(k->m, k, k->state != KERNEL_RUNNING); /* frees k */
    return true;
}

static void own_gone(kernel_t *k)
{
    kmgr_t *m = k->m;
    kfork__forget(m, k);
    remove_kernel(m, k);
    kinstance__free(k);
    trim_soon(m);
}

static void own_capacity(kernel_t *k)
{
    trim_soon(k->m);
    kpool__kick(k->m);
}

static int own_fork_fd(kernel_t *k)
{
    return kzygote__fd(k->m, k->spec);
}

static bool own_fork_adopt(kernel_t *k)
{
    return kzygote__adopt(k->m, k);
}

static void own_fork_adopted(kernel_t *k)
{
    kzygote__adopted(k->m, k);
}

static int own_fork_lend(kernel_t *k, int dirfds[SBX_CGROUP_MAX_DIRS])
{
    return kzygote__lend(k->m, k, dirfds);
}

static void own_fork_take_back(kernel_t *k)
{
    kzygote__take_back(k->m, k);
}

static void own_forked(kernel_t *k, bool ok)
{
    kzygote__forked(k->m, ok);
}

static const struct kernel_owner_ops kernel_owner = {
    .event = own_event,
    .iopub = own_iopub,
    .relay = own_relay,
    .notice = own_notice,
    .overflow = own_overflow,
    .exec_end = own_exec_end,
    .start_ok = own_start_ok,
    .start_failed = own_start_failed,
    .ready = own_ready,
    .lost = own_lost,
    .gone = own_gone,
    .capacity = own_capacity,
    .fork_fd = own_fork_fd,
    .fork_adopt = own_fork_adopt,
    .fork_adopted = own_fork_adopted,
    .fork_lend = own_fork_lend,
    .fork_take_back = own_fork_take_back,
    .forked = own_forked,
};

/* ---- a restart in place (khandover.c) ---- */

static void handover_added(kmgr_t *m, kernel_t *k)
{
    tenant_weights(m, k->ws->tenant);
}

static const struct khandover_ops handover_ops = {
    .kernel_owner = &kernel_owner,
    .ws = &ws_ops,
    .ws_remove = ws_remove,
    .added = handover_added,
};

bool kmgr_carriable(const kernel_t *k)
{
    return khandover__carriable(k);
}

json_t *kmgr_hand_over(kmgr_t *m, bool (*keep)(kernel_t *k, void *data), void *data)
{
    return khandover__export(m, keep, data, &handover_ops);
}

void kmgr_handover_undo(const json_t *rec, const char *runtime_dir)
{
    const char *dir = khandover__undo(rec, runtime_dir);
    int basefd = dir ? open(runtime_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (basefd >= 0) {
        remove_tree(basefd, dir, 0);
        sbx_cgroups_remove_stale(dir);
        close(basefd);
    }
}

kmgr_t *kmgr_new(evl_t *evl, const struct kmgr_opts *o)
{
    char tmpl[PATH_MAX];
    int max_sockets = 65536, io_threads = 1, err;
    kmgr_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->evl = evl;
    m->lockfd = -1;
    m->zyg.fd = -1;
    m->o = *o;
    list_init(&m->listeners);
    list_init(&m->forks);
    for (int i = 0; i < KMGR_START_N; i++)
        hist_init(&m->stats.start_seconds[i], start_bounds, UTIL_ARRAY_SIZE(start_bounds));
    hist_init(&m->stats.exec_seconds, exec_bounds, UTIL_ARRAY_SIZE(exec_bounds));
    if (m->o.max_workspaces <= 0)
        m->o.max_workspaces = m->o.max_kernels > 0 ? 2 * m->o.max_kernels : 1024;
    if (m->o.workspace_grace_s < 0)
        m->o.workspace_grace_s = 0;
    if (m->o.callback_max_bytes <= 0)
        m->o.callback_max_bytes = KMGR_CALLBACK_MAX_BYTES;
    if (m->o.callback_timeout_ms <= 0)
        m->o.callback_timeout_ms = KMGR_CALLBACK_TIMEOUT_MS;
    if (m->o.callback_max_calls <= 0)
        m->o.callback_max_calls = KMGR_CALLBACK_MAX_CALLS;
    m->callbacks = kcallmsg_allow_new(o->callbacks ? o->callbacks : KMGR_CALLBACKS_DEFAULT);
    if (!m->callbacks) {
        if (errno == EINVAL)
            log_error("callbacks: invalid name in '%.128s' (names are [A-Za-z_][A-Za-z0-9_]*, "
                      "at most %d bytes, separated by commas)",
                      o->callbacks, KCALLMSG_NAME_MAX);
        goto fail;
    }
    m->specs = kspecs_load();
    if (!m->specs)
        goto fail;
    if (kspecs_count(m->specs) == 0)
        log_warn("no kernelspecs found (looked in $JUPYTER_PATH, ~/.local/share/jupyter, "
                 "/usr/local/share/jupyter, /usr/share/jupyter)");
    /* 0711: sandboxed set-up (an unprivileged uid outside) must traverse it, nobody list it */
    if (mkdir(o->runtime_dir, 0711) < 0 && errno != EEXIST) {
        log_error("cannot create runtime directory %s: %s", o->runtime_dir, strerror(errno));
        goto fail;
    }
    if (o->handover && khandover__dir(m, o->handover) < 0)
        goto fail;
    sweep_stale(o->runtime_dir);
    snprintf(tmpl, sizeof(tmpl), "%s/gw-XXXXXX", o->runtime_dir);
    if (m->rundir[0]) {
        snprintf(tmpl, sizeof(tmpl), "%s", m->rundir);
    } else if (!mkdtemp(tmpl)) {
        log_error("cannot create a private directory in %s: %s", o->runtime_dir,
                  strerror(errno));
        goto fail;
    }
    snprintf(m->rundir, sizeof(m->rundir), "%s", tmpl);
    chmod(o->runtime_dir, 0711);
    chmod(m->rundir, 0711);
    snprintf(tmpl, sizeof(tmpl), "%s/.lock", m->rundir);
    if (m->lockfd < 0)
        m->lockfd = open(tmpl, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (m->lockfd < 0 || flock(m->lockfd, LOCK_EX | LOCK_NB) < 0) {
        log_error("cannot lock %s: %s", tmpl, strerror(errno));
        goto fail;
    }
    m->zctx = zmq_ctx_new();
    if (!m->zctx)
        goto fail;
    zmq_ctx_set(m->zctx, ZMQ_IO_THREADS, io_threads);
    zmq_ctx_set(m->zctx, ZMQ_MAX_SOCKETS, max_sockets);
    zmq_ctx_set(m->zctx, ZMQ_BLOCKY, 0);
    snprintf(m->sandbox_mode, sizeof(m->sandbox_mode), "disabled");
    if (o->handover) /* the image before's copy: the kernels that came over keep theirs */
        remove_python(m->rundir);
    if (o->python_dir && o->python_dir[0])
        python_setup(m, o->python_dir);
    if (o->sandbox)
        sandbox_setup(m);
    if (o->handover)
        khandover__resume(m, o->handover, &handover_ops);
    if (kzygote__init(m, kpool__kick) < 0 || kpool__init(m, &pool_ops) < 0)
        goto fail;
    if (!(m->trim = evl->timer_new(evl, on_trim, m)))
        goto fail;
    if (o->hb_interval_ms > 0) {
        if (!(m->hb_sweep = evl->timer_new(evl, on_hb_sweep, m)))
            goto fail;
        evl->timer_arm(evl, m->hb_sweep, (uint64_t)o->hb_interval_ms);
    }
    if (o->cull_idle_timeout_s > 0) {
        m->cull = evl->timer_new(evl, on_cull, m);
        if (!m->cull)
            goto fail;
        evl->timer_arm(evl, m->cull, (uint64_t)o->cull_interval_s * 1000);
    }
    return m;
fail:
    err = errno ? errno : ENOMEM;
    kmgr_destroy(&m);
    errno = err;
    return NULL;
}

void kmgr_destroy(kmgr_t **pm)
{
    kmgr_t *m = *pm;
    if (!m)
        return;
    /* pooled kernels never ran user code: no grace */
    kpool__fini(m);
    kzygote__fini(m);
    /* At exit there is no loop left to wait on: stop every process group at once, give them
     * a moment together, then kill what is left. */
    for (size_t i = 0; i < m->n; i++) {
        kfork__forget(m, m->v[i]);
        klaunch__signal(m->v[i], m->v[i]->adopted ? SIGKILL : SIGTERM);
        if (m->v[i]->adopted) /* a fork: not our child to wait for; its sandbox goes too */
            m->v[i]->pid = 0;
    }
    uint64_t deadline = util_now_ms() + 2000;
    for (;;) {
        size_t alive = 0;
        for (size_t i = 0; i < m->n; i++) {
            kernel_t *k = m->v[i];
            if (k->pid > 1 && waitpid(k->pid, NULL, WNOHANG) == k->pid) {
                klaunch__signal(k, SIGKILL);
                k->pid = 0;
            }
            alive += k->pid > 0;
        }
        if (alive == 0 || util_now_ms() > deadline)
            break;
        usleep(5000);
    }
    while (m->n > 0) {
        kernel_t *k = m->v[--m->n];
        kexec__fail_all(k, KERNEL_OUT_SHUTDOWN, "the gateway is shutting down");
        emit(m, k, KERNEL_EV_GONE, NULL);
        kinstance__free(k);
    }
    while (m->nws > 0)
        wspace__free(m->ws[--m->nws]);
    free(m->ws);
    free(m->v);
    evl_timer_destroy(m->evl, &m->cull);
    evl_timer_destroy(m->evl, &m->hb_sweep);
    evl_timer_destroy(m->evl, &m->trim);
    if (m->zctx)
        zmq_ctx_term(m->zctx);
    if (m->handed_over)
        sbx_cgroups_let_go(&m->cgroups);
    sbx_cgroups_destroy(&m->cgroups);
    free(m->slots);
    kcallmsg_allow_destroy(&m->callbacks);
    if (m->rundir[0] && !m->handed_over) {
        remove_python(m->rundir);
        int dfd = open(m->rundir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd >= 0) { /* the fork server's scratch directory; the lock goes last */
            remove_tree(dfd, "zygote", 0);
            unlinkat(dfd, ".lock", 0);
            close(dfd);
        }
        rmdir(m->rundir);
    }
    if (m->lockfd > 0)
        close(m->lockfd);
    kspecs_destroy(&m->specs);
    free(m);
    *pm = NULL;
}

const kspecs_t *kmgr_kspecs(const kmgr_t *m)
{
    return m->specs;
}

int kmgr_limits_parse(json_t *obj, struct kmgr_limits *out, char *err, size_t errsz)
{
    static const struct {
        const char *key;
        size_t off;
        long long scale;
    } keys[] = {
        {"memory", offsetof(struct kmgr_limits, mem_bytes), 1},
        {"cpu", offsetof(struct kmgr_limits, cpu_millis), 1},
        {"pids", offsetof(struct kmgr_limits, pids), 1},
        {"workspace", offsetof(struct kmgr_limits, workspace_bytes), 1},
        {"exec_timeout", offsetof(struct kmgr_limits, exec_timeout_ms), 1000},
        {"output_bytes", offsetof(struct kmgr_limits, output_cap), 1},
    };
    const char *key;
    json_t *v;
    memset(out, 0, sizeof(*out));
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj)) {
        snprintf(err, errsz, "\"limits\" must be an object");
        return -EINVAL;
    }
    json_object_foreach(obj, key, v)
    {
        size_t i;
        for (i = 0; i < UTIL_ARRAY_SIZE(keys); i++)
            if (!strcmp(key, keys[i].key))
                break;
        if (i == UTIL_ARRAY_SIZE(keys) || !json_is_integer(v) || json_integer_value(v) <= 0 ||
            json_integer_value(v) > (1LL << 50)) {
            char q[80];
            snprintf(err, errsz,
                     "limits: %s is not a known limit with a positive integer value (memory, cpu, "
                     "pids, workspace, exec_timeout, output_bytes)",
                     log_quote(q, sizeof(q), key, strlen(key)));
            return -EINVAL;
        }
        *(long long *)((char *)out + keys[i].off) = json_integer_value(v) * keys[i].scale;
    }
    return 0;
}

static bool within(long long want, long long cap)
{
    return want == 0 || (want > 0 && (cap == 0 || want <= cap));
}

/* The least recently used workspace no kernel uses and no transfer holds, or NULL. */
static wspace_t *ws_idle(kmgr_t *m)
{
    wspace_t *best = NULL;
    for (size_t i = 0; i < m->nws; i++) {
        wspace_t *w = m->ws[i];
        if (w->kernels == 0 && w->holds == 0 && (!best || w->last_used_us < best->last_used_us))
            best = w;
    }
    return best;
}

/* for_pool: the warm pool's own start (it never shrinks the pool to make room). */
static int new_workspace(kmgr_t *m, const char *tenant, long long size, bool for_pool,
                         wspace_t **ret)
{
    long slot = -1;
    /* for a user, the warm pool gives way first, before a workspace kept for downloads */
    while ((m->nws >= (size_t)m->o.max_workspaces ||
            (m->o.sandbox && (slot = wspace__slot_take(m)) < 0)) &&
           !for_pool && kpool__shrink(m))
        ;
    if (m->nws >= (size_t)m->o.max_workspaces || (m->o.sandbox && slot < 0 && (slot = wspace__slot_take(m)) < 0)) {
        /* full: the oldest workspace left only for downloads makes room */
        wspace_t *old = ws_idle(m);
        if (!old)
            return -EAGAIN;
        log_info("workspace=%s: removed early to make room for a new one", old->id);
        ws_remove(m, old);
        wspace__free(old);
        if (m->o.sandbox && slot < 0 && (slot = wspace__slot_take(m)) < 0)
            return -EAGAIN;
    }
    if (util_grow((void **)&m->ws, &m->capws, m->nws, sizeof(*m->ws)) < 0) {
        wspace__slot_put(m, slot);
        return -ENOMEM;
    }
    wspace_t *w = wspace__new(m, tenant, size, slot, &ws_ops);
    if (!w) {
        int err = errno;
        wspace__slot_put(m, slot);
        return -err;
    }
    m->ws[m->nws++] = w;
    *ret = w;
    return 0;
}

/* The tenant's oldest workspace kept only for downloads (no kernel, no transfer), or NULL. */
static wspace_t *tenant_idle_ws(const kmgr_t *m, const char *tenant)
{
    wspace_t *best = NULL;
    for (size_t i = 0; i < m->nws; i++) {
        wspace_t *w = m->ws[i];
        if (!w->pooled && w->kernels == 0 && w->holds == 0 && !strcmp(w->tenant, tenant) &&
            (!best || w->last_used_us < best->last_used_us))
            best = w;
    }
    return best;
}

/* The tenant's quotas: kernels, workspaces and the bytes its workspaces may hold (their
 * sizes: a workspace's bytes, uploads included, never exceed its size). When only a new
 * workspace does not fit, the tenant's own workspaces kept only for downloads make room, the
 * oldest first. -EDQUOT. */
static int tenant_quota(kmgr_t *m, const char *tenant, long long new_ws_bytes)
{
    size_t kernels = 0;
    for (size_t i = 0; i < m->n; i++)
        kernels += !strcmp(m->v[i]->ws->tenant, tenant);
    if (m->o.tenant_max_kernels > 0 && kernels >= (size_t)m->o.tenant_max_kernels)
        return -EDQUOT;
    if (new_ws_bytes < 0) /* shares one */
        return 0;
    for (;;) {
        size_t spaces = 0;
        long long bytes = new_ws_bytes;
        for (size_t i = 0; i < m->nws; i++)
            if (!m->ws[i]->pooled && !strcmp(m->ws[i]->tenant, tenant)) {
                spaces++;
                bytes += m->ws[i]->size;
            }
        bool over_n =
            m->o.tenant_max_workspaces > 0 && spaces >= (size_t)m->o.tenant_max_workspaces;
        bool over_b =
            new_ws_bytes > 0 && m->o.tenant_max_bytes > 0 && bytes > m->o.tenant_max_bytes;
        if (!over_n && !over_b)
            return 0;
        wspace_t *old = tenant_idle_ws(m, tenant);
        if (!old)
            return -EDQUOT;
        log_info("workspace=%s: removed early: its tenant needs room for a new workspace "
                 "(--tenant-max-%s)",
                 old->id, over_n ? "workspaces" : "bytes");
        ws_remove(m, old);
        wspace__free(old);
    }
}

/* A client's start that failed before a kernel existed: counted, and returned. */
/* CPU is shared between tenants, not between kernels: each of a tenant's n kernels weighs
 * 1/n of a kernel's default, so 16 busy kernels of one tenant together weigh what another
 * tenant's one kernel does (the kernels' CPU limits still cap each one). */
static void tenant_weights(kmgr_t *m, const char *tenant)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += m->v[i]->cgroup && !strcmp(m->v[i]->ws->tenant, tenant);
    unsigned shares = n ? (unsigned)(KMGR_CPU_SHARES / n) : 0;
    for (size_t i = 0; n && i < m->n; i++) {
        kernel_t *k = m->v[i];
        if (!k->cgroup || k->cpu_shares == shares || strcmp(k->ws->tenant, tenant) != 0)
            continue; /* unchanged: no write (a tenant's many kernels rarely change weight) */
        if (sbx_cgroup_set_weight(k->cgroup, shares) < 0)
            log_debug("kernel=%s: cannot set its CPU weight", k->id);
        else
            k->cpu_shares = shares;
    }
}

static int refuse(kmgr_t *m, enum kmgr_start_fail why, int r)
{
    m->stats.start_failures[why]++;
    return r;
}

/* 0 when one more kernel's descriptors fit, else -EMFILE (logged) after the warm pool gave
 * way (kcapacity.c has the arithmetic). */
static int fd_room(kmgr_t *m)
{
    long long left = kcapacity__fd_left(m), need = kcapacity__fd_per_kernel(m);
    /* the warm pool gives way first: a pooled kernel's descriptors are closed as it goes */
    while (left != LLONG_MAX && left < need && kpool__shrink(m))
        left += KMGR_KERNEL_FDS;
    if (left >= need)
        return 0;
    log_warn("kernel start refused: the open-file limit leaves %lld descriptors for kernels, a "
             "kernel needs %lld (raise LimitNOFILE or lower --max-kernels)",
             left > 0 ? left : 0, need);
    return -EMFILE;
}

int kmgr_start(kmgr_t *m, const struct kmgr_start *req, kernel_t **ret)
{
    const struct kmgr_limits *lim = req->lim;
    const char *tenant = req->tenant ? req->tenant : "";
    wspace_t *ws = NULL;
    uint64_t t0 = util_now_us();
    int r;
    if (m->draining)
        return -ESHUTDOWN;
    if (lim) {
        const struct sbx_limits *cap = m->o.sandbox ? &m->o.sandbox->lim : NULL;
        if ((cap && (!within(lim->mem_bytes, cap->mem_bytes) ||
                     !within(lim->cpu_millis, cap->cpu_millis) || !within(lim->pids, cap->pids) ||
                     !within(lim->workspace_bytes, cap->workspace_bytes))) ||
            !within(lim->exec_timeout_ms, m->o.exec_timeout_ms) ||
            lim->exec_timeout_ms > INT_MAX ||
            !within(lim->output_cap, m->o.output_cap))
            return -ERANGE;
    }
    if (strlen(tenant) > KMGR_TENANT_MAX)
        return -EINVAL;
    const kspec_t *spec = kspecs_find(m->specs, req->spec_name);
    if (!spec)
        return -ENOENT;
    if (req->env && !json_is_object(req->env))
        return -EINVAL;
    if (req->workspace) {
        ws = kmgr_workspace(m, req->workspace);
        if (!ws || strcmp(ws->tenant, tenant) != 0)
            return -ESRCH;
    }
    if (m->sandbox_error[0])
        return refuse(m, KMGR_FAIL_SANDBOX, -EPERM);
    if (m->o.max_kernels > 0 && m->n >= (size_t)m->o.max_kernels)
        return refuse(m, KMGR_FAIL_LIMIT, -EAGAIN);
    long long new_ws_bytes = ws                                ? -1 /* shares one */
                             : lim && lim->workspace_bytes > 0 ? lim->workspace_bytes
                             : m->o.sandbox                    ? m->o.sandbox->lim.workspace_bytes
                                                               : 0;
    if ((r = tenant_quota(m, tenant, new_ws_bytes)) < 0)
        return refuse(m, KMGR_FAIL_QUOTA, r);
    if (util_grow((void **)&m->v, &m->cap, m->n, sizeof(*m->v)) < 0)
        return refuse(m, KMGR_FAIL_SPAWN, -ENOMEM);
    /* a pooled kernel's environment has no proxy variables, nor its sandbox a proxy */
    kernel_t *k = req->egress && req->egress->n
                      ? NULL
                      : kpool__take(m, spec, req->workspace != NULL, req->lim);
    if (k) {
        if ((r = kinstance__adopt(k, req->env, lim)) < 0) {
            kpool__drop(m, k);
            return refuse(m, KMGR_FAIL_SPAWN, r);
        }
        snprintf(k->ws->tenant, sizeof(k->ws->tenant), "%s", tenant);
        m->v[m->n++] = k;
        tenant_weights(m, tenant);
        log_info("kernel=%s: %s taken from the pool, workspace=%s", k->id, spec->name, k->ws->id);
        start_begin(k, t0, true);
        *ret = k;
        return 0;
    }
    /* a new kernel's descriptors, before anything is opened for it */
    if ((r = fd_room(m)) < 0)
        return refuse(m, KMGR_FAIL_LIMIT, r);
    /* pooled kernels never push the gateway past max-kernels: one gives way */
    while (m->o.max_kernels > 0 && m->n + m->pn >= (size_t)m->o.max_kernels && kpool__shrink(m))
        ;
    if (!ws) {
        long long size = lim && lim->workspace_bytes > 0 ? lim->workspace_bytes
                         : m->o.sandbox                  ? m->o.sandbox->lim.workspace_bytes
                                                         : 0;
        if ((r = new_workspace(m, tenant, size, false, &ws)) < 0)
            return refuse(m, r == -EAGAIN ? KMGR_FAIL_LIMIT : KMGR_FAIL_SPAWN, r);
    }
    k = kinstance__new(m, spec, req->env, lim, ws, NULL, req->egress, req->secrets, req->nsecrets,
                       &kernel_owner);
    if (!k)
        return refuse(m, KMGR_FAIL_SPAWN, -errno);
    m->v[m->n++] = k;
    tenant_weights(m, tenant);
    log_info("kernel=%s: starting %s in workspace=%s", k->id, spec->name, ws->id);
    start_begin(k, t0, false);
    *ret = k;
    return 0;
}

int kmgr_fork(kmgr_t *m, kernel_t *parent, const char *checkpoint, kernel_t **ret)
{
    const char *tenant = parent->ws->tenant;
    uint64_t t0 = util_now_us();
    kernel_t *k;
    int r;
    if (m->draining)
        return -ESHUTDOWN;
    if (m->sandbox_error[0])
        return refuse(m, KMGR_FAIL_SANDBOX, -EPERM);
    if (m->o.max_kernels > 0 && m->n >= (size_t)m->o.max_kernels)
        return refuse(m, KMGR_FAIL_LIMIT, -EAGAIN);
    if ((r = tenant_quota(m, tenant, -1)) < 0) /* it shares its parent's workspace */
        return refuse(m, KMGR_FAIL_QUOTA, r);
    if (util_grow((void **)&m->v, &m->cap, m->n, sizeof(*m->v)) < 0)
        return refuse(m, KMGR_FAIL_SPAWN, -ENOMEM);
    if ((r = fd_room(m)) < 0)
        return refuse(m, KMGR_FAIL_LIMIT, r);
    while (m->o.max_kernels > 0 && m->n + m->pn >= (size_t)m->o.max_kernels && kpool__shrink(m))
        ;
    /* a fork's process lives in the sandbox of the kernel it was forked from (or of that
     * one's parent...): its fork does too */
    kernel_t *owner = parent;
    for (int depth = 0; owner && owner->adopted && depth < 64; depth++)
        owner = kmgr_find(m, owner->fork_of);
    if (!owner || owner->adopted)
        return -EBUSY;
    /* their endpoints take inodes of the owner's runtime directory (a small tmpfs) */
    size_t forks = 0, len = strlen(owner->dir);
    for (size_t i = 0; i < m->n; i++)
        forks += m->v[i]->ipc_dir && !strncmp(m->v[i]->ipc_dir, owner->dir, len) &&
                 m->v[i]->ipc_dir[len] == '/';
    if (forks >= KMGR_FORKS_MAX)
        return -ETOOMANYREFS;
    if ((r = kfork__start(m, parent, owner, checkpoint, &kernel_owner, &k)) < 0)
        return r == -EBUSY ? r : refuse(m, KMGR_FAIL_SPAWN, r);
    m->v[m->n++] = k;
    tenant_weights(m, tenant);
    log_info("kernel=%s: forking %s%s%s", k->id, parent->id, checkpoint ? " at checkpoint " : "",
             checkpoint ? checkpoint : "");
    start_begin(k, t0, false);
    *ret = k;
    return 0;
}

static void ws_remove(kmgr_t *m, wspace_t *w)
{
    for (size_t i = 0; i < m->nws; i++)
        if (m->ws[i] == w) {
            memmove(&m->ws[i], &m->ws[i + 1], (m->nws - i - 1) * sizeof(*m->ws));
            m->nws--;
            kpool__kick(m); /* room for the pool again */
            return;
        }
}

/* What a workspace and the warm pool ask of the manager (wspace.c, kpool.c). */
static const struct wspace_ops ws_ops = {
    .gone = ws_remove,
};

static const struct kpool_ops pool_ops = {
    .kernel_owner = &kernel_owner,
    .new_workspace = new_workspace,
    .ws_idle = ws_idle,
    .ws_remove = ws_remove,
};

/* Workspaces of pooled kernels belong to nobody yet: hidden until the kernel is handed out. */
wspace_t *kmgr_workspace(const kmgr_t *m, const char *id)
{
    for (size_t i = 0; i < m->nws; i++)
        if (!m->ws[i]->pooled && strcmp(m->ws[i]->id, id) == 0)
            return m->ws[i];
    return NULL;
}

size_t kmgr_workspace_count(const kmgr_t *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nws; i++)
        n += !m->ws[i]->pooled;
    return n;
}

wspace_t *kmgr_workspace_at(const kmgr_t *m, size_t i)
{
    for (size_t j = 0; j < m->nws; j++)
        if (!m->ws[j]->pooled && i-- == 0)
            return m->ws[j];
    return NULL;
}

static void remove_kernel(kmgr_t *m, kernel_t *k)
{
    if (k->pool) {
        kpool__remove(m, k);
        return;
    }
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i] == k) {
            memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
            m->n--;
            if (k->ws)
                tenant_weights(m, k->ws->tenant);
            kpool__kick(m); /* room for the pool again */
            return;
        }
}

void kmgr_reap(kmgr_t *m)
{
    for (size_t i = 0; i < m->n;) {
        size_t before = m->n;
        kernel__check_exit(m->v[i]);
        if (m->n == before) /* else v[i] was removed: look at the same index again */
            i++;
    }
    for (size_t i = 0; i < m->pn;) {
        size_t before = m->pn;
        kernel__check_exit(m->pv[i]);
        if (m->pn == before)
            i++;
    }
    kzygote__reap_strays(m);
}

kernel_t *kmgr_find(const kmgr_t *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->v[i]->id, id) == 0)
            return m->v[i];
    return NULL;
}

size_t kmgr_count(const kmgr_t *m)
{
    return m->n;
}

kernel_t *kmgr_at(const kmgr_t *m, size_t i)
{
    return i < m->n ? m->v[i] : NULL;
}

void kmgr_drain(kmgr_t *m)
{
    if (m->draining)
        return;
    m->draining = true;
    if (m->pn > 0)
        log_info("pool: draining: killing %zu pooled kernel%s", m->pn, m->pn == 1 ? "" : "s");
    kpool__fini(m); /* no refill from now on */
}

bool kmgr_draining(const kmgr_t *m)
{
    return m->draining;
}

size_t kmgr_executions(const kmgr_t *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        n += kernel_executions(m->v[i]);
    return n;
}

const struct kmgr_stats *kmgr_stats(const kmgr_t *m)
{
    return &m->stats;
}

/* Adds a cgroup's usage to the sums (-1 stays -1: not accounted). */
static void add_usage(const kernel_t *k, struct kmgr_usage *sum)
{
    struct sbx_cgroup_usage u;
    if (!k->cgroup)
        return;
    sbx_cgroup_usage(k->cgroup, &u);
    if (sum->mem_bytes >= 0 && u.mem_bytes > 0)
        sum->mem_bytes += u.mem_bytes;
    if (sum->cpu_ns >= 0 && u.cpu_ns > 0)
        sum->cpu_ns += u.cpu_ns;
}

void kmgr_usage(const kmgr_t *m, struct kmgr_usage *ret)
{
    struct kmgr_usage sum = {-1, -1};
    if (m->cgroups) {
        sum.mem_bytes = 0;
        if (sbx_cgroups_cpu_accounted(m->cgroups))
            sum.cpu_ns = (long long)m->stats.cpu_ns_gone;
        for (size_t i = 0; i < m->n; i++)
            add_usage(m->v[i], &sum);
        for (size_t i = 0; i < m->pn; i++)
            add_usage(m->pv[i], &sum);
    }
    *ret = sum;
}
