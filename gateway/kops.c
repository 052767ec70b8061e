/* Kernel operations behind every face, and the one table of their errors. */
#include "gateway/kops.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/ckpt.h"
#include "gateway/drain.h"
#include "gateway/gsecret.h"

/* What a row's message names after its head. */
enum kops_arg {
    ARG_NONE,
    ARG_SPEC,        /* the spec name, quoted */
    ARG_SANDBOX,     /* ": " and why the sandbox is unavailable, when known */
    ARG_MAX_KERNELS, /* " (N)" */
    ARG_ERRNO,       /* strerror of the code */
    ARG_KERNEL,      /* the kernel's id, then the rest of the head */
    ARG_KERNEL_STATE, /* the kernel's id, the head, its state, the tail */
    ARG_CHECKPOINT,  /* the checkpoint's id */
    ARG_WAITED,      /* the end of a wait: "kernel ID " before the head */
    ARG_WAITED_CAUSE, /* that, and ": " and its last cause after the head, if it has one */
};

struct kops_row {
    enum kops_op op;
    int code; /* 0: any other code (the op's last row) */
    int status;
    enum rpc_err exc;
    int retry_after;
    const char *head;
    enum kops_arg arg;
    const char *tail; /* after the argument (ARG_KERNEL, ARG_KERNEL_STATE) */
};

#define KOPS_STR_(x) #x
#define KOPS_STR(x)  KOPS_STR_(x)

/* One row per (operation, error); each operation ends with its catch-all row (a fork's other
 * refusals are a start's). */
static const struct kops_row rows[] = {
    {KOPS_START, -ENOENT, 404, RPC_ERR_KEY, 0, "No such kernel spec ", ARG_SPEC},
    {KOPS_START, -ESRCH, 404, RPC_ERR_KEY, 0, "No such workspace", ARG_NONE},
    {KOPS_START, -EDQUOT, 403, RPC_ERR_RUNTIME, 0,
     "quota reached: this key's tenant may not have more kernels, workspaces or workspace bytes",
     ARG_NONE},
    {KOPS_START, -ERANGE, 400, RPC_ERR_VALUE, 0,
     "limits: a requested limit is above the gateway's cap", ARG_NONE},
    {KOPS_START, -EPERM, 503, RPC_ERR_RUNTIME, 0,
     "kernels cannot be started: the sandbox is unavailable", ARG_SANDBOX},
    {KOPS_START, -EAGAIN, 503, RPC_ERR_RUNTIME, 0, "kernel limit reached", ARG_MAX_KERNELS},
    {KOPS_START, -EMFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the gateway's open-file limit leaves no room for another kernel",
     ARG_NONE},
    {KOPS_START, -ENFILE, 503, RPC_ERR_RUNTIME, 0,
     "kernel capacity reached: the host's open-file table is full", ARG_NONE},
    {KOPS_START, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE, ARG_NONE},
    /* the end of a wait for the start (kops_waited) */
    {KOPS_START, -ECANCELED, 409, RPC_ERR_RUNTIME, 0, "was shut down while it started", ARG_WAITED},
    {KOPS_START, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "failed to start", ARG_WAITED_CAUSE},
    {KOPS_START, 0, 500, RPC_ERR_RUNTIME, 0, "cannot start a kernel: ", ARG_ERRNO},
    {KOPS_INTERRUPT, -EAGAIN, 0, RPC_ERR_RUNTIME, 0, "cannot interrupt: the kernel is not running",
     ARG_NONE},
    {KOPS_INTERRUPT, 0, 500, RPC_ERR_RUNTIME, 0, "cannot interrupt: ", ARG_ERRNO},
    {KOPS_RESTART, -EBUSY, 0, RPC_ERR_RUNTIME, 0,
     "cannot restart: another restart or shutdown is in progress", ARG_NONE},
    /* the end of a wait for the restart (kops_waited) */
    {KOPS_RESTART, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE, ARG_NONE},
    {KOPS_RESTART, -ECANCELED, 409, RPC_ERR_RUNTIME, 0, "was shut down while it restarted",
     ARG_WAITED},
    {KOPS_RESTART, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "failed to restart", ARG_WAITED_CAUSE},
    {KOPS_RESTART, 0, 500, RPC_ERR_RUNTIME, 0, "cannot restart: ", ARG_ERRNO},
    {KOPS_SHUTDOWN, 0, 500, RPC_ERR_RUNTIME, 0, "cannot shut down: ", ARG_ERRNO},
    {KOPS_FORK, -ENOENT, 404, RPC_ERR_KEY, 0, "Checkpoint does not exist: ", ARG_CHECKPOINT},
    {KOPS_FORK, -EBUSY, 409, RPC_ERR_RUNTIME, 0, "kernel ", ARG_KERNEL_STATE,
     " is %s: only a running kernel can be forked"},
    {KOPS_FORK, -ETOOMANYREFS, 409, RPC_ERR_RUNTIME, 0, "kernel ", ARG_KERNEL,
     ": at most " KOPS_STR(KMGR_FORKS_MAX) " forks live at once in one kernel's sandbox"},
    /* (other codes: kmgr_fork refuses as a start does) */
    {KOPS_COMMAND_START, -ESRCH, 409, RPC_ERR_RUNTIME, 0, "kernel ", ARG_KERNEL,
     " has no running process (starting, restarting or gone)"},
    {KOPS_COMMAND_START, -EAGAIN, 429, RPC_ERR_RUNTIME, 1, "kernel ", ARG_KERNEL,
     " runs as many commands as it may (--max-commands-per-kernel); retry when one has ended"},
    {KOPS_COMMAND_START, -E2BIG, 413, RPC_ERR_VALUE, 0,
     "the command and its environment are too large (64 KiB, 1024 strings)", ARG_NONE},
    {KOPS_COMMAND_START, -EINVAL, 400, RPC_ERR_VALUE, 0, "invalid command", ARG_NONE},
    {KOPS_COMMAND_START, 0, 500, RPC_ERR_RUNTIME, 0, "the command could not be started: ",
     ARG_ERRNO},
    {KOPS_COMMAND_SIGNAL, -ESRCH, 404, RPC_ERR_KEY, 0, "the command has ended", ARG_NONE},
    {KOPS_COMMAND_SIGNAL, 0, 500, RPC_ERR_RUNTIME, 0, "cannot signal the command: ", ARG_ERRNO},
};

