/* The one table of kernel operations' errors (kerr.h). It calls nothing of the gateway: the
 * headers below give it constants only (the drain's refusal, the fork limit). */
#include "gateway/kerr.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "gateway/drain.h"
#include "kernelmgr/kmgr.h"

/* A row matches only when this holds too. */
enum kerr_when {
    WHEN_ANY,
    WHEN_AT_LIMIT,    /* the kernel's error answer says it is at its memory or process limit */
    WHEN_RESTARTED,   /* ctx->restarted */
    WHEN_PARENT_GONE, /* ctx->parent_gone */
};

/* KERR_CKPT: a row of every checkpoint operation (after the operation's own rows). */
#define KERR_CKPT (-1)

struct kerr_row {
    int op;   /* enum kerr_op, or KERR_CKPT */
    int code; /* 0: any other code (the op's last row) */
    int status;
    enum rpc_err exc;
    int retry_after;
    /* the message: text with {name} placeholders (see expand), as docs/rpc.md, the REST API
     * and docs/checkpoints.md document them */
    const char *text;
    enum kerr_when when; /* (not given: WHEN_ANY) */
};

#define KERR_STR_(x) #x
#define KERR_STR(x)  KERR_STR_(x)
#define LOST         "(its variables and checkpoints are lost)"
/* a paused kernel's refusal of new work (kernel_pause) */
#define PAUSED       "kernel {kernel} is paused: resume it first"

/* One row per (operation, error); each operation ends with its catch-all row (a fork's other
 * refusals are a start's; a checkpoint operation's, the KERR_CKPT rows'). */
