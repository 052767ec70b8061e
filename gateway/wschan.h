/* wschan.c: the Jupyter websocket, /api/kernels/{id}/channels. */
#ifndef KGW_GATEWAY_WSCHAN_H
#define KGW_GATEWAY_WSCHAN_H

#include <libwebsockets.h>

#include "gateway/gw.h"
#include "gateway/route.h"

#define WSCHAN_LEGACY_NAME "kgw" /* lws protocol 0: HTTP, and websockets offering no subprotocol */
/* Checks a channels upgrade request (rt: its route, matched once by main.c): 0 proceed, else
 * the HTTP status of the refusal described in no. */
int wschan_confirm(gw_t *g, struct lws *wsi, const struct route *rt, struct gw_refusal *no);
/* LWS_CALLBACK_ESTABLISHED (pss->route is its match): 0, or -1 to close it. Its later
 * callbacks go to its websocket-connection base (wsconn.h). */
int wschan_open(gw_t *g, struct lws *wsi, struct gw_pss *pss);
/* Subscribes the relay to kernel events (iopub to the kernels' websockets; notices as iopub
 * stderr streams under their execution; statuses on restarts and deaths). */
int wschan_listen(gw_t *g);
/* Closes every kernel websocket with code and reason, after what is queued for it. */
void wschan_close_all(gw_t *g, int code, const char *reason);

#endif
