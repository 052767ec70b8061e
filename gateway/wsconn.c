/* wsconn: the websocket connection base (see wsconn.h). */
#include "gateway/wsconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "gateway/auth.h"

bool wsconn_origin_ok(gw_t *g, struct lws *wsi)
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

/* Browsers send Origin; scripts usually do not. A browser page may open a websocket to any
 * host, so, as jupyter_server does, only the server's own origin (same host) or the configured
 * --allow-origin may. */
/* Websockets open per tenant: a tenant holds at most a quarter of --max-connections (at
 * least WSCONN_TENANT_MIN), so one tenant cannot take every websocket. */
#define WSCONN_TENANT_MIN 16

struct wsconn_share {
    struct wsconn_share *next;
    int n;
    char tenant[KEYFILE_TENANT_MAX + 1];
};

static struct wsconn_share *share_find(gw_t *g, const char *tenant)
{
    for (struct wsconn_share *s = g->ws_shares; s; s = s->next)
        if (!strcmp(s->tenant, tenant))
            return s;
    return NULL;
}

static int share_max(const gw_t *g)
{
    long long n = g->cfg.max_connections / 4;
    return n < WSCONN_TENANT_MIN ? WSCONN_TENANT_MIN : (int)n;
}

int wsconn_confirm(gw_t *g, struct lws *wsi, const char *name, struct gw_caller *ret_who,
                   struct gw_refusal *no)
{
    int retry = 0, st = auth_request(g, wsi, ret_who, &retry);
    if (st)
        return gw_refuse_auth(no, st, retry);
    /* a full gateway answers 503 for everyone (main.c); a tenant's share is 429 before that */
    const struct wsconn_share *sh = share_find(g, ret_who->tenant);
    if (sh && sh->n >= share_max(g) && g->connections < g->cfg.max_connections) {
        log_info("%s: websocket of tenant \"%s\" refused: it has %d open, its share", name,
                 ret_who->tenant, sh->n);
        g->stats.refused[GW_REFUSED_CONNECTION_CAP]++;
        return gw_refuse(no, 429, 5,
                         "this tenant has its share of websockets open (a quarter of "
                         "--max-connections); close some or retry later");
    }
    if (!wsconn_origin_ok(g, wsi)) {
        log_info("%s: websocket from a foreign origin refused", name);
        return gw_refuse(no, 403, 0, "origin not allowed");
    }
    return 0;
}

void wsconn_init(wsconn_t *w, gw_t *g, struct lws *wsi, enum gw_face face,
                 const struct wsconn_ops *ops, const char *tenant, size_t max_msg)
{
    w->g = g;
    w->wsi = wsi;
    w->ops = ops;
    w->face = face;
    w->in_max = max_msg;
    snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
    buf_init(&w->in, max_msg);
    wsq_init(&w->out, wsi, (size_t)g->cfg.max_ws_queue_bytes, w->who);
    g->connections++;
    g->stats.websockets[face]++;
    if (!(w->share = share_find(g, tenant)) && (w->share = calloc(1, sizeof(*w->share)))) {
        snprintf(w->share->tenant, sizeof(w->share->tenant), "%s", tenant);
        w->share->next = g->ws_shares;
        g->ws_shares = w->share;
    }
    if (w->share) /* else uncounted (out of memory): the gateway's cap still holds */
        w->share->n++;
}

void wsconn_fini(wsconn_t *w)
{
    if (w->share && --w->share->n == 0) {
        struct wsconn_share **pp = &w->g->ws_shares;
        while (*pp != w->share)
            pp = &(*pp)->next;
        *pp = w->share->next;
        free(w->share);
    }
    w->share = NULL;
    w->g->connections--;
    w->g->stats.websockets[w->face]--;
    wsq_fini(&w->out);
    buf_fini(&w->in);
}

void wsconn_close(wsconn_t *w, int code, const char *reason, bool flush_first)
{
    wsq_close(&w->out, code, reason, flush_first);
}

static int on_receive(wsconn_t *w, const void *in, size_t len)
{
    if (w->out.closing)
        return 0;
    if (!w->in_msg) {
        w->in_msg = true;
        w->in_binary = lws_frame_is_binary(w->wsi);
        buf_reset(&w->in);
    }
    if (buf_append(&w->in, in, len) < 0) {
        log_warn("%s: %s: message over %zu bytes; closing", w->ops->name, w->who, w->in_max);
        w->g->stats.refused[GW_REFUSED_BAD_INPUT]++;
        lws_close_reason(w->wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE,
                         (unsigned char *)"message too large", 17);
        return -1;
    }
    if (lws_is_final_fragment(w->wsi) && lws_remaining_packet_payload(w->wsi) == 0) {
        w->in_msg = false;
        auth_ws_message(w->g, w->wsi, w->tenant);
        w->ops->message(w);
        buf_reset(&w->in);
    }
    return 0;
}

int wsconn_callback(wsconn_t **slot, enum lws_callback_reasons reason, void *in, size_t len)
{
    wsconn_t *w = *slot;
    switch (reason) {
    case LWS_CALLBACK_RECEIVE:
        return w ? on_receive(w, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return w ? wsq_writeable(&w->out) : -1;
    case LWS_CALLBACK_CLOSED:
        if (w) {
            *slot = NULL;
            w->ops->closed(w);
        }
        return 0;
    default:
        return 0;
    }
}
