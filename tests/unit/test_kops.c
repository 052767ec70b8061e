/* gateway/kops.c: the one table of kernel-operation errors, row by row as docs/rpc.md and the
 * REST API document them. */
#include <errno.h>
#include <string.h>

#include "check.h"

#include "gateway/drain.h"
#include "gateway/kops.h"

static const struct {
    enum kops_op op;
    int code;
    int status; /* 0: REST goes on as if it succeeded */
    enum rpc_err exc;
    int retry_after;
    const char *message;
} rows[] = {
    {KOPS_START, -ENOENT, 404, RPC_ERR_KEY, 0, "No such kernel spec \"nope\""},
    {KOPS_START, -ESRCH, 404, RPC_ERR_KEY, 0, "No such workspace"},
    {KOPS_START, -EDQUOT, 403, RPC_ERR_RUNTIME, 0,
     "quota reached: this key's tenant may not have more kernels, workspaces or workspace bytes"},
    {KOPS_START, -ERANGE, 400, RPC_ERR_VALUE, 0,
     "limits: a requested limit is above the gateway's cap"},
    {KOPS_START, -EPERM, 503, RPC_ERR_RUNTIME, 0,
     "kernels cannot be started: the sandbox is unavailable: no user namespaces"},
    {KOPS_START, -EAGAIN, 503, RPC_ERR_RUNTIME, 0, "kernel limit reached (7)"},
    {KOPS_START, -EMFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the gateway's open-file limit leaves no room for another kernel"},
    {KOPS_START, -ENFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the host's open-file table is full"},
    {KOPS_START, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE},
    {KOPS_START, -ENOMEM, 500, RPC_ERR_RUNTIME, 0, "cannot start a kernel: Cannot allocate memory"},
    /* the end of a wait (kops_waited): shut down meanwhile, or failed */
    {KOPS_START, -ECANCELED, 409, RPC_ERR_RUNTIME, 0, "kernel k-1 was shut down while it started"},
    {KOPS_START, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "kernel k-1 failed to start: it died"},
    {KOPS_RESTART, -ECANCELED, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 was shut down while it restarted"},
    {KOPS_RESTART, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "kernel k-1 failed to restart: it died"},
    {KOPS_RESTART, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE},
    {KOPS_START, -EINVAL, 500, RPC_ERR_RUNTIME, 0, "cannot start a kernel: Invalid argument"},
    {KOPS_INTERRUPT, -EAGAIN, 0, RPC_ERR_RUNTIME, 0, "cannot interrupt: the kernel is not running"},
    {KOPS_INTERRUPT, -EIO, 500, RPC_ERR_RUNTIME, 0, "cannot interrupt: Input/output error"},
    {KOPS_RESTART, -EBUSY, 0, RPC_ERR_RUNTIME, 0,
     "cannot restart: another restart or shutdown is in progress"},
    {KOPS_RESTART, -ENOENT, 500, RPC_ERR_RUNTIME, 0,
     "cannot restart: No such file or directory"},
    {KOPS_SHUTDOWN, -EIO, 500, RPC_ERR_RUNTIME, 0, "cannot shut down: Input/output error"},
    /* a fork's own rows; its other refusals are a start's */
    {KOPS_FORK, -ENOENT, 404, RPC_ERR_KEY, 0, "Checkpoint does not exist: cp-9"},
    {KOPS_FORK, -EBUSY, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 is busy: only a running kernel can be forked"},
    {KOPS_FORK, -ETOOMANYREFS, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1: at most 6 forks live at once in one kernel's sandbox"},
    {KOPS_FORK, -EAGAIN, 503, RPC_ERR_RUNTIME, 0, "kernel limit reached (7)"},
    /* a command's */
    {KOPS_COMMAND_START, -ESRCH, 409, RPC_ERR_RUNTIME, 0,
     "kernel k-1 has no running process (starting, restarting or gone)"},
    {KOPS_COMMAND_START, -EAGAIN, 429, RPC_ERR_RUNTIME, 1,
     "kernel k-1 runs as many commands as it may (--max-commands-per-kernel); retry when one "
     "has ended"},
    {KOPS_COMMAND_START, -E2BIG, 413, RPC_ERR_VALUE, 0,
     "the command and its environment are too large (64 KiB, 1024 strings)"},
    {KOPS_COMMAND_START, -EIO, 500, RPC_ERR_RUNTIME, 0,
     "the command could not be started: Input/output error"},
    {KOPS_COMMAND_SIGNAL, -ESRCH, 404, RPC_ERR_KEY, 0, "the command has ended"},
    /* a start's codes mean nothing special to the other operations */
    {KOPS_SHUTDOWN, -EAGAIN, 500, RPC_ERR_RUNTIME, 0,
     "cannot shut down: Resource temporarily unavailable"},
};

int main(void)
{
    const struct kops_context ctx = {.spec_name = "nope",
                                     .sandbox_why = "no user namespaces",
                                     .max_kernels = 7,
                                     .kernel_id = "k-1",
                                     .kernel_state = "busy",
                                     .checkpoint = "cp-9",
                                     .cause = "it died"};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct kops_error e;
        CHECK_CASE(rows[i].message);
        memset(&e, 0xa5, sizeof(e));
        kops_error_make(rows[i].op, rows[i].code, &ctx, &e);
        CHECK_INT(e.code, rows[i].code);
        CHECK_INT(e.status, rows[i].status);
        CHECK_INT(e.exc, rows[i].exc);
        CHECK_INT(e.retry_after, rows[i].retry_after);
        CHECK_STR(e.message, rows[i].message);
    }

    /* the sandbox's reason when it has one; the spec name quoted, control bytes replaced */
    struct kops_error e;
    const struct kops_context bare = {.spec_name = "a\"b\nc"};
    CHECK_CASE("context");
    kops_error_make(KOPS_START, -EPERM, &bare, &e);
    CHECK_STR(e.message, "kernels cannot be started: the sandbox is unavailable");
    kops_error_make(KOPS_START, -ENOENT, &bare, &e);
    CHECK_STR(e.message, "No such kernel spec \"a?b?c\"");
    kops_error_make(KOPS_START, -ENOENT, NULL, &e);
    CHECK_STR(e.message, "No such kernel spec \"\"");
    /* a failure without a cause says none */
    const struct kops_context nocause = {.kernel_id = "k-2", .cause = ""};
    kops_error_make(KOPS_START, -ECHILD, &nocause, &e);
    CHECK_STR(e.message, "kernel k-2 failed to start");
    /* an RPC exception message: printable ASCII within RPC_ERROR_MAX */
    char longname[400];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    const struct kops_context lng = {.spec_name = longname, .sandbox_why = longname};
    kops_error_make(KOPS_START, -ENOENT, &lng, &e);
    CHECK(strlen(e.message) < 120 && strstr(e.message, "...\""));
    kops_error_make(KOPS_START, -EPERM, &lng, &e);
    CHECK(strlen(e.message) == RPC_ERROR_MAX - 1);
    CHECK_DONE();
}

