/* wsconn: what every websocket connection of the gateway has, whichever face it serves (the
 * Jupyter relay in wschan.c, the /channel RPC in chconn.c): the send queue, the assembly of a
 * fragmented message under a size limit (over it: close 1009), the writeable pump, and the
 * count of open websockets. A face embeds one wsconn_t in its connection and gives ops. */
#ifndef KGW_GATEWAY_WSCONN_H
#define KGW_GATEWAY_WSCONN_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "gateway/gw.h"
#include "gateway/wsq.h"

typedef struct wsconn wsconn_t;

struct wsconn_ops {
    const char *name; /* log lines: "<name>: <who>: ..." */
    /* a whole message is in w->in (w->in_binary: it came as binary frames) */
    void (*message)(wsconn_t *w);
    /* LWS_CALLBACK_CLOSED: the face lets go of its connection (it calls wsconn_fini) */
    void (*closed)(wsconn_t *w);
};

struct wsconn {
    gw_t *g;
    struct lws *wsi;
    const struct wsconn_ops *ops;
    enum gw_face face;
    wsq_t out;
    buf_t in;
    size_t in_max;
    bool in_msg, in_binary;
    char tenant[KEYFILE_TENANT_MAX + 1];
    struct wsconn_share *share; /* its tenant's count of open websockets (NULL: uncounted) */
    char who[96]; /* "session ...", "connection from ..." */
};

/* Checks a websocket upgrade's key and Origin: 0 (ret_who filled) or the HTTP status of the
 * refusal described in no. */
int wsconn_confirm(gw_t *g, struct lws *wsi, const char *name, struct gw_caller *ret_who,
                   struct gw_refusal *no);
/* Browsers send Origin: only the server's own or --allow-origin may open a websocket. */
bool wsconn_origin_ok(gw_t *g, struct lws *wsi);

/* Sets w up for wsi (a message may have max_msg bytes) and counts it as open; wsconn_fini
 * undoes it. */
void wsconn_init(wsconn_t *w, gw_t *g, struct lws *wsi, enum gw_face face,
                 const struct wsconn_ops *ops, const char *tenant, size_t max_msg);
void wsconn_fini(wsconn_t *w);
/* Closes with code and reason, after what is queued when flush_first. */
void wsconn_close(wsconn_t *w, int code, const char *reason, bool flush_first);
/* The face's lws callbacks once established (RECEIVE, SERVER_WRITEABLE, CLOSED) for the
 * connection in *slot (the per-session data's link, cleared on CLOSED). */
int wsconn_callback(wsconn_t **slot, enum lws_callback_reasons reason, void *in, size_t len);

#endif
