/* wschan: websockets on /api/kernels/{id}/channels, relayed to the kernel's ZeroMQ sockets.
 *
 * A kernel has a hub; the hub has client sessions (one per session_id: the ZeroMQ identity of
 * its shell/control/stdin sockets); a session has at most one live websocket. A session
 * outlives its websocket for a while so a reconnect with the same session_id (JupyterLab does
 * this after every restart and network blip) reuses the same sockets: a second DEALER with the
 * same identity would be refused by the kernel's ROUTER. */
#include "gateway/wschan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/blob.h"
#include "common/audit.h"
#include "common/buf.h"
#include "common/ident.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/auth.h"
#include "gateway/gw.h"
#include "gateway/route.h"
#include "gateway/wsq.h"
#include "kernelmgr/kconn.h"
#include "protocol/wsmsg.h"

#define WS_MAX_BAD     16  /* malformed frames tolerated before the connection is closed */
#define SESSION_ID_MAX IDENT_TOKEN_MAX /* session ids are IDENT_TOKEN names */

typedef struct khub khub_t;
typedef struct wsess wsess_t;

struct wsconn {
    gw_t *g;
    struct lws *wsi;
    wsess_t *sess;
    enum wsproto proto;
    buf_t in;
    bool in_msg, in_binary;
    int bad;
    wsq_t out;
    char who[SESSION_ID_MAX + 16];
    char tenant[KEYFILE_TENANT_MAX + 1];
};

struct wsess {
    khub_t *hub;
    kconn_t *kc;
    char id[SESSION_ID_MAX + 1];
    struct wsconn *ws;
    evl_timer_t *linger;
    /* while no websocket is attached, what the session would have received, replayed to the
     * next websocket of the same protocol (as jupyter_server does after a network blip) */
    bool buffering;
    enum wsproto buf_proto;
    blob_t **buf;
    size_t nbuf, cap, buf_bytes;
    struct list link; /* on hub->sessions */
};

#define SESSION_BUFFER_MAX 10000 /* messages */

struct khub {
    gw_t *g;
    kernel_t *k;
    struct list sessions; /* wsess_t.link, newest first */
};

/* ---- kernel -> clients ---- */

static void buf_clear(wsess_t *s)
{
    for (size_t i = 0; i < s->nbuf; i++)
        blob_unref(&s->buf[i]);
    free(s->buf);
    s->hub->g->replay_bytes -= s->buf_bytes;
    s->buf = NULL;
    s->nbuf = s->cap = s->buf_bytes = 0;
}

/* Keeps b for the session's next websocket; a session that buffers too much stops buffering
 * (its client has been gone too long to catch up). */
static void buf_add(wsess_t *s, blob_t *b)
{
    if (!s->buffering)
        return;
    if (s->nbuf == SESSION_BUFFER_MAX ||
        s->buf_bytes + b->len > (size_t)s->hub->g->cfg.max_ws_queue_bytes ||
        /* every detached session together: many clients that connect and go away must not
         * add up to more than --max-replay-bytes */
        s->hub->g->replay_bytes + b->len > (size_t)s->hub->g->cfg.max_replay_bytes) {
        log_warn("ws: session %s: too much output while disconnected; not replaying it", s->id);
        buf_clear(s);
        s->buffering = false;
        return;
    }
    if (s->nbuf == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        blob_t **nb = realloc(s->buf, cap * sizeof(*nb));
        if (!nb) {
            buf_clear(s);
            s->buffering = false;
            return;
        }
        s->buf = nb;
        s->cap = cap;
    }
    s->buf[s->nbuf++] = blob_ref(b);
    s->buf_bytes += b->len;
    s->hub->g->replay_bytes += b->len;
}

static void deliver(wsess_t *s, blob_t **enc, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    struct wsconn *ws = s->ws;
    if (ws ? ws->out.closing : !s->buffering)
        return;
    enum wsproto p = ws ? ws->proto : s->buf_proto;
    if (!enc[p])
        enc[p] = wsmsg_encode(p, chan, m, h, LWS_PRE);
    if (!enc[p]) {
        log_warn("ws: cannot encode %s message: %s", h->msg_type, strerror(errno));
        return;
    }
    if (ws)
        wsq_push(&ws->out, enc[p]);
    else
        buf_add(s, enc[p]);
}

