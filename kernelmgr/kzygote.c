/* The fork server as the kernel manager sees it: one kgw-zygote process (kernelmgr/zygote.c)
 * for the kernelspec it was configured for, started at start-up, checked with a dry run of
 * the forked sandbox, used by klaunch.c for every start of that kernelspec while it is ready,
 * restarted (with a backoff) when it dies, and recycled after ZYGOTE_MAX_FORKS kernels or
 * ZYGOTE_MAX_AGE_MS (its children share its address layout and string hash seed).
 *
 * A forked kernel's proxy is the gateway's child (sbx.h), so kernel.c waits for, signals and
 * reaps it exactly as an exec'd one. The gateway is also a child subreaper: orphans that are
 * not kernels (a sandbox's init whose proxy died, a proxy whose start was abandoned) are
 * reaped in kzygote__reap_strays.
 *
 * Between kernels the server sits in the cgroup of the next kernel (place, kzygote__adopt): a
 * move into a cgroup costs an RCU grace period on cgroup v1 (10-25 ms here), so it is paid by
 * the server while it is idle, not by the gateway's loop while a kernel starts. */
#include "kernelmgr/kzygote_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/private.h"

#define ZYGOTE_MAX_FORKS   500
#define ZYGOTE_MAX_AGE_MS  (3600 * 1000)
#define ZYGOTE_BACKOFF_MS  1000
#define ZYGOTE_MAX_FAILS   5 /* in a row before it ever became ready: give up */
#define ZYGOTE_FORK_TIMEOUT_MS 2000

static void on_io(void *data);
static void on_respawn(void *data);

/* The kernelspecs the fork server can run: `<python> -m ipykernel_launcher -f
 * {connection_file}`, with the python the server embeds (it is started with that argv[0]). */
static bool forkable(const kspec_t *spec)
{
    json_t *a = json_object_get(spec->spec, "argv");
    static const char *const tail[] = {"-m", "ipykernel_launcher", "-f", "{connection_file}"};
    if (json_array_size(a) != 5)
        return false;
    const char *exe = json_string_value(json_array_get(a, 0));
    if (!exe || exe[0] != '/')
        return false;
    for (size_t i = 0; i < 4; i++)
        if (strcmp(json_string_value(json_array_get(a, i + 1)), tail[i]) != 0)
            return false;
    return true;
}

static void stop(kmgr_t *m)
{
    struct kzygote *z = &m->zyg;
    evl_io_destroy(m->evl, &z->io);
    if (z->fd >= 0)
        close(z->fd); /* EOF: a ready server exits */
    z->fd = -1;
    if (z->pid > 0) {
        kill(z->pid, SIGKILL);
        waitpid(z->pid, NULL, 0);
    }
    if (m->cgroups)
        sbx_cgroups_keep(m->cgroups, 0);
    sbx_cgroup_destroy(&z->next_cg);
    z->pid = 0;
    z->ready = false;
}

/* Moves the server into a new cgroup for the next kernel it forks (kzygote__adopt). Until it
 * has read the message it may still sit in the last kernel's cgroup, so removals of cgroups
 * spare it (sbx_cgroups_keep); it moves before it forks again (one socket, read in order). */
static int place(kmgr_t *m)
{
    struct kzygote *z = &m->zyg;
    const struct sbx_limits *lim = &m->o.sandbox->lim;
    char name[32];
    if (!m->cgroups || !z->ready || z->next_cg)
        return 0;
    snprintf(name, sizeof(name), "fork-%u", ++z->serial);
    z->next_cg = sbx_cgroup_new(m->cgroups, name, lim->mem_bytes, lim->pids, lim->cpu_millis);
    int r = z->next_cg ? sbx_fork_server_move(z->fd, z->next_cg, m->o.sandbox->uid_base - 1)
                       : -errno;
    if (r < 0)
        sbx_cgroup_destroy(&z->next_cg);
    return r;
}

