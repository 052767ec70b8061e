#include "sandbox/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

static const char *const v1_ctls[] = {"memory", "pids", "cpu"};
#define NCTL 3

/* The cgroup worker: a small process (forked while the gateway is small) that makes and
 * removes cgroup directories for the gateway, whose loop must not wait for them (a mkdir in
 * the v1 memory hierarchy takes 10-50 ms here, an rmdir up to 10 ms, and a removal retries
 * while the killed processes leave). It keeps SPARES empty cgroups ready ("cg-<tag>-N" in every
 * hierarchy); sbx_cgroup_new takes one as it is (a rename would take the cgroup_mutex like a
 * mkdir) and writes its limits,
 * so a kernel is still in its cgroup, with its limits, before it runs any code. Removals are
 * handed over and not waited for. Without a worker (it died, or could not start) the
 * gateway does the same itself, as before. Requests and answers are datagrams on a
 * SOCK_SEQPACKET pair; the gateway never blocks on it (answers are read when it wants a
 * spare, sends are MSG_DONTWAIT). */
#define SPARES 16
enum { CGW_MAKE = 'm', CGW_REMOVE = 'r', CGW_DIRS = 'd' };
#define CGW_PATH 192
struct cgw_req {
    char op;
    bool mounted;           /* CGW_DIRS: dirs[0] is a mount point */
    pid_t keep;             /* CGW_REMOVE: a process never killed */
    char name[40];          /* below the gateway's cgroup parent, no '/' */
    char dirs[2][CGW_PATH]; /* CGW_DIRS: absolute, no "..", "" for none */
};
struct cgw_ans {
    char name[40];
    int err; /* 0 or an errno */
};

struct sbx_cgroups {
    int version;
    char base[NCTL][PATH_MAX]; /* v1: one per controller; v2: base[0] only */
    pid_t keep;                /* never killed by a cgroup's removal (sbx_cgroups_keep) */
    bool cpuacct;              /* v1: cpuacct shares the cpu hierarchy (cpuacct.usage) */
    pid_t worker;              /* the cgroup worker, 0 for none */
    int wfd;                   /* its socket, -1 for none */
    unsigned serial;           /* of spares */
    unsigned tag;              /* in its spares' names: another image's never collide */
    int asked;                 /* spares asked for, not yet answered */
    int nready;
    char ready[SPARES][40]; /* spares made */
};

struct sbx_cgroup {
    sbx_cgroups_t *cgs;
    char path[NCTL][PATH_MAX];
};

static int write_file(const char *dir, const char *file, const char *value)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    return util_write_small(p, value);
}

static int read_file(const char *dir, const char *file, char *out, size_t outsz)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, out, outsz - 1);
    close(fd);
    if (n < 0)
        return -errno;
    out[n] = '\0';
    return (int)n;
}

/* Value of "key N" in a flat keyed file (memory.events, pids.events, memory.oom_control). */
static long long keyed(const char *dir, const char *file, const char *key)
{
    char buf[4096];
    if (read_file(dir, file, buf, sizeof(buf)) < 0)
        return 0;
    size_t kl = strlen(key);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, key, kl) && line[kl] == ' ')
            return atoll(line + kl + 1);
    return 0;
}

