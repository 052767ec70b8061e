#include "sandbox/sbx.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <stdint.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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

#include "common/log.h"
#include "sandbox/filter.h"

/* Everything between fork and exec below runs in a copy of a multi-threaded process: no
 * allocation, no locks, no stdio; errors go back as {step, errno} through a close-on-exec pipe. */

enum step {
    ST_NONE = 0,
    ST_USERNS,
    ST_CGROUP,
    ST_MAPS,
    ST_NAMESPACES,
    ST_FORK,
    ST_ROOT,
    ST_USR,
    ST_ETC,
    ST_PROC,
    ST_DEV,
    ST_TMPFS,
    ST_RUNTIME,
    ST_PYTHON,
    ST_PIVOT,
    ST_HOSTNAME,
    ST_LOOPBACK,
    ST_PRIVS,
    ST_RLIMITS,
    ST_SECCOMP,
    ST_EXEC_INIT,
    ST_EXEC_KERNEL,
    ST_N
};

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

struct failure {
    int step;
    int err;
};

static void fail(int fd, enum step st, int err)
{
    struct failure f = {st, err ? err : EIO};
    ssize_t w = write(fd, &f, sizeof(f));
    (void)w;
    _exit(127);
}

#define TRY(fd, st, expr)                                                                          \
    do {                                                                                           \
        if ((expr) < 0)                                                                            \
            fail((fd), (st), errno);                                                               \
    } while (0)

static int path(char *out, size_t outsz, const char *a, const char *b)
{
    int n = snprintf(out, outsz, "%s%s", a, b);
    return n < 0 || (size_t)n >= outsz ? -1 : 0;
}

/* flags of an existing mount that a remount inside a user namespace must keep */
static unsigned long locked_flags(const char *p)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(p, &sv) < 0)
        return 0;
    if (sv.f_flag & ST_NOSUID)
        f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV)
        f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
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
            fail(efd, ST_PRIVS, errno);
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
    fail(efd, ST_EXEC_KERNEL, errno);
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
    TRY(efd, ST_SECCOMP, sbx_filter_load());
    syscall(SYS_execveat, p->init_fd, "", init_argv, init_envp, AT_EMPTY_PATH);
    fail(efd, ST_EXEC_INIT, errno);
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

/* The process the gateway knows: in the new user namespace, outside the pid namespace. */
static void proxy_stage(int efd, int syncfd, int gofd, const sbx_profile_t *p,
                        void (*fn)(void *), void *arg)
{
    char c;
    /* ncgroup_dirfds <= SBX_CGROUP_MAX_DIRS: checked by sbx_start_forked, bounded by the
     * control buffer of sbx_fork_req_recv */
    int keep[5 + SBX_CGROUP_MAX_DIRS] = {efd, syncfd, gofd, p->init_fd, p->stderr_fd};
    for (int i = 0; i < p->ncgroup_dirfds; i++)
        keep[5 + i] = p->cgroup_dirfds[i];
    close_all_but(keep, 5 + p->ncgroup_dirfds);
    /* still the gateway's uid (sbx_start_async): into the cgroup here, so the gateway's loop
     * does not wait for the move (an RCU grace period on cgroup v1); the handshake checks,
     * and moves it itself if this failed. A fork server's proxy has no cgroup here. */
    if (p->cgroup)
        sbx_cgroup_attach(p->cgroup, getpid());
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

static int write_map(pid_t pid, const char *file, const char *map)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, file);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, map, strlen(map));
    int err = n < 0 ? -errno : 0;
    close(fd);
    return err;
}

