/* chclient: /channel kernel clients (see chclient.h). */
#include "gateway/chclient.h"

#include <errno.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"

/* ---- message queues ---- */

/* The oldest message of queue qi (a reference for the caller), its bytes released; NULL when
 * it is empty. */
static json_t *q_pop(chclient_t *cl, int qi)
{
    json_t *m = ring_pop(&cl->q[qi]);
    if (m && cl->share) {
        size_t n = (uintptr_t)ring_pop(&cl->qn[qi]);
        obudget_share_release(cl->share, n);
        cl->held -= n;
    }
    return m;
}

static void q_clear(chclient_t *cl, int qi)
{
    json_t *m;
    while ((m = q_pop(cl, qi)))
        json_decref(m);
}

/* Queues a reference to m, n bytes of kernel message: charged to the kernel's share. */
static int q_push(chclient_t *cl, int qi, json_t *m, size_t n)
{
    if (cl->q[qi].len >= CH_QUEUE_MAX)
        return -ENOBUFS;
    if (cl->share && ring_push(&cl->qn[qi], (void *)(uintptr_t)n) < 0)
        return -ENOMEM;
    int r = ring_push(&cl->q[qi], m);
    if (r < 0) {
        if (cl->share)
            cl->qn[qi].len--; /* takes back its last entry, pushed above */
        return r;
    }
    json_incref(m); /* the queue's reference */
    if (cl->share) {
        obudget_share_charge(cl->share, n);
        cl->held += n;
    }
    return 0;
}

/* A kernel message's bytes: header, parent header, metadata, content, buffers. */
static size_t msg_bytes(const jmsg_t *m)
{
    size_t n = 0;
    for (int i = 0; i < 4; i++)
        n += m->part[i].n;
    for (size_t i = 0; i < m->nbuf; i++)
        n += m->buf[i].n;
    return n;
}

/* ---- the clients of a kernel ---- */