/* Our own cgroup path for a v1 controller, or for v2 ("" key), from /proc/self/cgroup. */
static bool own_cgroup(const char *ctl, char *out, size_t outsz)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[1024];
    bool found = false;
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *list = c1 + 1;
        bool match = false;
        if (!ctl[0]) {
            match = list[0] == '\0';
        } else {
            char copy[256], *save = NULL;
            snprintf(copy, sizeof(copy), "%s", list);
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
                match = match || !strcmp(t, ctl);
        }
        if (match) {
            snprintf(out, outsz, "%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
            found = true;
            break;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* Kills what is in the cgroup dir (but keep) and tries to remove it: 0, or -errno (-EBUSY
 * while killed processes are still leaving, or dead ones not yet reaped). */
static int kill_rmdir_once(const char *dir, pid_t keep)
{
    char buf[8192];
    if (read_file(dir, "cgroup.procs", buf, sizeof(buf)) > 0)
        for (char *p = buf; *p;) {
            pid_t pid = (pid_t)atoi(p);
            if (pid > 0 && pid != keep)
                kill(pid, SIGKILL);
            p = strchr(p, '\n');
            if (!p)
                break;
            p++;
        }
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : -errno;
}

static void kill_and_rmdir(const char *dir, pid_t keep)
{
    int r = 0;
    for (int attempt = 0; attempt < 50; attempt++) {
        if ((r = kill_rmdir_once(dir, keep)) == 0)
            return;
        usleep(2000);
    }
    log_debug("cgroup: cannot remove %s: %s", dir, strerror(-r));
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char sub[PATH_MAX];
    while (d && (e = readdir(d)))
        if (e->d_type == DT_DIR && e->d_name[0] != '.') {
            snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
            kill_and_rmdir(sub, 0);
        }
    if (d)
        closedir(d);
    kill_and_rmdir(dir, 0);
}

/* The worker's side. Only system calls and string formatting: it is a copy of the gateway,
 * which may have other threads. A removal that cannot finish at once (killed processes still
 * leaving, or not yet reaped: they hold a v1 cgroup) is retried every WORKER_RETRY_MS for
 * WORKER_RETRIES times, between requests. */
#define WORKER_PENDING  256
#define WORKER_RETRY_MS 20
#define WORKER_RETRIES  1500 /* 30 s */
struct worker_removal {
    char name[40];
    pid_t keep;
    int tries;
};

/* true once the cgroup is gone from every hierarchy */
static bool worker_remove(const sbx_cgroups_t *cgs, const char *name, pid_t keep)
{
    char dir[PATH_MAX + 48];
    bool gone = true;
    for (int i = 0; i < (cgs->version == 1 ? NCTL : 1); i++) {
        snprintf(dir, sizeof(dir), "%s/%s", cgs->base[i], name);
        gone = kill_rmdir_once(dir, keep) == 0 && gone;
    }
    return gone;
}

static int worker_make(const sbx_cgroups_t *cgs, const char *name)
{
    char dir[PATH_MAX + 48];
    for (int i = 0; i < (cgs->version == 1 ? NCTL : 1); i++) {
        snprintf(dir, sizeof(dir), "%s/%s", cgs->base[i], name);
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
            int err = errno;
            worker_remove(cgs, name, 0);
            return err;
        }
    }
    return 0;
}

static void worker_dirs(struct cgw_req *q)
{
    for (int i = 0; i < 2; i++) {
        q->dirs[i][CGW_PATH - 1] = '\0';
        if (q->dirs[i][0] != '/' || strstr(q->dirs[i], "/.."))
            continue;
        if (i == 0 && q->mounted)
            umount2(q->dirs[i], MNT_DETACH);
        rmdir(q->dirs[i]);
    }
}

static _Noreturn void worker_main(const sbx_cgroups_t *cgs, int fd)
{
    static struct worker_removal pending[WORKER_PENDING];
    int npending = 0;
    struct cgw_req q;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, npending ? WORKER_RETRY_MS : -1);
        if (pr == 0) {
            for (int i = 0; i < npending;)
                if (worker_remove(cgs, pending[i].name, pending[i].keep) ||
                    ++pending[i].tries >= WORKER_RETRIES)
                    pending[i] = pending[--npending];
                else
                    i++;
            continue;
        }
        ssize_t n = pr < 0 ? -1 : recv(fd, &q, sizeof(q), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof(q))
            _exit(0); /* EOF: the gateway is gone or done */
        q.name[sizeof(q.name) - 1] = '\0';
        if (q.op == CGW_DIRS) {
            worker_dirs(&q);
            continue;
        }
        if (!q.name[0] || q.name[0] == '.' || strchr(q.name, '/'))
            continue; /* never outside the gateway's cgroups */
        if (q.op == CGW_REMOVE) {
            if (!worker_remove(cgs, q.name, q.keep) && npending < WORKER_PENDING) {
                memcpy(pending[npending].name, q.name, sizeof(q.name));
                pending[npending].keep = q.keep;
                pending[npending++].tries = 0;
            }
        } else if (q.op == CGW_MAKE) {
            struct cgw_ans a = {.err = worker_make(cgs, q.name)};
            memcpy(a.name, q.name, sizeof(a.name));
            if (send(fd, &a, sizeof(a), MSG_NOSIGNAL) < 0)
                _exit(0);
        }
    }
}

static void worker_start(sbx_cgroups_t *cgs)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(0);
        if (sv[1] != 3 && dup2(sv[1], 3) < 0)
            _exit(0);
        /* nothing of the gateway's but its socket (the listeners, kernels' sockets) */
        if (syscall(SYS_close_range, 4, ~0U, 0) < 0)
            for (int fd = 4; fd < 1024; fd++)
                close(fd);
        worker_main(cgs, 3);
    }
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return;
    }
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    cgs->worker = pid;
    cgs->wfd = sv[0];
}

static void worker_stop(sbx_cgroups_t *cgs)
{
    if (cgs->wfd >= 0)
        close(cgs->wfd); /* EOF: it exits once its last request is done */
    cgs->wfd = -1;
    if (cgs->worker > 0)
        waitpid(cgs->worker, NULL, 0);
    cgs->worker = 0;
}

