/* chconn: one /channel websocket (see chconn.h). Object references belong to their
 * connection and die with it (kernels stay). A call that has to wait (a timeout, a kernel
 * starting or restarting) is a pending call with an event-loop timer, never a blocking wait. */
#include "gateway/chconn.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/auth.h"
#include "gateway/chclient.h"

/* ---- replies ---- */

void chconn_send_text(chconn_t *c, char *text)
{
    if (!text) {
        wsconn_close(&c->wc, 1011, "out of memory", false);
        return;
    }
    wsq_push_text(&c->wc.out, text, strlen(text));
    free(text);
}

void chconn_reply_value(chconn_t *c, const char *rid, json_t *value)
{
    chconn_send_text(c, rpc_reply_value(rid, value ? value : json_null()));
}

void chconn_reply_ref(chconn_t *c, const char *rid, enum rpc_obj type, const char *id)
{
    chconn_send_text(c, rpc_reply_ref(rid, type, id));
}

void chconn_reply_error(chconn_t *c, const char *rid, enum rpc_err type, const char *fmt, ...)
{
    rpc_error_t e = {.type = type};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    chconn_send_text(c, rpc_reply_exception(rid, &e));
}

void chconn_violation(chconn_t *c, const char *rid, const rpc_error_t *e)
{
    c->violations++;
    c->g->stats.refused[GW_REFUSED_BAD_INPUT]++;
    log_warn("channel: %s: refused call: %s: %s (%d so far)", c->wc.who, rpc_err_name(e->type),
             e->message, c->violations);
    audit_event("rpc_refused", "s:s, s:s, s:s, s:o, s:i", "tenant", c->wc.tenant, "addr",
                c->addr, "error", rpc_err_name(e->type), "message",
                audit_str(e->message, strlen(e->message)), "count", c->violations);
    if (rid)
        chconn_send_text(c, rpc_reply_exception(rid, e));
    if (c->violations >= CH_MAX_VIOLATIONS)
        wsconn_close(&c->wc, 1008, "too many refused calls", true);
}

/* ---- pending calls ---- */

void chcall_free(chcall_t *call)
{
    chconn_t *c = call->c;
    evl_t *l = &c->g->loop.evl;
    list_remove(&call->link);
    c->ncalls--;
    kwait_cancel(&call->wait);
    evl_timer_destroy(l, &call->timer);
    evl_timer_destroy(l, &call->flush);
    free(call);
}

static void on_call_timeout(void *data)
{
    chcall_t *call = data;
    chconn_reply_error(call->c, call->rid, call->timeout_err, "%s", call->timeout_msg);
    chcall_free(call);
}

chcall_t *chcall_new(chconn_t *c, const char *rid, enum chcall_kind kind, double timeout_s,
                     enum rpc_err timeout_err, const char *timeout_msg)
{
    evl_t *l = &c->g->loop.evl;
    if (c->ncalls >= CH_MAX_PENDING) {
        chconn_reply_error(c, rid, RPC_ERR_RUNTIME,
                           "too many calls in progress on this connection (at most %d)",
                           CH_MAX_PENDING);
        return NULL;
    }
    chcall_t *call = calloc(1, sizeof(*call));
    if (!call || !(call->timer = l->timer_new(l, on_call_timeout, call))) {
        free(call);
        chconn_reply_error(c, rid, RPC_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    call->c = c;
    call->kind = kind;
    call->timeout_err = timeout_err;
    call->timeout_msg = timeout_msg;
    snprintf(call->rid, sizeof(call->rid), "%s", rid);
    if (timeout_s > 0)
        l->timer_arm(l, call->timer, (uint64_t)ceil(timeout_s * 1000.0));
    /* appended: waiters on one queue are served in call order */
    list_append(&c->calls, &call->link);
    c->ncalls++;
    return call;
}

/* ---- references ---- */

struct chref *chconn_ref_find(chconn_t *c, enum rpc_obj type, const char *id)
{
    for (size_t i = 0; i < c->nrefs; i++)
        if (c->refs[i].type == type && !strcmp(c->refs[i].id, id))
            return &c->refs[i];
    return NULL;
}

struct chref *chconn_ref_add(chconn_t *c, enum rpc_obj type, const char *id)
{
    struct chref *r = chconn_ref_find(c, type, id);
    if (r || c->nrefs == CH_MAX_REFS)
        return r;
    r = &c->refs[c->nrefs++];
    r->type = type;
    snprintf(r->id, sizeof(r->id), "%s", id);
    r->client = NULL;
    return r;
}

kernel_t *chconn_kernel(chconn_t *c, const char *id)
{
    return gw_kernel(c->g, id, c->wc.tenant);
}

/* ---- kernel callbacks (kernel -> the client running the execution) ---- */

static void cb_remove(chconn_t *c, size_t i)
{
    c->cbs[i] = c->cbs[--c->ncbs];
}

/* Answers the kernel's call (the kernel may be gone: then nothing happens). */
static void cb_finish(gw_t *g, const struct chcb *cb, json_t *value, const char *err_type,
                      const char *err_message)
{
    kernel_t *k = kmgr_find(g->km, cb->kernel_id);
    if (k)
        kernel_call_reply(k, cb->call_id, value, err_type, err_message);
    else
        json_decref(value);
}

void chconn_callback(chconn_t *c, kernel_t *k, uint64_t call_id, const char *client_ref,
                     const char *name, json_t *args, json_t *kwargs)
{
    if (c->ncbs == CH_MAX_CALLBACKS) { /* the oldest unanswered one gives way */
        cb_finish(c->g, &c->cbs[0], NULL, "RuntimeError",
                  "the client did not answer before newer callbacks came");
        cb_remove(c, 0);
    }
    struct chcb *cb = &c->cbs[c->ncbs];
    util_uuid(cb->rid);
    snprintf(cb->kernel_id, sizeof(cb->kernel_id), "%s", kernel_id(k));
    cb->call_id = call_id;
    json_t *msg = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:O, s:O}", "message_type",
                            "call_request", "request_id", cb->rid, "object_reference", "type",
                            "client", "id", client_ref, "method", name, "args", args, "kwargs",
                            kwargs);
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!text) {
        kernel_call_reply(k, call_id, NULL, "RuntimeError", "out of memory");
        return;
    }
    c->ncbs++;
    log_debug("channel: kernel=%s: callback %s to %s", kernel_id(k), name, c->wc.who);
    chconn_send_text(c, text);
}

