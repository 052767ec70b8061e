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
#include "gateway/wsconn.h"
#include "gateway/wsq.h"
#include "kernelmgr/kconn.h"
#include "protocol/wsmsg.h"

#define WS_MAX_BAD     16  /* malformed frames tolerated before the connection is closed */
#define SESSION_ID_MAX IDENT_TOKEN_MAX /* session ids are IDENT_TOKEN names */

typedef struct khub khub_t;
typedef struct wsess wsess_t;

/* one websocket: the base, and the session it serves */
struct wsch {
    wsconn_t wc;
    wsess_t *sess;
    enum wsproto proto;
    int bad;
};

struct wsess {
    khub_t *hub;
    kconn_t *kc;
    char id[SESSION_ID_MAX + 1];
    struct wsch *ws;
    evl_timer_t *linger;
    /* while no websocket is attached, what the session would have received, replayed to the
     * next websocket of the same protocol (as jupyter_server does after a network blip) */
    bool buffering;
    enum wsproto buf_proto;
    blob_t **buf;
    size_t nbuf, cap, buf_bytes;
    struct wschan_share *share; /* its tenant's replay bytes, while it holds some */
    struct list link; /* on hub->sessions */
};

/* The replay bytes of one tenant's detached sessions: at most a quarter of --max-replay-bytes,
 * so one tenant's sessions cannot use up what every tenant's share. */
struct wschan_share {
    struct wschan_share *next;
    size_t bytes;
    char tenant[KEYFILE_TENANT_MAX + 1];
};

#define SESSION_BUFFER_MAX 10000 /* messages */

struct khub {
    gw_t *g;
    kernel_t *k;
    struct list sessions; /* wsess_t.link, newest first */
};

/* ---- kernel -> clients ---- */

static struct wschan_share *share_get(gw_t *g, const char *tenant)
{
    struct wschan_share *sh;
    for (sh = g->replay_shares; sh; sh = sh->next)
        if (!strcmp(sh->tenant, tenant))
            return sh;
    if (!(sh = calloc(1, sizeof(*sh))))
        return NULL;
    snprintf(sh->tenant, sizeof(sh->tenant), "%s", tenant);
    sh->next = g->replay_shares;
    g->replay_shares = sh;
    return sh;
}

static void share_put(gw_t *g, wsess_t *s)
{
    struct wschan_share *sh = s->share, **pp = &g->replay_shares;
    s->share = NULL;
    if (!sh)
        return;
    sh->bytes -= s->buf_bytes;
    if (sh->bytes > 0)
        return;
    while (*pp != sh)
        pp = &(*pp)->next;
    *pp = sh->next;
    free(sh);
}