/* Hands a request over without waiting; false when the worker cannot take it (then the
 * caller does the work itself). */
static bool worker_send(sbx_cgroups_t *cgs, char op, const char *name, pid_t keep)
{
    struct cgw_req q = {.op = op, .keep = keep};
    if (cgs->wfd < 0 || strlen(name) >= sizeof(q.name))
        return false;
    memcpy(q.name, name, strlen(name) + 1);
    if (send(cgs->wfd, &q, sizeof(q), MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(q))
        return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK) { /* gone: from now on, without it */
        log_debug("cgroup: the cgroup worker is gone (%s)", strerror(errno));
        close(cgs->wfd);
        cgs->wfd = -1;
    }
    return false;
}

void sbx_cgroups_remove_dirs(sbx_cgroups_t *cgs, const char *dir, bool mounted, const char *also)
{
    struct cgw_req q = {.op = CGW_DIRS, .mounted = mounted};
    bool fits = strlen(dir) < CGW_PATH && (!also || strlen(also) < CGW_PATH);
    if (fits && cgs && cgs->wfd >= 0) {
        memcpy(q.dirs[0], dir, strlen(dir) + 1);
        if (also)
            memcpy(q.dirs[1], also, strlen(also) + 1);
        if (send(cgs->wfd, &q, sizeof(q), MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(q))
            return;
    }
    if (mounted)
        umount2(dir, MNT_DETACH);
    rmdir(dir);
    if (also)
        rmdir(also);
}

/* Reads the worker's answers that are there, and asks for spares up to SPARES. */
static void spares_refill(sbx_cgroups_t *cgs)
{
    struct cgw_ans a;
    ssize_t n = -1;
    while (cgs->wfd >= 0 && (n = recv(cgs->wfd, &a, sizeof(a), MSG_DONTWAIT)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                close(cgs->wfd);
                cgs->wfd = -1;
            }
            break;
        }
        if (n != (ssize_t)sizeof(a))
            continue;
        cgs->asked--;
        a.name[sizeof(a.name) - 1] = '\0';
        if (a.err)
            log_debug("cgroup: no spare %s: %s", a.name, strerror(a.err));
        else if (cgs->nready < SPARES)
            memcpy(cgs->ready[cgs->nready++], a.name, sizeof(a.name));
        else
            worker_send(cgs, CGW_REMOVE, a.name, 0);
    }
    if (n == 0 && cgs->wfd >= 0) { /* EOF: the worker died */
        close(cgs->wfd);
        cgs->wfd = -1;
    }
    while (cgs->wfd >= 0 && cgs->nready + cgs->asked < SPARES) {
        char name[40];
        snprintf(name, sizeof(name), "cg-%x-%u", cgs->tag, ++cgs->serial);
        if (!worker_send(cgs, CGW_MAKE, name, 0))
            break;
        cgs->asked++;
    }
}