/* The websocket is going: what it had not sent yet is kept for the next one. */
static void sess_detach(wsess_t *s, struct wsconn *ws)
{
    s->ws = NULL;
    s->buffering = true;
    s->buf_proto = ws->proto;
    for (blob_t *b; (b = wsq_pop(&ws->out));) { /* a partly sent message is sent again whole */
        buf_add(s, b);
        blob_unref(&b);
    }
}

static void sess_attach(wsess_t *s, struct wsconn *ws)
{
    s->ws = ws;
    if (s->nbuf > 0 && s->buf_proto == ws->proto) {
        log_info("ws: session %s: replaying %zu messages", s->id, s->nbuf);
        for (size_t i = 0; i < s->nbuf; i++)
            wsq_push(&ws->out, s->buf[i]);
    }
    buf_clear(s);
    s->buffering = false;
}

static void broadcast(khub_t *hub, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    blob_t *enc[WSPROTO_N] = {0};
    wsess_t *s;
    list_for_each(s, &hub->sessions, link)
    {
        deliver(s, enc, chan, m, h);
    }
    for (int i = 0; i < WSPROTO_N; i++)
        blob_unref(&enc[i]);
}

/* The relay's data on a kernel: its hub, from the first websocket on. */
static khub_t *hub_of(gw_t *g, kernel_t *k)
{
    return kernel_data(k, g->ws_listener.slot);
}

static void on_iopub(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    khub_t *hub = hub_of(user, k);
    if (!hub)
        return;
    /* The legacy encoding splices the kernel's JSON parts into one document. */
    if (!jmsg_parts_ok(m)) {
        log_warn("kernel=%s: iopub %s message with invalid JSON dropped", kernel_id(k),
                 h->msg_type);
        return;
    }
    broadcast(hub, JCHAN_IOPUB, m, h);
}

static void on_reply(void *user, kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    wsess_t *s = user;
    blob_t *enc[WSPROTO_N] = {0};
    if (!jmsg_parts_ok(m)) {
        log_warn("kernel=%s: %s %s message with invalid JSON dropped", kernel_id(s->hub->k),
                 jchan_name(chan), h->msg_type);
        return;
    }
    deliver(s, enc, chan, m, h);
    for (int i = 0; i < WSPROTO_N; i++)
        blob_unref(&enc[i]);
}

static const struct kconn_ops sess_ops = {.reply = on_reply};

/* An iopub message made by the gateway itself, in its own Jupyter session. */
static void broadcast_own(khub_t *hub, const char *msg_type, jspan_t parent, const char *content)
{
    jhdr_t h;
    char *hdr = jmsg_new_header(msg_type, hub->g->server_session, h.msg_id);
    if (!hdr)
        return;
    snprintf(h.msg_type, sizeof(h.msg_type), "%s", msg_type);
    jmsg_t m = {.nbuf = 0};
    m.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
    m.part[JPART_PARENT] = parent;
    m.part[JPART_METADATA] = (jspan_t){"{}", 2};
    m.part[JPART_CONTENT] = (jspan_t){content, strlen(content)};
    broadcast(hub, JCHAN_IOPUB, &m, &h);
    free(hdr);
}

/* A status message with parent_header {}, as jupyter_server sends on restarts and deaths. */
static void broadcast_status(khub_t *hub, const char *state)
{
    char content[64];
    snprintf(content, sizeof(content), "{\"execution_state\":\"%s\"}", state);
    broadcast_own(hub, "status", (jspan_t){"{}", 2}, content);
}

static void on_notice(void *user, kernel_t *k, jspan_t parent, const char *text)
{
    khub_t *hub = hub_of(user, k);
    char line[300];
    if (!hub || !jmsg_is_json_object(parent))
        return;
    snprintf(line, sizeof(line), "\n[kgw] %s\n", text);
    json_t *c = json_pack("{s:s, s:s}", "name", "stderr", "text", line);
    char *content = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    if (content)
        broadcast_own(hub, "stream", parent, content);
    free(content);
}

