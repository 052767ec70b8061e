/* channel: the /channel websocket RPC (docs/rpc.md). A client calls allowlisted methods on
 * jupyter_client-like objects: the multi kernel manager, kernel managers and kernel clients.
 * protocol/rpc.c parses and binds every call against its static table; this file only switches
 * on the bound method's enum. Nothing here looks a name up anywhere else.
 *
 * Object references belong to their connection and die with it (kernels stay). A kernel
 * client has its own ZeroMQ session (shell/stdin DEALERs with its identity) and three queues
 * (iopub, shell, stdin) that get_*_msg calls read; a call that has to wait (a timeout, a kernel
 * starting or restarting) is a pending call with an event-loop timer, never a blocking wait. */
#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/gw.h"
#include "gateway/kops.h"
#include "gateway/route.h"
#include "gateway/wsconn.h"
#include "gateway/wsq.h"
#include "kernelmgr/kconn.h"
#include "protocol/rpc.h"

#define CH_MAX_REFS       64   /* object references per connection */
#define CH_MAX_PENDING    64   /* calls waiting at once per connection */
#define CH_MAX_VIOLATIONS 10   /* calls refused by the allowlist before the connection is closed */
#define CH_QUEUE_MAX      10000 /* unread messages per client channel */
#define CH_EXEC_IDS       16   /* recent execute_request ids per client (callback routing) */
#define CH_FLUSH_MS       200  /* wait_for_ready: iopub quiet time after kernel_info_reply */
#define CH_MAX_CALLBACKS  16   /* kernel callbacks awaiting this connection's answer */

enum { Q_IOPUB = 0, Q_SHELL, Q_STDIN, Q_N };

typedef struct chconn chconn_t;
typedef struct chclient chclient_t;
typedef struct chcall chcall_t;

/* unread messages of one client channel: a ring of message dicts */
struct chq {
    json_t **v;
    size_t head, len, cap;
};

struct chclient {
    chconn_t *c;
    char ref[40];          /* its object reference id */
    char kernel_id[40];
    kernel_t *k;           /* NULL once the kernel is gone */
    kconn_t *kc;
    char session[40];
    bool started;          /* start_channels: iopub is collected */
    struct chq q[Q_N];
    char exec_ids[CH_EXEC_IDS][JMSG_MSG_ID_MAX]; /* its recent executions */
    unsigned nexec;
    chclient_t *next;
    struct list klink; /* on its kernel's list (kernel_data), while k */
};

struct chref {
    enum rpc_obj type;
    char id[40];
    chclient_t *client; /* RPC_OBJ_CLIENT */
};

/* a call that has not been answered yet */
struct chcall {
    chconn_t *c;
    char rid[RPC_REQUEST_ID_MAX + 1];
    enum rpc_method method;
    chclient_t *cl;        /* get_*_msg and wait_for_ready */
    int q;                 /* get_*_msg: the queue */
    char kernel_id[40];
    kwait_t *wait;
    evl_timer_t *timer;    /* the call's timeout */
    evl_timer_t *flush;    /* wait_for_ready: iopub quiet time */
    char info_id[40];      /* wait_for_ready: its kernel_info_request */
    int stage;             /* wait_for_ready: 0 kernel starting, 1 asked, 2 flushing */
    bool idle_seen;        /* wait_for_ready: its iopub idle came before its reply */
    struct list link;      /* on c->calls */
};

/* a kernel's callback waiting for this connection's answer */
struct chcb {
    char rid[40];
    char kernel_id[40];
    uint64_t call_id;
};

struct chconn {
    wsconn_t wc; /* g, wsi, out, in, tenant, who */
    gw_t *g;
    int violations;
    char addr[RL_ADDR_MAX];
    struct chref refs[CH_MAX_REFS];
    size_t nrefs;
    chclient_t *clients;
    struct list calls; /* chcall_t.link, in call order */
    size_t ncalls;
    struct chcb cbs[CH_MAX_CALLBACKS];
    size_t ncbs;
    struct list link; /* on gw_t.ch_conns */
};


/* ---- replies ---- */

static void send_text(chconn_t *c, char *text)
{
    if (!text) {
        wsq_close(&c->wc.out, 1011, "out of memory", false);
        return;
    }
    wsq_push_text(&c->wc.out, text, strlen(text));
    free(text);
}

static void reply_value(chconn_t *c, const char *rid, json_t *value)
{
    send_text(c, rpc_reply_value(rid, value ? value : json_null()));
}

static void reply_ref(chconn_t *c, const char *rid, enum rpc_obj type, const char *id)
{
    send_text(c, rpc_reply_ref(rid, type, id));
}