static void buf_clear(wsess_t *s)
{
    for (size_t i = 0; i < s->nbuf; i++)
        blob_unref(&s->buf[i]);
    free(s->buf);
    share_put(s->hub->g, s);
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
    gw_t *g = s->hub->g;
    if (!s->share && !(s->share = share_get(g, wspace_tenant(kernel_workspace(s->hub->k))))) {
        buf_clear(s);
        s->buffering = false;
        return;
    }
    if (s->nbuf == SESSION_BUFFER_MAX ||
        /* the tenant's share of the total */
        s->share->bytes + b->len > (size_t)g->cfg.max_replay_bytes / 4 ||
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
    s->share->bytes += b->len;
    s->hub->g->replay_bytes += b->len;
}

static void deliver(wsess_t *s, blob_t **enc, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    struct wsch *ws = s->ws;
    if (ws ? ws->wc.out.closing : !s->buffering)
        return;
    enum wsproto p = ws ? ws->proto : s->buf_proto;
    if (!enc[p])
        enc[p] = wsmsg_encode(p, chan, m, h, LWS_PRE);
    if (!enc[p]) {
        log_warn("ws: cannot encode %s message: %s", h->msg_type, strerror(errno));
        return;
    }
    /* held while any queue (a websocket's, a detached session's) holds it */
    blob_charge(enc[p], kernel_out_share(s->hub->k));
    if (ws)
        wsq_push(&ws->wc.out, enc[p]);
    else
        buf_add(s, enc[p]);
}

/* The websocket is going: what it had not sent yet is kept for the next one. */
static void sess_detach(wsess_t *s, struct wsch *ws)
{
    s->ws = NULL;
    s->buffering = true;
    s->buf_proto = ws->proto;
    for (blob_t *b; (b = wsq_pop(&ws->wc.out));) { /* a partly sent message is sent again whole */
        buf_add(s, b);
        blob_unref(&b);
    }
}

static void sess_attach(wsess_t *s, struct wsch *ws)
{
    s->ws = ws;
    if (s->nbuf > 0 && s->buf_proto == ws->proto) {
        log_info("ws: session %s: replaying %zu messages", s->id, s->nbuf);
        for (size_t i = 0; i < s->nbuf; i++)
            wsq_push(&ws->wc.out, s->buf[i]);
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

/* An iopub message made by the gateway itself, in its own Jupyter session: to one session
 * (to), or to every session of the hub (to NULL). */
static void send_own(khub_t *hub, wsess_t *to, const char *msg_type, jspan_t parent,
                     const char *content)
{
    jhdr_t h;
    char *hdr = jmsg_new_header(msg_type, hub->g->server_session, h.msg_id);
    if (!hdr)
        return;
    jmsg_t m;
    jmsg_own(&m, &h, hdr, h.msg_id, msg_type, NULL, content);
    m.part[JPART_PARENT] = parent; /* a span of the kernel's message, not a string */
    if (to) {
        blob_t *enc[WSPROTO_N] = {0};
        deliver(to, enc, JCHAN_IOPUB, &m, &h);
        for (int i = 0; i < WSPROTO_N; i++)
            blob_unref(&enc[i]);
    } else {
        broadcast(hub, JCHAN_IOPUB, &m, &h);
    }
    free(hdr);
}

/* A status message with parent_header {}, as jupyter_server sends on restarts and deaths. */
static void send_status(khub_t *hub, wsess_t *to, const char *state)
{
    char content[64];
    snprintf(content, sizeof(content), "{\"execution_state\":\"%s\"}", state);
    send_own(hub, to, "status", (jspan_t){"{}", 2}, content);
}

static void on_notice(void *user, kernel_t *k, jspan_t parent, const char *text)
{
    khub_t *hub = hub_of(user, k);
    char line[600];
    if (!hub || !jmsg_is_json_object(parent))
        return;
    snprintf(line, sizeof(line), "\n[kgw] %s\n", text);
    json_t *c = json_pack("{s:s, s:s}", "name", "stderr", "text", line);
    char *content = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    if (content)
        send_own(hub, NULL, "stream", parent, content);
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
            wsq_close(&s->ws->wc.out, code, reason, true);
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
            send_status(hub, NULL, "restarting");
        break;
    case KERNEL_EV_STARTED:
        break;
    case KERNEL_EV_DIED:
        if (hub) {
            send_status(hub, NULL, "dead");
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
            send_status(hub, NULL, "starting");
        break;
    case KERNEL_EV_N:
        break;
    }
}

/* The kernel's output share is past its ceiling (kernelmgr/kout.c): the websockets and
 * detached sessions holding more than min bytes of its output let it go. */
static unsigned on_overflow(void *user, kernel_t *k, size_t min)
{
    khub_t *hub = hub_of(user, k);
    wsess_t *s;
    unsigned n = 0;
    if (!hub)
        return 0;
    list_for_each(s, &hub->sessions, link)
    {
        if (s->ws && s->ws->wc.out.qbytes > min) {
            if (!s->ws->wc.out.closing) {
                log_warn("ws: %s is not reading its kernel's output (%zu bytes queued, past "
                         "the kernel's share); disconnecting",
                         s->ws->wc.who, s->ws->wc.out.qbytes);
                n++;
            }
            /* not kept for a replay either; a socket already closing drops it too */
            wsq_clear(&s->ws->wc.out);
            wsq_close(&s->ws->wc.out, 1008, "client too slow: kernel output share exceeded", false);
        } else if (!s->ws && s->buffering && s->buf_bytes > min) {
            log_warn("ws: session %s: too much output while disconnected (%zu bytes, past "
                     "the kernel's share); not replaying it",
                     s->id, s->buf_bytes);
            buf_clear(s);
            s->buffering = false;
            n++;
        }
    }
    return n;
}

static const struct kmgr_listener_ops listener_ops = {
    .iopub = on_iopub, .event = on_event, .notice = on_notice, .overflow = on_overflow};

int wschan_listen(gw_t *g)
{
    return kmgr_listen(g->km, &g->ws_listener, &listener_ops, g);
}

/* ---- websocket callbacks ---- */

/* The kernel of the channels URL (its route, matched at the upgrade), if it is the caller's
 * tenant's and usable. */
static kernel_t *kernel_of(gw_t *g, const struct route *rt, const char *tenant)
{
    if (!rt->def || rt->def->ops.ws_confirm != wschan_confirm)
        return NULL;
    kernel_t *k = gw_kernel(g, rt->arg[0], tenant);
    if (!k || kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD)
        return NULL;
    return k;
}

int wschan_confirm(gw_t *g, struct lws *wsi, const struct route *rt, struct gw_refusal *no)
{
    char sid[SESSION_ID_MAX + 16];
    struct gw_caller who;
    int st = wsconn_confirm(g, wsi, "ws", &who, no);
    if (st)
        return st;
    if (!kernel_of(g, rt, who.tenant))
        return gw_refuse(no, 404, 0, "Kernel does not exist");
    const char *s = lws_get_urlarg_by_name(wsi, "session_id=", sid, sizeof(sid));
    if (s && *s && !ident_str_ok(s, IDENT_TOKEN))
        return gw_refuse(no, 400, 0, "invalid session_id");
    return 0;
}

static void on_message(wsconn_t *w);
static void on_closed(wsconn_t *w);
static const struct wsconn_ops wsch_ops = {.name = "ws", .message = on_message, .closed = on_closed};

int wschan_open(gw_t *g, struct lws *wsi, struct gw_pss *pss)
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

    struct wsch *ws = calloc(1, sizeof(*ws));
    khub_t *hub = hub_get(g, k);
    if (!ws || !hub) {
        free(ws);
        return -1;
    }
    wsconn_init(&ws->wc, g, wsi, GW_FACE_CHANNELS, &wsch_ops, tenant,
                (size_t)g->cfg.max_ws_message_bytes);
    ws->proto = p && p->name && !strcmp(p->name, WSMSG_V1_NAME) ? WSPROTO_V1 : WSPROTO_LEGACY;

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
        struct wsch *old = sess->ws;
        sess_detach(sess, old);
        old->sess = NULL;
        kernel_connections(k, -1);
        wsq_close(&old->wc.out, 1000, "replaced by a newer connection for this session", false);
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
    snprintf(ws->wc.who, sizeof(ws->wc.who), "session %s", sid);
    sess_attach(sess, ws);
    pss->wc = &ws->wc;
    kernel_connections(k, 1);
    kernel_touch(k);
    log_info("ws: connected to kernel=%s session %s (%s)", kernel_id(k), sid,
             ws->proto == WSPROTO_V1 ? WSMSG_V1_NAME : "legacy");
    /* The connection hears the kernel's state at once, after any replay: a client whose
     * first kernel_info_request is lost on the way would otherwise show the state as unknown
     * until its next request (jupyter_server 1.x's gateway client drops what its client sends
     * before its own websocket to the gateway is open). */
    send_status(hub, sess, kernel_execution_state(k));
    return 0;
fail:
    wsconn_fini(&ws->wc);
    free(ws);
    return -1;
}

static void on_message(wsconn_t *w)
{
    struct wsch *ws = container_of(w, struct wsch, wc);
    wsmsg_t wm;
    char q[80];
    if (!ws->sess)
        return;
    int r = wsmsg_decode(ws->proto, w->in_binary, w->in.data, w->in.len, &wm);
    if (r < 0) {
        ws->bad++;
        log_warn("ws: session %s: %s frame dropped (%d so far)", ws->sess->id,
                 r == -ENOENT ? "unknown channel in" : "malformed", ws->bad);
        if (ws->bad > WS_MAX_BAD)
            wsq_close(&ws->wc.out, r == -ENOENT ? 1008 : 1007, "too many invalid messages", false);
        return;
    }
    if (wm.chan == JCHAN_IOPUB) {
        log_debug("ws: session %s: message on iopub from a client dropped", ws->sess->id);
    } else {
        log_debug("ws: session %s: %s %s", ws->sess->id, jchan_name(wm.chan),
                  log_quote(q, sizeof(q), wm.hdr.msg_type, strlen(wm.hdr.msg_type)));
        r = kconn_send(ws->sess->kc, wm.chan, &wm.m, &wm.hdr);
        if (r == -EAGAIN)
            wsq_close(&ws->wc.out, 1013, "kernel is not accepting messages", false);
        else if (r == -EPERM)
            wsq_close(&ws->wc.out, 1008, "message type reserved for the gateway", false);
        else if (r < 0)
            log_warn("ws: session %s: send to kernel failed: %s", ws->sess->id, strerror(-r));
        w->g->last_activity_us = util_wall_us();
    }
    wsmsg_fini(&wm);
}

static void on_closed(wsconn_t *w)
{
    struct wsch *ws = container_of(w, struct wsch, wc);
    gw_t *g = w->g;
    wsess_t *s = ws->sess;
    if (s) {
        sess_detach(s, ws);
        kernel_connections(s->hub->k, -1);
        g->loop.evl.timer_arm(&g->loop.evl, s->linger, (uint64_t)g->cfg.session_linger * 1000);
    }
    wsconn_fini(w);
    free(ws);
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
                wsq_close(&s->ws->wc.out, code, reason, true);
        }
    }
}
