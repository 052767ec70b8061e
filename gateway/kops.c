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
#include "gateway/drain.h"
#include "gateway/gsecret.h"

/* What a row's message names after its head. */
enum kops_arg {
    ARG_NONE,
    ARG_SPEC,         /* the spec name, quoted */
    ARG_SANDBOX,      /* ": " and why the sandbox is unavailable, when known */
    ARG_MAX_KERNELS,  /* " (N)" */
    ARG_ERRNO,        /* strerror of the code */
    ARG_KERNEL,       /* "kernel ID " before the head */
    ARG_KERNEL_CAUSE, /* that, and ": " and its last cause after the head, if it has one */
};

struct kops_row {
    enum kops_op op;
    int code; /* 0: any other code (the op's last row) */
    int status;
    enum rpc_err exc;
    int retry_after;
    const char *head;
    enum kops_arg arg;
};

/* One row per (operation, error); each operation ends with its catch-all row. */
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
    {KOPS_START, -ECANCELED, 409, RPC_ERR_RUNTIME, 0, "was shut down while it started", ARG_KERNEL},
    {KOPS_START, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "failed to start", ARG_KERNEL_CAUSE},
    {KOPS_START, 0, 500, RPC_ERR_RUNTIME, 0, "cannot start a kernel: ", ARG_ERRNO},
    {KOPS_INTERRUPT, -EAGAIN, 0, RPC_ERR_RUNTIME, 0, "cannot interrupt: the kernel is not running",
     ARG_NONE},
    {KOPS_INTERRUPT, 0, 500, RPC_ERR_RUNTIME, 0, "cannot interrupt: ", ARG_ERRNO},
    {KOPS_RESTART, -EBUSY, 0, RPC_ERR_RUNTIME, 0,
     "cannot restart: another restart or shutdown is in progress", ARG_NONE},
    /* the end of a wait for the restart (kops_waited) */
    {KOPS_RESTART, -ESHUTDOWN, 503, RPC_ERR_RUNTIME, DRAIN_RETRY_AFTER_S, DRAIN_MESSAGE, ARG_NONE},
    {KOPS_RESTART, -ECANCELED, 409, RPC_ERR_RUNTIME, 0, "was shut down while it restarted",
     ARG_KERNEL},
    {KOPS_RESTART, -ECHILD, 500, RPC_ERR_RUNTIME, 0, "failed to restart", ARG_KERNEL_CAUSE},
    {KOPS_RESTART, 0, 500, RPC_ERR_RUNTIME, 0, "cannot restart: ", ARG_ERRNO},
    {KOPS_SHUTDOWN, 0, 500, RPC_ERR_RUNTIME, 0, "cannot shut down: ", ARG_ERRNO},
};

void kops_error_make(enum kops_op op, int code, const struct kops_context *ctx,
                     struct kops_error *ret)
{
    const struct kops_row *row = NULL;
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(rows) && !row; i++)
        if (rows[i].op == op && (rows[i].code == code || rows[i].code == 0))
            row = &rows[i];
    assert(row); /* every op has a catch-all row */
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
    case ARG_KERNEL_CAUSE:
    case ARG_NONE:
        break;
    }
    ret->code = code;
    ret->status = row->status;
    ret->exc = row->exc;
    ret->retry_after = row->retry_after;
    if (row->arg == ARG_KERNEL || row->arg == ARG_KERNEL_CAUSE) {
        const char *id = ctx && ctx->kernel_id ? ctx->kernel_id : "";
        const char *cause = row->arg == ARG_KERNEL_CAUSE && ctx && ctx->cause ? ctx->cause : "";
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

static int fail(gw_t *g, enum kops_op op, int code, const char *spec, struct kops_error *err)
{
    struct kops_context ctx = {.spec_name = spec,
                               .sandbox_why = kmgr_sandbox_error(g->km),
                               .max_kernels = g->cfg.km.max_kernels};
    kops_error_make(op, code, &ctx, err);
    return code;
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