sbx_cgroups_t *sbx_cgroups_new(const char *instance, char *why, size_t whysz)
{
    char own[PATH_MAX];
    struct stat st;
    sbx_cgroups_t *cgs = calloc(1, sizeof(*cgs));
    if (!cgs)
        return NULL;
    cgs->wfd = -1;
    cgs->tag = (unsigned)(util_now_us() & 0xffffffffu);
    if (own_cgroup("memory", own, sizeof(own)) && stat("/sys/fs/cgroup/memory", &st) == 0) {
        cgs->version = 1;
        for (int i = 0; i < NCTL; i++) {
            if (!own_cgroup(v1_ctls[i], own, sizeof(own))) {
                snprintf(why, whysz, "cgroup v1 controller %s is not mounted", v1_ctls[i]);
                goto fail;
            }
            snprintf(cgs->base[i], sizeof(cgs->base[i]), "/sys/fs/cgroup/%s%s/kgw-%s",
                     v1_ctls[i], own, instance);
            if (mkdir(cgs->base[i], 0755) < 0 && errno != EEXIST) {
                snprintf(why, whysz, "cannot create cgroup %s: %s", cgs->base[i],
                         strerror(errno));
                goto fail;
            }
        }
        char usage[PATH_MAX + 16];
        snprintf(usage, sizeof(usage), "%s/cpuacct.usage", cgs->base[2]);
        cgs->cpuacct = access(usage, R_OK) == 0;
        worker_start(cgs);
        spares_refill(cgs);
        return cgs;
    }
    if (own_cgroup("", own, sizeof(own))) {
        char buf[512], dir[PATH_MAX], leaf[PATH_MAX + 32];
        cgs->version = 2;
        snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", own);
        if (read_file("/sys/fs/cgroup", "cgroup.controllers", buf, sizeof(buf)) < 0 ||
            !strstr(buf, "memory") || !strstr(buf, "pids") || !strstr(buf, "cpu")) {
            snprintf(why, whysz, "cgroup v2 is mounted without the memory, pids and cpu "
                                 "controllers");
            goto fail;
        }
        /* v2 has no processes in inner cgroups: move the gateway into a leaf of its own,
         * then delegate the controllers to the kernels' parent. */
        snprintf(leaf, sizeof(leaf), "%s/kgw-%s-gateway", dir, instance);
        snprintf(buf, sizeof(buf), "%d", (int)getpid());
        if ((mkdir(leaf, 0755) < 0 && errno != EEXIST) ||
            write_file(leaf, "cgroup.procs", buf) < 0 ||
            write_file(dir, "cgroup.subtree_control", "+memory +pids +cpu") < 0) {
            snprintf(why, whysz, "cannot delegate cgroup v2 controllers under %s: %s", dir,
                     strerror(errno));
            goto fail;
        }
        snprintf(cgs->base[0], sizeof(cgs->base[0]), "%s/kgw-%s", dir, instance);
        if ((mkdir(cgs->base[0], 0755) < 0 && errno != EEXIST) ||
            write_file(cgs->base[0], "cgroup.subtree_control", "+memory +pids +cpu") < 0) {
            snprintf(why, whysz, "cannot create cgroup %s: %s", cgs->base[0], strerror(errno));
            goto fail;
        }
        worker_start(cgs);
        spares_refill(cgs);
        return cgs;
    }
    snprintf(why, whysz, "no usable cgroup hierarchy found in /proc/self/cgroup");
fail:
    free(cgs);
    errno = ENOTSUP;
    return NULL;
}

void sbx_cgroups_destroy(sbx_cgroups_t **pcgs)
{
    sbx_cgroups_t *cgs = *pcgs;
    if (!cgs)
        return;
    worker_stop(cgs); /* its removals are done before the tree goes */
    for (int i = 0; i < (cgs->version == 1 ? NCTL : 1); i++)
        remove_tree(cgs->base[i]);
    free(cgs);
    *pcgs = NULL;
}

void sbx_cgroups_let_go(sbx_cgroups_t **pcgs)
{
    sbx_cgroups_t *cgs = *pcgs;
    if (!cgs)
        return;
    spares_refill(cgs); /* the answers so far: their spares go too */
    while (cgs->nready > 0)
        if (!worker_send(cgs, CGW_REMOVE, cgs->ready[--cgs->nready], 0))
            for (int i = 0; i < (cgs->version == 1 ? NCTL : 1); i++) {
                char dir[PATH_MAX + 48];
                snprintf(dir, sizeof(dir), "%s/%s", cgs->base[i], cgs->ready[cgs->nready]);
                rmdir(dir);
            }
    worker_stop(cgs); /* its removals are done; spares asked for and not answered stay
                         empty until the tree goes */
    free(cgs);
    *pcgs = NULL;
}

void sbx_cgroups_remove_stale(const char *instance)
{
    char own[PATH_MAX], dir[PATH_MAX + 64];
    for (int i = 0; i < NCTL; i++)
        if (own_cgroup(v1_ctls[i], own, sizeof(own))) {
            snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s/kgw-%s", v1_ctls[i], own, instance);
            remove_tree(dir);
        }
    if (own_cgroup("", own, sizeof(own))) {
        snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s/kgw-%s", own, instance);
        remove_tree(dir);
    }
}

/* Removes empty cgroups only (rmdir fails where processes live): a dead instance's kernels
 * died with it, while a live instance under another runtime directory keeps its kernels. */
static void rmdir_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char sub[PATH_MAX + 256];
    while (d && (e = readdir(d)))
        if (e->d_type == DT_DIR && e->d_name[0] != '.') {
            snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
            rmdir(sub);
        }
    if (d)
        closedir(d);
    if (rmdir(dir) == 0)
        log_info("cgroup: removed stale %s", dir);
}

static void sweep_dir(const char *dir, bool (*alive)(const char *, void *), void *data)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char sub[PATH_MAX + 256];
    while (d && (e = readdir(d))) {
        /* kgw-<instance> only: never the gateway leaf "kgw-<instance>-gateway" of a live v2
         * instance (alive() says so for live instances, and the name check skips leaves) */
        if (e->d_type != DT_DIR || strncmp(e->d_name, "kgw-gw-", 7) != 0 ||
            strchr(e->d_name + 7, '-'))
            continue;
        if (alive(e->d_name + 4, data))
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        rmdir_tree(sub);
    }
    if (d)
        closedir(d);
}

