/* gateway/kerr.c: the one table of kernel-operation errors, row by row as docs/rpc.md, the
 * REST API and docs/checkpoints.md document them. */
#include <errno.h>
#include <string.h>

#include "check.h"

#include "gateway/drain.h"
#include "gateway/kerr.h"

/* what the rows' messages name (most rows: shared) */
static const struct kerr_context shared = {.spec_name = "nope",
                                           .sandbox_why = "no user namespaces",
                                           .max_kernels = 7,
                                           .kernel_id = "k-1",
                                           .kernel_state = "busy",
                                           .checkpoint = "cp-9",
                                           .cause = "it died",
                                           .ename = "ValueError",
                                           .evalue = "boom",
                                           .timeout_s = 59,
                                           .held = 3,
                                           .max_checkpoints = 3};
static const struct kerr_context refused_fork = {.kernel_id = "k-1", .checkpoint = "cp-9"};
/* a fork's failure is told of its parent, with the kernel's last cause */
#define FORK_CAUSE "the kernel could not fork: CheckpointError: no checkpoint cp-9"
static const struct kerr_context failed_fork = {.kernel_id = "k-0", .cause = FORK_CAUSE};
static const struct kerr_context parent_gone = {
    .kernel_id = "k-0", .cause = "it ended", .parent_gone = true};
/* a checkpoint operation's kernel answers (kgw_ckpt's errors) */
static const struct kerr_context fork_error = {.ename = "ForkError", .evalue = "no fork"};
static const struct kerr_context oom = {.ename = "OSError", .evalue = "Cannot allocate memory"};
#define UNSUPPORTED                                                                         \
    "unsupported ipykernel 6.29 (IPython 8.20.0, pyzmq 25.1.2, Python 3.11.2): checkpoints " \
    "rely on internals it lacks: IPython.core.history.HistorySavingThread"
static const struct kerr_context unsupported = {.ename = "UnsupportedError",
                                                .evalue = UNSUPPORTED};
static const struct kerr_context restarted = {
    .checkpoint = "cp-9", .timeout_s = 59, .restarted = true};

