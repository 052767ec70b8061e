/* The stages that run inside a new sandbox: the proxy (user namespace, the other namespaces),
 * init (mounts, pivot_root, hostname, loopback, then kgw-sandbox-init) and the kernel
 * (rlimits, privileges, seccomp, fn). See private.h for the rules between fork and exec. */
#include "sandbox/private.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/filter.h"

void sbx__report(int fd, enum sbx__step st, int err)
{
    struct sbx__failure f = {st, err ? err : EIO};
    ssize_t w = write(fd, &f, sizeof(f));
    (void)w;
}

void sbx__fail(int fd, enum sbx__step st, int err)
{
    sbx__report(fd, st, err);
    _exit(127);
}

#define TRY(fd, st, expr)                                                                          \
    do {                                                                                           \
        if ((expr) < 0)                                                                            \
            sbx__fail((fd), (st), errno);                                                          \
    } while (0)

static int path(char *out, size_t outsz, const char *a, const char *b)
{
    int n = snprintf(out, outsz, "%s%s", a, b);
    return n < 0 || (size_t)n >= outsz ? -1 : 0;
}

/* flags of an existing mount that a remount inside a user namespace must keep */
static unsigned long locked_flags(const char *p)
{
    static const struct {
        unsigned long st, ms;
    } locked[] = {
        {ST_NOSUID, MS_NOSUID},   {ST_NODEV, MS_NODEV},           {ST_NOEXEC, MS_NOEXEC},
        {ST_NOATIME, MS_NOATIME}, {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME},
    };
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(p, &sv) < 0)
        return 0;
    for (size_t i = 0; i < sizeof(locked) / sizeof(locked[0]); i++)
        if (sv.f_flag & locked[i].st)
            f |= locked[i].ms;
    return f;
}

static int bind_ro(const char *src, const char *dst, unsigned long extra)
{
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        return -1;
    return mount(NULL, dst, NULL,
                 MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | extra | locked_flags(dst), NULL);
}

static int write_all(const char *p, const char *s, mode_t mode)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, s, strlen(s));
    close(fd);
    return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* /etc entries the sandbox may see: what Python and common libraries read. */
static const char *const etc_files[] = {
    "ld.so.cache", "python3", "python3.11", "ssl/certs", "ssl/openssl.cnf", "fonts",
    "matplotlibrc", "alternatives", "mime.types", "nsswitch.conf", "host.conf", "gai.conf",
    "protocols", "services", "debian_version", "os-release",
};

static void mk_etc(int efd, const char *root)
{
    char dst[512], src[256], link[256];
    struct stat st;
    path(dst, sizeof(dst), root, "/etc/ssl");
    TRY(efd, ST_ETC, mkdir(dst, 0755));
    for (size_t i = 0; i < sizeof(etc_files) / sizeof(etc_files[0]); i++) {
        snprintf(src, sizeof(src), "/etc/%s", etc_files[i]);
        if (lstat(src, &st) < 0)
            continue;
        snprintf(dst, sizeof(dst), "%s/etc/%s", root, etc_files[i]);
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(src, link, sizeof(link) - 1);
            if (n < 0)
                continue;
            link[n] = '\0';
            TRY(efd, ST_ETC, symlink(link, dst));
            continue;
        }
        if (S_ISDIR(st.st_mode))
            TRY(efd, ST_ETC, mkdir(dst, 0755));
        else
            TRY(efd, ST_ETC, write_all(dst, "", 0644));
        TRY(efd, ST_ETC, bind_ro(src, dst, MS_NODEV));
    }
    /* /etc/localtime is a symlink into /usr on Debian: keep it a symlink */
    ssize_t n = readlink("/etc/localtime", link, sizeof(link) - 1);
    if (n > 0) {
        link[n] = '\0';
        path(dst, sizeof(dst), root, "/etc/localtime");
        TRY(efd, ST_ETC, symlink(link, dst));
    }
    static const struct {
        const char *name, *text;
    } gen[] = {
        {"passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                   "sandbox:x:1000:1000:sandbox:" SBX_HOME ":/bin/sh\n"
                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
        {"group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"},
        {"hosts", "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n"},
        {"hostname", "sandbox\n"},
        {"resolv.conf", ""},
    };
    for (size_t i = 0; i < sizeof(gen) / sizeof(gen[0]); i++) {
        snprintf(dst, sizeof(dst), "%s/etc/%s", root, gen[i].name);
        TRY(efd, ST_ETC, write_all(dst, gen[i].text, 0644));
    }
}

