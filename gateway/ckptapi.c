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

/* An operation's end: the error, or status with the record (201: at its Location). */
static void answer(struct gw_req *r, const struct kerr *err, int status, json_t *rec)
{
    r->face = NULL; /* the operation, ended */
    if (err)
        return req_error_retry(r, err->status, err->retry_after, "%s", err->message);
    if (status == 201)
        snprintf(r->location, sizeof(r->location), "/api/kernels/%s/checkpoints/%s",
                 r->route.arg[0], json_string_value(json_object_get(rec, "id")));
    req_reply(r, status, rec ? json_incref(rec) : NULL);
}

static void taken(void *data, const struct kerr *err, json_t *rec)
{
    answer(data, err, 201, rec);
}

static void rolled_back(void *data, const struct kerr *err, json_t *rec)
{
    answer(data, err, 200, rec);
}

static void dropped(void *data, const struct kerr *err, json_t *rec)
{
    answer(data, err, 204, NULL);
}

/* An operation asked for (op, or NULL: refused for err): the request waits for it (its face),
 * or is answered now. */
static void started(struct gw_req *r, ckpt_op_t *op, const struct kerr *err)
{
    if (!op)
        return answer(r, err, 0, NULL);
    r->face = op;
}

void ckptapi_list(struct gw_req *r)
{
    struct kerr err;
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
    const struct ckpt_asker a = {.who = &r->caller, .done = taken, .data = r};
    started(r, ckpt_take(r->g, k, &a, with_files, &err), &err);
}

void ckptapi_one(struct gw_req *r)
{
    struct kerr err;
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
    const struct ckpt_asker a = {.who = &r->caller, .done = dropped, .data = r};
    started(r, ckpt_drop(r->g, k, &a, r->route.arg[1], &err), &err);
}

void ckptapi_rollback(struct gw_req *r)
{
    struct kerr err;
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
    const struct ckpt_asker a = {.who = &r->caller, .done = rolled_back, .data = r};
    ckpt_op_t *op = ckpt_rollback(r->g, k, &a, json_string_value(cp), &err);
    json_decref(body);
    started(r, op, &err);
}

void ckptapi_req_fini(struct gw_req *r)
{
    ckpt_op_t *op = r->face;
    r->face = NULL;
    ckpt_op_cancel(&op);
}