static const struct {
    const struct kerr_context *ctx; /* NULL: shared */
    enum kerr_op op;
    int code;
    int status; /* 0: REST goes on as if it succeeded */
    enum rpc_err exc;
    int retry_after;
    const char *message;
} rows[] = {
    {NULL, KERR_START, -ENOENT, 404, RPC_ERR_KEY, 0, "No such kernel spec \"nope\""},
    {NULL, KERR_START, -ESRCH, 404, RPC_ERR_KEY, 0, "No such workspace"},
    {NULL, KERR_START, -EDQUOT, 403, RPC_ERR_RUNTIME, 0,
     "quota reached: this key's tenant may not have more kernels, workspaces or workspace bytes"},
    {NULL, KERR_START, -ERANGE, 400, RPC_ERR_VALUE, 0,
     "limits: a requested limit is above the gateway's cap"},
    {NULL, KERR_START, -EPERM, 503, RPC_ERR_RUNTIME, 0,
     "kernels cannot be started: the sandbox is unavailable: no user namespaces"},
    {NULL, KERR_START, -EAGAIN, 503, RPC_ERR_RUNTIME, 0, "kernel limit reached (7)"},
    {NULL, KERR_START, -EMFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the gateway's open-file limit leaves no room for another kernel"},
    {NULL, KERR_START, -ENFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the host's open-file table is full"},
    {NULL, KERR_START, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE},
    {NULL, KERR_START, -ENOMEM, 500, RPC_ERR_RUNTIME, 0,
     "cannot start a kernel: Cannot allocate memory"},
    /* the end of a wait (kops_waited): shut down meanwhile, or failed */
    {NULL, KERR_START, -ECANCELED, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 was shut down while it started"},
    {NULL, KERR_START, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "kernel k-1 failed to start: it died"},
    {NULL, KERR_RESTART, -ECANCELED, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 was shut down while it restarted"},
    {NULL, KERR_RESTART, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "kernel k-1 failed to restart: it died"},
    {NULL, KERR_RESTART, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE},
    {NULL, KERR_START, -EINVAL, 500, RPC_ERR_RUNTIME, 0, "cannot start a kernel: Invalid argument"},
    {NULL, KERR_INTERRUPT, -EAGAIN, 0, RPC_ERR_RUNTIME, 0,
     "cannot interrupt: the kernel is not running"},
    {NULL, KERR_INTERRUPT, -EIO, 500, RPC_ERR_RUNTIME, 0, "cannot interrupt: Input/output error"},
    {NULL, KERR_RESTART, -EBUSY, 0, RPC_ERR_RUNTIME, 0,
     "cannot restart: another restart or shutdown is in progress"},
    {NULL, KERR_RESTART, -ENOENT, 500, RPC_ERR_RUNTIME, 0,
     "cannot restart: No such file or directory"},
    {NULL, KERR_SHUTDOWN, -EIO, 500, RPC_ERR_RUNTIME, 0, "cannot shut down: Input/output error"},
    /* a fork's own rows; its other refusals are a start's */
    {&refused_fork, KERR_FORK, -ENOENT, 404, RPC_ERR_KEY, 0, "Checkpoint does not exist: cp-9"},
    {NULL, KERR_FORK, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 is busy: only a running kernel can be forked"},
    {NULL, KERR_FORK, -ETOOMANYREFS, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1: at most 6 forks live at once in one kernel's sandbox"},
    {NULL, KERR_FORK, -EAGAIN, 503, RPC_ERR_RUNTIME, 0, "kernel limit reached (7)"},
    /* a command's */
    {NULL, KERR_COMMAND_START, -ESRCH, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 has no running process (starting, restarting or gone)"},
    {NULL, KERR_COMMAND_START, -EAGAIN, 429, RPC_ERR_RUNTIME, 1,
     "kernel k-1 runs as many commands as it may (--max-commands-per-kernel); retry when one "
     "has ended"},
    {NULL, KERR_COMMAND_START, -E2BIG, 413, RPC_ERR_VALUE, 0,
     "the command and its environment are too large (64 KiB, 1024 strings)"},
    {NULL, KERR_COMMAND_START, -EIO, 500, RPC_ERR_RUNTIME, 0,
     "the command could not be started: Input/output error"},
    {NULL, KERR_COMMAND_SIGNAL, -ESRCH, 404, RPC_ERR_KEY, 0, "the command has ended"},
    /* a start's codes mean nothing special to the other operations */
    {NULL, KERR_SHUTDOWN, -EAGAIN, 500, RPC_ERR_RUNTIME, 0,
     "cannot shut down: Resource temporarily unavailable"},
    /* a fork that did not become ready (kops_fork_failed) */
    {&failed_fork, KERR_FORK, -ENOENT, 404, RPC_ERR_KEY, 0,
     "Checkpoint does not exist: " FORK_CAUSE},
    {&parent_gone, KERR_FORK, -ECHILD, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-0 is not running: it ended before the fork"},
    {&failed_fork, KERR_FORK, -ECHILD, 500, RPC_ERR_RUNTIME, 0,
     "kernel k-0 failed to fork: " FORK_CAUSE},
    /* checkpoints, rollbacks, revivals and drops (docs/checkpoints.md) */
    {NULL, KERR_CHECKPOINT, -ENOSPC, 409, RPC_ERR_RUNTIME, 0,
     "checkpoint limit reached: the kernel holds 3 (--max-checkpoints=3); DELETE one first"},
    {NULL, KERR_ROLLBACK, -ENOENT, 404, RPC_ERR_KEY, 0, "no checkpoint cp-9 on kernel k-1"},
    {NULL, KERR_DROP, -ENOENT, 404, RPC_ERR_KEY, 0, "no checkpoint cp-9 on kernel k-1"},
    {NULL, KERR_DROP, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "cannot drop: the kernel is not running (it is busy)"},
    {NULL, KERR_DROP, -EINPROGRESS, 409, RPC_ERR_RUNTIME, 0,
     "checkpoint cp-9: a rollback to it is in progress; drop it after"},
    {NULL, KERR_CHECKPOINT, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "cannot take a checkpoint: the kernel is not running (it is busy)"},
    {NULL, KERR_ROLLBACK, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "cannot roll back: the kernel is not running (it is busy)"},
    {NULL, KERR_CHECKPOINT, -EREMOTEIO, 409, RPC_ERR_RUNTIME, 0,
     "cannot take a checkpoint: ValueError: boom"},
    {&fork_error, KERR_ROLLBACK, -EREMOTEIO, 507, RPC_ERR_RUNTIME, 0,
     "cannot roll back: the kernel is at its memory or process limit (ForkError: no fork); "
     "nothing was changed"},
    {&oom, KERR_REVIVE, -EREMOTEIO, 507, RPC_ERR_RUNTIME, 0,
     "cannot revive the kernel: the kernel is at its memory or process limit (OSError: Cannot "
     "allocate memory); nothing was changed"},
    {&unsupported, KERR_CHECKPOINT, -ENOTSUP, 501, RPC_ERR_RUNTIME, 0,
     "cannot take a checkpoint: " UNSUPPORTED},
    {NULL, KERR_ROLLBACK, -EMLINK, 409, RPC_ERR_RUNTIME, 0, "cannot roll back: boom"},
    {NULL, KERR_DROP, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "cannot drop: the kernel did not answer within 59 s (a cell may still be running)"},
    {NULL, KERR_ROLLBACK, -ECHILD, 409, RPC_ERR_RUNTIME, 0,
     "cannot roll back: the kernel's process ended meanwhile: it died"},
    {NULL, KERR_CHECKPOINT, -EAGAIN, 429, RPC_ERR_RUNTIME, 0,
     "cannot take a checkpoint: too many checkpoint requests queued for this kernel"},
    {NULL, KERR_CHECKPOINT, -ENOMEM, 500, RPC_ERR_RUNTIME, 0,
     "cannot take a checkpoint: Cannot allocate memory"},
    /* timed out, and the kernel restarted for it */
    {&restarted, KERR_ROLLBACK, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "cannot roll back: the kernel did not come back from the rollback within 59 s and was "
     "restarted (its variables and checkpoints are lost)"},
    {&restarted, KERR_REVIVE, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "the kernel did not come back from its checkpoint cp-9 within 59 s and was restarted (its "
     "variables and checkpoints are lost)"},
    {&restarted, KERR_CHECKPOINT, -ETIMEDOUT, 504, RPC_ERR_RUNTIME, 0,
     "the kernel did not come back from the revival its first checkpoint makes within 59 s and "
     "was restarted (its variables and checkpoints are lost)"},
    /* pause and resume; a paused kernel refuses new work */
    {NULL, KERR_PAUSE, -EALREADY, 409, RPC_ERR_RUNTIME, 0, "kernel k-1 is paused already"},
    {NULL, KERR_PAUSE, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 is busy: only a running kernel can be paused"},
    {NULL, KERR_PAUSE, -ENOTSUP, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 shares its sandbox with a fork (or is one): it cannot be paused alone"},
    {NULL, KERR_PAUSE, -EPERM, 500, RPC_ERR_RUNTIME, 0, "cannot pause: Operation not permitted"},
    {NULL, KERR_RESUME, -EALREADY, 409, RPC_ERR_RUNTIME, 0, "kernel k-1 is not paused"},
    {NULL, KERR_RESUME, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 is busy: only a paused kernel can be resumed"},
    {NULL, KERR_RESUME, -ESRCH, 500, RPC_ERR_RUNTIME, 0, "cannot resume: No such process"},
    {NULL, KERR_EXECUTE, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 is paused: resume it first"},
    {NULL, KERR_COMMAND_START, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 is paused: resume it first"},
    {NULL, KERR_INTERRUPT, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 is paused: resume it first"},
    {NULL, KERR_CHECKPOINT, -EHOSTDOWN, 409, RPC_ERR_RUNTIME, 0,
     "cannot take a checkpoint: kernel k-1 is paused: resume it first"},
    /* the kernel operations' codes mean nothing special to a checkpoint's, nor theirs to them */
    {NULL, KERR_DROP, -ESHUTDOWN, 500, RPC_ERR_RUNTIME, 0,
     "cannot drop: Cannot send after transport endpoint shutdown"},
    {NULL, KERR_START, -EMLINK, 500, RPC_ERR_RUNTIME, 0, "cannot start a kernel: Too many links"},
};

int main(void)
{
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct kerr e;
        CHECK_CASE(rows[i].message);
        memset(&e, 0xa5, sizeof(e));
        kerr_make(rows[i].op, rows[i].code, rows[i].ctx ? rows[i].ctx : &shared, &e);
        CHECK_INT(e.code, rows[i].code);
        CHECK_INT(e.status, rows[i].status);
        CHECK_INT(e.exc, rows[i].exc);
        CHECK_INT(e.retry_after, rows[i].retry_after);
        CHECK_STR(e.message, rows[i].message);
    }

    /* the sandbox's reason when it has one; the spec name quoted, control bytes replaced */
    struct kerr e;
    const struct kerr_context bare = {.spec_name = "a\"b\nc"};
    CHECK_CASE("context");
    kerr_make(KERR_START, -EPERM, &bare, &e);
    CHECK_STR(e.message, "kernels cannot be started: the sandbox is unavailable");
    kerr_make(KERR_START, -ENOENT, &bare, &e);
    CHECK_STR(e.message, "No such kernel spec \"a?b?c\"");
    kerr_make(KERR_START, -ENOENT, NULL, &e);
    CHECK_STR(e.message, "No such kernel spec \"\"");
    /* a failure without a cause says none */
    const struct kerr_context nocause = {.kernel_id = "k-2", .cause = ""};
    kerr_make(KERR_START, -ECHILD, &nocause, &e);
    CHECK_STR(e.message, "kernel k-2 failed to start");
    /* an RPC exception message: printable ASCII within RPC_ERROR_MAX */
    char longname[400];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    const struct kerr_context lng = {.spec_name = longname, .sandbox_why = longname};
    kerr_make(KERR_START, -ENOENT, &lng, &e);
    CHECK(strlen(e.message) < 120 && strstr(e.message, "...\""));
    kerr_make(KERR_START, -EPERM, &lng, &e);
    CHECK(strlen(e.message) == KERR_MESSAGE_MAX - 1);

    /* a kernel's answer without its parts; a long one cut so that the message's end stays */
    CHECK_CASE("checkpoint answers");
    kerr_make(KERR_DROP, -EREMOTEIO, NULL, &e);
    CHECK_STR(e.message, "cannot drop: error: ");
    kerr_make(KERR_CHECKPOINT, -ENOTSUP, NULL, &e);
    CHECK_STR(e.message, "cannot take a checkpoint: this kernel does not support checkpoints");
    kerr_make(KERR_ROLLBACK, -EMLINK, NULL, &e);
    CHECK_STR(e.message, "cannot roll back: the kernel is at its generation limit; restart it");
    kerr_make(KERR_ROLLBACK, -ECHILD, &nocause, &e);
    CHECK_STR(e.message, "cannot roll back: the kernel's process ended meanwhile");
    const struct kerr_context long_answer = {.ename = longname, .evalue = longname};
    kerr_make(KERR_CHECKPOINT, -EREMOTEIO, &long_answer, &e);
    CHECK_INT(strlen(e.message), strlen("cannot take a checkpoint: ") + 64 + 2 + 200);
    const struct kerr_context long_oom = {.ename = "MemoryError", .evalue = longname};
    kerr_make(KERR_CHECKPOINT, -EREMOTEIO, &long_oom, &e);
    CHECK(e.status == 507 && strstr(e.message, "xxx); nothing was changed"));
    /* not a limit: an error that names neither fork nor memory, or no error name */
    const struct kerr_context other = {.ename = "KeyError", .evalue = "x"};
    const struct kerr_context unnamed = {.evalue = "cannot fork"};
    kerr_make(KERR_CHECKPOINT, -EREMOTEIO, &other, &e);
    CHECK_INT(e.status, 409);
    kerr_make(KERR_CHECKPOINT, -EREMOTEIO, &unnamed, &e);
    CHECK_STR(e.message, "cannot take a checkpoint: error: cannot fork");
    /* not restarted: the plain timeout */
    kerr_make(KERR_REVIVE, -ETIMEDOUT, &shared, &e);
    CHECK_STR(e.message, "cannot revive the kernel: the kernel did not answer within 59 s (a "
                         "cell may still be running)");
    CHECK_DONE();
}