/* ---- sessions and hubs ---- */

static void sess_destroy(wsess_t *s)
{
    khub_t *hub = s->hub;
    list_remove(&s->link);
    if (s->ws)
        s->ws->sess = NULL;
    buf_clear(s);
    kconn_destroy(&s->kc);
    evl_timer_destroy(&hub->g->loop.evl, &s->linger);
    free(s);
}

static void on_linger(void *data)
{
    wsess_t *s = data;
    log_debug("ws: session %s on kernel=%s expired", s->id, kernel_id(s->hub->k));
    sess_destroy(s);
}

static khub_t *hub_get(gw_t *g, kernel_t *k)
{
    khub_t *hub = hub_of(g, k);
    if (hub)
        return hub;
    hub = calloc(1, sizeof(*hub));
    if (!hub)
        return NULL;
    hub->g = g;
    hub->k = k;
    list_init(&hub->sessions);
    kernel_set_data(k, g->ws_listener.slot, hub);
    return hub;
}

static void hub_close_all(khub_t *hub, int code, const char *reason)
{
    while (!list_empty(&hub->sessions)) {
        wsess_t *s = list_first(&hub->sessions, wsess_t, link);
        if (s->ws)
            wsq_close(&s->ws->out, code, reason, true);
        sess_destroy(s);
    }
}

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    gw_t *g = user;
    khub_t *hub = hub_of(g, k);
    char reason[100];
    switch (ev) {
    case KERNEL_EV_RESTARTING:
        if (hub)
            broadcast_status(hub, "restarting");
        break;
    case KERNEL_EV_STARTED:
        break;
    case KERNEL_EV_DIED:
        if (hub) {
            broadcast_status(hub, "dead");
            snprintf(reason, sizeof(reason), "kernel died: %s", detail ? detail : "unknown");
            hub_close_all(hub, 1011, reason);
        }
        break;
    case KERNEL_EV_GONE:
        if (hub) {
            hub_close_all(hub, 1001, "kernel shut down");
            kernel_set_data(k, g->ws_listener.slot, NULL);
            free(hub);
        }
        break;
    case KERNEL_EV_RESTART: /* a client's restart: "starting", as jupyter_server says */
        if (hub)
            broadcast_status(hub, "starting");
        break;
    case KERNEL_EV_N:
        break;
    }
}

static const struct kmgr_listener_ops listener_ops = {
    .iopub = on_iopub, .event = on_event, .notice = on_notice};

int wschan_listen(gw_t *g)
{
    return kmgr_listen(g->km, &g->ws_listener, &listener_ops, g);
}

/* ---- websocket callbacks ---- */

/* The kernel of the channels URL (its route, matched at the upgrade), if it is the caller's
 * tenant's and usable. */
static kernel_t *kernel_of(gw_t *g, const struct route *rt, const char *tenant)
{
    if (rt->id != ROUTE_KERNEL_CHANNELS)
        return NULL;
    kernel_t *k = gw_kernel(g, rt->arg[0], tenant);
    if (!k || kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD)
        return NULL;
    return k;
}

/* Browsers send Origin; scripts usually do not. A browser page may open a websocket to any
 * host, so, as jupyter_server does, only the server's own origin (same host) or the configured
 * --allow-origin may. */
bool wschan_origin_ok(gw_t *g, struct lws *wsi)
{
    char origin[256], host[256];
    if (lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) <= 0)
        return true;
    const char *allow = g->cfg.allow_origin;
    if (allow && allow[0] && (!strcmp(allow, "*") || !strcmp(allow, origin)))
        return true;
    if (lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) <= 0)
        return false;
    const char *o = strstr(origin, "://");
    return o && !strcasecmp(o + 3, host);
}