static const struct kerr_row rows[] = {
    {KERR_START, -ENOENT, 404, RPC_ERR_KEY, 0, "No such kernel spec {spec}"},
    {KERR_START, -ESRCH, 404, RPC_ERR_KEY, 0, "No such workspace"},
    {KERR_START, -EDQUOT, 403, RPC_ERR_RUNTIME, 0,
     "quota reached: this key's tenant may not have more kernels, workspaces or workspace bytes"},
    {KERR_START, -ERANGE, 400, RPC_ERR_VALUE, 0,
     "limits: a requested limit is above the gateway's cap"},
    {KERR_START, -EPERM, 503, RPC_ERR_RUNTIME, 0,
     "kernels cannot be started: the sandbox is unavailable{: sandbox}"},
    {KERR_START, -EAGAIN, 503, RPC_ERR_RUNTIME, 0, "kernel limit reached ({max_kernels})"},
    {KERR_START, -EMFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the gateway's open-file limit leaves no room for another kernel"},
    {KERR_START, -ENFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the host's open-file table is full"},
    {KERR_START, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE},
    /* the end of a wait for the start (kops_waited) */
    {KERR_START, -ECANCELED, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} was shut down while it started"},
    {KERR_START, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "kernel {kernel} failed to start{: cause}"},
    {KERR_START, 0, 500, RPC_ERR_RUNTIME, 0, "cannot start a kernel: {errno}"},
    {KERR_INTERRUPT, -EAGAIN, 0, RPC_ERR_RUNTIME, 0, "cannot interrupt: the kernel is not running"},
    {KERR_INTERRUPT, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0, PAUSED},
    {KERR_INTERRUPT, 0, 500, RPC_ERR_RUNTIME, 0, "cannot interrupt: {errno}"},
    {KERR_RESTART, -EBUSY, 0, RPC_ERR_RUNTIME, 0,
     "cannot restart: another restart or shutdown is in progress"},
    /* the end of a wait for the restart (kops_waited) */
    {KERR_RESTART, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE},
    {KERR_RESTART, -ECANCELED, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} was shut down while it restarted"},
    {KERR_RESTART, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "kernel {kernel} failed to restart{: cause}"},
    {KERR_RESTART, 0, 500, RPC_ERR_RUNTIME, 0, "cannot restart: {errno}"},
    {KERR_SHUTDOWN, 0, 500, RPC_ERR_RUNTIME, 0, "cannot shut down: {errno}"},
    /* a fork's refusals (kops_fork: the parent's id), and its failures (kops_fork_failed; the
     * checkpoint not found: the failure naming it, as its cause) */
    {KERR_FORK, -ENOENT, 404, RPC_ERR_KEY, 0, "Checkpoint does not exist: {checkpoint:64}{cause}"},
    {KERR_FORK, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} is {state}: only a running kernel can be forked"},
    {KERR_FORK, -ETOOMANYREFS, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel}: at most " KERR_STR(KMGR_FORKS_MAX) " forks live at once in one kernel's "
     "sandbox"},
    {KERR_FORK, -ECHILD, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} is not running: it ended before the fork", WHEN_PARENT_GONE},
    {KERR_FORK, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "kernel {kernel} failed to fork{: cause}"},
    /* (other codes: kmgr_fork refuses as a start does) */
    {KERR_COMMAND_START, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0, PAUSED},
    {KERR_COMMAND_START, -ESRCH, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} has no running process (starting, restarting or gone)"},
    {KERR_COMMAND_START, -EAGAIN, 429, RPC_ERR_RUNTIME, 1,
     "kernel {kernel} runs as many commands as it may (--max-commands-per-kernel); retry when "
     "one has ended"},
    {KERR_COMMAND_START, -E2BIG, 413, RPC_ERR_VALUE, 0,
     "the command and its environment are too large (64 KiB, 1024 strings)"},
    {KERR_COMMAND_START, -EINVAL, 400, RPC_ERR_VALUE, 0, "invalid command"},
    {KERR_COMMAND_START, 0, 500, RPC_ERR_RUNTIME, 0, "the command could not be started: {errno}"},
    {KERR_COMMAND_SIGNAL, -ESRCH, 404, RPC_ERR_KEY, 0, "the command has ended"},
    {KERR_COMMAND_SIGNAL, 0, 500, RPC_ERR_RUNTIME, 0, "cannot signal the command: {errno}"},
    /* pause and resume (kernel_pause, kernel_resume) */
    {KERR_PAUSE, -EALREADY, 409, RPC_ERR_RUNTIME, 0, "kernel {kernel} is paused already"},
    {KERR_PAUSE, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} is {state}: only a running kernel can be paused"},
    {KERR_PAUSE, -ENOTSUP, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} shares its sandbox with a fork (or is one): it cannot be paused alone"},
    {KERR_PAUSE, 0, 500, RPC_ERR_RUNTIME, 0, "cannot pause: {errno}"},
    {KERR_RESUME, -EALREADY, 409, RPC_ERR_RUNTIME, 0, "kernel {kernel} is not paused"},
    {KERR_RESUME, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "kernel {kernel} is {state}: only a paused kernel can be resumed"},
    {KERR_RESUME, 0, 500, RPC_ERR_RUNTIME, 0, "cannot resume: {errno}"},
    {KERR_EXECUTE, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0, PAUSED},
    {KERR_EXECUTE, 0, 500, RPC_ERR_RUNTIME, 0, "cannot execute: {errno}"},
    /* checkpoints (docs/checkpoints.md): each operation's own rows */
    {KERR_CHECKPOINT, -ENOSPC, 409, RPC_ERR_RUNTIME, 0,
     "checkpoint limit reached: the kernel holds {held} (--max-checkpoints={max_checkpoints}); "
     "DELETE one first"},
    /* (a checkpoint's: the revival that makes the first process the keeper timed out) */
    {KERR_CHECKPOINT, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "the kernel did not come back from the revival its first checkpoint makes within {timeout} "
     "s and was restarted " LOST, WHEN_RESTARTED},
    {KERR_ROLLBACK, -ENOENT, 404, RPC_ERR_KEY, 0,
     "no checkpoint {checkpoint:64} on kernel {kernel}"},
    {KERR_ROLLBACK, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "cannot roll back: the kernel did not come back from the rollback within {timeout} s and "
     "was restarted " LOST, WHEN_RESTARTED},
    {KERR_REVIVE, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "the kernel did not come back from its checkpoint {checkpoint} within {timeout} s and was "
     "restarted " LOST, WHEN_RESTARTED},
    {KERR_DROP, -ENOENT, 404, RPC_ERR_KEY, 0, "no checkpoint {checkpoint:64} on kernel {kernel}"},
    {KERR_DROP, -EINPROGRESS, 409, RPC_ERR_RUNTIME, 0,
     "checkpoint {checkpoint}: a rollback to it is in progress; drop it after"},
    /* every checkpoint operation's ({verb}: what it could not do) */
    {KERR_CKPT, -EREMOTEIO, 507, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: the kernel is at its memory or process limit ({ename:64}: {evalue:200}); "
     "nothing was changed", WHEN_AT_LIMIT},
    {KERR_CKPT, -EREMOTEIO, 409, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: {ename:64|error}: {evalue:200}"},
    /* its ipykernel lacks what checkpoints rely on ("unsupported ipykernel X.Y: ..."): not
     * offered there */
    {KERR_CKPT, -ENOTSUP, 501, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: {evalue:340|this kernel does not support checkpoints}"},
    /* at kgw_ckpt.MAX_GENERATIONS: a restart of the kernel starts again */
    {KERR_CKPT, -EMLINK, 409, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: {evalue:340|the kernel is at its generation limit; restart it}"},
    {KERR_CKPT, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: the kernel did not answer within {timeout} s (a cell may still be running)"},
    {KERR_CKPT, -ECHILD, 409, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: the kernel's process ended meanwhile{: cause:300}"},
    {KERR_CKPT, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0, "cannot {verb}: " PAUSED},
    {KERR_CKPT, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: the kernel is not running (it is {state})"},
    {KERR_CKPT, -EAGAIN, 429, RPC_ERR_RUNTIME, 0,
     "cannot {verb}: too many checkpoint requests queued for this kernel"},
    {KERR_CKPT, 0, 500, RPC_ERR_RUNTIME, 0, "cannot {verb}: {errno}"},
};

static bool is_ckpt(enum kerr_op op)
{
    return op == KERR_CHECKPOINT || op == KERR_ROLLBACK || op == KERR_REVIVE || op == KERR_DROP;
}

/* Whether the kernel's error answer says it is at its memory or process limit (kgw_ckpt's
 * ForkError, Python's MemoryError, or an error naming fork or memory). */
static bool at_limit(const struct kerr_context *ctx)
{
    const char *en = ctx ? ctx->ename : NULL, *ev = ctx ? ctx->evalue : NULL;
    return en && (!strcmp(en, "ForkError") || !strcmp(en, "MemoryError") ||
                  (ev && (strstr(ev, "fork") || strstr(ev, "emory"))));
}

static bool row_holds(const struct kerr_row *row, const struct kerr_context *ctx)
{
    switch (row->when) {
    case WHEN_AT_LIMIT:
        return at_limit(ctx);
    case WHEN_RESTARTED:
        return ctx && ctx->restarted;
    case WHEN_PARENT_GONE:
        return ctx && ctx->parent_gone;
    case WHEN_ANY:
        break;
    }
    return true;
}

static const struct kerr_row *row_find(int op, int code, const struct kerr_context *ctx)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(rows); i++)
        if (rows[i].op == op && (rows[i].code == code || rows[i].code == 0) &&
            row_holds(&rows[i], ctx))
            return &rows[i];
    return NULL;
}

/* The value a placeholder names (written to num when a number), or NULL when not known. */
static const char *value(const char *name, size_t n, enum kerr_op op, int code,
                         const struct kerr_context *ctx, char *num, size_t numsz)
{
    static const char *const verbs[] = {[KERR_CHECKPOINT] = "take a checkpoint",
                                        [KERR_ROLLBACK] = "roll back",
                                        [KERR_REVIVE] = "revive the kernel",
                                        [KERR_DROP] = "drop"};
    const struct kerr_context none = {.max_kernels = -1};
    const struct kerr_context *c = ctx ? ctx : &none;
#define IS(s) (n == strlen(s) && !memcmp(name, s, n))
    if (IS("verb"))
        return (size_t)op < UTIL_ARRAY_SIZE(verbs) ? verbs[op] : NULL;
    if (IS("errno"))
        return strerror(-code);
    if (IS("spec")) /* quoted, control bytes replaced */
        return log_quote(num, numsz < 96 ? numsz : 96, c->spec_name ? c->spec_name : "",
                         c->spec_name ? strlen(c->spec_name) : 0);
    if (IS("max_kernels") || IS("max_checkpoints") || IS("held") || IS("timeout")) {
        long long v = IS("max_kernels")       ? c->max_kernels
                      : IS("max_checkpoints") ? c->max_checkpoints
                      : IS("held")            ? c->held
                                              : c->timeout_s;
        snprintf(num, numsz, "%lld", v);
        return num;
    }
    return IS("sandbox")      ? c->sandbox_why
           : IS("kernel")     ? c->kernel_id
           : IS("state")      ? c->kernel_state
           : IS("checkpoint") ? c->checkpoint
           : IS("cause")      ? c->cause
           : IS("ename")      ? c->ename
           : IS("evalue")     ? c->evalue
                              : NULL;
#undef IS
}

/* Writes the message of text to out: each {PREFIX NAME:PRECISION|DEFAULT} (all but NAME
 * optional) is the value NAME names, at most PRECISION bytes of it, after PREFIX (what comes
 * before the name: no lower-case letters); a value not known or empty is DEFAULT without
 * PREFIX, or nothing. */
static void expand(const char *text, enum kerr_op op, int code, const struct kerr_context *ctx,
                   char *out, size_t outsz)
{
    size_t len = 0;
    out[0] = '\0';
    for (const char *p = text; *p && len + 1 < outsz;) {
        const char *close = *p == '{' ? strchr(p, '}') : NULL;
        if (!close) {
            out[len++] = *p++;
            out[len] = '\0';
            continue;
        }
        const char *name = p + 1;
        while (name < close && !(*name >= 'a' && *name <= 'z'))
            name++;
        const char *end = name;
        while (end < close && ((*end >= 'a' && *end <= 'z') || *end == '_'))
            end++;
        int prec = *end == ':' ? atoi(end + 1) : INT_MAX;
        const char *bar = memchr(end, '|', (size_t)(close - end));
        char num[128];
        const char *v = value(name, (size_t)(end - name), op, code, ctx, num, sizeof(num));
        if (v && v[0])
            snprintf(out + len, outsz - len, "%.*s%.*s", (int)(name - p - 1), p + 1, prec, v);
        else if (bar)
            snprintf(out + len, outsz - len, "%.*s", (int)(close - bar - 1), bar + 1);
        len += strlen(out + len);
        p = close + 1;
    }
}

void kerr_make(enum kerr_op op, int code, const struct kerr_context *ctx, struct kerr *ret)
{
    const struct kerr_row *row = row_find((int)op, code, ctx);
    if (!row && op == KERR_FORK) /* kmgr_fork's other refusals are a start's */
        row = row_find(KERR_START, code, ctx);
    if (!row && is_ckpt(op))
        row = row_find(KERR_CKPT, code, ctx);
    assert(row); /* every operation ends with a catch-all row */
    ret->code = code;
    ret->status = row->status;
    ret->exc = row->exc;
    ret->retry_after = row->retry_after;
    expand(row->text, op, code, ctx, ret->message, sizeof(ret->message));
}