bool kzygote__adopt(kmgr_t *m, kernel_t *k)
{
    struct kzygote *z = &m->zyg;
    sbx_cgroup_t *cg = z->next_cg;
    /* cgroup v1: never. The server would then move into a fresh cgroup (place) before its
     * next fork, and the gateway's next start waits for the server's answer: in a burst of
     * starts each one waited 10-50 ms behind that move. A proxy that moves itself in
     * (kzygote__lend) pays it while the gateway's loop goes on; the server stays where it
     * is. (v2: the gateway would move the proxy itself: adopting is cheaper there.) */
    if (m->cgroups && !strcmp(sbx_cgroups_version(m->cgroups), "v1"))
        return false;
    if (!cg || !k->cgroup || k->cgroup_used ||
        sbx_cgroup_set_limits(cg, k->lim.mem_bytes, k->lim.pids, k->lim.cpu_millis) < 0)
        return false;
    z->next_cg = NULL;
    sbx_cgroup_destroy(&k->cgroup); /* empty: it never held a process */
    k->cgroup = cg; /* named as it was (no rename: it takes the cgroup_mutex, sandbox/cgroup.c) */
    return true;
}

int kzygote__lend(kmgr_t *m, kernel_t *k, int dirfds[SBX_CGROUP_MAX_DIRS])
{
    /* cgroup v1 only: on v2 a process moves only where it could write the cgroup.procs of
     * the common ancestor, which is the gateway's */
    if (!k->cgroup || !m->cgroups || strcmp(sbx_cgroups_version(m->cgroups), "v1") != 0)
        return 0;
    int n = sbx_cgroup_delegate(k->cgroup, m->o.sandbox->uid_base - 1, dirfds);
    if (n < 0) {
        sbx_cgroup_delegate(k->cgroup, 0, NULL);
        return 0;
    }
    k->cgroup_lent = true;
    return n;
}

void kzygote__take_back(kmgr_t *m, kernel_t *k)
{
    if (!k->cgroup_lent)
        return;
    sbx_cgroup_delegate(k->cgroup, 0, NULL);
    k->cgroup_lent = false;
}

void kzygote__adopted(kmgr_t *m, kernel_t *k)
{
    /* the server read our messages in order: by the time the start went through it (or
     * failed), it has moved into this cgroup if it could; it moves out on the next message */
    sbx_cgroup_delegate(k->cgroup, 0, NULL);
}