static void reply_error(chconn_t *c, const char *rid, enum rpc_err type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_error(chconn_t *c, const char *rid, enum rpc_err type, const char *fmt, ...)
{
    rpc_error_t e = {.type = type};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    send_text(c, rpc_reply_exception(rid, &e));
}

/* A call the allowlist or the reference table refused: answered, logged and counted. */
static void violation(chconn_t *c, const char *rid, const rpc_error_t *e)
{
    c->violations++;
    c->g->stats.refused[GW_REFUSED_BAD_INPUT]++;
    log_warn("channel: %s: refused call: %s: %s (%d so far)", c->wc.who, rpc_err_name(e->type),
             e->message, c->violations);
    audit_event("rpc_refused", "s:s, s:s, s:s, s:o, s:i", "tenant", c->wc.tenant, "addr", c->addr,
                "error", rpc_err_name(e->type), "message", audit_str(e->message, strlen(e->message)),
                "count", c->violations);
    if (rid)
        send_text(c, rpc_reply_exception(rid, e));
    if (c->violations >= CH_MAX_VIOLATIONS)
        wsq_close(&c->wc.out, 1008, "too many refused calls", true);
}

/* ---- client message queues ---- */

static void q_clear(struct chq *q)
{
    while (q->len > 0) {
        json_decref(q->v[q->head]);
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
}

static int q_push(struct chq *q, json_t *m)
{
    if (q->len >= CH_QUEUE_MAX)
        return -ENOBUFS;
    if (q->len == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 32;
        json_t **v = malloc(cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < q->len; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v;
        q->head = 0;
        q->cap = cap;
    }
    q->v[(q->head + q->len) % q->cap] = json_incref(m);
    q->len++;
    return 0;
}

static json_t *q_pop(struct chq *q)
{
    if (q->len == 0)
        return NULL;
    json_t *m = q->v[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return m;
}

/* ---- pending calls ---- */

static void call_free(chcall_t *call)
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

static void on_call_timeout(void *data);

static chcall_t *call_new(chconn_t *c, const rpc_call_t *rc, enum rpc_method method,
                          double timeout_s)
{
    evl_t *l = &c->g->loop.evl;
    if (c->ncalls >= CH_MAX_PENDING) {
        reply_error(c, rc->request_id, RPC_ERR_RUNTIME,
                    "too many calls in progress on this connection (at most %d)", CH_MAX_PENDING);
        return NULL;
    }
    chcall_t *call = calloc(1, sizeof(*call));
    if (!call || !(call->timer = l->timer_new(l, on_call_timeout, call))) {
        free(call);
        reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    call->c = c;
    call->method = method;
    snprintf(call->rid, sizeof(call->rid), "%s", rc->request_id);
    if (timeout_s > 0)
        l->timer_arm(l, call->timer, (uint64_t)ceil(timeout_s * 1000.0));
    /* appended: waiters on one queue are served in call order */
    list_append(&c->calls, &call->link);
    c->ncalls++;
    return call;
}

static void on_call_timeout(void *data)
{
    chcall_t *call = data;
    chconn_t *c = call->c;
    switch (call->method) {
    case RPC_KC_GET_IOPUB_MSG:
    case RPC_KC_GET_SHELL_MSG:
    case RPC_KC_GET_STDIN_MSG:
        reply_error(c, call->rid, RPC_ERR_EMPTY, "%s", "");
        break;
    case RPC_KC_WAIT_FOR_READY:
        reply_error(c, call->rid, RPC_ERR_RUNTIME, "Kernel didn't respond in time");
        break;
    default:
        reply_error(c, call->rid, RPC_ERR_TIMEOUT, "the kernel did not finish in time");
        break;
    }
    call_free(call);
}

/* ---- references ---- */

static struct chref *ref_find(chconn_t *c, enum rpc_obj type, const char *id)
{
    for (size_t i = 0; i < c->nrefs; i++)
        if (c->refs[i].type == type && !strcmp(c->refs[i].id, id))
            return &c->refs[i];
    return NULL;
}

static struct chref *ref_add(chconn_t *c, enum rpc_obj type, const char *id)
{
    struct chref *r = ref_find(c, type, id);
    if (r || c->nrefs == CH_MAX_REFS)
        return r;
    r = &c->refs[c->nrefs++];
    r->type = type;
    snprintf(r->id, sizeof(r->id), "%s", id);
    r->client = NULL;
    return r;
}

/* A kernel of the caller's tenant, by id; NULL for a missing one and another tenant's alike. */
static kernel_t *tenant_kernel(chconn_t *c, const char *id)
{
    return gw_kernel(c->g, id, c->wc.tenant);
}

static bool kernel_usable(const kernel_t *k)
{
    return k && kernel_state(k) != KERNEL_TERMINATING && kernel_state(k) != KERNEL_DEAD;
}

/* ---- kernel clients ---- */

static void client_fail_waiters(chclient_t *cl, const char *why)
{
    chconn_t *c = cl->c;
    chcall_t *call, *next;
    list_for_each_safe(call, next, &c->calls, link)
    {
        if (call->cl == cl) {
            reply_error(c, call->rid, RPC_ERR_RUNTIME, "%s", why);
            call_free(call);
        }
    }
}

/* The kernel is going away: the client keeps its reference but has no sockets any more. */
static void client_detach(chclient_t *cl, const char *why)
{
    client_fail_waiters(cl, why);
    kconn_destroy(&cl->kc);
    list_remove(&cl->klink);
    cl->k = NULL;
}

/* The /channel clients of a kernel: a list kept as the listener's data on the kernel. */
static struct list *kernel_clients(gw_t *g, kernel_t *k, bool make)
{
    struct list *head = kernel_data(k, g->ch_listener.slot);
    if (!head && make && (head = malloc(sizeof(*head)))) {
        list_init(head);
        kernel_set_data(k, g->ch_listener.slot, head);
    }
    return head;
}

static void client_free(chclient_t *cl)
{
    list_remove(&cl->klink);
    for (int i = 0; i < Q_N; i++) {
        q_clear(&cl->q[i]);
        free(cl->q[i].v);
    }
    kconn_destroy(&cl->kc);
    free(cl);
}

/* A message as jupyter_client returns it: header, msg_id, msg_type, parent_header, metadata,
 * content, buffers (base64 strings). NULL when a part is not a JSON object. */
static json_t *msg_dict(const jmsg_t *m, const jhdr_t *h, enum jchan chan)
{
    json_t *part[4] = {0};
    json_t *bufs = json_array();
    for (int i = 0; i < 4; i++) {
        part[i] = json_loadb(m->part[i].p, m->part[i].n, 0, NULL);
        if (!json_is_object(part[i]))
            goto fail;
    }
    for (size_t i = 0; bufs && i < m->nbuf; i++) {
        size_t n = sodium_base64_encoded_len(m->buf[i].n, sodium_base64_VARIANT_ORIGINAL);
        char *b64 = malloc(n);
        if (!b64)
            goto fail;
        sodium_bin2base64(b64, n, (const unsigned char *)m->buf[i].p, m->buf[i].n,
                          sodium_base64_VARIANT_ORIGINAL);
        json_array_append_new(bufs, json_string(b64));
        free(b64);
    }
    json_t *d = json_pack("{s:o, s:s, s:s, s:o, s:o, s:o, s:o, s:s}", "header", part[0], "msg_id",
                          h->msg_id, "msg_type", h->msg_type, "parent_header", part[1],
                          "metadata", part[2], "content", part[3], "buffers", bufs, "channel",
                          jchan_name(chan));
    return d;
fail:
    for (int i = 0; i < 4; i++)
        json_decref(part[i]);
    json_decref(bufs);
    return NULL;
}

static const char *parent_id(json_t *msg)
{
    const char *id = json_string_value(json_object_get(json_object_get(msg, "parent_header"),
                                                       "msg_id"));
    return id ? id : "";
}

static void wait_ready_done(chcall_t *call)
{
    q_clear(&call->cl->q[Q_IOPUB]); /* as jupyter_client flushes iopub once ready */
    reply_value(call->c, call->rid, json_null());
    call_free(call);
}

static void on_flush(void *data)
{
    wait_ready_done(data);
}

/* Gives msg to the first call waiting on that queue, or queues it. */
static void client_deliver(chclient_t *cl, int qi, json_t *msg)
{
    chconn_t *c = cl->c;
    chcall_t *call;
    list_for_each(call, &c->calls, link)
    {
        if (call->cl != cl || call->method != RPC_KC_WAIT_FOR_READY || call->stage == 0)
            continue;
        /* wait_for_ready consumes its own kernel_info_reply and waits for iopub to settle */
        if (qi == Q_SHELL && call->stage == 1 && !strcmp(parent_id(msg), call->info_id)) {
            if (call->idle_seen)
                return wait_ready_done(call);
            call->stage = 2;
            c->g->loop.evl.timer_arm(&c->g->loop.evl, call->flush, CH_FLUSH_MS);
            return;
        }
        if (qi == Q_IOPUB && !strcmp(parent_id(msg), call->info_id) &&
            !strcmp(json_string_value(json_object_get(msg, "msg_type")) ?: "", "status") &&
            !strcmp(json_string_value(json_object_get(json_object_get(msg, "content"),
                                                      "execution_state")) ?: "",
                    "idle")) {
            if (call->stage == 2)
                return wait_ready_done(call);
            call->idle_seen = true;
        }
    }
    static const enum rpc_method getter[Q_N] = {RPC_KC_GET_IOPUB_MSG, RPC_KC_GET_SHELL_MSG,
                                                RPC_KC_GET_STDIN_MSG};
    list_for_each(call, &c->calls, link)
    {
        if (call->cl == cl && call->method == getter[qi]) {
            reply_value(c, call->rid, json_incref(msg));
            call_free(call);
            return;
        }
    }
    int r = q_push(&cl->q[qi], msg);
    if (r == -ENOBUFS) {
        log_warn("channel: %s: client %s has %d unread messages; closing", c->wc.who, cl->ref,
                 CH_QUEUE_MAX);
        wsq_close(&c->wc.out, 1008, "too many unread kernel messages", false);
    } else if (r < 0) {
        wsq_close(&c->wc.out, 1011, "out of memory", false);
    }
}

static void on_client_reply(void *user, kconn_t *kc, enum jchan chan, const jmsg_t *m,
                            const jhdr_t *h)
{
    chclient_t *cl = user;
    if (chan != JCHAN_SHELL && chan != JCHAN_STDIN)
        return; /* control replies: no get_control_msg here */
    json_t *msg = msg_dict(m, h, chan);
    if (!msg) {
        log_warn("channel: kernel=%s: %s message with invalid JSON dropped", cl->kernel_id,
                 jchan_name(chan));
        return;
    }
    client_deliver(cl, chan == JCHAN_SHELL ? Q_SHELL : Q_STDIN, msg);
    json_decref(msg);
}

static const struct kconn_ops client_ops = {.reply = on_client_reply};

/* Sends a request on the client's shell (or stdin); msg_id_out gets its id. */
static int client_send(chclient_t *cl, enum jchan chan, const char *msg_type, json_t *content,
                       char msg_id_out[37])
{
    int r = -ENOMEM;
    char *hdr = jmsg_new_header(msg_type, cl->session, msg_id_out);
    char *body = content ? json_dumps(content, JSON_COMPACT) : NULL;
    if (hdr && body) {
        jmsg_t m = {.nbuf = 0};
        m.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
        m.part[JPART_PARENT] = (jspan_t){"{}", 2};
        m.part[JPART_METADATA] = (jspan_t){"{}", 2};
        m.part[JPART_CONTENT] = (jspan_t){body, strlen(body)};
        jhdr_t h;
        snprintf(h.msg_id, sizeof(h.msg_id), "%s", msg_id_out);
        snprintf(h.msg_type, sizeof(h.msg_type), "%s", msg_type);
        r = kconn_send(cl->kc, chan, &m, &h);
    }
    free(hdr);
    free(body);
    return r;
}

/* ---- kernel transitions ---- */

static void on_kernel_done(void *data, kernel_t *k, int status)
{
    chcall_t *call = data;
    chconn_t *c = call->c;
    call->wait = NULL;
    if (call->method == RPC_KC_WAIT_FOR_READY) {
        char id[37];
        if (status < 0 || !call->cl->kc) {
            reply_error(c, call->rid, RPC_ERR_RUNTIME, "Kernel died before replying to kernel_info");
            call_free(call);
            return;
        }
        json_t *empty = json_object();
        int r = client_send(call->cl, JCHAN_SHELL, "kernel_info_request", empty, id);
        json_decref(empty);
        if (r < 0) {
            reply_error(c, call->rid, RPC_ERR_RUNTIME, "cannot send kernel_info_request");
            call_free(call);
            return;
        }
        snprintf(call->info_id, sizeof(call->info_id), "%s", id);
        call->stage = 1;
        return;
    }
    if (status < 0 && call->method != RPC_MKM_SHUTDOWN_KERNEL &&
        call->method != RPC_KM_SHUTDOWN_KERNEL) {
        reply_error(c, call->rid, RPC_ERR_RUNTIME, "kernel %s failed to start: %s",
                    call->kernel_id, strerror(-status));
    } else if (call->method == RPC_MKM_START_KERNEL) {
        reply_value(c, call->rid, json_string(call->kernel_id));
    } else {
        reply_value(c, call->rid, json_null());
    }
    call_free(call);
}

/* Answers when the kernel's transition in progress ends (or at once if there is none). */
static void await_kernel(chconn_t *c, const rpc_call_t *rc, enum rpc_method method, kernel_t *k)
{
    chcall_t *call = call_new(c, rc, method, 0);
    if (!call)
        return;
    snprintf(call->kernel_id, sizeof(call->kernel_id), "%s", kernel_id(k));
    if (kernel_wait(k, on_kernel_done, call, &call->wait) < 0)
        on_kernel_done(call, k, 0);
}

/* ---- methods ---- */

static void do_start_kernel(chconn_t *c, const rpc_call_t *rc, const rpc_args_t *a)
{
    const rpc_val_t *name = rpc_args_get(a, "kernel_name");
    const rpc_val_t *env = rpc_args_get(a, "env");
    const rpc_val_t *ws = rpc_args_get(a, "workspace");
    const rpc_val_t *lims = rpc_args_get(a, "limits");
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
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "out of memory");
    struct gw_caller who;
    snprintf(who.tenant, sizeof(who.tenant), "%s", c->wc.tenant);
    snprintf(who.addr, sizeof(who.addr), "%s", c->addr);
    struct kops_error err;
    kernel_t *k;
    int r = kops_start(c->g, &who, req, &k, &err);
    json_decref(req);
    if (r < 0)
        return reply_error(c, rc->request_id, err.exc, "%s", err.message);
    kernel_touch(k);
    await_kernel(c, rc, RPC_MKM_START_KERNEL, k);
}

/* interrupt / restart / shutdown, for both manager objects */
static void do_kernel_op(chconn_t *c, const rpc_call_t *rc, const rpc_args_t *a, kernel_t *k)
{
    const rpc_val_t *restart = rpc_args_get(a, "restart");
    struct kops_error err;
    switch (a->method) {
    case RPC_MKM_INTERRUPT_KERNEL:
    case RPC_KM_INTERRUPT_KERNEL:
        if (kops_interrupt(c->g, k, &err) < 0)
            return reply_error(c, rc->request_id, err.exc, "%s", err.message);
        return reply_value(c, rc->request_id, json_null());
    case RPC_MKM_SHUTDOWN_KERNEL:
    case RPC_KM_SHUTDOWN_KERNEL:
        if (!(restart && restart->b)) {
            if (kops_shutdown(c->g, k, &err) < 0)
                return reply_error(c, rc->request_id, err.exc, "%s", err.message);
            return await_kernel(c, rc, a->method, k);
        }
        __attribute__((fallthrough)); /* shutdown_kernel(restart=True) is a restart */
    default:
        if (kops_restart(c->g, k, &err) < 0)
            return reply_error(c, rc->request_id, err.exc, "%s", err.message);
        return await_kernel(c, rc, a->method, k);
    }
}

static void do_client(chconn_t *c, const rpc_call_t *rc, kernel_t *k)
{
    if (c->nrefs == CH_MAX_REFS)
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME,
                           "too many object references on this connection (at most %d)",
                           CH_MAX_REFS);
    chclient_t *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "out of memory");
    struct list *peers = kernel_clients(c->g, k, true);
    if (!peers) {
        free(cl);
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "out of memory");
    }
    cl->c = c;
    cl->k = k;
    list_init(&cl->klink);
    snprintf(cl->kernel_id, sizeof(cl->kernel_id), "%s", kernel_id(k));
    util_uuid(cl->ref);
    util_uuid(cl->session);
    if (!(cl->kc = kconn_new(k, cl->session, &client_ops, cl))) {
        free(cl);
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "cannot connect to the kernel: %s",
                           strerror(errno));
    }
    list_append(peers, &cl->klink);
    struct chref *r = ref_add(c, RPC_OBJ_CLIENT, cl->ref);
    r->client = cl;
    cl->next = c->clients;
    c->clients = cl;
    kernel_connections(k, 1);
    reply_ref(c, rc->request_id, RPC_OBJ_CLIENT, cl->ref);
}

