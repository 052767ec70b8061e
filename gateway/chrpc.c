/* chrpc: the /channel method table and its handlers (see chrpc.h). protocol/rpc.c parses and
 * binds every call against its allowlist; this file only indexes by the bound method. Nothing
 * here looks a name up anywhere else. */
#include "gateway/chrpc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "gateway/chclient.h"
#include "gateway/kops.h"

/* ---- the kernel managers ---- */

/* A kernel's transition in progress ended (or there was none). */
static void on_kernel_done(void *data, kernel_t *k, int status)
{
    chcall_t *call = data;
    chconn_t *c = call->c;
    struct kerr err;
    int rc = kops_waited(c->g, k, status);
    call->wait = NULL;
    if (rc < 0 && !call->ignore_fail) {
        kops_waited_error(c->g, k, call->reply_id ? KERR_START : KERR_RESTART, rc, &err);
        chconn_reply_error(c, call->rid, err.exc, "%s", err.message);
    } else if (call->reply_id) {
        chconn_reply_value(c, call->rid, json_string(call->kernel_id));
    } else {
        chconn_reply_value(c, call->rid, json_null());
    }
    chcall_free(call);
}

/* Answers when the kernel's transition in progress ends (or at once if there is none). */
static void await_kernel(const struct chrpc_call *x, kernel_t *k, bool reply_id, bool ignore_fail)
{
    chcall_t *call = chcall_new(x->c, x->rc->request_id, CHCALL_KERNEL, 0, RPC_ERR_TIMEOUT,
                                "the kernel did not finish in time");
    if (!call)
        return;
    call->reply_id = reply_id;
    call->ignore_fail = ignore_fail;
    snprintf(call->kernel_id, sizeof(call->kernel_id), "%s", kernel_id(k));
    if (kernel_wait(k, on_kernel_done, call, &call->wait) < 0)
        on_kernel_done(call, k, 0);
}

static void reply_kops(const struct chrpc_call *x, const struct kerr *err)
{
    chconn_reply_error(x->c, x->rc->request_id, err->exc, "%s", err->message);
}

static void list_kernel_ids(const struct chrpc_call *x)
{
    chconn_t *c = x->c;
    json_t *ids = json_array();
    for (size_t i = 0; i < kmgr_count(c->g->km); i++) {
        kernel_t *ki = kmgr_at(c->g->km, i);
        if (chconn_kernel(c, kernel_id(ki)))
            json_array_append_new(ids, json_string(kernel_id(ki)));
    }
    chconn_reply_value(c, x->rc->request_id, ids);
}

static void start_kernel(const struct chrpc_call *x)
{
    chconn_t *c = x->c;
    const rpc_val_t *name = rpc_args_get(x->a, "kernel_name");
    const rpc_val_t *env = rpc_args_get(x->a, "env");
    const rpc_val_t *ws = rpc_args_get(x->a, "workspace");
    const rpc_val_t *lims = rpc_args_get(x->a, "limits");
    /* the start request REST takes, from the checked arguments */
    json_t *req = json_object();
    if (req && name->type == RPC_T_STR)
        json_object_set_new(req, "name", json_string(name->s));
    if (req && env->type == RPC_T_DICT)
        json_object_set(req, "env", env->d);
    if (req && ws->type == RPC_T_STR)
        json_object_set_new(req, "workspace", json_string(ws->s));
    if (req && lims->type == RPC_T_DICT)
        json_object_set(req, "limits", lims->d);
    if (!req)
        return chconn_reply_error(c, x->rc->request_id, RPC_ERR_RUNTIME, "out of memory");
    struct gw_caller who;
    snprintf(who.tenant, sizeof(who.tenant), "%s", c->wc.tenant);
    snprintf(who.addr, sizeof(who.addr), "%s", c->addr);
    struct kerr err;
    kernel_t *k;
    int r = kops_start(c->g, &who, req, &k, &err);
    json_decref(req);
    if (r < 0)
        return reply_kops(x, &err);
    kernel_touch(k);
    await_kernel(x, k, true, false);
}