static int spawn(kmgr_t *m)
{
    struct kzygote *z = &m->zyg;
    const struct kmgr_sandbox *sb = m->o.sandbox;
    json_t *a = json_object_get(z->spec->spec, "argv");
    char *argv[6] = {NULL};
    /* the environment block every forked kernel shows in /proc/self/environ: the sandbox's
     * defaults (kernel.c), nothing of the server's own */
    char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LANG=C.UTF-8", "HOME=" SBX_HOME, NULL};
    for (size_t i = 0; i < 5; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        argv[i] = (char *)(strcmp(s, "{connection_file}") ? s : SBX_RUNTIME_PATH "/connection.json");
    }
    uid_t zuid = sb->uid_base - 1; /* below every kernel slot's uids */
    /* where it may write while it pre-builds the kernel application (zygote.py); "" if none */
    char scratch[PATH_MAX];
    snprintf(scratch, sizeof(scratch), "%s/zygote", m->rundir);
    if ((mkdir(scratch, 0700) < 0 && errno != EEXIST) || chown(scratch, zuid, zuid) < 0) {
        log_warn("fork server: no scratch directory %s: %s", scratch, strerror(errno));
        scratch[0] = '\0';
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(sv[0]);
        close(sv[1]);
        return -err;
    }
    if (pid == 0) {
        sigset_t none;
        for (int s = 1; s < NSIG; s++)
            signal(s, SIG_DFL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        util_sched_slice(0); /* its kernels get the default slice, not the gateway's */
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        struct rlimit core = {0, 0};
        if (setsid() < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
            dup2(sv[1], 3) < 0 || dup2(sb->init_fd, 4) < 0 || dup2(sb->zygote_fd, 5) < 0 ||
            fcntl(5, F_SETFD, FD_CLOEXEC) < 0)
            _exit(126);
        syscall(SYS_close_range, 6u, ~0u, 0u);
        if (chdir("/") < 0 || setrlimit(RLIMIT_CORE, &core) < 0 || setgroups(0, NULL) < 0 ||
            setresgid(zuid, zuid, zuid) < 0 || setresuid(zuid, zuid, zuid) < 0 ||
            prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent ||
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
            _exit(126);
        syscall(SYS_execveat, 5, "", argv, envp, AT_EMPTY_PATH);
        _exit(127);
    }
    close(sv[1]);
    /* its configuration, the first message it reads: "P" modules NUL scratch-directory */
    char conf[PATH_MAX + 512];
    int n = snprintf(conf, sizeof(conf), "P%.500s%c%s", sb->zygote_preload ? sb->zygote_preload : "",
                     '\0', scratch);
    if (send(sv[0], conf, (size_t)n < sizeof(conf) ? (size_t)n : sizeof(conf) - 1,
             MSG_NOSIGNAL) < 0)
        log_debug("fork server: cannot send its configuration: %s", strerror(errno));
    z->fd = sv[0];
    z->pid = pid;
    if (m->cgroups)
        sbx_cgroups_keep(m->cgroups, pid);
    z->ready = false;
    z->forks = 0;
    if (z->starts++ > 0)
        m->stats.fork_server_restarts++;
    z->started_ms = util_now_ms();
    if (!(z->io = m->evl->io_add(m->evl, z->fd, on_io, m))) {
        int err = errno;
        stop(m);
        return -err;
    }
    log_debug("fork server: started pid %d for %s", (int)pid, z->spec->name);
    return 0;
}

static void retry_later(kmgr_t *m)
{
    struct kzygote *z = &m->zyg;
    if (++z->fails >= ZYGOTE_MAX_FAILS) {
        log_warn("fork server: given up after %d failed starts; kernels start with exec",
                 z->fails);
        return;
    }
    uint64_t delay = (uint64_t)ZYGOTE_BACKOFF_MS << (z->fails - 1);
    m->evl->timer_arm(m->evl, z->respawn, delay);
}

/* A dry run of the forked sandbox, as kmgr does for the exec path at start. */
static int probe(kmgr_t *m, char *why, size_t whysz)
{
    struct kzygote *z = &m->zyg;
    const struct kmgr_sandbox *sb = m->o.sandbox;
    char dir[PATH_MAX + 16], root[PATH_MAX + 24];
    long slot = (long)m->nslots - 1; /* reserved for dry runs (kmgr.c) */
    uid_t uid = sb->uid_base + 2 * (unsigned)slot + 1;
    int r = -EIO;
    snprintf(dir, sizeof(dir), "%s/zprobe", m->rundir);
    snprintf(root, sizeof(root), "%s/zprobe.root", m->rundir);
    sbx_cgroup_t *cg = sbx_cgroup_new(m->cgroups, "zprobe", sb->lim.mem_bytes, sb->lim.pids,
                                      sb->lim.cpu_millis);
    if (!cg || mkdir(dir, 0700) < 0 || chown(dir, uid, uid) < 0 || mkdir(root, 0700) < 0 ||
        chown(root, uid - 1, uid - 1) < 0) {
        snprintf(why, whysz, "cannot prepare the dry run: %s", strerror(errno));
    } else {
        char *envp[] = {NULL}, *payload[] = {"--kgw-probe", NULL};
        sbx_profile_t p = {.runtime_dir = dir, .root_dir = root, .uid = uid, .root_uid = uid - 1,
                           .lim = &sb->lim, .cgroup = cg, .init_fd = sb->init_fd, .envp = envp,
                           .stderr_fd = -1};
        pid_t pid;
        int pidfd, setupfd, st;
        struct sbx_start_opts o = {.profile = &p, .server = z->fd, .payload = payload,
                                   .timeout_ms = ZYGOTE_FORK_TIMEOUT_MS};
        r = sbx_start_forked(&o, &pid, &pidfd, &setupfd, why, whysz);
        if (r == 0) {
            waitpid(pid, &st, 0);
            r = sbx_setup_result(setupfd, why, whysz);
            if (r == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                snprintf(why, whysz, "the dry run ended with status 0x%x", st);
                r = -EIO;
            }
            close(setupfd);
            if (pidfd >= 0)
                close(pidfd);
        }
    }
    sbx_cgroup_destroy(&cg);
    rmdir(dir);
    rmdir(root);
    return r;
}

static void on_io(void *data)
{
    kmgr_t *m = data;
    struct kzygote *z = &m->zyg;
    char c;
    ssize_t n = recv(z->fd, &c, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n == 1 && c == 'R' && !z->ready) {
        char why[256] = "";
        uint64_t t0 = util_now_ms();
        int r = probe(m, why, sizeof(why));
        if (r < 0) {
            log_warn("fork server: the dry run of a forked sandbox failed: %s; kernels start "
                     "with exec",
                     why);
            stop(m);
            z->fails = ZYGOTE_MAX_FAILS; /* a host problem: do not retry */
            return;
        }
        z->ready = true;
        z->fails = 0;
        int pr = place(m); /* it sits where it was started: kernels are moved by the gateway */
        if (pr < 0)
            log_debug("fork server: no cgroup for the next kernel: %s", strerror(-pr));
        log_info("fork server: ready (pid %d, pre-loaded in %llu ms, dry run %llu ms)",
                 (int)z->pid, (unsigned long long)(t0 - z->started_ms),
                 (unsigned long long)(util_now_ms() - t0));
        z->on_ready(m);
        return;
    }
    log_warn("fork server: pid %d gone%s; kernels start with exec meanwhile", (int)z->pid,
             z->ready ? "" : " before it was ready");
    bool was_ready = z->ready;
    stop(m);
    if (was_ready)
        z->fails = 0;
    retry_later(m);
}

static void on_respawn(void *data)
{
    kmgr_t *m = data;
    int r = spawn(m);
    if (r < 0) {
        log_warn("fork server: cannot start: %s", strerror(-r));
        retry_later(m);
    }
}

int kzygote__init(kmgr_t *m, void (*on_ready)(kmgr_t *m))
{
    struct kzygote *z = &m->zyg;
    z->fd = -1;
    z->on_ready = on_ready;
    const struct kmgr_sandbox *sb = m->o.sandbox;
    if (!sb || sb->zygote_fd <= 0 || m->sandbox_error[0])
        return 0;
    const kspec_t *spec = kspecs_find(m->specs, sb->zygote_spec ? sb->zygote_spec : "python3");
    if (!spec || !forkable(spec)) {
        log_warn("fork server: kernelspec %s is not `python -m ipykernel_launcher -f "
                 "{connection_file}`; kernels start with exec",
                 spec ? spec->name : "(none)");
        return 0;
    }
    if (sb->uid_base < 2) {
        log_warn("fork server: no uid below --sandbox-uid-base for it; disabled");
        return 0;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        log_warn("fork server: cannot become a child subreaper: %s; disabled", strerror(errno));
        return 0;
    }
    z->spec = spec;
    if (!(z->respawn = m->evl->timer_new(m->evl, on_respawn, m)))
        return -ENOMEM;
    on_respawn(m);
    return 0;
}

void kzygote__fini(kmgr_t *m)
{
    stop(m);
    evl_timer_destroy(m->evl, &m->zyg.respawn);
}

int kzygote__fd(kmgr_t *m, const kspec_t *spec)
{
    struct kzygote *z = &m->zyg;
    if (!z->ready || z->spec != spec)
        return -1;
    if (z->forks >= ZYGOTE_MAX_FORKS || util_now_ms() - z->started_ms > ZYGOTE_MAX_AGE_MS) {
        log_info("fork server: recycling pid %d after %d kernels", (int)z->pid, z->forks);
        stop(m);
        z->fails = 0;
        m->evl->timer_arm(m->evl, z->respawn, 0);
        return -1;
    }
    return z->fd;
}

void kzygote__forked(kmgr_t *m, bool ok)
{
    struct kzygote *z = &m->zyg;
    z->forks++;
    int r = ok ? place(m) : 0;
    if (r < 0) /* it sits in the cgroup of the kernel it just forked: never leave it there */
        log_warn("fork server: no cgroup for the next kernel (%s); restarting it", strerror(-r));
    if (!ok || r < 0) {
        stop(m);
        retry_later(m);
    }
}

static bool known(kmgr_t *m, pid_t pid)
{
    if (pid == m->zyg.pid)
        return true;
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i]->pid == pid)
            return true;
    for (size_t i = 0; i < m->pn; i++)
        if (m->pv[i]->pid == pid)
            return true;
    return false;
}

void kzygote__reap_strays(kmgr_t *m)
{
    if (!m->zyg.spec)
        return;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    char path[96], buf[4096];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.20s/children", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        for (char *p = buf, *end; *p; p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            if (pid > 1 && !known(m, (pid_t)pid))
                waitpid((pid_t)pid, NULL, WNOHANG);
        }
    }
    if (d)
        closedir(d);
}