int wschan_confirm(gw_t *g, struct lws *wsi, const struct route *rt, struct gw_refusal *no)
{
    char sid[SESSION_ID_MAX + 16];
    struct gw_caller who;
    int retry = 0, st = auth_request(g, wsi, &who, &retry);
    if (st)
        return gw_refuse_auth(no, st, retry);
    if (!wschan_origin_ok(g, wsi)) {
        log_info("ws: websocket from a foreign origin refused");
        return gw_refuse(no, 403, 0, "origin not allowed");
    }
    if (!kernel_of(g, rt, who.tenant))
        return gw_refuse(no, 404, 0, "Kernel does not exist");
    const char *s = lws_get_urlarg_by_name(wsi, "session_id=", sid, sizeof(sid));
    if (s && *s && !ident_str_ok(s, IDENT_TOKEN))
        return gw_refuse(no, 400, 0, "invalid session_id");
    return 0;
}

static int on_established(gw_t *g, struct lws *wsi, struct gw_pss *pss)
{
    char sidbuf[SESSION_ID_MAX + 16], sid[SESSION_ID_MAX + 1];
    const char *tenant = auth_tenant(g, wsi);
    kernel_t *k = kernel_of(g, &pss->route, tenant);
    if (!k)
        return -1;
    const char *s = lws_get_urlarg_by_name(wsi, "session_id=", sidbuf, sizeof(sidbuf));
    if (s && *s && ident_str_ok(s, IDENT_TOKEN))
        snprintf(sid, sizeof(sid), "%s", s);
    else
        util_uuid(sid);
    const struct lws_protocols *p = lws_get_protocol(wsi);

    struct wsconn *ws = calloc(1, sizeof(*ws));
    khub_t *hub = hub_get(g, k);
    if (!ws || !hub) {
        free(ws);
        return -1;
    }
    ws->g = g;
    ws->wsi = wsi;
    snprintf(ws->tenant, sizeof(ws->tenant), "%s", tenant);
    ws->proto = p && p->name && !strcmp(p->name, WSMSG_V1_NAME) ? WSPROTO_V1 : WSPROTO_LEGACY;
    buf_init(&ws->in, (size_t)g->cfg.max_ws_message_bytes);

    wsess_t *sess = NULL, *it;
    list_for_each(it, &hub->sessions, link)
    {
        if (!strcmp(it->id, sid)) {
            sess = it;
            break;
        }
    }
    if (sess && sess->ws) {
        log_info("ws: replacing stale connection for session %s on kernel=%s", sid, kernel_id(k));
        struct wsconn *old = sess->ws;
        sess_detach(sess, old);
        old->sess = NULL;
        kernel_connections(k, -1);
        wsq_close(&old->out, 1000, "replaced by a newer connection for this session", false);
    }
    if (!sess) {
        sess = calloc(1, sizeof(*sess));
        if (!sess)
            goto fail;
        sess->hub = hub;
        list_init(&sess->link);
        snprintf(sess->id, sizeof(sess->id), "%s", sid);
        sess->linger = g->loop.evl.timer_new(&g->loop.evl, on_linger, sess);
        sess->kc = kconn_new(k, sid, &sess_ops, sess);
        if (!sess->kc || !sess->linger) {
            log_warn("ws: cannot connect session %s to kernel=%s: %s", sid, kernel_id(k),
                     strerror(errno));
            kconn_destroy(&sess->kc);
            evl_timer_destroy(&g->loop.evl, &sess->linger);
            free(sess);
            goto fail;
        }
        list_prepend(&hub->sessions, &sess->link);
    }
    g->loop.evl.timer_disarm(&g->loop.evl, sess->linger);
    ws->sess = sess;
    snprintf(ws->who, sizeof(ws->who), "session %s", sid);
    wsq_init(&ws->out, wsi, (size_t)g->cfg.max_ws_queue_bytes, ws->who);
    sess_attach(sess, ws);
    pss->ws = ws;
    kernel_connections(k, 1);
    kernel_touch(k);
    g->connections++;
    g->stats.websockets[GW_FACE_CHANNELS]++;
    log_info("ws: connected to kernel=%s session %s (%s)", kernel_id(k), sid,
             ws->proto == WSPROTO_V1 ? WSMSG_V1_NAME : "legacy");
    return 0;
fail:
    buf_fini(&ws->in);
    free(ws);
    return -1;
}