void sbx_cgroups_sweep(bool (*alive)(const char *instance, void *data), void *data)
{
    char own[PATH_MAX], dir[PATH_MAX + 64];
    for (int i = 0; i < NCTL; i++)
        if (own_cgroup(v1_ctls[i], own, sizeof(own))) {
            snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s", v1_ctls[i], own);
            sweep_dir(dir, alive, data);
        }
    if (own_cgroup("", own, sizeof(own))) {
        snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", own);
        sweep_dir(dir, alive, data);
    }
}

void sbx_cgroups_keep(sbx_cgroups_t *cgs, pid_t pid)
{
    cgs->keep = pid;
}

const char *sbx_cgroups_version(const sbx_cgroups_t *cgs)
{
    return cgs->version == 1 ? "v1" : "v2";
}

bool sbx_cgroups_cpu_accounted(const sbx_cgroups_t *cgs)
{
    return cgs->version == 2 || cgs->cpuacct;
}

/* Kills what is left in cg and removes its directories: through the worker (not waited for)
 * when its directories are base/name in every hierarchy (they are: no rename). */
static void release(sbx_cgroup_t *cg)
{
    sbx_cgroups_t *cgs = cg->cgs;
    int n = cgs->version == 1 ? NCTL : 1;
    const char *name = strrchr(cg->path[0], '/');
    bool same = name != NULL;
    for (int i = 0; same && i < n; i++) {
        size_t bl = strlen(cgs->base[i]);
        same = !strncmp(cg->path[i], cgs->base[i], bl) && !strcmp(cg->path[i] + bl, name);
    }
    if (!same || !worker_send(cgs, CGW_REMOVE, name + 1, cgs->keep))
        for (int i = 0; i < NCTL; i++)
            if (cg->path[i][0])
                kill_and_rmdir(cg->path[i], cgs->keep);
    for (int i = 0; i < NCTL; i++)
        cg->path[i][0] = '\0';
}

sbx_cgroup_t *sbx_cgroup_new(sbx_cgroups_t *cgs, const char *name, long long mem_bytes,
                             long long pids, long long cpu_millis)
{
    int r = 0;
    sbx_cgroup_t *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return NULL;
    cg->cgs = cgs;
    int n = cgs->version == 1 ? NCTL : 1;
    spares_refill(cgs);
    while (cgs->nready > 0) { /* a spare made by the worker: no mkdir on the caller's time */
        const char *spare = cgs->ready[--cgs->nready];
        /* it keeps the spare's name: a rename takes the cgroup_mutex, as every mkdir and
         * rmdir does, and waited up to 54 ms behind them here */
        for (int i = 0; i < n; i++)
            snprintf(cg->path[i], sizeof(cg->path[i]), "%s/%s", cgs->base[i], spare);
        if ((r = sbx_cgroup_set_limits(cg, mem_bytes, pids, cpu_millis)) == 0) {
            spares_refill(cgs);
            return cg;
        }
        release(cg); /* gone (a sweep of a dead instance's): try the next, or make one */
    }
    spares_refill(cgs);
    for (int i = 0; i < n; i++) {
        mkdir(cgs->base[i], 0755); /* a sweep by another instance may have removed it empty */
        snprintf(cg->path[i], sizeof(cg->path[i]), "%s/%s", cgs->base[i], name);
        if (mkdir(cg->path[i], 0755) < 0 && errno != EEXIST) {
            r = -errno;
            goto fail;
        }
    }
    if ((r = sbx_cgroup_set_limits(cg, mem_bytes, pids, cpu_millis)) < 0)
        goto fail;
    return cg;
fail:
    sbx_cgroup_destroy(&cg);
    errno = -r;
    return NULL;
}

sbx_cgroup_t *sbx_cgroup_open(sbx_cgroups_t *cgs, const char *name)
{
    struct stat st;
    if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
        errno = EINVAL;
        return NULL;
    }
    sbx_cgroup_t *cg = calloc(1, sizeof(*cg));
    if (!cg)
        return NULL;
    cg->cgs = cgs;
    for (int i = 0; i < (cgs->version == 1 ? NCTL : 1); i++) {
        snprintf(cg->path[i], sizeof(cg->path[i]), "%s/%s", cgs->base[i], name);
        if (lstat(cg->path[i], &st) < 0 || !S_ISDIR(st.st_mode)) {
            int err = errno ? errno : ENOTDIR;
            free(cg);
            errno = err;
            return NULL;
        }
    }
    return cg;
}

