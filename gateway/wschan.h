/* wschan.c: the Jupyter websocket, /api/kernels/{id}/channels. */
#ifndef KGW_GATEWAY_WSCHAN_H
#define KGW_GATEWAY_WSCHAN_H

#include <libwebsockets.h>
#include <stdbool.h>

#include "gateway/gw.h"
#include "gateway/route.h"

#define WSCHAN_LEGACY_NAME "kgw" /* lws protocol 0: HTTP, and websockets offering no subprotocol */
/* The websocket's callbacks (its route's row in routes.c; pss->route is its match). */
int wschan_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason,
                    struct gw_pss *pss, void *in, size_t len);
/* Checks a channels upgrade request (rt: its route, matched once by main.c): 0 proceed, else
 * the HTTP status of the refusal described in no. */
int wschan_confirm(gw_t *g, struct lws *wsi, const struct route *rt, struct gw_refusal *no);
/* Subscribes the relay to kernel events (iopub to the kernels' websockets; notices as iopub
 * stderr streams under their execution; statuses on restarts and deaths). */
int wschan_listen(gw_t *g);
/* Closes every kernel websocket with code and reason, after what is queued for it. */
void wschan_close_all(gw_t *g, int code, const char *reason);
/* Browsers send Origin: only the server's own or --allow-origin may open a websocket. */
bool wschan_origin_ok(gw_t *g, struct lws *wsi);

#endif