void kops_error_make(enum kops_op op, int code, const struct kops_context *ctx,
                     struct kops_error *ret)
{
    const struct kops_row *row = NULL;
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(rows) && !row; i++)
        if (rows[i].op == op && (rows[i].code == code || rows[i].code == 0))
            row = &rows[i];
    if (!row && op == KOPS_FORK) /* kmgr_fork's other refusals are a start's */
        return kops_error_make(KOPS_START, code, ctx, ret);
    assert(row); /* every other op has a catch-all row */
    char arg[RPC_ERROR_MAX] = "";
    const char *spec = ctx && ctx->spec_name ? ctx->spec_name : "";
    switch (row->arg) {
    case ARG_SPEC:
        log_quote(arg, 96, spec, strlen(spec));
        break;
    case ARG_SANDBOX:
        if (ctx && ctx->sandbox_why)
            snprintf(arg, sizeof(arg), ": %s", ctx->sandbox_why);
        break;
    case ARG_MAX_KERNELS:
        snprintf(arg, sizeof(arg), " (%lld)", ctx ? ctx->max_kernels : -1);
        break;
    case ARG_ERRNO:
        snprintf(arg, sizeof(arg), "%s", strerror(-code));
        break;
    case ARG_KERNEL:
        snprintf(arg, sizeof(arg), "%s%s", ctx && ctx->kernel_id ? ctx->kernel_id : "",
                 row->tail ? row->tail : "");
        break;
    case ARG_KERNEL_STATE:
        snprintf(arg, sizeof(arg), "%s", ctx && ctx->kernel_id ? ctx->kernel_id : "");
        if (row->tail) {
            size_t n = strlen(arg);
            const char *pct = strstr(row->tail, "%s");
            snprintf(arg + n, sizeof(arg) - n, "%.*s%s%s", (int)(pct - row->tail), row->tail,
                     ctx && ctx->kernel_state ? ctx->kernel_state : "", pct + 2);
        }
        break;
    case ARG_CHECKPOINT:
        snprintf(arg, sizeof(arg), "%.64s", ctx && ctx->checkpoint ? ctx->checkpoint : "");
        break;
    case ARG_WAITED:
    case ARG_WAITED_CAUSE:
    case ARG_NONE:
        break;
    }
    ret->code = code;
    ret->status = row->status;
    ret->exc = row->exc;
    ret->retry_after = row->retry_after;
    if (row->arg == ARG_WAITED || row->arg == ARG_WAITED_CAUSE) {
        const char *id = ctx && ctx->kernel_id ? ctx->kernel_id : "";
        const char *cause = row->arg == ARG_WAITED_CAUSE && ctx && ctx->cause ? ctx->cause : "";
        snprintf(ret->message, sizeof(ret->message), "kernel %s %s%s%s", id, row->head,
                 cause[0] ? ": " : "", cause);
        return;
    }
    snprintf(ret->message, sizeof(ret->message), "%s%s", row->head, arg);
}