static void do_get_msg(chconn_t *c, const rpc_call_t *rc, const rpc_args_t *a, chclient_t *cl,
                       int qi)
{
    const rpc_val_t *t = rpc_args_get(a, "timeout");
    json_t *m = q_pop(&cl->q[qi]);
    if (m)
        return reply_value(c, rc->request_id, m);
    if (!cl->k)
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "the kernel has been shut down");
    double timeout = t->type == RPC_T_NUM ? t->n : 3600; /* None: wait (bounded) */
    if (timeout <= 0)
        return reply_error(c, rc->request_id, RPC_ERR_EMPTY, "%s", "");
    chcall_t *call = call_new(c, rc, a->method, timeout);
    if (call) {
        call->cl = cl;
        call->q = qi;
    }
}

static void do_wait_for_ready(chconn_t *c, const rpc_call_t *rc, const rpc_args_t *a,
                              chclient_t *cl)
{
    const rpc_val_t *t = rpc_args_get(a, "timeout");
    evl_t *l = &c->g->loop.evl;
    if (!kernel_usable(cl->k))
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME,
                           "Kernel died before replying to kernel_info");
    chcall_t *call = call_new(c, rc, a->method, t->n);
    if (!call)
        return;
    call->cl = cl;
    if (!(call->flush = l->timer_new(l, on_flush, call))) {
        reply_error(c, call->rid, RPC_ERR_RUNTIME, "out of memory");
        return call_free(call);
    }
    cl->started = true;
    snprintf(call->kernel_id, sizeof(call->kernel_id), "%s", cl->kernel_id);
    if (kernel_wait(cl->k, on_kernel_done, call, &call->wait) < 0)
        on_kernel_done(call, cl->k, 0);
}