static void mk_dev(int efd, const char *root)
{
    static const char *const nodes[] = {"null", "zero", "full", "random", "urandom"};
    static const char *const links[][2] = {
        {"fd", "/proc/self/fd"},
        {"stdin", "/proc/self/fd/0"},
        {"stdout", "/proc/self/fd/1"},
        {"stderr", "/proc/self/fd/2"},
    };
    char dst[512], src[64];
    path(dst, sizeof(dst), root, "/dev");
    TRY(efd, ST_DEV, mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"));
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        snprintf(dst, sizeof(dst), "%s/dev/%s", root, nodes[i]);
        snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
        TRY(efd, ST_DEV, write_all(dst, "", 0666));
        TRY(efd, ST_DEV, mount(src, dst, NULL, MS_BIND, NULL));
    }
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        snprintf(dst, sizeof(dst), "%s/dev/%s", root, links[i][0]);
        TRY(efd, ST_DEV, symlink(links[i][1], dst));
    }
    path(dst, sizeof(dst), root, "/dev/shm");
    TRY(efd, ST_DEV, mkdir(dst, 01777));
    /* a private devpts instance: IPython runs !commands on a pseudo-terminal */
    path(dst, sizeof(dst), root, "/dev/pts");
    TRY(efd, ST_DEV, mkdir(dst, 0755));
    TRY(efd, ST_DEV, mount("devpts", dst, "devpts", MS_NOSUID | MS_NOEXEC,
                           "newinstance,ptmxmode=0666,mode=0600"));
    path(dst, sizeof(dst), root, "/dev/ptmx");
    TRY(efd, ST_DEV, symlink("pts/ptmx", dst));
}

static void tmpfs(int efd, const char *root, const char *where, long long size, int uid,
                  int mode)
{
    char dst[512], opts[128];
    path(dst, sizeof(dst), root, where);
    snprintf(opts, sizeof(opts), "size=%lld,mode=%o,uid=%d,gid=%d", size, mode, uid, uid);
    TRY(efd, ST_TMPFS, mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, opts));
}

