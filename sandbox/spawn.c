#include "sandbox/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

static void child_fail(int errfd, int err)
{
    ssize_t w = write(errfd, &err, sizeof(err));
    (void)w;
    _exit(127);
}

static int dup_to(int from, int to)
{
    if (from == to)
        return fcntl(to, F_SETFD, 0);
    return dup2(from, to) < 0 ? -1 : 0;
}

/* Runs in the child between fork and exec: only async-signal-safe calls. */
static void child(const struct sbx_spawn_opts *o, pid_t parent, int errfd)
{
    sigset_t all;
    struct rlimit core0 = {0, 0};

    /* The gateway blocks signals it reads through signalfd: undo that first. */
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    util_sched_slice(0); /* the default slice, not the gateway's */
    if (setsid() < 0)
        child_fail(errfd, errno);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        child_fail(errfd, errno);
    if (getppid() != parent) /* the gateway died before prctl took effect */
        _exit(1);
    if (setrlimit(RLIMIT_CORE, &core0) < 0)
        child_fail(errfd, errno);

    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        child_fail(errfd, errno);
    if (dup_to(o->stdin_fd > 2 ? o->stdin_fd : null, 0) < 0 || dup_to(o->stdout_fd >= 0 ? o->stdout_fd : null, 1) < 0 ||
        dup_to(o->stderr_fd >= 0 ? o->stderr_fd : null, 2) < 0)
        child_fail(errfd, errno);
    /* Nothing else the gateway holds (sockets, keys, other kernels' pipes) crosses exec. */
    if (syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) < 0) {
        for (int fd = 3; fd < 65536; fd++)
            if (fd != errfd)
                close(fd);
    }
    if (o->cwd && chdir(o->cwd) < 0)
        child_fail(errfd, errno);
    if (strchr(o->argv[0], '/'))
        execve(o->argv[0], o->argv, o->envp);
    else
        execvpe(o->argv[0], o->argv, o->envp);
    child_fail(errfd, errno);
}

int sbx_spawn(const struct sbx_spawn_opts *o, pid_t *ret_pid, int *ret_pidfd)
{
    int pipefd[2], err = 0;
    pid_t parent = getpid();

    if (!o->argv || !o->argv[0])
        return -EINVAL;
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        err = -errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return err;
    }
    if (pid == 0) {
        close(pipefd[0]);
        child(o, parent, pipefd[1]);
    }
    close(pipefd[1]);
    ssize_t n;
    do {
        n = read(pipefd[0], &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    close(pipefd[0]);
    if (n == sizeof(err)) {
        waitpid(pid, NULL, 0);
        log_debug("spawn: child set-up failed: %s", strerror(err));
        return -err;
    }
    /* -1 where pidfds are unavailable (kernels before 5.3, valgrind): callers then learn of
     * the exit through SIGCHLD */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0 && errno != ENOSYS) {
        err = -errno;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return err;
    }
    if (pidfd >= 0)
        fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    *ret_pid = pid;
    *ret_pidfd = pidfd;
    return 0;
}
