/* Internals shared by the sandbox's files: the set-up steps and their report, the stages that
 * run inside a new sandbox (stages.c), and the gateway's half of a start (sbx.c), which the
 * fork-server wire (forksrv.c) reuses. */
#ifndef KGW_SANDBOX_PRIVATE_H
#define KGW_SANDBOX_PRIVATE_H

#include <sys/types.h>

#include "sandbox/sbx.h"

/* Everything between fork and exec runs in a copy of a multi-threaded process: no
 * allocation, no locks, no stdio; errors go back as {step, errno} through a close-on-exec pipe
 * (the set-up report). */
enum sbx__step {
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

struct sbx__failure {
    int step;
    int err;
};

/* stages.c */
/* Writes {st, err} (0: EIO) to the report fd; sbx__fail then exits 127. */
void sbx__report(int fd, enum sbx__step st, int err);
_Noreturn void sbx__fail(int fd, enum sbx__step st, int err);
void sbx__reset_signals(void);
/* The process the gateway knows: in the new user namespace, outside the pid namespace. It
 * reports on efd, says its pid on syncfd, waits for the gateway on gofd, and never returns. */
_Noreturn void sbx__proxy_stage(int efd, int syncfd, int gofd, const sbx_profile_t *p,
                                void (*fn)(void *), void *arg);

/* sbx.c */
int sbx__handshake(pid_t expect, int efd, int syncfd, int gofd, int timeout_ms,
                   const sbx_profile_t *p, pid_t *ret_pid, int *ret_pidfd, int *ret_setupfd,
                   char *why, size_t whysz);
void sbx__close_pipes(int efd[2], int syncp[2], int gop[2]);

#endif