/* execute, complete, inspect, history, kernel_info, is_complete, comm_info, input */
static void do_request(chconn_t *c, const rpc_call_t *rc, const rpc_args_t *a, chclient_t *cl)
{
    const char *type = NULL;
    enum jchan chan = JCHAN_SHELL;
    json_t *content = json_object();
    char id[37];
    /* the content is the arguments, named as in the messaging spec */
    for (size_t i = 0; content && a->spec->params[i].name; i++) {
        const rpc_val_t *v = &a->v[i];
        const char *name = a->spec->params[i].name;
        json_t *j = NULL;
        switch (v->type) {
        case RPC_T_NONE:
            continue;
        case RPC_T_NULL:
            j = json_null();
            break;
        case RPC_T_STR:
            j = json_stringn(v->s, v->len);
            break;
        case RPC_T_INT:
            j = json_integer(v->i);
            break;
        case RPC_T_NUM:
            j = json_real(v->n);
            break;
        case RPC_T_BOOL:
            j = json_boolean(v->b);
            break;
        case RPC_T_DICT:
            j = json_deep_copy(v->d);
            break;
        }
        if (!strcmp(name, "string")) /* input(string) is an input_reply's "value" */
            name = "value";
        json_object_set_new(content, name, j);
    }
    switch (a->method) {
    case RPC_KC_EXECUTE:
        type = "execute_request";
        if (json_is_null(json_object_get(content, "user_expressions")))
            json_object_set_new(content, "user_expressions", json_object());
        if (json_is_null(json_object_get(content, "allow_stdin")))
            json_object_set_new(content, "allow_stdin", json_false());
        break;
    case RPC_KC_COMPLETE:
    case RPC_KC_INSPECT:
        type = a->method == RPC_KC_COMPLETE ? "complete_request" : "inspect_request";
        if (json_is_null(json_object_get(content, "cursor_pos")))
            json_object_set_new(content, "cursor_pos",
                                json_integer((json_int_t)json_string_length(
                                    json_object_get(content, "code"))));
        break;
    case RPC_KC_HISTORY:
        type = "history_request";
        break;
    case RPC_KC_KERNEL_INFO:
        type = "kernel_info_request";
        break;
    case RPC_KC_IS_COMPLETE:
        type = "is_complete_request";
        break;
    case RPC_KC_COMM_INFO:
        type = "comm_info_request";
        if (json_is_null(json_object_get(content, "target_name")))
            json_object_del(content, "target_name");
        break;
    case RPC_KC_INPUT:
        type = "input_reply";
        chan = JCHAN_STDIN;
        break;
    default:
        break;
    }
    int r = content && type ? client_send(cl, chan, type, content, id) : -ENOMEM;
    json_decref(content);
    if (r == -EAGAIN)
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "the kernel is not accepting "
                                                               "messages");
    if (r < 0)
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "cannot send: %s", strerror(-r));
    if (a->method == RPC_KC_EXECUTE)
        snprintf(cl->exec_ids[cl->nexec++ % CH_EXEC_IDS], JMSG_MSG_ID_MAX, "%s", id);
    kernel_touch(cl->k);
    c->g->last_activity_us = util_wall_us();
    if (a->method == RPC_KC_INPUT)
        return reply_value(c, rc->request_id, json_null());
    reply_value(c, rc->request_id, json_string(id));
}