static void get_kernel(const struct chrpc_call *x)
{
    if (!chconn_ref_add(x->c, RPC_OBJ_KERNEL_MANAGER, kernel_id(x->k)))
        return chconn_reply_error(x->c, x->rc->request_id, RPC_ERR_RUNTIME,
                                  "too many object references on this connection (at most %d)",
                                  CH_MAX_REFS);
    chconn_reply_ref(x->c, x->rc->request_id, RPC_OBJ_KERNEL_MANAGER, kernel_id(x->k));
}

static void interrupt_kernel(const struct chrpc_call *x)
{
    struct kerr err;
    if (kops_interrupt(x->c->g, x->k, &err) < 0)
        return reply_kops(x, &err);
    chconn_reply_value(x->c, x->rc->request_id, json_null());
}

/* restart_kernel; and shutdown_kernel(restart=True), answered None however it ends */
static void restart(const struct chrpc_call *x, bool ignore_fail)
{
    struct kerr err;
    if (kops_restart(x->c->g, x->k, &err) < 0)
        return reply_kops(x, &err);
    await_kernel(x, x->k, false, ignore_fail);
}

static void restart_kernel(const struct chrpc_call *x)
{
    restart(x, false);
}

static void shutdown_kernel(const struct chrpc_call *x)
{
    const rpc_val_t *again = rpc_args_get(x->a, "restart");
    struct kerr err;
    if (again && again->b)
        return restart(x, true);
    if (kops_shutdown(x->c->g, x->k, &err) < 0)
        return reply_kops(x, &err);
    await_kernel(x, x->k, false, true);
}

static void is_alive(const struct chrpc_call *x)
{
    chconn_reply_value(x->c, x->rc->request_id, json_boolean(chconn_kernel_usable(x->k)));
}

static void client(const struct chrpc_call *x)
{
    chclient_t *cl = chclient_new(x->c, x->rc->request_id, x->k);
    if (cl)
        chconn_reply_ref(x->c, x->rc->request_id, RPC_OBJ_CLIENT, cl->ref);
}

/* ---- the kernel clients ---- */

static void start_channels(const struct chrpc_call *x)
{
    chclient_start(x->cl);
    chconn_reply_value(x->c, x->rc->request_id, json_null());
}

static void stop_channels(const struct chrpc_call *x)
{
    chclient_stop(x->cl);
    chconn_reply_value(x->c, x->rc->request_id, json_null());
}

static void get_msg(const struct chrpc_call *x)
{
    const rpc_val_t *t = rpc_args_get(x->a, "timeout");
    chclient_get_msg(x->cl, x->rc->request_id, x->row->chan, t->type == RPC_T_NUM ? t->n : -1);
}

static void wait_for_ready(const struct chrpc_call *x)
{
    chclient_wait_ready(x->cl, x->rc->request_id, rpc_args_get(x->a, "timeout")->n);
}

static json_t *arg_json(const rpc_val_t *v)
{
    switch (v->type) {
    case RPC_T_NULL:
        return json_null();
    case RPC_T_STR:
        return json_stringn(v->s, v->len);
    case RPC_T_INT:
        return json_integer(v->i);
    case RPC_T_NUM:
        return json_real(v->n);
    case RPC_T_BOOL:
        return json_boolean(v->b);
    case RPC_T_DICT:
        return json_deep_copy(v->d);
    default:
        return NULL;
    }
}

/* Sends the row's request, its content the arguments named as in the messaging spec; 0 and
 * the msg_id in id, or the call is answered. */