const char *sbx_cgroup_name(const sbx_cgroup_t *cg)
{
    const char *slash = strrchr(cg->path[0], '/');
    return slash ? slash + 1 : cg->path[0];
}

void sbx_cgroup_forget(sbx_cgroup_t **pcg)
{
    free(*pcg);
    *pcg = NULL;
}

int sbx_cgroup_set_limits(sbx_cgroup_t *cg, long long mem_bytes, long long pids,
                          long long cpu_millis)
{
    char v[64];
    int r;
    if (cg->cgs->version == 1) {
        snprintf(v, sizeof(v), "%lld", mem_bytes);
        r = write_file(cg->path[0], "memory.limit_in_bytes", v);
        write_file(cg->path[0], "memory.memsw.limit_in_bytes", v); /* absent without swap accounting */
        snprintf(v, sizeof(v), "%lld", pids);
        r = r ? r : write_file(cg->path[1], "pids.max", v);
        snprintf(v, sizeof(v), "%lld", cpu_millis * 100);
        r = r ? r : write_file(cg->path[2], "cpu.cfs_period_us", "100000");
        r = r ? r : write_file(cg->path[2], "cpu.cfs_quota_us", v);
    } else {
        snprintf(v, sizeof(v), "%lld", mem_bytes);
        r = write_file(cg->path[0], "memory.max", v);
        write_file(cg->path[0], "memory.swap.max", "0");
        snprintf(v, sizeof(v), "%lld", pids);
        r = r ? r : write_file(cg->path[0], "pids.max", v);
        snprintf(v, sizeof(v), "%lld 100000", cpu_millis * 100);
        r = r ? r : write_file(cg->path[0], "cpu.max", v);
    }
    return r;
}

int sbx_cgroup_set_weight(sbx_cgroup_t *cg, unsigned shares)
{
    char v[32];
    shares = shares < 2 ? 2 : shares > 262144 ? 262144 : shares;
    if (cg->cgs->version == 1) {
        snprintf(v, sizeof(v), "%u", shares);
        return write_file(cg->path[2], "cpu.shares", v);
    }
    unsigned w = (unsigned)((unsigned long long)shares * 100 / 1024);
    snprintf(v, sizeof(v), "%u", w < 1 ? 1 : w > 10000 ? 10000 : w);
    return write_file(cg->path[0], "cpu.weight", v);
}