int kops_waited(gw_t *g, kernel_t *k, int status)
{
    enum kernel_state st = kernel_state(k);
    if (st == KERNEL_TERMINATING || status == -ECANCELED)
        return kmgr_draining(g->km) ? -ESHUTDOWN : -ECANCELED;
    if (status < 0 || st == KERNEL_DEAD)
        return kmgr_draining(g->km) ? -ESHUTDOWN : -ECHILD;
    return 0;
}

void kops_waited_error(gw_t *g, kernel_t *k, enum kops_op op, int code, struct kops_error *ret)
{
    struct kops_context ctx = {.kernel_id = kernel_id(k), .cause = kernel_last_cause(k)};
    kops_error_make(op, code, &ctx, ret);
}

static int fail_on(gw_t *g, enum kops_op op, int code, kernel_t *k, const char *spec,
                   const char *cp, struct kops_error *err)
{
    struct kops_context ctx = {.spec_name = spec,
                               .sandbox_why = kmgr_sandbox_error(g->km),
                               .max_kernels = g->cfg.km.max_kernels,
                               .kernel_id = k ? kernel_id(k) : NULL,
                               .kernel_state = k ? kernel_execution_state(k) : NULL,
                               .checkpoint = cp};
    kops_error_make(op, code, &ctx, err);
    return code;
}

static int fail(gw_t *g, enum kops_op op, int code, const char *spec, struct kops_error *err)
{
    return fail_on(g, op, code, NULL, spec, NULL, err);
}

/* A bad start request: 400 / ValueError. */
static int bad_request(struct kops_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int bad_request(struct kops_error *err, const char *fmt, ...)
{
    va_list ap;
    err->code = -EINVAL;
    err->status = 400;
    err->exc = RPC_ERR_VALUE;
    err->retry_after = 0;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static void audit_start(gw_t *g, const struct gw_caller *who, const struct kmgr_start *st, int rc,
                        kernel_t *k)
{
    if (rc == -EDQUOT)
        g->stats.refused[GW_REFUSED_QUOTA]++;
    else if (rc == -EAGAIN || rc == -EMFILE || rc == -ENFILE)
        g->stats.refused[GW_REFUSED_KERNEL_LIMIT]++;
    if (!audit_enabled())
        return;
    char eg[EGPOL_TEXT_MAX + 1] = "";
    if (st->egress && egpol_format(st->egress, eg, sizeof(eg)) < 0)
        snprintf(eg, sizeof(eg), "(too long to show)");
    audit_event("kernel_start", "s:s, s:s, s:o, s:o, s:o, s:s, s:o", "tenant", who->tenant,
                "addr", who->addr, "kernel", k ? json_string(kernel_id(k)) : json_null(), "name",
                audit_str(st->spec_name, strlen(st->spec_name)), "workspace",
                k ? json_string(wspace_id(kernel_workspace(k))) : json_null(), "result",
                rc == 0 ? "ok" : rc == -ESHUTDOWN ? "draining" : strerror(-rc), "egress",
                eg[0] ? json_string(eg) : json_null());
}

/* The kernel's egress policy into out: the request's "egress" (a string or a list of
 * strings; at most what the tenant has) or else the tenant's, within --egress-ceiling. */
static int egress_policy(gw_t *g, const struct gw_caller *who, json_t *req, egpol_t *out,
                         struct kops_error *err)
{
    const char *text = keyfile_egress(g->keys, who->tenant);
    char why[160];
    egpol_t *ask = NULL;
    int r = 0;
    if (egpol_parse(text, strlen(text), out, why, sizeof(why)) < 0) /* checked at load */
        out->n = 0;
    if (g->cfg.egress_ceiling && g->cfg.egress_ceiling[0]) {
        size_t dropped = egpol_restrict(out, &g->egress_ceiling);
        if (dropped)
            log_warn("tenant=%s: %zu egress entries beyond --egress-ceiling ignored", who->tenant,
                     dropped);
    }
    json_t *j = json_object_get(req, "egress");
    if (!j || json_is_null(j))
        return 0;
    char buf[EGPOL_TEXT_MAX + 1];
    size_t len = 0, i;
    json_t *v;
    if (json_is_string(j)) {
        len = (size_t)snprintf(buf, sizeof(buf), "%s", json_string_value(j));
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v)
        {
            if (!json_is_string(v))
                return bad_request(err, "\"egress\" must be a string or a list of strings");
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? "," : "",
                                    json_string_value(v));
            if (len >= sizeof(buf))
                break;
        }
    } else {
        return bad_request(err, "\"egress\" must be a string or a list of strings");
    }
    if (len >= sizeof(buf))
        return bad_request(err, "\"egress\": longer than %d bytes", EGPOL_TEXT_MAX);
    if (!(ask = malloc(sizeof(*ask))))
        return bad_request(err, "out of memory");
    if (egpol_parse(buf, len, ask, why, sizeof(why)) < 0) {
        r = bad_request(err, "\"egress\": %s", why);
    } else if (!egpol_covers(out, ask, why, sizeof(why))) {
        r = bad_request(err, "\"egress\": %s for this tenant", why);
        err->code = -EPERM;
        err->status = 403;
    } else {
        *out = *ask;
    }
    free(ask);
    return r;
}