static void client_fail_waiters(chclient_t *cl, const char *why)
{
    chconn_t *c = cl->c;
    chcall_t *call, *next;
    list_for_each_safe(call, next, &c->calls, link)
    {
        if (call->cl == cl) {
            chconn_reply_error(c, call->rid, RPC_ERR_RUNTIME, "%s", why);
            chcall_free(call);
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

void chclient_free(chclient_t *cl)
{
    list_remove(&cl->klink);
    for (int i = 0; i < CHQ_N; i++) {
        q_clear(cl, i);
        ring_fini(&cl->q[i]);
        ring_fini(&cl->qn[i]);
    }
    obudget_share_unref(&cl->share);
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

/* ---- waits: wait_for_ready ---- */

static void wait_ready_done(chcall_t *call)
{
    q_clear(call->cl, CHQ_IOPUB); /* as jupyter_client flushes iopub once ready */
    chconn_reply_value(call->c, call->rid, json_null());
    chcall_free(call);
}

static void on_flush(void *data)
{
    wait_ready_done(data);
}

static bool is_idle_status(json_t *msg)
{
    return !strcmp(json_string_value(json_object_get(msg, "msg_type")) ?: "", "status") &&
           !strcmp(json_string_value(json_object_get(json_object_get(msg, "content"),
                                                     "execution_state")) ?: "",
                   "idle");
}

/* wait_for_ready consumes its own kernel_info_reply and waits for iopub to settle: true when
 * msg was that call's. */
static bool ready_take(chclient_t *cl, int qi, json_t *msg)
{
    chconn_t *c = cl->c;
    chcall_t *call;
    list_for_each(call, &c->calls, link)
    {
        if (call->cl != cl || call->kind != CHCALL_READY || call->stage == 0)
            continue;
        if (qi == CHQ_SHELL && call->stage == 1 && !strcmp(parent_id(msg), call->info_id)) {
            if (call->idle_seen) {
                wait_ready_done(call);
                return true;
            }
            call->stage = 2;
            c->g->loop.evl.timer_arm(&c->g->loop.evl, call->flush, CH_FLUSH_MS);
            return true;
        }
        if (qi == CHQ_IOPUB && !strcmp(parent_id(msg), call->info_id) && is_idle_status(msg)) {
            if (call->stage == 2) {
                wait_ready_done(call);
                return true;
            }
            call->idle_seen = true;
        }
    }
    return false;
}

/* Gives msg to the first call waiting on that queue, or queues it. */
static void client_deliver(chclient_t *cl, int qi, json_t *msg, size_t n)
{
    chconn_t *c = cl->c;
    chcall_t *call;
    if (ready_take(cl, qi, msg))
        return;
    list_for_each(call, &c->calls, link)
    {
        if (call->cl == cl && call->kind == CHCALL_GET_MSG && call->q == qi) {
            chconn_reply_value(c, call->rid, json_incref(msg));
            chcall_free(call);
            return;
        }
    }
    int r = q_push(cl, qi, msg, n);
    if (r == -ENOBUFS) {
        log_warn("channel: %s: client %s has %d unread messages; closing", c->wc.who, cl->ref,
                 CH_QUEUE_MAX);
        wsconn_close(&c->wc, 1008, "too many unread kernel messages", false);
    } else if (r < 0) {
        wsconn_close(&c->wc, 1011, "out of memory", false);
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
    client_deliver(cl, chan == JCHAN_SHELL ? CHQ_SHELL : CHQ_STDIN, msg, msg_bytes(m));
    json_decref(msg);
}

static const struct kconn_ops client_ops = {.reply = on_client_reply};

static int client_send(chclient_t *cl, enum jchan chan, const char *msg_type, json_t *content,
                       char msg_id_out[37])
{
    int r = -ENOMEM;
    char *hdr = jmsg_new_header(msg_type, cl->session, msg_id_out);
    char *body = content ? json_dumps(content, JSON_COMPACT) : NULL;
    if (hdr && body) {
        jmsg_t m;
        jhdr_t h;
        jmsg_own(&m, &h, hdr, msg_id_out, msg_type, NULL, body);
        r = kconn_send(cl->kc, chan, &m, &h);
    }
    free(hdr);
    free(body);
    return r;
}

int chclient_request(chclient_t *cl, enum jchan chan, const char *msg_type, json_t *content,
                     char ret_msg_id[37])
{
    int r = client_send(cl, chan, msg_type, content, ret_msg_id);
    if (r < 0)
        return r;
    kernel_touch(cl->k);
    cl->c->g->last_activity_us = util_wall_us();
    return 0;
}

void chclient_note_exec(chclient_t *cl, const char *msg_id)
{
    snprintf(cl->exec_ids[cl->nexec++ % CH_EXEC_IDS], JMSG_MSG_ID_MAX, "%s", msg_id);
}

/* ---- the client's methods ---- */

chclient_t *chclient_new(chconn_t *c, const char *rid, kernel_t *k)
{
    if (c->nrefs == CH_MAX_REFS) {
        chconn_reply_error(c, rid, RPC_ERR_RUNTIME,
                           "too many object references on this connection (at most %d)",
                           CH_MAX_REFS);
        return NULL;
    }
    chclient_t *cl = calloc(1, sizeof(*cl));
    struct list *peers = cl ? kernel_clients(c->g, k, true) : NULL;
    if (!peers) {
        free(cl);
        chconn_reply_error(c, rid, RPC_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    cl->c = c;
    cl->k = k;
    if (kernel_out_share(k))
        cl->share = obudget_share_ref(kernel_out_share(k));
    list_init(&cl->klink);
    snprintf(cl->kernel_id, sizeof(cl->kernel_id), "%s", kernel_id(k));
    util_uuid(cl->ref);
    util_uuid(cl->session);
    if (!(cl->kc = kconn_new(k, cl->session, &client_ops, cl))) {
        obudget_share_unref(&cl->share);
        free(cl);
        chconn_reply_error(c, rid, RPC_ERR_RUNTIME, "cannot connect to the kernel: %s",
                           strerror(errno));
        return NULL;
    }
    list_append(peers, &cl->klink);
    struct chref *r = chconn_ref_add(c, RPC_OBJ_CLIENT, cl->ref);
    r->client = cl;
    cl->next = c->clients;
    c->clients = cl;
    kernel_connections(k, 1);
    return cl;
}

void chclient_start(chclient_t *cl)
{
    cl->started = true;
}

void chclient_stop(chclient_t *cl)
{
    cl->started = false;
    for (int i = 0; i < CHQ_N; i++)
        q_clear(cl, i);
}

void chclient_get_msg(chclient_t *cl, const char *rid, enum jchan chan, double timeout)
{
    chconn_t *c = cl->c;
    int qi = chan == JCHAN_IOPUB ? CHQ_IOPUB : chan == JCHAN_SHELL ? CHQ_SHELL : CHQ_STDIN;
    json_t *m = q_pop(cl, qi);
    if (m)
        return chconn_reply_value(c, rid, m);
    if (!cl->k)
        return chconn_reply_error(c, rid, RPC_ERR_RUNTIME, "the kernel has been shut down");
    if (timeout < 0)
        timeout = 3600; /* None: wait (bounded) */
    if (timeout <= 0)
        return chconn_reply_error(c, rid, RPC_ERR_EMPTY, "%s", "");
    chcall_t *call = chcall_new(c, rid, CHCALL_GET_MSG, timeout, RPC_ERR_EMPTY, "");
    if (call) {
        call->cl = cl;
        call->q = qi;
    }
}

/* The kernel is up (or gone): wait_for_ready asks for kernel_info. */
static void on_ready_kernel(void *data, kernel_t *k, int status)
{
    chcall_t *call = data;
    chconn_t *c = call->c;
    char id[37];
    call->wait = NULL;
    if (status < 0 || !call->cl->kc) {
        chconn_reply_error(c, call->rid, RPC_ERR_RUNTIME,
                           "Kernel died before replying to kernel_info");
        return chcall_free(call);
    }
    json_t *empty = json_object();
    int r = client_send(call->cl, JCHAN_SHELL, "kernel_info_request", empty, id);
    json_decref(empty);
    if (r < 0) {
        chconn_reply_error(c, call->rid, RPC_ERR_RUNTIME, "cannot send kernel_info_request");
        return chcall_free(call);
    }
    snprintf(call->info_id, sizeof(call->info_id), "%s", id);
    call->stage = 1;
}

void chclient_wait_ready(chclient_t *cl, const char *rid, double timeout)
{
    chconn_t *c = cl->c;
    evl_t *l = &c->g->loop.evl;
    if (!chconn_kernel_usable(cl->k))
        return chconn_reply_error(c, rid, RPC_ERR_RUNTIME,
                                  "Kernel died before replying to kernel_info");
    chcall_t *call = chcall_new(c, rid, CHCALL_READY, timeout, RPC_ERR_RUNTIME,
                                "Kernel didn't respond in time");
    if (!call)
        return;
    call->cl = cl;
    if (!(call->flush = l->timer_new(l, on_flush, call))) {
        chconn_reply_error(c, call->rid, RPC_ERR_RUNTIME, "out of memory");
        return chcall_free(call);
    }
    cl->started = true;
    snprintf(call->kernel_id, sizeof(call->kernel_id), "%s", cl->kernel_id);
    if (kernel_wait(cl->k, on_ready_kernel, call, &call->wait) < 0)
        on_ready_kernel(call, cl->k, 0);
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
        client_deliver(cl, CHQ_IOPUB, msg, msg_bytes(m));
    }
    json_decref(msg);
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

/* A notice for an execution's clients (output dropped or cut, wall time exceeded): an iopub
 * stream message to stderr in the gateway's own session, as the websocket face sends it. */
static void on_notice(void *user, kernel_t *k, jspan_t parent, const char *text)
{
    gw_t *g = user;
    struct list *peers = kernel_clients(g, k, false);
    char line[600];
    jhdr_t h;
    jmsg_t m;
    if (!peers || list_empty(peers) || !jmsg_is_json_object(parent))
        return;
    snprintf(line, sizeof(line), "\n[kgw] %s\n", text);
    json_t *c = json_pack("{s:s, s:s}", "name", "stderr", "text", line);
    char *content = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    char *hdr = content ? jmsg_new_header("stream", g->server_session, h.msg_id) : NULL;
    if (hdr) {
        jmsg_own(&m, &h, hdr, h.msg_id, "stream", NULL, content);
        m.part[JPART_PARENT] = parent; /* a span of the kernel's message */
        on_iopub(user, k, &m, &h);
    }
    free(hdr);
    free(content);
}

/* The kernel's output share is past its ceiling (kernelmgr/kout.c): the connections whose
 * clients of k hold more than min bytes of its output are closed (1008), their queues let go. */
static unsigned on_overflow(void *user, kernel_t *k, size_t min)
{
    struct list *peers = kernel_clients(user, k, false);
    chclient_t *cl;
    unsigned n = 0;
    if (!peers)
        return 0;
    list_for_each(cl, peers, klink)
    {
        if (cl->held <= min)
            continue;
        if (!cl->c->wc.out.closing) {
            log_warn("channel: %s: client %s is not reading its kernel's output (%zu bytes "
                     "queued, past the kernel's share); closing",
                     cl->c->wc.who, cl->ref, cl->held);
            wsconn_close(&cl->c->wc, 1008, "client too slow: kernel output share exceeded", false);
            n++;
        }
        for (int i = 0; i < CHQ_N; i++) /* (a closing connection's too: nobody reads them) */
            q_clear(cl, i);
    }
    return n;
}

const struct kmgr_listener_ops chclient_listener_ops = {
    .iopub = on_iopub, .event = on_event, .notice = on_notice, .overflow = on_overflow};

/* A kernel calls a client function (kgw_tools): forwarded to the /channel client whose
 * execution is running, as a call_request on its connection. The name is on the allowlist and
 * the arguments are checked by kernelmgr/kcall.c already. */
void chclient_kernel_call(void *user, kernel_t *k, uint64_t call_id, const char *name,
                          json_t *args, json_t *kwargs, const char *exec_msg_id)
{
    gw_t *g = user;
    struct list *peers = exec_msg_id[0] ? kernel_clients(g, k, false) : NULL;
    chclient_t *owner = NULL, *cl;
    if (peers)
        list_for_each(cl, peers, klink)
        {
            for (unsigned i = 0; i < CH_EXEC_IDS && !owner; i++)
                if (!strcmp(cl->exec_ids[i], exec_msg_id))
                    owner = cl;
            if (owner)
                break;
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
    chconn_callback(owner->c, k, call_id, owner->ref, name, args, kwargs);
}