static void on_message(struct wsconn *ws)
{
    wsmsg_t wm;
    char q[80];
    int r = wsmsg_decode(ws->proto, ws->in_binary, ws->in.data, ws->in.len, &wm);
    if (r < 0) {
        ws->bad++;
        log_warn("ws: session %s: %s frame dropped (%d so far)", ws->sess->id,
                 r == -ENOENT ? "unknown channel in" : "malformed", ws->bad);
        if (ws->bad > WS_MAX_BAD)
            wsq_close(&ws->out, r == -ENOENT ? 1008 : 1007, "too many invalid messages", false);
        return;
    }
    if (wm.chan == JCHAN_IOPUB) {
        log_debug("ws: session %s: message on iopub from a client dropped", ws->sess->id);
    } else {
        log_debug("ws: session %s: %s %s", ws->sess->id, jchan_name(wm.chan),
                  log_quote(q, sizeof(q), wm.hdr.msg_type, strlen(wm.hdr.msg_type)));
        r = kconn_send(ws->sess->kc, wm.chan, &wm.m, &wm.hdr);
        if (r == -EAGAIN)
            wsq_close(&ws->out, 1013, "kernel is not accepting messages", false);
        else if (r < 0)
            log_warn("ws: session %s: send to kernel failed: %s", ws->sess->id, strerror(-r));
        ws->g->last_activity_us = util_wall_us();
    }
    wsmsg_fini(&wm);
}

static int on_receive(struct wsconn *ws, const void *in, size_t len)
{
    if (ws->out.closing)
        return 0;
    if (!ws->in_msg) {
        ws->in_msg = true;
        ws->in_binary = lws_frame_is_binary(ws->wsi);
        buf_reset(&ws->in);
    }
    if (buf_append(&ws->in, in, len) < 0) {
        log_warn("ws: session %s: message over %lld bytes; closing",
                 ws->sess ? ws->sess->id : "?", ws->g->cfg.max_ws_message_bytes);
        ws->g->stats.refused[GW_REFUSED_BAD_INPUT]++;
        lws_close_reason(ws->wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE,
                         (unsigned char *)"message too large", 17);
        return -1;
    }
    if (lws_is_final_fragment(ws->wsi) && lws_remaining_packet_payload(ws->wsi) == 0) {
        ws->in_msg = false;
        auth_ws_message(ws->g, ws->wsi, ws->tenant);
        if (ws->sess)
            on_message(ws);
        buf_reset(&ws->in);
    }
    return 0;
}

static void on_closed(gw_t *g, struct gw_pss *pss)
{
    struct wsconn *ws = pss->ws;
    if (!ws)
        return;
    pss->ws = NULL;
    wsess_t *s = ws->sess;
    if (s) {
        sess_detach(s, ws);
        kernel_connections(s->hub->k, -1);
        g->loop.evl.timer_arm(&g->loop.evl, s->linger, (uint64_t)g->cfg.session_linger * 1000);
    }
    g->connections--;
    g->stats.websockets[GW_FACE_CHANNELS]--;
    wsq_fini(&ws->out);
    buf_fini(&ws->in);
    free(ws);
}

int wschan_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason,
                    struct gw_pss *pss, void *in, size_t len)
{
    switch (reason) {
    case LWS_CALLBACK_ESTABLISHED:
        return on_established(g, wsi, pss);
    case LWS_CALLBACK_RECEIVE:
        return pss->ws ? on_receive(pss->ws, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return pss->ws ? wsq_writeable(&pss->ws->out) : -1;
    case LWS_CALLBACK_CLOSED:
        on_closed(g, pss);
        return 0;
    default:
        return 0;
    }
}

void wschan_close_all(gw_t *g, int code, const char *reason)
{
    for (size_t i = 0; i < kmgr_count(g->km); i++) {
        khub_t *hub = hub_of(g, kmgr_at(g->km, i));
        wsess_t *s;
        if (!hub)
            continue;
        list_for_each(s, &hub->sessions, link)
        {
            if (s->ws)
                wsq_close(&s->ws->out, code, reason, true);
        }
    }
}