int sbx_cgroup_delegate(sbx_cgroup_t *cg, uid_t uid, int dirfds[SBX_CGROUP_MAX_DIRS])
{
    int n = cg->cgs->version == 1 ? NCTL : 1;
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX + 16];
        snprintf(p, sizeof(p), "%s/cgroup.procs", cg->path[i]);
        int err = chown(p, uid, uid) < 0 ? -errno : 0;
        if (!err && dirfds && (dirfds[i] = open(cg->path[i], O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
            err = -errno;
        if (err) {
            while (dirfds && --i >= 0)
                close(dirfds[i]);
            return err;
        }
    }
    return n;
}

bool sbx_cgroup_has(const sbx_cgroup_t *cg, pid_t pid)
{
    char dir[32], buf[4096];
    snprintf(dir, sizeof(dir), "/proc/%d", (int)pid);
    if (read_file(dir, "cgroup", buf, sizeof(buf)) <= 0)
        return false;
    int n = cg->cgs->version == 1 ? NCTL : 1, found = 0;
    for (int i = 0; i < n; i++) {
        /* "ID:controllers:/relative/path": the path below the hierarchy's mount */
        const char *mnt = "/sys/fs/cgroup", *ctl = cg->cgs->version == 1 ? v1_ctls[i] : "";
        char want[PATH_MAX + 64];
        size_t ml = strlen(mnt) + (ctl[0] ? strlen(ctl) + 1 : 0);
        if (strlen(cg->path[i]) <= ml)
            return false;
        snprintf(want, sizeof(want), "%s\n", cg->path[i] + ml);
        for (char *line = buf; line && *line;) {
            char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            char *next = strchr(line, '\n');
            if (c2 && (!next || c2 < next)) {
                size_t cl = (size_t)(c2 - c1 - 1);
                bool match = false;
                if (!ctl[0]) {
                    match = cl == 0;
                } else {
                    for (const char *t = c1 + 1; t < c2;) { /* "cpu,cpuacct" lists */
                        const char *e = memchr(t, ',', (size_t)(c2 - t));
                        size_t tl = e ? (size_t)(e - t) : (size_t)(c2 - t);
                        match = match || (tl == strlen(ctl) && !strncmp(t, ctl, tl));
                        t = e ? e + 1 : c2;
                    }
                }
                if (match && !strncmp(c2 + 1, want, strlen(want)))
                    found++;
            }
            line = next ? next + 1 : NULL;
        }
    }
    return found == n;
}

int sbx_cgroup_attach(sbx_cgroup_t *cg, pid_t pid)
{
    char v[32];
    snprintf(v, sizeof(v), "%d", (int)pid);
    for (int i = 0; i < (cg->cgs->version == 1 ? NCTL : 1); i++) {
        int r = write_file(cg->path[i], "cgroup.procs", v);
        if (r < 0)
            return r;
    }
    return 0;
}

void sbx_cgroup_events(const sbx_cgroup_t *cg, struct sbx_cgroup_events *ret)
{
    if (cg->cgs->version == 1) {
        ret->oom_kills = keyed(cg->path[0], "memory.oom_control", "oom_kill");
        ret->pids_max = keyed(cg->path[1], "pids.events", "max");
    } else {
        ret->oom_kills = keyed(cg->path[0], "memory.events", "oom_kill");
        ret->pids_max = keyed(cg->path[0], "pids.events", "max");
    }
}

/* Its files are opened for each read, not held: a kernel's cgroup costs the gateway no
 * descriptor between reads (an open, read and close is some microseconds more than a pread). */
void sbx_cgroup_usage(sbx_cgroup_t *cg, struct sbx_cgroup_usage *ret)
{
    char buf[512];
    bool v1 = cg->cgs->version == 1;
    ret->mem_bytes = -1;
    ret->cpu_ns = -1;
    const char *mem = v1 ? "memory.usage_in_bytes" : "memory.current";
    if (read_file(cg->path[0], mem, buf, sizeof(buf)) > 0)
        ret->mem_bytes = atoll(buf);
    if (v1 && cg->cgs->cpuacct && read_file(cg->path[2], "cpuacct.usage", buf, sizeof(buf)) > 0)
        ret->cpu_ns = atoll(buf);
    else if (!v1 && read_file(cg->path[0], "cpu.stat", buf, sizeof(buf)) > 0 &&
             !strncmp(buf, "usage_usec ", 11)) /* the first line (kernel/cgroup/rstat.c) */
        ret->cpu_ns = atoll(buf + 11) * 1000;
}

/* The cgroup's memory limit less its use, bytes (LLONG_MAX: no limit or unknown). */
static long long mem_room(const sbx_cgroup_t *cg)
{
    char lim[64], use[64];
    bool v1 = cg->cgs->version == 1;
    if (read_file(cg->path[0], v1 ? "memory.limit_in_bytes" : "memory.max", lim, sizeof(lim)) <=
            0 ||
        read_file(cg->path[0], v1 ? "memory.usage_in_bytes" : "memory.current", use,
                  sizeof(use)) <= 0 ||
        !strncmp(lim, "max", 3))
        return LLONG_MAX;
    return atoll(lim) - atoll(use);
}

int sbx_cgroup_run_start(sbx_cgroup_t *cg, long long need, int (*fn)(void *arg), void *arg,
                         struct sbx_cgroup_charge *ret)
{
    if (cg && mem_room(cg) < need)
        return -ENOMEM;
    char p[PATH_MAX + 32];
    int procs = -1, adj = -1, pfd[2];
    if (cg) {
        snprintf(p, sizeof(p), "%s/cgroup.procs", cg->path[0]); /* v1: the memory hierarchy */
        if ((procs = open(p, O_WRONLY | O_CLOEXEC)) < 0)
            return -errno;
        adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    }
    if (pipe2(pfd, O_CLOEXEC | O_NONBLOCK) < 0) {
        int err = -errno;
        if (procs >= 0)
            close(procs);
        if (adj >= 0)
            close(adj);
        return err;
    }
    pid_t pid = fork();
    if (pid == 0) { /* async-signal-safe calls only: the gateway has other threads */
        int out = 0;
        /* should the cgroup's OOM killer run after all, this child goes first, not a kernel */
        if (adj >= 0 && write(adj, "1000", 4) < 0)
            out = -EIO;
        else if (procs >= 0 && write(procs, "0", 1) < 0)
            out = -errno;
        if (out == 0)
            out = fn(arg);
        /* the outcome (nothing, should the OOM killer take it) */
        _exit(write(pfd[1], &out, sizeof(out)) == (ssize_t)sizeof(out) ? 0 : 1);
    }
    int err = pid < 0 ? -errno : 0;
    if (procs >= 0)
        close(procs);
    if (adj >= 0)
        close(adj);
    close(pfd[1]);
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if (pid > 0 && pidfd < 0) { /* before Linux 5.3: the outcome's pipe tells the end */
        pidfd = fcntl(pfd[0], F_DUPFD_CLOEXEC, 0);
        if (pidfd < 0) {
            err = -errno;
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
    }
    if (err < 0) {
        close(pfd[0]);
        return err;
    }
    *ret = (struct sbx_cgroup_charge){.pid = pid, .fd = pidfd, .out = pfd[0]};
    return 0;
}

int sbx_cgroup_charge_end(struct sbx_cgroup_charge *c)
{
    int err = 0;
    ssize_t got = read(c->out, &err, sizeof(err));
    /* not yet reaped by us: a subreaper's sweep of strays may have taken it already */
    siginfo_t si;
    if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG) < 0 && errno != ECHILD)
        log_debug("cgroup: charge child %d: waitid: %s", (int)c->pid, strerror(errno));
    close(c->out);
    close(c->fd);
    *c = (struct sbx_cgroup_charge){.pid = 0, .fd = -1, .out = -1};
    if (got != (ssize_t)sizeof(err)) /* killed: the cgroup's OOM killer, over its limit */
        return -ENOMEM;
    return err;
}