int kops_start(gw_t *g, const struct gw_caller *who, json_t *req, kernel_t **ret_k,
               struct kops_error *err)
{
    json_t *jname = json_object_get(req, "name");
    json_t *env = json_object_get(req, "env");
    json_t *jws = json_object_get(req, "workspace");
    const char *name = g->cfg.default_kernel;
    if (jname && !json_is_null(jname)) {
        if (!json_is_string(jname))
            return bad_request(err, "\"name\" must be a string");
        name = json_string_value(jname);
    }
    if (env && !json_is_null(env) && !json_is_object(env))
        return bad_request(err, "\"env\" must be an object");
    struct kmgr_limits lim;
    char why[200];
    if (kmgr_limits_parse(json_object_get(req, "limits"), &lim, why, sizeof(why)) < 0)
        return bad_request(err, "%s", why);
    if (jws && !json_is_null(jws) &&
        (!json_is_string(jws) ||
         !ident_ok(json_string_value(jws), json_string_length(jws), IDENT_UUIDISH)))
        return bad_request(err, "\"workspace\" must be a workspace id");
    egpol_t *egress = malloc(sizeof(*egress));
    if (!egress)
        return bad_request(err, "out of memory");
    if (egress_policy(g, who, req, egress, err) < 0) {
        free(egress);
        return err->code;
    }
    /* its secrets: only a kernel with an egress policy has a proxy to put them in */
    const char *secrets[SECRETS_PER_KERNEL];
    size_t nsecrets = 0;
    json_t *jsec = json_object_get(req, "secrets");
    int sr = gsecret_pick(g, who->tenant, jsec, secrets, &nsecrets, why, sizeof(why));
    if (sr == 0 && nsecrets && !egress->n && jsec && !json_is_null(jsec))
        sr = (snprintf(why, sizeof(why), "\"secrets\" need an egress policy"), -EINVAL);
    if (sr < 0) {
        free(egress);
        bad_request(err, "%s", why);
        if (sr == -EPERM) {
            err->code = -EPERM;
            err->status = 403;
        }
        return err->code;
    }
    if (!egress->n)
        nsecrets = 0;
    struct kmgr_start st = {.spec_name = name,
                            .env = json_is_object(env) ? env : NULL,
                            .lim = &lim,
                            .workspace = json_is_string(jws) ? json_string_value(jws) : NULL,
                            .tenant = who->tenant,
                            .egress = egress,
                            .secrets = secrets,
                            .nsecrets = nsecrets};
    kernel_t *k;
    int rc = kmgr_start(g->km, &st, &k);
    audit_start(g, who, &st, rc, rc == 0 ? k : NULL);
    free(egress);
    if (rc < 0)
        return fail(g, KOPS_START, rc, name, err);
    *ret_k = k;
    return 0;
}

int kops_interrupt(gw_t *g, kernel_t *k, struct kops_error *err)
{
    int rc = kernel_interrupt(k);
    return rc < 0 ? fail(g, KOPS_INTERRUPT, rc, NULL, err) : 0;
}

int kops_restart(gw_t *g, kernel_t *k, struct kops_error *err)
{
    int rc = kernel_restart(k);
    return rc < 0 ? fail(g, KOPS_RESTART, rc, NULL, err) : 0;
}

int kops_shutdown(gw_t *g, kernel_t *k, struct kops_error *err)
{
    int rc = kernel_shutdown(k, "the kernel was shut down by a client");
    if (rc == -EALREADY) /* another shutdown is in progress: wait for it too */
        return 0;
    return rc < 0 ? fail(g, KOPS_SHUTDOWN, rc, NULL, err) : 0;
}