static void setup_root(int efd, const sbx_profile_t *p)
{
    const char *root = p->root_dir;
    char dst[512];
    static const char *const dirs[] = {"/usr", "/etc", "/proc", "/dev", "/tmp", "/home",
                                       "/home/sandbox", "/mnt", "/mnt/data", "/run",
                                       "/run/kernel", "/.oldroot", "/root"};
    static const char *const usrlinks[][2] = {
        {"/bin", "usr/bin"}, {"/lib", "usr/lib"}, {"/lib64", "usr/lib64"}, {"/sbin", "usr/sbin"}};

    TRY(efd, ST_ROOT, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
    TRY(efd, ST_ROOT, mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"));
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        path(dst, sizeof(dst), root, dirs[i]);
        TRY(efd, ST_ROOT, mkdir(dst, 0755));
    }
    /* the workspace where E2B's SDKs name it too (docs/e2b.md): the same mount again (below),
     * so a kernel working there sees /home/user as its working directory */
    path(dst, sizeof(dst), root, SBX_E2B_HOME);
    TRY(efd, ST_ROOT, mkdir(dst, 0755));
    for (size_t i = 0; i < sizeof(usrlinks) / sizeof(usrlinks[0]); i++) {
        struct stat st;
        if (lstat(usrlinks[i][0], &st) < 0)
            continue;
        path(dst, sizeof(dst), root, usrlinks[i][0]);
        if (S_ISLNK(st.st_mode)) {
            TRY(efd, ST_USR, symlink(usrlinks[i][1], dst));
        } else { /* not a merged-/usr system: bind the directory itself */
            TRY(efd, ST_USR, mkdir(dst, 0755));
            TRY(efd, ST_USR, bind_ro(usrlinks[i][0], dst, MS_NODEV));
        }
    }
    path(dst, sizeof(dst), root, "/usr");
    TRY(efd, ST_USR, bind_ro("/usr", dst, MS_NODEV));
    mk_etc(efd, root);

    path(dst, sizeof(dst), root, "/proc");
    TRY(efd, ST_PROC, mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL));
    static const char *const proc_ro[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq",
                                          "/proc/bus", "/proc/fs"};
    for (size_t i = 0; i < sizeof(proc_ro) / sizeof(proc_ro[0]); i++) {
        path(dst, sizeof(dst), root, proc_ro[i]);
        if (access(dst, F_OK) == 0)
            TRY(efd, ST_PROC, bind_ro(dst, dst, MS_NODEV | MS_NOEXEC));
    }
    mk_dev(efd, root);
    tmpfs(efd, root, "/dev/shm", p->lim->tmp_bytes, SBX_UID, 01777);
    tmpfs(efd, root, "/tmp", p->lim->tmp_bytes, 0, 01777);
    tmpfs(efd, root, SBX_HOME, p->lim->tmp_bytes, SBX_UID, 0700);
    if (p->workspace_dir) {
        path(dst, sizeof(dst), root, SBX_WORKSPACE_PATH);
        TRY(efd, ST_TMPFS, mount(p->workspace_dir, dst, NULL, MS_BIND, NULL));
        TRY(efd, ST_TMPFS, mount(NULL, dst, NULL,
                                 MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | locked_flags(dst),
                                 NULL));
    } else {
        tmpfs(efd, root, SBX_WORKSPACE_PATH, p->lim->workspace_bytes, SBX_UID, 0755);
    }
    {
        char ws[512];
        path(ws, sizeof(ws), root, SBX_WORKSPACE_PATH);
        path(dst, sizeof(dst), root, SBX_E2B_HOME);
        TRY(efd, ST_TMPFS, mount(ws, dst, NULL, MS_BIND, NULL));
        TRY(efd, ST_TMPFS, mount(NULL, dst, NULL,
                                 MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | locked_flags(dst),
                                 NULL));
    }

    path(dst, sizeof(dst), root, SBX_RUNTIME_PATH);
    TRY(efd, ST_RUNTIME, mount(p->runtime_dir, dst, NULL, MS_BIND, NULL));
    TRY(efd, ST_RUNTIME, mount(NULL, dst, NULL,
                               MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC |
                                   locked_flags(dst),
                               NULL));

    if (p->python_dir) {
        static const char *const opt[] = {"/opt", "/opt/kgw", SBX_PYTHON_PATH};
        for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++) {
            path(dst, sizeof(dst), root, opt[i]);
            TRY(efd, ST_PYTHON, mkdir(dst, 0755));
        }
        TRY(efd, ST_PYTHON, bind_ro(p->python_dir, dst, MS_NODEV | MS_NOEXEC));
    }

    path(dst, sizeof(dst), root, "/.oldroot");
    TRY(efd, ST_PIVOT, syscall(SYS_pivot_root, root, dst));
    TRY(efd, ST_PIVOT, chdir("/"));
    TRY(efd, ST_PIVOT, umount2("/.oldroot", MNT_DETACH));
    TRY(efd, ST_PIVOT, rmdir("/.oldroot"));
    TRY(efd, ST_PIVOT, mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL));
}

static void loopback_up(int efd)
{
    struct ifreq ifr;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    TRY(efd, ST_LOOPBACK, s);
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    TRY(efd, ST_LOOPBACK, ioctl(s, SIOCGIFFLAGS, &ifr));
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    TRY(efd, ST_LOOPBACK, ioctl(s, SIOCSIFFLAGS, &ifr));
    close(s);
}

static void drop_privs(int efd)
{
    for (int c = 0; c <= CAP_LAST_CAP; c++)
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
            sbx__fail(efd, ST_PRIVS, errno);
    TRY(efd, ST_PRIVS, prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0));
    TRY(efd, ST_PRIVS, setgroups(0, NULL));
    TRY(efd, ST_PRIVS, setresgid(SBX_UID, SBX_UID, SBX_UID));
    TRY(efd, ST_PRIVS, setresuid(SBX_UID, SBX_UID, SBX_UID));
    /* the uid change cleared it */
    TRY(efd, ST_PRIVS, prctl(PR_SET_PDEATHSIG, SIGKILL));
    /* loading the seccomp filter sets it too; set here, it does not depend on the filter */
    TRY(efd, ST_PRIVS, prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
}