static int send_request(const struct chrpc_call *x, char id[37])
{
    json_t *content = json_object();
    for (size_t i = 0; content && x->a->spec->params[i].name; i++) {
        const char *name = x->a->spec->params[i].name;
        if (x->a->v[i].type == RPC_T_NONE)
            continue;
        if (!strcmp(name, "string")) /* input(string) is an input_reply's "value" */
            name = "value";
        json_object_set_new(content, name, arg_json(&x->a->v[i]));
    }
    if (content && x->row->content)
        x->row->content(content);
    int r = content ? chclient_request(x->cl, x->row->chan, x->row->msg_type, content, id)
                    : -ENOMEM;
    json_decref(content);
    if (r == -EAGAIN)
        chconn_reply_error(x->c, x->rc->request_id, RPC_ERR_RUNTIME,
                           "the kernel is not accepting messages");
    else if (r < 0)
        chconn_reply_error(x->c, x->rc->request_id, RPC_ERR_RUNTIME, "cannot send: %s",
                           strerror(-r));
    return r;
}

/* complete, inspect, history, kernel_info, is_complete, comm_info: answer the msg_id */
static void request(const struct chrpc_call *x)
{
    char id[37];
    if (send_request(x, id) == 0)
        chconn_reply_value(x->c, x->rc->request_id, json_string(id));
}

static void execute(const struct chrpc_call *x)
{
    char id[37];
    struct kerr err;
    if (kops_executable(x->c->g, x->k, &err) < 0) /* paused: refused, not queued */
        return reply_kops(x, &err);
    if (send_request(x, id) < 0)
        return;
    chclient_note_exec(x->cl, id);
    chconn_reply_value(x->c, x->rc->request_id, json_string(id));
}

static void input(const struct chrpc_call *x)
{
    char id[37];
    if (send_request(x, id) == 0)
        chconn_reply_value(x->c, x->rc->request_id, json_null());
}

static void execute_content(json_t *content)
{
    if (json_is_null(json_object_get(content, "user_expressions")))
        json_object_set_new(content, "user_expressions", json_object());
    if (json_is_null(json_object_get(content, "allow_stdin")))
        json_object_set_new(content, "allow_stdin", json_false());
}

static void cursor_content(json_t *content) /* None: the end of the code */
{
    if (json_is_null(json_object_get(content, "cursor_pos")))
        json_object_set_new(
            content, "cursor_pos",
            json_integer((json_int_t)json_string_length(json_object_get(content, "code"))));
}

static void comm_info_content(json_t *content)
{
    if (json_is_null(json_object_get(content, "target_name")))
        json_object_del(content, "target_name");
}

/* ---- the table ---- */

/* clang-format off */
#define MKM  RPC_OBJ_MULTI_KERNEL_MANAGER
#define KM   RPC_OBJ_KERNEL_MANAGER
#define KC   RPC_OBJ_CLIENT
#define ARG  CHRPC_KERNEL_ARG
#define LIVE CHRPC_LIVE
#define ROW(m, o, f, fl)        [m] = {.method = m, .obj = o, .fn = f, .flags = fl}
#define GET(m, ch)              [m] = {.method = m, .obj = KC, .fn = get_msg, .chan = ch}
#define REQ(m, f, type, ch, fx) [m] = {.method = m, .obj = KC, .fn = f, .flags = LIVE, \
                                       .msg_type = type, .chan = ch, .content = fx}

