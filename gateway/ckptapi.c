/* The checkpoint routes (ckptapi.h) on the operations of ckpt.c: the REST answer of each
 * operation's end, and the records as ckpt.c models them. */
#include "gateway/ckptapi.h"

#include <stdio.h>

#include "common/ident.h"
#include "gateway/ckpt.h"

/* The request's kernel ({id}), the caller's and not shutting down; NULL after a 404. */
static kernel_t *req_kernel(struct gw_req *r)
{
    kernel_t *k = gw_kernel(r->g, r->route.arg[0], r->caller.tenant);
    if (!k || kernel_state(k) == KERNEL_TERMINATING) {
        req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
        return NULL;
    }
    return k;
}

static void rest_done(void *data, int status, int http, const char *message, json_t *rec)
{
    struct gw_req *r = data;
    r->face = NULL; /* the operation, ended */
    if (status < 0)
        return req_error(r, http, "%s", message);
    if (http == 201)
        snprintf(r->location, sizeof(r->location), "/api/kernels/%s/checkpoints/%s",
                 r->route.arg[0], json_string_value(json_object_get(rec, "id")));
    req_reply(r, http, rec ? json_incref(rec) : NULL);
}

/* An operation asked for: the request waits for it (its face), or is refused now. */
static void started(struct gw_req *r, int rc, ckpt_op_t *op, int http, const char *msg)
{
    if (rc < 0)
        return req_error(r, http, "%s", msg);
    r->face = op;
}

void ckptapi_list(struct gw_req *r)
{
    char msg[400];
    int http;
    kernel_t *k = req_kernel(r);
    if (!k)
        return;
    if (r->method == HTTP_M_GET)
        return req_reply(r, 200, ckpt_list(r->g, k));
    json_t *body = req_json_body(r);
    if (!body)
        return;
    json_t *files = json_object_get(body, "files");
    if (files && !json_is_boolean(files)) {
        json_decref(body);
        return req_error(r, 400, "\"files\" must be true or false");
    }
    bool with_files = !files || json_is_true(files);
    json_decref(body);
    ckpt_op_t *op = NULL;
    int rc = ckpt_take(r->g, k, &r->caller, with_files, rest_done, r, &op, &http, msg, sizeof(msg));
    started(r, rc, op, http, msg);
}

void ckptapi_one(struct gw_req *r)
{
    char msg[400];
    int http;
    kernel_t *k = req_kernel(r);
    if (!k)
        return;
    if (r->method == HTTP_M_GET) {
        json_t *rec = ckpt_model(r->g, k, r->route.arg[1]);
        if (!rec)
            return req_error(r, 404, "no checkpoint %s on kernel %s", r->route.arg[1],
                             kernel_id(k));
        return req_reply(r, 200, rec);
    }
    ckpt_op_t *op = NULL;
    int rc = ckpt_drop(r->g, k, &r->caller, r->route.arg[1], rest_done, r, &op, &http, msg,
                       sizeof(msg));
    started(r, rc, op, http, msg);
}

void ckptapi_rollback(struct gw_req *r)
{
    char msg[400];
    int http;
    kernel_t *k = req_kernel(r);
    if (!k)
        return;
    json_t *body = req_json_body(r);
    if (!body)
        return;
    json_t *cp = json_object_get(body, "checkpoint");
    if (!json_is_string(cp) ||
        !ident_ok(json_string_value(cp), json_string_length(cp), IDENT_UUIDISH)) {
        json_decref(body);
        return req_error(r, 400, "\"checkpoint\" must be a checkpoint id");
    }
    ckpt_op_t *op = NULL;
    int rc = ckpt_rollback(r->g, k, &r->caller, json_string_value(cp), NULL, rest_done, r, &op,
                           &http, msg, sizeof(msg));
    json_decref(body);
    started(r, rc, op, http, msg);
}

void ckptapi_req_fini(struct gw_req *r)
{
    ckpt_op_t *op = r->face;
    r->face = NULL;
    ckpt_op_cancel(&op);
}
