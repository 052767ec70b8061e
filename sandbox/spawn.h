/* Starting a kernel process: fork, prepare the child, exec. Exec (or set-up) failures come
 * back to the parent as -errno through a close-on-exec pipe, never as a silent dead child. */
#ifndef KGW_SANDBOX_SPAWN_H
#define KGW_SANDBOX_SPAWN_H

#include <sys/types.h>

struct sbx_spawn_opts {
    char *const *argv;
    char *const *envp;
    const char *cwd;    /* NULL: keep */
    int stdin_fd;       /* above 2: the child's stdin; else /dev/null */
    int stdout_fd;      /* -1: /dev/null */
    int stderr_fd;      /* -1: /dev/null */
};

/* Starts argv[0] (resolved with PATH from envp when it has no '/') in a new session (so a
 * process-group signal reaches the kernel and its children), dying with the gateway.
 * ret_pidfd: a pidfd that becomes readable when the child exits, or -1 where the system has
 * none (then watch SIGCHLD). */
int sbx_spawn(const struct sbx_spawn_opts *o, pid_t *ret_pid, int *ret_pidfd);

#endif
