/* Kernel operations behind every face (REST, sessions, /channel RPC): start, interrupt, restart
 * and shut down, with one table that turns their errors into an HTTP status, an RPC exception
 * and one message, so the faces answer alike. */
#ifndef KGW_GATEWAY_KOPS_H
#define KGW_GATEWAY_KOPS_H

#include <jansson.h>

#include "gateway/gw.h"
#include "kernelmgr/kcmd.h"
#include "kernelmgr/kernel.h"
#include "protocol/rpc.h"

enum kops_op {
    KOPS_START,
    KOPS_INTERRUPT,
    KOPS_RESTART,
    KOPS_SHUTDOWN,
    KOPS_FORK,          /* a new kernel from a running one or its checkpoint */
    KOPS_COMMAND_START, /* a command in a kernel's sandbox (kcmd) */
    KOPS_COMMAND_SIGNAL,
};

/* Why an operation failed, for every face. */
struct kops_error {
    int code;       /* the -errno */
    int status;     /* HTTP status; 0: REST goes on as if it succeeded (nothing to interrupt;
                       a restart or shutdown in progress is waited for) */
    enum rpc_err exc; /* the RPC exception */
    int retry_after;  /* seconds for Retry-After; 0: none */
    char message[RPC_ERROR_MAX];
};

/* What a message may name besides the code. */
struct kops_context {
    const char *spec_name;   /* KOPS_START: the kernel spec asked for */
    const char *sandbox_why; /* kmgr_sandbox_error(), or NULL */
    long long max_kernels;   /* --max-kernels */
    const char *kernel_id;   /* the kernel operated on (or waited for: kops_waited), or NULL */
    const char *kernel_state; /* its execution state, or NULL */
    const char *checkpoint;  /* KOPS_FORK: the checkpoint asked for, or NULL */
    const char *cause;       /* the end of a wait: its last cause ("" or NULL: none) */
};

/* Fills ret from the one error table (pure: no gateway state). code < 0. */
void kops_error_make(enum kops_op op, int code, const struct kops_context *ctx,
                     struct kops_error *ret);

/* Starts a kernel from a start request {"name", "env", "limits", "workspace"} (all optional;
 * name defaults to --default-kernel) for who's tenant; writes the audit event kernel_start and
 * counts a refusal (quota, kernel limit). 0 with *ret_k "starting" (wait for it with
 * kernel_wait), or -errno with err filled: -EINVAL for a bad request (400, ValueError; not
 * audited), else kmgr_start's codes. */
int kops_start(gw_t *g, const struct gw_caller *who, json_t *req, kernel_t **ret_k,
               struct kops_error *err);
/* -EAGAIN: not running (err->status 0). */
int kops_interrupt(gw_t *g, kernel_t *k, struct kops_error *err);
/* Tells the kernel's websockets it is restarting; -EBUSY while another restart or shutdown
 * runs (err->status 0). */
int kops_restart(gw_t *g, kernel_t *k, struct kops_error *err);
/* 0 also when a shutdown is already in progress. */
int kops_shutdown(gw_t *g, kernel_t *k, struct kops_error *err);
/* Forks parent (running; the caller's, found by the caller) now, or from its checkpoint cp
 * (NULL: now), audited as kernel_fork for who. 0 with the new kernel in *ret_k, starting: wait
 * for it (kernel_wait) and, if that fails, take the reason from kops_fork_failed and shut it
 * down. -ENOENT: no such checkpoint, -EBUSY: not running, -ETOOMANYREFS: at the fork limit, or
 * kmgr_fork's refusals (as a start's); err says why. */
int kops_fork(gw_t *g, const struct gw_caller *who, kernel_t *parent, const char *cp,
              kernel_t **ret_k, struct kops_error *err);
/* Why the fork k did not become ready: code, kops_waited's (< 0). */
void kops_fork_failed(gw_t *g, kernel_t *k, int code, struct kops_error *err);
/* kcmd_start (kernelmgr/kcmd.h) with its refusals in the table: -ESRCH no running process
 * (409), -EAGAIN at --max-commands-per-kernel (429), -E2BIG (413), -EINVAL (400). */
int kops_command_start(gw_t *g, kernel_t *k, const struct kcmd_opts *o, const struct kcmd_cbs *cb,
                       kcmd_t **ret, struct kops_error *err);
/* kcmd_signal: -ESRCH when it has ended (404). */
int kops_command_signal(gw_t *g, kcmd_t *c, int sig, struct kops_error *err);
/* The end of a face's wait (kernel_wait) for a start or restart of k, from the status its
 * waiter was called with and the kernel's state now (waiters run on a later loop turn than
 * the transition's end: both count): 0 when k is up (running, or restarting again since);
 * -ESHUTDOWN when the drain shut it down; -ECANCELED when it was shut down meanwhile (DELETE,
 * the end of its session, E2B sandbox or MCP session, from any face): a conflict with that
 * shutdown, not a failure of the kernel; -ECHILD when it failed (kernel_last_cause). Every
 * face answers these alike, through kops_waited_error. */
int kops_waited(gw_t *g, kernel_t *k, int status);
/* kops_waited's code < 0 as op's error (KOPS_START, KOPS_RESTART): 409, 500 with the kernel's
 * last cause, or the drain's 503. */
void kops_waited_error(gw_t *g, kernel_t *k, enum kops_op op, int code, struct kops_error *ret);
/* Subscribes the audit log to kernel events (restarting, started, died, stopped). */
int kops_listen(gw_t *g);

#endif