static void describe(const struct failure *f, char *why, size_t whysz)
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
static struct failure let_go(pid_t pid, int gofd, uid_t root_uid, uid_t uid,
                             sbx_cgroup_t *cg, char *why, size_t whysz)
{
    char map[128];
    int r;
    snprintf(map, sizeof(map), "0 %u 1\n%u %u 1\n", (unsigned)root_uid, SBX_UID, (unsigned)uid);
    r = write_map(pid, "uid_map", map);
    if (r == 0)
        r = write_map(pid, "gid_map", map);
    if (r < 0)
        return (struct failure){ST_MAPS, -r};
    if (cg && !sbx_cgroup_has(cg, pid) && (r = sbx_cgroup_attach(cg, pid)) < 0) {
        snprintf(why, whysz, "cannot move the kernel into its cgroup: %s", strerror(-r));
        return (struct failure){ST_NONE, -r};
    }
    if (write(gofd, "g", 1) != 1)
        return (struct failure){ST_MAPS, errno};
    return (struct failure){0, 0};
}

/* The gateway's half of the set-up, once a proxy runs: it says its pid (expect: the pid we
 * forked, or 0 for a fork server's proxy, which must have become our child) after creating
 * its user namespace; let_go does the rest. The descriptors are the read end of efd and syncp
 * and the write end of gop (all closed here but efd, returned as the set-up report on
 * success). */