static void set_rlimits(int efd, const struct sbx_limits *lim)
{
    struct rlimit core = {0, 0}, fsize = {(rlim_t)lim->fsize_bytes, (rlim_t)lim->fsize_bytes},
                  nofile = {(rlim_t)lim->nofile, (rlim_t)lim->nofile};
    TRY(efd, ST_RLIMITS, setrlimit(RLIMIT_CORE, &core));
    TRY(efd, ST_RLIMITS, setrlimit(RLIMIT_FSIZE, &fsize));
    TRY(efd, ST_RLIMITS, setrlimit(RLIMIT_NOFILE, &nofile));
}

static void close_fds(int keep)
{
    if (syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) < 0)
        for (int fd = 3; fd < 4096; fd++)
            if (fd != keep)
                close(fd);
}

/* pid 2: the kernel */
static void kernel_stage(int efd, const sbx_profile_t *p, void (*fn)(void *), void *arg)
{
    int null;
    if (p->ctl_fd > 2)
        close(p->ctl_fd); /* init's command socket: never the kernel's */
    TRY(efd, ST_EXEC_KERNEL, setsid());
    TRY(efd, ST_EXEC_KERNEL, null = open("/dev/null", O_RDWR | O_CLOEXEC));
    TRY(efd, ST_EXEC_KERNEL, dup2(null, 0));
    TRY(efd, ST_EXEC_KERNEL, dup2(null, 1));
    TRY(efd, ST_EXEC_KERNEL, dup2(p->stderr_fd >= 0 ? p->stderr_fd : null, 2));
    set_rlimits(efd, p->lim);
    drop_privs(efd);
    TRY(efd, ST_EXEC_KERNEL, chdir(SBX_WORKSPACE_PATH));
    close_fds(efd);
#ifndef KGW_TEST_WEAKEN_SECCOMP /* a test build only (meson.build refuses it elsewhere) */
    TRY(efd, ST_SECCOMP, sbx_filter_load());
#endif
    fn(arg);
    sbx__fail(efd, ST_EXEC_KERNEL, errno);
}

/* pid 1: set up, fork the kernel, become kgw-sandbox-init */
static void init_stage(int efd, const sbx_profile_t *p, void (*fn)(void *), void *arg)
{
    static char *const init_argv[] = {"init", NULL};
    static char *const init_envp[] = {NULL};
    /* out of the proxy's process group: a signal to that group must reach init only once,
     * through the proxy */
    TRY(efd, ST_FORK, setsid());
    setup_root(efd, p);
    TRY(efd, ST_HOSTNAME, sethostname("sandbox", 7));
    loopback_up(efd);
    pid_t k = fork();
    TRY(efd, ST_FORK, k);
    if (k == 0)
        kernel_stage(efd, p, fn, arg);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    set_rlimits(efd, p->lim);
    drop_privs(efd);
    close_fds(efd);
    /* the command socket stays open across the exec (a duplicate without FD_CLOEXEC, at the
     * lowest free number: the gateway's number for it may be far above init's search, on a
     * busy gateway): init finds it as its one descriptor above 2 (sandbox/init.c) */
    if (p->ctl_fd > 2)
        TRY(efd, ST_EXEC_INIT, fcntl(p->ctl_fd, F_DUPFD, 3));
    TRY(efd, ST_SECCOMP, sbx_filter_load());
    syscall(SYS_execveat, p->init_fd, "", init_argv, init_envp, AT_EMPTY_PATH);
    sbx__fail(efd, ST_EXEC_INIT, errno);
}

static volatile pid_t proxied;

static void forward(int sig)
{
    if (proxied > 0)
        kill(proxied, sig);
}

/* Closes every descriptor above 2 but the n in keep (the proxy never execs, so close-on-exec
 * does not help: without this it would hold the gateway's sockets). */