static void do_client_method(chconn_t *c, const rpc_call_t *rc, const rpc_args_t *a,
                             chclient_t *cl)
{
    switch (a->method) {
    case RPC_KC_START_CHANNELS:
        cl->started = true;
        return reply_value(c, rc->request_id, json_null());
    case RPC_KC_STOP_CHANNELS:
        cl->started = false;
        for (int i = 0; i < Q_N; i++)
            q_clear(&cl->q[i]);
        return reply_value(c, rc->request_id, json_null());
    case RPC_KC_GET_IOPUB_MSG:
        return do_get_msg(c, rc, a, cl, Q_IOPUB);
    case RPC_KC_GET_SHELL_MSG:
        return do_get_msg(c, rc, a, cl, Q_SHELL);
    case RPC_KC_GET_STDIN_MSG:
        return do_get_msg(c, rc, a, cl, Q_STDIN);
    default:
        break;
    }
    if (!cl->kc || !kernel_usable(cl->k))
        return reply_error(c, rc->request_id, RPC_ERR_RUNTIME, "the kernel has been shut down");
    if (a->method == RPC_KC_WAIT_FOR_READY)
        return do_wait_for_ready(c, rc, a, cl);
    do_request(c, rc, a, cl);
}

static void dispatch(chconn_t *c, const rpc_call_t *rc)
{
    rpc_args_t a;
    rpc_error_t e;
    char q[RPC_QUOTE_MAX];
    if (rpc_bind(rc, &a, &e) < 0)
        return violation(c, rc->request_id, &e);
    kernel_t *k = NULL;
    struct chref *ref = NULL;
    if (rc->obj != RPC_OBJ_MULTI_KERNEL_MANAGER) {
        ref = ref_find(c, rc->obj, rc->ref_id);
        if (!ref) {
            rpc_error_set(&e, RPC_ERR_KEY, "no %s object %s on this connection",
                          rpc_obj_name(rc->obj), rpc_quote(q, rc->ref_id, strlen(rc->ref_id)));
            return violation(c, rc->request_id, &e);
        }
    }
    log_debug("channel: %s: %s.%s", c->wc.who, rpc_obj_name(rc->obj), a.spec->name);
    switch (rc->obj) {
    case RPC_OBJ_MULTI_KERNEL_MANAGER:
        if (a.method == RPC_MKM_LIST_KERNEL_IDS) {
            json_t *ids = json_array();
            for (size_t i = 0; i < kmgr_count(c->g->km); i++) {
                kernel_t *ki = kmgr_at(c->g->km, i);
                if (tenant_kernel(c, kernel_id(ki)))
                    json_array_append_new(ids, json_string(kernel_id(ki)));
            }
            return reply_value(c, rc->request_id, ids);
        }
        if (a.method == RPC_MKM_START_KERNEL)
            return do_start_kernel(c, rc, &a);
        {
            const rpc_val_t *id = rpc_args_get(&a, "kernel_id");
            k = tenant_kernel(c, id->s);
            if (!k)
                return reply_error(c, rc->request_id, RPC_ERR_KEY, "%s",
                                   rpc_quote(q, id->s, id->len));
        }
        if (a.method == RPC_MKM_GET_KERNEL) {
            if (!ref_add(c, RPC_OBJ_KERNEL_MANAGER, kernel_id(k)))
                return reply_error(c, rc->request_id, RPC_ERR_RUNTIME,
                                   "too many object references on this connection (at most %d)",
                                   CH_MAX_REFS);
            return reply_ref(c, rc->request_id, RPC_OBJ_KERNEL_MANAGER, kernel_id(k));
        }
        return do_kernel_op(c, rc, &a, k);
    case RPC_OBJ_KERNEL_MANAGER:
        k = tenant_kernel(c, ref->id);
        if (a.method == RPC_KM_IS_ALIVE)
            return reply_value(c, rc->request_id, json_boolean(kernel_usable(k)));
        if (!kernel_usable(k))
            return reply_error(c, rc->request_id, RPC_ERR_RUNTIME,
                               "the kernel has been shut down");
        if (a.method == RPC_KM_CLIENT)
            return do_client(c, rc, k);
        return do_kernel_op(c, rc, &a, k);
    case RPC_OBJ_CLIENT:
        return do_client_method(c, rc, &a, ref->client);
    default:
        return;
    }
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

/* A kernel calls a client function (kgw_tools): forwarded to the /channel client whose
 * execution is running, as a call_request on its connection. The name is on the allowlist and
 * the arguments are checked by kernelmgr/kcall.c already. */
void channel_call(void *user, kernel_t *k, uint64_t call_id, const char *name, json_t *args,
                  json_t *kwargs, const char *exec_msg_id)
{
    gw_t *g = user;
    chclient_t *owner = NULL;
    chconn_t *conn;
    list_for_each(conn, &g->ch_conns, link)
    {
        if (owner || !exec_msg_id[0])
            break;
        for (chclient_t *cl = conn->clients; cl && !owner; cl = cl->next)
            for (unsigned i = 0; cl->k == k && i < CH_EXEC_IDS && !owner; i++)
                if (!strcmp(cl->exec_ids[i], exec_msg_id))
                    owner = cl;
    }
    if (!owner || owner->c->wc.out.closing) {
        log_info("channel: kernel=%s: callback %s refused: no /channel client runs this "
                 "execution", kernel_id(k), name);
        audit_event("callback_refused", "s:s, s:s, s:s, s:s", "tenant",
                    wspace_tenant(kernel_workspace(k)), "kernel", kernel_id(k), "name", name,
                    "reason", "no client");
        kernel_call_reply(k, call_id, NULL, "RuntimeError",
                          "no /channel client is running this execution to receive the "
                          "callback");
        return;
    }
    chconn_t *c = owner->c;
    if (c->ncbs == CH_MAX_CALLBACKS) { /* the oldest unanswered one gives way */
        cb_finish(g, &c->cbs[0], NULL, "RuntimeError",
                  "the client did not answer before newer callbacks came");
        cb_remove(c, 0);
    }
    struct chcb *cb = &c->cbs[c->ncbs];
    util_uuid(cb->rid);
    snprintf(cb->kernel_id, sizeof(cb->kernel_id), "%s", kernel_id(k));
    cb->call_id = call_id;
    json_t *msg = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:O, s:O}", "message_type",
                            "call_request", "request_id", cb->rid, "object_reference", "type",
                            "client", "id", owner->ref, "method", name, "args", args, "kwargs",
                            kwargs);
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!text) {
        kernel_call_reply(k, call_id, NULL, "RuntimeError", "out of memory");
        return;
    }
    c->ncbs++;
    log_debug("channel: kernel=%s: callback %s to %s", kernel_id(k), name, c->wc.who);
    send_text(c, text);
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
        return violation(c, NULL, &e);
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