void sbx_cgroup_charge_abort(struct sbx_cgroup_charge *c)
{
    if (c->pid <= 0)
        return;
    kill(c->pid, SIGKILL);
    /* a killed child's exit is immediate (it holds no lock we could wait on) */
    waitpid(c->pid, NULL, 0);
    close(c->out);
    close(c->fd);
    *c = (struct sbx_cgroup_charge){.pid = 0, .fd = -1, .out = -1};
}

long long sbx_cgroup_peak(sbx_cgroup_t *cg, bool reset)
{
    char buf[64];
    bool v1 = cg->cgs->version == 1;
    /* v1: resettable by writing 0; v2: memory.peak (Linux 5.19), since the cgroup was made */
    const char *file = v1 ? "memory.max_usage_in_bytes" : "memory.peak";
    if (reset)
        return v1 && write_file(cg->path[0], file, "0") == 0 ? 0 : -1;
    return read_file(cg->path[0], file, buf, sizeof(buf)) > 0 ? atoll(buf) : -1;
}

void sbx_cgroup_explain(sbx_cgroup_t *cg, char *out, size_t outsz)
{
    struct sbx_cgroup_events ev;
    sbx_cgroup_events(cg, &ev);
    long long oom = ev.oom_kills, pidmax = ev.pids_max;
    out[0] = '\0';
    if (oom > 0)
        snprintf(out, outsz, "out of memory (%lld OOM kill%s)", oom, oom > 1 ? "s" : "");
    else if (pidmax > 0)
        snprintf(out, outsz, "process limit reached (%lld fork%s refused)", pidmax,
                 pidmax > 1 ? "s" : "");
}

#define FREEZE_PASSES 8 /* v1: passes over cgroup.procs until none is new */
#define FREEZE_PIDS   4096

/* v1: sig to every process of the cgroup (but the kept one); the number signalled now that
 * were not in seen (which grows, up to FREEZE_PIDS), or -errno. */
static int signal_procs(const sbx_cgroup_t *cg, int sig, pid_t *seen, size_t *nseen)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/cgroup.procs", cg->path[0]);
    FILE *f = fopen(p, "re");
    if (!f)
        return -errno;
    int fresh = 0, pid;
    while (fscanf(f, "%d", &pid) == 1) {
        if (pid <= 1 || pid == cg->cgs->keep)
            continue;
        bool known = false;
        for (size_t i = 0; i < *nseen && !known; i++)
            known = seen[i] == pid;
        if (known)
            continue;
        if (kill(pid, sig) == 0 || errno != ESRCH)
            fresh++;
        if (*nseen < FREEZE_PIDS)
            seen[(*nseen)++] = pid;
    }
    fclose(f);
    return fresh;
}

int sbx_cgroup_freeze(sbx_cgroup_t *cg, bool on)
{
    if (cg->cgs->version != 1)
        return write_file(cg->path[0], "cgroup.freeze", on ? "1" : "0");
    pid_t *seen = malloc(FREEZE_PIDS * sizeof(*seen));
    size_t nseen = 0;
    int r = 0;
    if (!seen)
        return -ENOMEM;
    for (int pass = 0; pass < (on ? FREEZE_PASSES : 1); pass++)
        if ((r = signal_procs(cg, on ? SIGSTOP : SIGCONT, seen, &nseen)) <= 0)
            break;
    free(seen);
    return r < 0 ? r : 0;
}

void sbx_cgroup_destroy(sbx_cgroup_t **pcg)
{
    sbx_cgroup_t *cg = *pcg;
    if (!cg)
        return;
    release(cg);
    free(cg);
    *pcg = NULL;
}