static void close_all_but(int *keep, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n is tiny */
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    unsigned lo = 3;
    for (int i = 0; i < n; i++) {
        if (keep[i] < (int)lo)
            continue;
        if ((unsigned)keep[i] > lo)
            syscall(SYS_close_range, lo, (unsigned)keep[i] - 1, 0u);
        lo = (unsigned)keep[i] + 1;
    }
    syscall(SYS_close_range, lo, ~0u, 0u);
}

/* The process the gateway knows (private.h). */
void sbx__proxy_stage(int efd, int syncfd, int gofd, const sbx_profile_t *p, void (*fn)(void *),
                      void *arg)
{
    char c;
    /* ncgroup_dirfds <= SBX_CGROUP_MAX_DIRS: checked by sbx_start_forked, bounded by the
     * control buffer of sbx_fork_req_recv */
    int keep[6 + SBX_CGROUP_MAX_DIRS] = {efd, syncfd, gofd, p->init_fd, p->stderr_fd,
                                         p->ctl_fd > 2 ? p->ctl_fd : -1};
    for (int i = 0; i < p->ncgroup_dirfds; i++)
        keep[6 + i] = p->cgroup_dirfds[i];
    close_all_but(keep, 6 + p->ncgroup_dirfds);
    /* still the gateway's uid (sbx_start_async): into the cgroup here, so the gateway's loop
     * does not wait for the move (an RCU grace period on cgroup v1), nor check it (reading
     * /proc/PID/cgroup takes the cgroup_mutex): a failure is this start's, with its cause.
     * A fork server's proxy has no cgroup here. */
    if (p->cgroup) {
        int r = sbx_cgroup_attach(p->cgroup, getpid());
        if (r < 0)
            sbx__fail(efd, ST_CGROUP, -r);
    }
    TRY(efd, ST_USERNS, unshare(CLONE_NEWUSER));
    pid_t me = getpid(); /* the gateway maps uids for this pid (a fork server's child too) */
    TRY(efd, ST_USERNS, write(syncfd, &me, sizeof(me)));
    if (read(gofd, &c, 1) != 1) /* the gateway gave up */
        _exit(127);
    close(syncfd);
    close(gofd);
    /* a fork server's proxy whose cgroup was given to its uid (a restart): into it now, the
     * gateway no longer waiting (the move waits for an RCU grace period on cgroup v1) */
    for (int i = 0; i < p->ncgroup_dirfds; i++) {
        int fd;
        TRY(efd, ST_CGROUP,
            fd = openat(p->cgroup_dirfds[i], "cgroup.procs", O_WRONLY | O_CLOEXEC));
        TRY(efd, ST_CGROUP, write(fd, "0", 1));
        close(fd);
        close(p->cgroup_dirfds[i]);
    }
    /* become the namespace's root (the host uid mapped to inside 0): until now this process
     * still had the gateway's uid, which means nothing inside */
    TRY(efd, ST_MAPS, setgroups(0, NULL));
    TRY(efd, ST_MAPS, setresgid(0, 0, 0));
    TRY(efd, ST_MAPS, setresuid(0, 0, 0));
    TRY(efd, ST_MAPS, prctl(PR_SET_PDEATHSIG, SIGKILL)); /* the uid change cleared it */
    TRY(efd, ST_NAMESPACES, unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                                    CLONE_NEWUTS | CLONE_NEWCGROUP));
    /* init shares this process's memory until it execs kgw-sandbox-init (this process waits):
     * no copy of page tables that may be a fork server's, for a process that only sets up and
     * forks the kernel. It leaves through execveat or _exit, never returns. */
    pid_t init = vfork();
    TRY(efd, ST_FORK, init);
    if (init == 0) {
        TRY(efd, ST_FORK, prctl(PR_SET_PDEATHSIG, SIGKILL));
        init_stage(efd, p, fn, arg);
    }
    close(efd);
    if (p->ctl_fd > 2)
        close(p->ctl_fd); /* init's alone */
    proxied = init;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    int st;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(st))
        _exit(128 + WTERMSIG(st));
    _exit(WEXITSTATUS(st));
}

void sbx__reset_signals(void)
{
    sigset_t none;
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}