static int handshake(pid_t expect, int efd, int syncfd, int gofd, int timeout_ms,
                     const sbx_profile_t *p, pid_t *ret_pid, int *ret_pidfd, int *ret_setupfd,
                     char *why, size_t whysz)
{
    struct failure f = {0, 0};
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
        f = let_go(pid, gofd, p->root_uid, p->uid, p->ncgroup_dirfds ? NULL : p->cgroup, why,
                   whysz);
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
            f = (struct failure){ST_USERNS, EIO};
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

static void reset_signals(void)
{
    sigset_t none;
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* The set-up pipes of a start that failed (-1: never opened). */
static void close_pipes(int efd[2], int syncp[2], int gop[2])
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
static int fork_proxy(const sbx_profile_t *p, void (*fn)(void *arg), void *arg, int efd[2],
                      int syncp[2], int gop[2], pid_t *ret_pid, char *why, size_t whysz)
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
        reset_signals();
        close(efd[0]);
        close(syncp[0]);
        close(gop[1]);
        if (setsid() < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(127);
        proxy_stage(efd[1], syncp[1], gop[0], p, fn, arg);
    }
    close(efd[1]);
    close(syncp[1]);
    close(gop[0]);
    efd[1] = syncp[1] = gop[0] = -1;
    *ret_pid = pid;
    return 0;
}

int sbx_start_async(const sbx_profile_t *p, void (*fn)(void *arg), void *arg, pid_t *ret_pid,
                    int *ret_pidfd, int *ret_setupfd, char *why, size_t whysz)
{
    int efd[2] = {-1, -1}, syncp[2] = {-1, -1}, gop[2] = {-1, -1};
    pid_t pid;
    int r = fork_proxy(p, fn, arg, efd, syncp, gop, &pid, why, whysz);
    if (r < 0) {
        close_pipes(efd, syncp, gop);
        return r;
    }
    return handshake(pid, efd[0], syncp[0], gop[1], -1, p, ret_pid, ret_pidfd, ret_setupfd, why,
                     whysz);
}

struct sbx_pending {
    pid_t pid;
    int syncfd, gofd;
    uid_t uid, root_uid;
    sbx_cgroup_t *cgroup;
};

int sbx_start_begin(const sbx_profile_t *p, void (*fn)(void *arg), void *arg, pid_t *ret_pid,
                    int *ret_pidfd, int *ret_setupfd, sbx_pending_t **ret, char *why,
                    size_t whysz)
{
    int efd[2] = {-1, -1}, syncp[2] = {-1, -1}, gop[2] = {-1, -1};
    sbx_pending_t *pd = calloc(1, sizeof(*pd));
    pid_t pid = 0;
    int r = pd ? fork_proxy(p, fn, arg, efd, syncp, gop, &pid, why, whysz) : -ENOMEM;
    int pidfd = r < 0 ? -1 : (int)syscall(SYS_pidfd_open, pid, 0);
    if (r == 0 && pidfd < 0 && errno != ENOSYS)
        r = -errno;
    if (r < 0) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        close_pipes(efd, syncp, gop);
        free(pd);
        return r;
    }
    if (pidfd >= 0)
        fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    fcntl(efd[0], F_SETFL, O_NONBLOCK);
    fcntl(syncp[0], F_SETFL, O_NONBLOCK);
    *pd = (sbx_pending_t){.pid = pid, .syncfd = syncp[0], .gofd = gop[1], .uid = p->uid,
                          .root_uid = p->root_uid, .cgroup = p->cgroup};
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
    struct failure f = {0, ESRCH}; /* it failed before its user namespace: see its report */
    if (n == sizeof(pid) && pid == pd->pid) {
        f = let_go(pid, pd->gofd, pd->root_uid, pd->uid, pd->cgroup, why, whysz);
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

/* ---- the fork server ---- */

#define FORK_MAGIC   0x4b47575aU /* "KGWZ" */
#define MOVE_MAGIC   0x4b47574dU /* "KGWM": move yourself into the cgroup of these fds */
#define FORK_MSG_MAX (64 * 1024)
#define FORK_STR_MAX 1024 /* environment and payload strings, each list */
#define FORK_FIXED   4    /* the profile's directories */

struct fork_wire {
    uint32_t magic;
    int32_t gateway;
    uint32_t uid, root_uid;
    uint32_t nenv, npayload;
    struct sbx_limits lim;
    /* then NUL-terminated: runtime_dir, root_dir, workspace_dir, python_dir ("" = none),
     * env..., payload... */
};

struct sbx_fork_req {
    struct fork_wire w;
    char *buf;
    char **env, **payload;
    sbx_profile_t p;
    int efd, syncfd, gofd;
    int cgdirs[SBX_CGROUP_MAX_DIRS], ncgdirs;
};

/* One message with nfds descriptors (at most 3 + SBX_CGROUP_MAX_DIRS) to the fork server,
 * without blocking: sendmsg's result. */
static ssize_t send_fds(int server, const void *buf, size_t len, const int *fds, int nfds)
{
    union {
        char buf[CMSG_SPACE((3 + SBX_CGROUP_MAX_DIRS) * sizeof(int))];
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

int sbx_start_forked(int server, const sbx_profile_t *p, char *const *payload, pid_t *ret_pid,
                     int *ret_pidfd, int *ret_setupfd, int timeout_ms, char *why, size_t whysz)
{
    int efd[2] = {-1, -1}, syncp[2] = {-1, -1}, gop[2] = {-1, -1}, r;
    struct fork_wire w = {.magic = FORK_MAGIC, .gateway = (int32_t)getpid(), .uid = p->uid,
                          .root_uid = p->root_uid, .lim = *p->lim};
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
    int fds[3 + SBX_CGROUP_MAX_DIRS] = {efd[1], syncp[1], gop[0]};
    for (int i = 0; i < p->ncgroup_dirfds; i++)
        fds[3 + i] = p->cgroup_dirfds[i];
    if (send_fds(server, msg, len, fds, 3 + p->ncgroup_dirfds) != (ssize_t)len) {
        r = errno == EAGAIN ? -ETIMEDOUT : -errno;
        snprintf(why, whysz, "cannot reach the fork server: %s", strerror(-r));
        goto fail;
    }
    free(msg);
    close(efd[1]);
    close(syncp[1]);
    close(gop[0]);
    return handshake(0, efd[0], syncp[0], gop[1], timeout_ms, p, ret_pid, ret_pidfd, ret_setupfd,
                     why, whysz);
fail:
    free(msg);
    close_pipes(efd, syncp, gop);
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
        char buf[CMSG_SPACE((3 + SBX_CGROUP_MAX_DIRS) * sizeof(int))];
        struct cmsghdr align;
    } u;
    int err = EBADMSG;
    if (!r)
        return -ENOMEM;
    r->efd = r->syncfd = r->gofd = -1;
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
    int fds[3 + SBX_CGROUP_MAX_DIRS], nfds = 0;
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
    if (nfds >= 3 && magic == FORK_MAGIC) {
        r->efd = fds[0];
        r->syncfd = fds[1];
        r->gofd = fds[2];
        r->ncgdirs = nfds - 3; /* the kernel's cgroup, for its proxy to move into */
        memcpy(r->cgdirs, fds + 3, (size_t)r->ncgdirs * sizeof(int));
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
                           .init_fd = init_fd, .envp = r->env, .stderr_fd = -1};
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
    reset_signals();
    close(server);
    if (setsid() < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != gw)
        fail(r->efd, ST_FORK, errno ? errno : ESRCH);
    proxy_stage(r->efd, r->syncfd, r->gofd, &r->p, fn, arg);
}

int sbx_fork_req_spawn(sbx_fork_req_t *r, int server, void (*fn)(void *arg), void *arg)
{
    int r_ = sbx_filter_prepare();
    if (r_ < 0) {
        struct failure f = {ST_SECCOMP, -r_};
        ssize_t w = write(r->efd, &f, sizeof(f));
        (void)w;
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
        struct failure f = {ST_FORK, errno};
        ssize_t w = write(r->efd, &f, sizeof(f));
        (void)w;
        return -f.err;
    }
    if (px == 0)
        forked_proxy(r, server, fn, arg);
    return 0;
}

int sbx_setup_result(int setupfd, char *why, size_t whysz)
{
    struct failure f = {0, 0};
    ssize_t n;
    do {
        n = read(setupfd, &f, sizeof(f));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return -EINPROGRESS;
    if (n == 0)
        return 0; /* every end closed on exec: init and the kernel started */
    if (n != sizeof(f) || !f.err)
        f = (struct failure){ST_NONE, n < 0 ? errno : EIO};
    describe(&f, why, whysz);
    return -f.err;
}

int sbx_start(const sbx_profile_t *p, void (*fn)(void *arg), void *arg, pid_t *ret_pid,
              int *ret_pidfd, char *why, size_t whysz)
{
    pid_t pid;
    int pidfd, setupfd;
    int r = sbx_start_async(p, fn, arg, &pid, &pidfd, &setupfd, why, whysz);
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
    pid_t pid;
    int pidfd, st;
    int r = sbx_start(p, probe_fn, NULL, &pid, &pidfd, why, whysz);
    if (r < 0)
        return r;
    waitpid(pid, &st, 0);
    if (pidfd >= 0)
        close(pidfd);
    return 0;
}

struct listen_job {
    int nsfd;
    unsigned short port;
    int fd;
    int err;
};

static void *listen_thread(void *arg)
{
    struct listen_job *j = arg;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(j->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, s = -1;
    /* this thread only: it ends here, so nothing has to be restored */
    if (setns(j->nsfd, CLONE_NEWNET) < 0 ||
        (s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 64) < 0) {
        j->err = errno;
        if (s >= 0)
            close(s);
        return NULL;
    }
    j->fd = s;
    return NULL;
}

int sbx_listen_in(pid_t pid, int pidfd, unsigned short port, int *ret_fd)
{
    struct listen_job j = {.nsfd = pidfd, .port = port, .fd = -1};
    int own = -1, r;
    if (pid <= 1)
        return -ESRCH;
    if (pidfd < 0) {
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/ns/net", (int)pid);
        if ((own = open(p, O_RDONLY | O_CLOEXEC)) < 0)
            return -errno;
        j.nsfd = own;
    }
    pthread_t t;
    if ((r = pthread_create(&t, NULL, listen_thread, &j)) != 0) {
        if (own >= 0)
            close(own);
        return -r;
    }
    pthread_join(t, NULL);
    if (own >= 0)
        close(own);
    if (j.fd < 0)
        return -(j.err ? j.err : EIO);
    *ret_fd = j.fd;
    return 0;
}
