/* POST /api/kernels/{id}/fork {"checkpoint"?: id}: the caller's kernel (404 for another
 * tenant's, as every kernel route) is forked into a new kernel of the same tenant (kmgr_fork),
 * answered as POST /api/kernels answers (201, the kernel's model, Location) once the fork
 * answers kernel_info. */
#include "gateway/gfork.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/audit.h"
#include "common/ident.h"
#include "common/log.h"
#include "gateway/ckpt.h"
#include "gateway/drain.h"
#include "gateway/gw.h"
#include "gateway/http.h"
#include "gateway/kops.h"
#include "kernelmgr/kmgr.h"
#include "kernelmgr/wspace.h"

/* Whether the kernel the fork k was made from runs (not ended, nor restarting since). */
static bool parent_runs(gw_t *g, kernel_t *k)
{
    kernel_t *p = kmgr_find(g->km, kernel_forked_from(k));
    return p && kernel_state(p) == KERNEL_RUNNING;
}

void gfork_failed(const struct gw_req *r, kernel_t *k, int code, int *status, char *msg, size_t len)
{
    struct kops_error err;
    if (code == -ESHUTDOWN || code == -ECANCELED) { /* the drain's, or shut down meanwhile */
        kops_waited_error(r->g, k, KOPS_START, code, &err);
        *status = err.status;
        snprintf(msg, len, "%s", err.message);
    } else if (kernel_fork_no_checkpoint(k)) {
        *status = 404;
        snprintf(msg, len, "Checkpoint does not exist: %s", kernel_last_cause(k));
    } else if (kernel_fork_parent_gone(k) || !parent_runs(r->g, k)) {
        /* shut down, restarted or dead meanwhile (a fork lives in its parent's sandbox) */
        *status = 409;
        snprintf(msg, len, "kernel %s is not running: it ended before the fork",
                 kernel_forked_from(k));
    } else {
        *status = 500;
        snprintf(msg, len, "kernel %s failed to fork%s%s", kernel_forked_from(k),
                 kernel_last_cause(k)[0] ? ": " : "", kernel_last_cause(k));
    }
}

static void on_forked(struct gw_req *r, kernel_t *k, int status)
{
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) {
        char msg[400];
        int http;
        gfork_failed(r, k, rc, &http, msg, sizeof(msg));
        if (rc == -ESHUTDOWN)
            req_error_draining(r);
        else
            req_error(r, http, "%s", msg);
        kernel_shutdown(k, NULL);
        return;
    }
    snprintf(r->location, sizeof(r->location), "/api/kernels/%s", kernel_id(k));
    req_reply(r, 201, kernel_model(k));
}

static void
audit_fork(const struct gw_req *r, const char *parent, const char *cp, int rc, kernel_t *k)
{
    if (!audit_enabled())
        return;
    audit_event("kernel_fork", "s:s, s:s, s:s, s:o, s:o, s:s", "tenant", r->caller.tenant, "addr",
                r->caller.addr, "parent", parent, "checkpoint", cp ? json_string(cp) : json_null(),
                "kernel", k ? json_string(kernel_id(k)) : json_null(), "result",
                rc == 0            ? "ok"
                : rc == -ESHUTDOWN ? "draining"
                                   : strerror(-rc));
}

int gfork_start(
    struct gw_req *r, kernel_t *parent, const char *cp, kernel_t **ret_k, struct gfork_error *err)
{
    gw_t *g = r->g;
    kernel_t *k;
    err->status = 0;
    err->retry_after = 0;
    err->message[0] = 0;
    if (cp && !ckpt_exists(g, parent, cp)) {
        err->status = 404;
        snprintf(err->message, sizeof(err->message), "Checkpoint does not exist: %.64s", cp);
        return -ENOENT;
    }
    if (kernel_state(parent) != KERNEL_RUNNING) {
        err->status = 409;
        snprintf(err->message, sizeof(err->message),
                 "kernel %s is %s: only a running kernel can be forked", kernel_id(parent),
                 kernel_execution_state(parent));
        return -EBUSY;
    }
    int rc = kmgr_fork(g->km, parent, cp, &k);
    audit_fork(r, kernel_id(parent), cp, rc, rc == 0 ? k : NULL);
    if (rc == -EBUSY) {
        err->status = 409;
        snprintf(err->message, sizeof(err->message), "kernel %s is not running", kernel_id(parent));
    } else if (rc == -ETOOMANYREFS) {
        err->status = 409;
        snprintf(err->message, sizeof(err->message),
                 "kernel %s: at most %d forks live at once in one kernel's sandbox",
                 kernel_id(parent), KMGR_FORKS_MAX);
    } else if (rc < 0) {
        struct kops_error kerr;
        struct kops_context ctx = {.spec_name = kernel_spec_name(parent),
                                   .sandbox_why = kmgr_sandbox_error(g->km),
                                   .max_kernels = g->cfg.km.max_kernels};
        kops_error_make(KOPS_START, rc, &ctx, &kerr);
        err->status = kerr.status;
        err->retry_after = kerr.retry_after;
        snprintf(err->message, sizeof(err->message), "%s", kerr.message);
    }
    if (rc < 0)
        return rc;
    *ret_k = k;
    return 0;
}

void gfork_kernel(struct gw_req *r)
{
    gw_t *g = r->g;
    kernel_t *parent = gw_kernel(g, r->route.arg[0], r->caller.tenant), *k;
    if (!parent || kernel_state(parent) == KERNEL_TERMINATING)
        return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
    json_t *body = req_json_body(r);
    if (!body)
        return;
    json_t *jcp = json_object_get(body, "checkpoint");
    const char *cp = json_string_value(jcp);
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) if (strcmp(key, "checkpoint") != 0)
    {
        json_decref(body);
        return req_error(r, 400, "unknown field in a fork request (only \"checkpoint\")");
    }
    /* the gateway's checkpoint ids are UUIDs (gateway/ckpt.c) */
    if (jcp && !json_is_null(jcp) &&
        !(cp && ident_ok(cp, json_string_length(jcp), IDENT_UUIDISH))) {
        json_decref(body);
        return req_error(r, 400, "checkpoint must be a checkpoint id");
    }
    struct gfork_error err;
    int rc = gfork_start(r, parent, cp, &k, &err);
    json_decref(body);
    if (rc < 0)
        return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
    if (req_wait_kernel(r, k, on_forked) < 0)
        on_forked(r, k, 0);
}