static void audit_fork(const struct gw_caller *who, const char *parent, const char *cp, int rc,
                       kernel_t *k)
{
    if (!audit_enabled())
        return;
    audit_event("kernel_fork", "s:s, s:s, s:s, s:o, s:o, s:s", "tenant", who->tenant, "addr",
                who->addr, "parent", parent, "checkpoint", cp ? json_string(cp) : json_null(),
                "kernel", k ? json_string(kernel_id(k)) : json_null(), "result",
                rc == 0            ? "ok"
                : rc == -ESHUTDOWN ? "draining"
                                   : strerror(-rc));
}

int kops_fork(gw_t *g, const struct gw_caller *who, kernel_t *parent, const char *cp,
              kernel_t **ret_k, struct kops_error *err)
{
    kernel_t *k;
    if (cp && !ckpt_exists(g, parent, cp))
        return fail_on(g, KOPS_FORK, -ENOENT, parent, NULL, cp, err);
    if (kernel_state(parent) != KERNEL_RUNNING)
        return fail_on(g, KOPS_FORK, -EBUSY, parent, NULL, cp, err);
    int rc = kmgr_fork(g->km, parent, cp, &k);
    audit_fork(who, kernel_id(parent), cp, rc, rc == 0 ? k : NULL);
    if (rc < 0)
        return fail_on(g, KOPS_FORK, rc, parent, kernel_spec_name(parent), cp, err);
    *ret_k = k;
    return 0;
}

/* Whether the kernel k was forked from still runs. */
static bool parent_up(gw_t *g, kernel_t *k)
{
    kernel_t *p = gw_kernel(g, kernel_forked_from(k), wspace_tenant(kernel_workspace(k)));
    return p && kernel_state(p) == KERNEL_RUNNING;
}

void kops_fork_failed(gw_t *g, kernel_t *k, int code, struct kops_error *err)
{
    if (code == -ESHUTDOWN || code == -ECANCELED) /* the drain's, or shut down meanwhile */
        return kops_waited_error(g, k, KOPS_START, code, err);
    err->code = code;
    err->exc = RPC_ERR_RUNTIME;
    err->retry_after = 0;
    if (kernel_fork_no_checkpoint(k)) {
        err->code = -ENOENT;
        err->status = 404;
        err->exc = RPC_ERR_KEY;
        snprintf(err->message, sizeof(err->message), "Checkpoint does not exist: %s",
                 kernel_last_cause(k));
    } else if (kernel_fork_parent_gone(k) || !parent_up(g, k)) {
        /* shut down, restarted or dead meanwhile: the fork lived in its sandbox */
        err->status = 409;
        snprintf(err->message, sizeof(err->message),
                 "kernel %s is not running: it ended before the fork", kernel_forked_from(k));
    } else {
        err->status = 500;
        snprintf(err->message, sizeof(err->message), "kernel %s failed to fork%s%s",
                 kernel_forked_from(k), kernel_last_cause(k)[0] ? ": " : "",
                 kernel_last_cause(k));
    }
}

int kops_command_start(gw_t *g, kernel_t *k, const struct kcmd_opts *o, const struct kcmd_cbs *cb,
                       kcmd_t **ret, struct kops_error *err)
{
    int rc = kcmd_start(k, o, cb, ret);
    return rc < 0 ? fail_on(g, KOPS_COMMAND_START, rc, k, NULL, NULL, err) : 0;
}

int kops_command_signal(gw_t *g, kcmd_t *c, int sig, struct kops_error *err)
{
    int rc = kcmd_signal(c, sig);
    return rc < 0 ? fail(g, KOPS_COMMAND_SIGNAL, rc, NULL, err) : 0;
}

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    static const char *const names[KERNEL_EV_N] = {
        [KERNEL_EV_RESTARTING] = "kernel_restarting", [KERNEL_EV_STARTED] = "kernel_started",
        [KERNEL_EV_DIED] = "kernel_died", [KERNEL_EV_GONE] = "kernel_stopped"};
    (void)user;
    if (names[ev]) /* a client's restart: its new process is audited as kernel_started */
        audit_event(names[ev], "s:s, s:s, s:o", "tenant", wspace_tenant(kernel_workspace(k)),
                    "kernel", kernel_id(k), "reason",
                    detail ? audit_str(detail, strlen(detail)) : json_null());
}

static const struct kmgr_listener_ops listener_ops = {.event = on_event};

int kops_listen(gw_t *g)
{
    return kmgr_listen(g->km, &g->audit_listener, &listener_ops, g);
}
