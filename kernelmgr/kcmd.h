/* Commands run in a kernel's sandbox (docs/commands.md): a program (`/bin/bash -l -c CMD`, or
 * any argv) forked by the sandbox's init (sandbox/init.c), so it has the kernel's namespaces,
 * workspace, cgroup (its pids and memory limits count it), rlimits, seccomp filter, uid and
 * egress policy, and the kernel's environment with the command's own variables on top. Its
 * stdout and stderr come apart, as read; it ends with its exit status, or is ended by a signal,
 * its timeout, its output cap, or the kernel's end (every command of a kernel ends with its
 * process: a restart, a death, a shutdown). Under --no-sandbox a command is a plain child of
 * the gateway in its own session, with the kernel's environment and working directory, and no
 * limits but its timeout and output cap.
 *
 * Nothing here waits: output and the end come as callbacks from the loop. */
#ifndef KGW_KERNELMGR_KCMD_H
#define KGW_KERNELMGR_KCMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernelmgr/kernel.h"

/* commands running at once in one kernel, unless kmgr_opts.max_commands
 * (--max-commands-per-kernel) says */
#define KCMD_PER_KERNEL_MAX 16
#define KCMD_READ_MAX       (64 * 1024) /* bytes per output callback */

typedef struct kcmd kcmd_t;

struct kcmd_opts {
    const char *const *argv; /* argv[0]: a path, or a name looked up in the command's PATH */
    const char *cwd;         /* NULL: the workspace (the kernel's working directory) */
    const char *const *env;  /* "NAME=VALUE" set over the kernel's environment; NULL: none */
    double timeout_s;        /* wall time, then SIGKILL to its process group; <= 0: none */
    bool stdin_open;         /* stdin is a pipe (kcmd_write_stdin); else /dev/null */
    long long output_max;    /* bytes of stdout and stderr together, then it is stopped;
                                0: the kernel's output cap (--max-output-bytes), < 0: none */
};

enum kcmd_status {
    KCMD_OK,            /* exited with status 0 */
    KCMD_ERROR,         /* exited with another status, or could not start (exit_code 127) */
    KCMD_KILLED,        /* ended by a signal nobody here sent (exit_code -1, signal) */
    KCMD_TIMEOUT,       /* over its timeout: killed */
    KCMD_CANCELLED,     /* kcmd_signal (exit_code -1, signal) */
    KCMD_OUTPUT_LIMIT,  /* over output_max: killed */
    KCMD_KERNEL_GONE,   /* the kernel's process ended (restart, death, shutdown) */
    KCMD_OUT_OF_MEMORY, /* killed by the OOM killer at the kernel's memory limit */
    KCMD_STATUS_N
};

struct kcmd_end {
    enum kcmd_status status;
    int exit_code;       /* -1: no exit status (a signal ended it, or the kernel went) */
    int signal;          /* the signal that ended it, 0: none */
    int64_t duration_us; /* from kcmd_start */
    const char *message; /* one line for a client ("" when it exited by itself) */
};

/* "ok", "error", "killed", "timeout", "cancelled", "output_limit", "kernel_died",
 * "out_of_memory" */
const char *kcmd_status_name(enum kcmd_status s);

struct kcmd_cbs {
    /* n bytes (at most KCMD_READ_MAX) of its stdout (fd 1) or stderr (fd 2), in the order read
     * (each pipe's bytes in order; between the two, as the loop reads them) */
    void (*output)(void *ud, int fd, const void *buf, size_t n);
    /* once, last; kcmd_release may be called in it */
    void (*end)(void *ud, const struct kcmd_end *e);
    void *ud;
};

/* Starts a command in k (running). -ESRCH: no kernel process; -EAGAIN: its limit of commands
 * running (--max-commands-per-kernel); -E2BIG: argv and environment over 64 KiB or 1024 strings;
 * -EINVAL: no argv, or a relative cwd. A program that cannot be run ends with KCMD_ERROR, exit_code
 * 127. The callbacks never run after kcmd_release, nor when this fails. */
int kcmd_start(kernel_t *k, const struct kcmd_opts *o, const struct kcmd_cbs *cb, kcmd_t **ret);
/* Up to n bytes to its stdin without waiting: the count written (short or 0 when the pipe is
 * full), -EPIPE when it is closed (or the command ended), -EBADF without stdin_open. */
int kcmd_write_stdin(kcmd_t *c, const void *buf, size_t n);
int kcmd_close_stdin(kcmd_t *c);
/* A signal to its process group; SIGKILL/SIGTERM/SIGINT/SIGHUP end it as KCMD_CANCELLED.
 * -ESRCH once it ended. */
int kcmd_signal(kcmd_t *c, int sig);
/* Stops (or resumes) reading its output: a reader that cannot keep up pauses it, and the
 * command then blocks on a full pipe instead of the gateway holding its output. */
void kcmd_pause(kcmd_t *c, bool paused);
/* Its pid (inside its sandbox; 0 until known) and whether it ended. */
int kcmd_pid(const kcmd_t *c);
bool kcmd_ended(const kcmd_t *c);
/* Commands of k running now (an idle sweep leaves a kernel with some alone). */
int kcmd_running(const kernel_t *k);
/* Lets go of it: a command still running is killed (SIGKILL to its process group). NULL is
 * fine; *c becomes NULL. */
void kcmd_release(kcmd_t **c);

#endif
