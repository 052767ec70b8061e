/* The one table of kernel operations' errors: an operation (kops.h's start, interrupt,
 * restart, shutdown, fork and commands; ckpt.h's checkpoints, rollbacks, revivals and drops)
 * and its -errno make the HTTP status, the RPC exception, the message and the Retry-After
 * every face answers with, so the faces answer alike. Pure: no gateway state; the caller
 * says what a message names (struct kerr_context). */
#ifndef KGW_GATEWAY_KERR_H
#define KGW_GATEWAY_KERR_H

#include <stdbool.h>

#include "protocol/rpc.h"

#define KERR_MESSAGE_MAX 400 /* bytes of a message with its NUL (an RPC exception takes fewer) */

enum kerr_op {
    KERR_START,
    KERR_INTERRUPT,
    KERR_RESTART,
    KERR_SHUTDOWN,
    KERR_FORK,          /* a new kernel from a running one or its checkpoint */
    KERR_COMMAND_START, /* a command in a kernel's sandbox (kcmd) */
    KERR_COMMAND_SIGNAL,
    KERR_CHECKPOINT, /* ckpt.h: take one (and make the kernel's first process its keeper) */
    KERR_ROLLBACK,
    KERR_REVIVE, /* the kernel back from its newest checkpoint after a death */
    KERR_DROP,
    KERR_PAUSE, /* freeze a kernel's processes in place (kernel_pause) */
    KERR_RESUME,
    KERR_EXECUTE, /* a new execution (the execute API): refused while the kernel is paused */
};

/* Why an operation failed, for every face. */
struct kerr {
    int code;         /* the -errno */
    int status;       /* HTTP status; 0: REST goes on as if it succeeded (nothing to interrupt;
                         a restart or shutdown in progress is waited for) */
    enum rpc_err exc; /* the RPC exception */
    int retry_after;  /* seconds for Retry-After; 0: none */
    char message[KERR_MESSAGE_MAX];
};

/* What a message may name besides the code (NULL, 0: not known). */
struct kerr_context {
    const char *spec_name;    /* KERR_START: the kernel spec asked for */
    const char *sandbox_why;  /* kmgr_sandbox_error() */
    long long max_kernels;    /* --max-kernels */
    const char *kernel_id;    /* the kernel operated on (a fork's failure: its parent) */
    const char *kernel_state; /* its execution state */
    const char *checkpoint;   /* the checkpoint asked for */
    const char *cause;        /* the kernel's last cause, or the end of a wait's */
    const char *ename;        /* a checkpoint operation: the kernel's error answer */
    const char *evalue;
    int timeout_s;               /* -ETIMEDOUT: how long the kernel was waited for */
    int held;                    /* KERR_CHECKPOINT -ENOSPC: the checkpoints the kernel holds */
    long long max_checkpoints;   /* --max-checkpoints */
    bool restarted;              /* -ETIMEDOUT: the kernel was restarted for it */
    bool parent_gone;            /* KERR_FORK -ECHILD: the parent ended before the fork */
};

/* Fills ret from the table. code < 0; ctx may be NULL. */
void kerr_make(enum kerr_op op, int code, const struct kerr_context *ctx, struct kerr *ret);

#endif