static void on_message(chconn_t *c)
{
    rpc_call_t rc;
    int r = rpc_parse((const char *)c->wc.in.data, c->wc.in.len, &rc);
    if (r < 0) {
        rpc_error_t e;
        rpc_error_set(&e, RPC_ERR_VALUE, "%s",
                      r == -EMSGSIZE ? "message too large"
                      : r == -ENOENT ? "unknown message_type"
                                     : "malformed message (not a call_request JSON object)");
        return violation(c, NULL, &e);
    }
    c->g->last_activity_us = util_wall_us();
    switch (rc.kind) {
    case RPC_CALL_REQUEST:
        if (rc.err.type != RPC_ERR_NONE)
            violation(c, rc.request_id, &rc.err);
        else
            dispatch(c, &rc);
        break;
    case RPC_REGISTER_ACTIVITY_REQUEST: {
        kernel_t *k = rc.kernel_id[0] ? tenant_kernel(c, rc.kernel_id) : NULL;
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

/* ---- websocket ---- */

void channel_init(gw_t *g)
{
    list_init(&g->ch_conns);
}

bool channel_is_channel(struct lws *wsi)
{
    char uri[ROUTE_MAX_PATH + 1];
    struct route rt;
    int n = lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI);
    return n > 0 && route_match(uri, (size_t)n, &rt) == 0 && rt.id == ROUTE_CHANNEL;
}

int channel_confirm(gw_t *g, struct lws *wsi, struct gw_refusal *no)
{
    struct gw_caller who;
    return wsconn_confirm(g, wsi, "channel", &who, no);
}

static void on_message_w(wsconn_t *w)
{
    on_message(container_of(w, chconn_t, wc));
}

static void on_closed(wsconn_t *w)
{
    chconn_t *c = container_of(w, chconn_t, wc);
    list_remove(&c->link);
    callbacks_drop(c);
    while (!list_empty(&c->calls))
        call_free(list_first(&c->calls, chcall_t, link));
    while (c->clients) {
        chclient_t *cl = c->clients;
        c->clients = cl->next;
        if (cl->k)
            kernel_connections(cl->k, -1);
        client_free(cl);
    }
    log_info("channel: %s closed", c->wc.who);
    wsconn_fini(&c->wc);
    free(c);
}

static const struct wsconn_ops chconn_ops = {
    .name = "channel", .message = on_message_w, .closed = on_closed};

int channel_open(gw_t *g, struct lws *wsi, struct gw_pss *pss)
{
    const char *tenant = auth_tenant(g, wsi);
    if (!tenant)
        return -1;
    chconn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return -1;
    c->g = g;
    wsconn_init(&c->wc, g, wsi, GW_FACE_CHANNEL, &chconn_ops, tenant, RPC_MAX_MESSAGE_BYTES);
    list_init(&c->calls);
    auth_peer(g, wsi, c->addr);
    snprintf(c->wc.who, sizeof(c->wc.who), "connection from %s", c->addr);
    list_prepend(&g->ch_conns, &c->link);
    pss->wc = &c->wc;
    log_info("channel: %s opened", c->wc.who);
    return 0;
}

/* ---- kernel events ---- */

static void on_iopub(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    struct list *peers = kernel_clients(user, k, false);
    json_t *msg = NULL;
    chclient_t *cl;
    if (!peers)
        return;
    list_for_each(cl, peers, klink)
    {
        if (!cl->started)
            continue;
        if (!msg && !(msg = msg_dict(m, h, JCHAN_IOPUB))) {
            log_warn("channel: kernel=%s: iopub message with invalid JSON dropped",
                     kernel_id(k));
            return;
        }
        client_deliver(cl, Q_IOPUB, msg);
    }
    json_decref(msg);
}

void channel_close_all(gw_t *g, int code, const char *reason)
{
    chconn_t *c;
    list_for_each(c, &g->ch_conns, link)
    {
        wsq_close(&c->wc.out, code, reason, true);
    }
}

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    gw_t *g = user;
    struct list *peers = kernel_clients(g, k, false);
    (void)detail;
    if (ev != KERNEL_EV_GONE || !peers)
        return;
    while (!list_empty(peers)) {
        chclient_t *cl = list_first(peers, chclient_t, klink);
        kernel_connections(k, -1);
        client_detach(cl, "the kernel has been shut down");
    }
    kernel_set_data(k, g->ch_listener.slot, NULL);
    free(peers);
}

static const struct kmgr_listener_ops listener_ops = {.iopub = on_iopub, .event = on_event};

int channel_listen(gw_t *g)
{
    kmgr_on_call(g->km, channel_call, g);
    return kmgr_listen(g->km, &g->ch_listener, &listener_ops, g);
}
