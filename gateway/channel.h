/* channel: the /channel RPC websocket face (docs/rpc.md). */
#ifndef KGW_GATEWAY_CHANNEL_H
#define KGW_GATEWAY_CHANNEL_H

#include <libwebsockets.h>

#include "gateway/gw.h"
#include "gateway/route.h"

/* Once, before anything else: the empty list of connections. */
void channel_init(gw_t *g);
/* Checks a /channel upgrade request (rt: its route, matched once by main.c): 0 proceed, else
 * the HTTP status of the refusal in no. */
int channel_confirm(gw_t *g, struct lws *wsi, const struct route *rt, struct gw_refusal *no);
/* LWS_CALLBACK_ESTABLISHED of a /channel websocket: 0, or -1 to close it. */
int channel_open(gw_t *g, struct lws *wsi, struct gw_pss *pss);
/* Subscribes /channel to kernel events, and makes it the handler of kernel callbacks. */
int channel_listen(gw_t *g);
/* Closes every /channel websocket with code and reason, after what is queued for it. */
void channel_close_all(gw_t *g, int code, const char *reason);

#endif