static const struct chrpc_row rows[RPC_METHOD_N] = {
    ROW(RPC_MKM_GET_KERNEL,       MKM, get_kernel,       ARG),
    ROW(RPC_MKM_INTERRUPT_KERNEL, MKM, interrupt_kernel, ARG),
    ROW(RPC_MKM_LIST_KERNEL_IDS,  MKM, list_kernel_ids,  0),
    ROW(RPC_MKM_RESTART_KERNEL,   MKM, restart_kernel,   ARG),
    ROW(RPC_MKM_SHUTDOWN_KERNEL,  MKM, shutdown_kernel,  ARG),
    ROW(RPC_MKM_START_KERNEL,     MKM, start_kernel,     0),
    ROW(RPC_KM_CLIENT,            KM,  client,           LIVE),
    ROW(RPC_KM_INTERRUPT_KERNEL,  KM,  interrupt_kernel, LIVE),
    ROW(RPC_KM_IS_ALIVE,          KM,  is_alive,         0),
    ROW(RPC_KM_RESTART_KERNEL,    KM,  restart_kernel,   LIVE),
    ROW(RPC_KM_SHUTDOWN_KERNEL,   KM,  shutdown_kernel,  LIVE),
    REQ(RPC_KC_COMM_INFO,   request, "comm_info_request",   JCHAN_SHELL, comm_info_content),
    REQ(RPC_KC_COMPLETE,    request, "complete_request",    JCHAN_SHELL, cursor_content),
    REQ(RPC_KC_EXECUTE,     execute, "execute_request",     JCHAN_SHELL, execute_content),
    GET(RPC_KC_GET_IOPUB_MSG, JCHAN_IOPUB),
    GET(RPC_KC_GET_SHELL_MSG, JCHAN_SHELL),
    GET(RPC_KC_GET_STDIN_MSG, JCHAN_STDIN),
    REQ(RPC_KC_HISTORY,     request, "history_request",     JCHAN_SHELL, NULL),
    REQ(RPC_KC_INPUT,       input,   "input_reply",         JCHAN_STDIN, NULL),
    REQ(RPC_KC_INSPECT,     request, "inspect_request",     JCHAN_SHELL, cursor_content),
    REQ(RPC_KC_IS_COMPLETE, request, "is_complete_request", JCHAN_SHELL, NULL),
    REQ(RPC_KC_KERNEL_INFO, request, "kernel_info_request", JCHAN_SHELL, NULL),
    ROW(RPC_KC_START_CHANNELS,    KC,  start_channels,   0),
    ROW(RPC_KC_STOP_CHANNELS,     KC,  stop_channels,    0),
    ROW(RPC_KC_WAIT_FOR_READY,    KC,  wait_for_ready,   LIVE),
};
/* clang-format on */

const struct chrpc_row *chrpc_rows(size_t *ret_n)
{
    *ret_n = UTIL_ARRAY_SIZE(rows);
    return rows;
}

/* ---- dispatch ---- */

/* The call's object, into x; false when the call has been refused or answered. */
static bool bind_object(struct chrpc_call *x)
{
    const rpc_call_t *rc = x->rc;
    rpc_error_t e;
    char q[RPC_QUOTE_MAX];
    if (rc->obj != RPC_OBJ_MULTI_KERNEL_MANAGER) {
        struct chref *ref = chconn_ref_find(x->c, rc->obj, rc->ref_id);
        if (!ref) {
            rpc_error_set(&e, RPC_ERR_KEY, "no %s object %s on this connection",
                          rpc_obj_name(rc->obj), rpc_quote(q, rc->ref_id, strlen(rc->ref_id)));
            chconn_violation(x->c, rc->request_id, &e);
            return false;
        }
        x->cl = ref->client;
        x->k = x->cl ? x->cl->k : chconn_kernel(x->c, ref->id);
    }
    log_debug("channel: %s: %s.%s", x->c->wc.who, rpc_obj_name(rc->obj), x->a->spec->name);
    if (x->row->flags & CHRPC_KERNEL_ARG) {
        const rpc_val_t *id = rpc_args_get(x->a, "kernel_id");
        if (!(x->k = chconn_kernel(x->c, id->s))) {
            chconn_reply_error(x->c, rc->request_id, RPC_ERR_KEY, "%s",
                               rpc_quote(q, id->s, id->len));
            return false;
        }
    }
    if ((x->row->flags & CHRPC_LIVE) &&
        (!chconn_kernel_usable(x->k) || (x->cl && !x->cl->kc))) {
        chconn_reply_error(x->c, rc->request_id, RPC_ERR_RUNTIME, "the kernel has been shut down");
        return false;
    }
    return true;
}

void chrpc_dispatch(chconn_t *c, const rpc_call_t *rc)
{
    rpc_args_t a;
    rpc_error_t e;
    if (rpc_bind(rc, &a, &e) < 0)
        return chconn_violation(c, rc->request_id, &e);
    struct chrpc_call x = {.c = c, .rc = rc, .a = &a, .row = &rows[a.method]};
    if (bind_object(&x))
        x.row->fn(&x);
}
