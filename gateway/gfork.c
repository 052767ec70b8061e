/* POST /api/kernels/{id}/fork {"checkpoint"?: id}: the caller's kernel (404 for another
 * tenant's, as every kernel route) is forked into a new kernel of the same tenant (kops_fork),
 * answered as POST /api/kernels answers (201, the kernel's model, Location) once the fork
 * answers kernel_info. */
#include "gateway/gfork.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/ident.h"
#include "common/log.h"
#include "gateway/drain.h"
#include "gateway/gw.h"
#include "gateway/http.h"
#include "gateway/kops.h"
#include "kernelmgr/kmgr.h"

static void on_forked(struct gw_req *r, kernel_t *k, int status)
{
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) {
        struct kerr err;
        kops_fork_failed(r->g, k, rc, &err);
        if (rc == -ESHUTDOWN)
            req_error_draining(r);
        else
            req_error(r, err.status, "%s", err.message);
        kernel_shutdown(k, NULL);
        return;
    }
    snprintf(r->location, sizeof(r->location), "/api/kernels/%s", kernel_id(k));
    req_reply(r, 201, kernel_model(k));
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
    struct kerr err;
    int rc = kops_fork(g, &r->caller, parent, cp, &k, &err);
    json_decref(body);
    if (rc < 0)
        return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
    if (req_wait_kernel(r, k, on_forked) < 0)
        on_forked(r, k, 0);
}