/* A client answers a callback the gateway sent it. */
static void callback_answer(chconn_t *c, const rpc_call_t *rc)
{
    size_t i;
    for (i = 0; i < c->ncbs; i++)
        if (!strcmp(c->cbs[i].rid, rc->request_id))
            break;
    if (i == c->ncbs) {
        rpc_error_t e;
        char q[RPC_QUOTE_MAX];
        rpc_error_set(&e, RPC_ERR_KEY, "no callback is waiting for an answer with request_id %s",
                      rpc_quote(q, rc->request_id, strlen(rc->request_id)));
        return chconn_violation(c, NULL, &e);
    }
    struct chcb cb = c->cbs[i];
    cb_remove(c, i);
    if (rc->kind == RPC_CALL_RETURN_VALUE)
        cb_finish(c->g, &cb, json_incref(rc->value), NULL, NULL);
    else
        cb_finish(c->g, &cb, NULL, rpc_err_name(rc->err.type), rc->err.message);
}

/* The connection is closing: its callbacks fail in their kernels. */
static void callbacks_drop(chconn_t *c)
{
    while (c->ncbs > 0) {
        cb_finish(c->g, &c->cbs[c->ncbs - 1], NULL, "RuntimeError",
                  "the client disconnected before answering");
        c->ncbs--;
    }
}

/* ---- the websocket ---- */

static void on_message(wsconn_t *w)
{
    chconn_t *c = container_of(w, chconn_t, wc);
    rpc_call_t rc;
    int r = rpc_parse((const char *)w->in.data, w->in.len, &rc);
    if (r < 0) {
        rpc_error_t e;
        rpc_error_set(&e, RPC_ERR_VALUE, "%s",
                      r == -EMSGSIZE ? "message too large"
                      : r == -ENOENT ? "unknown message_type"
                                     : "malformed message (not a call_request JSON object)");
        return chconn_violation(c, NULL, &e);
    }
    c->g->last_activity_us = util_wall_us();
    switch (rc.kind) {
    case RPC_CALL_REQUEST:
        if (rc.err.type != RPC_ERR_NONE)
            chconn_violation(c, rc.request_id, &rc.err);
        else
            c->h->dispatch(c, &rc);
        break;
    case RPC_REGISTER_ACTIVITY_REQUEST: {
        kernel_t *k = rc.kernel_id[0] ? chconn_kernel(c, rc.kernel_id) : NULL;
        if (k)
            kernel_touch(k);
        break;
    }
    case RPC_CALL_RETURN_VALUE:
    case RPC_CALL_EXCEPTION:
        callback_answer(c, &rc);
        break;
    }
    rpc_call_fini(&rc);
}

static void on_closed(wsconn_t *w)
{
    chconn_t *c = container_of(w, chconn_t, wc);
    list_remove(&c->link);
    callbacks_drop(c);
    while (!list_empty(&c->calls))
        chcall_free(list_first(&c->calls, chcall_t, link));
    while (c->clients) {
        chclient_t *cl = c->clients;
        c->clients = cl->next;
        if (cl->k)
            kernel_connections(cl->k, -1);
        c->h->client_free(cl);
    }
    log_info("channel: %s closed", c->wc.who);
    wsconn_fini(&c->wc);
    free(c);
}

static const struct wsconn_ops chconn_ops = {
    .name = "channel", .message = on_message, .closed = on_closed};

int chconn_open(gw_t *g, struct lws *wsi, struct gw_pss *pss, const struct chconn_handlers *h)
{
    const char *tenant = auth_tenant(g, wsi);
    if (!tenant)
        return -1;
    chconn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return -1;
    c->g = g;
    c->h = h;
    wsconn_init(&c->wc, g, wsi, GW_FACE_CHANNEL, &chconn_ops, tenant, RPC_MAX_MESSAGE_BYTES);
    list_init(&c->calls);
    auth_peer(g, wsi, c->addr);
    snprintf(c->wc.who, sizeof(c->wc.who), "connection from %s", c->addr);
    list_prepend(&g->ch_conns, &c->link);
    pss->wc = &c->wc;
    log_info("channel: %s opened", c->wc.who);
    return 0;
}

void chconn_close_all(gw_t *g, int code, const char *reason)
{
    chconn_t *c;
    list_for_each(c, &g->ch_conns, link)
    {
        wsconn_close(&c->wc, code, reason, true);
    }
}
