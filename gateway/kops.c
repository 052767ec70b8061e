/* Kernel operations behind every face; their errors are the table's (kerr.c). */
#include "gateway/kops.h"

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
#include "gateway/gsecret.h"

int kops_waited(gw_t *g, kernel_t *k, int status)
{
    enum kernel_state st = kernel_state(k);
    if (st == KERNEL_TERMINATING || status == -ECANCELED)
        return kmgr_draining(g->km) ? -ESHUTDOWN : -ECANCELED;
    if (status < 0 || st == KERNEL_DEAD)
        return kmgr_draining(g->km) ? -ESHUTDOWN : -ECHILD;
    return 0;
}

void kops_waited_error(gw_t *g, kernel_t *k, enum kerr_op op, int code, struct kerr *ret)
{
    struct kerr_context ctx = {.kernel_id = kernel_id(k), .cause = kernel_last_cause(k)};
    kerr_make(op, code, &ctx, ret);
}

static int fail_on(gw_t *g, enum kerr_op op, int code, kernel_t *k, const char *spec,
                   const char *cp, struct kerr *err)
{
    struct kerr_context ctx = {.spec_name = spec,
                               .sandbox_why = kmgr_sandbox_error(g->km),
                               .max_kernels = g->cfg.km.max_kernels,
                               .kernel_id = k ? kernel_id(k) : NULL,
                               .kernel_state = k ? kernel_execution_state(k) : NULL,
                               .checkpoint = cp};
    kerr_make(op, code, &ctx, err);
    return code;
}

static int fail(gw_t *g, enum kerr_op op, int code, const char *spec, struct kerr *err)
{
    return fail_on(g, op, code, NULL, spec, NULL, err);
}

/* A bad start request: 400 / ValueError. */
static int bad_request(struct kerr *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int bad_request(struct kerr *err, const char *fmt, ...)
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
                         struct kerr *err)
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
               struct kerr *err)
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
        return fail(g, KERR_START, rc, name, err);
    *ret_k = k;
    return 0;
}

int kops_interrupt(gw_t *g, kernel_t *k, struct kerr *err)
{
    int rc = kernel_interrupt(k);
    return rc < 0 ? fail_on(g, KERR_INTERRUPT, rc, k, NULL, NULL, err) : 0;
}

static void audit_pause(gw_t *g, const struct gw_caller *who, kernel_t *k, const char *what,
                        int rc)
{
    if (audit_enabled())
        audit_event(what, "s:s, s:s, s:s, s:s", "tenant", who ? who->tenant : "", "addr",
                    who ? who->addr : "", "kernel", kernel_id(k), "result",
                    rc == 0 ? "ok" : strerror(-rc));
}

int kops_pause(gw_t *g, const struct gw_caller *who, kernel_t *k, struct kerr *err)
{
    int rc = kernel_pause(k);
    audit_pause(g, who, k, "kernel_pause", rc);
    return rc < 0 ? fail_on(g, KERR_PAUSE, rc, k, NULL, NULL, err) : 0;
}

int kops_resume(gw_t *g, const struct gw_caller *who, kernel_t *k, struct kerr *err)
{
    int rc = kernel_resume(k);
    audit_pause(g, who, k, "kernel_resume", rc);
    return rc < 0 ? fail_on(g, KERR_RESUME, rc, k, NULL, NULL, err) : 0;
}

int kops_executable(gw_t *g, kernel_t *k, struct kerr *err)
{
    return kernel_paused(k) ? fail_on(g, KERR_EXECUTE, -EHOSTDOWN, k, NULL, NULL, err) : 0;
}

int kops_restart(gw_t *g, kernel_t *k, struct kerr *err)
{
    int rc = kernel_restart(k);
    return rc < 0 ? fail(g, KERR_RESTART, rc, NULL, err) : 0;
}

int kops_shutdown(gw_t *g, kernel_t *k, struct kerr *err)
{
    int rc = kernel_shutdown(k, "the kernel was shut down by a client");
    if (rc == -EALREADY) /* another shutdown is in progress: wait for it too */
        return 0;
    return rc < 0 ? fail(g, KERR_SHUTDOWN, rc, NULL, err) : 0;
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
              kernel_t **ret_k, struct kerr *err)
{
    kernel_t *k;
    if (cp && !ckpt_exists(g, parent, cp))
        return fail_on(g, KERR_FORK, -ENOENT, parent, NULL, cp, err);
    if (kernel_state(parent) != KERNEL_RUNNING)
        return fail_on(g, KERR_FORK, -EBUSY, parent, NULL, cp, err);
    int rc = kmgr_fork(g->km, parent, cp, &k);
    audit_fork(who, kernel_id(parent), cp, rc, rc == 0 ? k : NULL);
    if (rc < 0)
        return fail_on(g, KERR_FORK, rc, parent, kernel_spec_name(parent), cp, err);
    *ret_k = k;
    return 0;
}

/* Whether the kernel k was forked from still runs. */
static bool parent_up(gw_t *g, kernel_t *k)
{
    kernel_t *p = gw_kernel(g, kernel_forked_from(k), wspace_tenant(kernel_workspace(k)));
    return p && kernel_state(p) == KERNEL_RUNNING;
}

void kops_fork_failed(gw_t *g, kernel_t *k, int code, struct kerr *err)
{
    if (code == -ESHUTDOWN || code == -ECANCELED) /* the drain's, or shut down meanwhile */
        return kops_waited_error(g, k, KERR_START, code, err);
    /* else a failure of the fork itself, told of its parent */
    struct kerr_context ctx = {.kernel_id = kernel_forked_from(k), .cause = kernel_last_cause(k)};
    if (kernel_fork_no_checkpoint(k))
        return kerr_make(KERR_FORK, -ENOENT, &ctx, err);
    /* shut down, restarted or dead meanwhile: the fork lived in its sandbox */
    ctx.parent_gone = kernel_fork_parent_gone(k) || !parent_up(g, k);
    kerr_make(KERR_FORK, code, &ctx, err);
}

int kops_command_start(gw_t *g, kernel_t *k, const struct kcmd_opts *o, const struct kcmd_cbs *cb,
                       kcmd_t **ret, struct kerr *err)
{
    int rc = kernel_paused(k) ? -EHOSTDOWN : kcmd_start(k, o, cb, ret);
    return rc < 0 ? fail_on(g, KERR_COMMAND_START, rc, k, NULL, NULL, err) : 0;
}

int kops_command_signal(gw_t *g, kcmd_t *c, int sig, struct kerr *err)
{
    int rc = kcmd_signal(c, sig);
    return rc < 0 ? fail(g, KERR_COMMAND_SIGNAL, rc, NULL, err) : 0;
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
