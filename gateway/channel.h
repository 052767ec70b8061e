/* channel.c: the /channel RPC websocket. */
#ifndef KGW_GATEWAY_CHANNEL_H
#define KGW_GATEWAY_CHANNEL_H

#include <jansson.h>
#include <libwebsockets.h>
#include <stdint.h>

#include "gateway/gw.h"
#include "gateway/route.h"
#include "kernelmgr/kernel.h"

/* Once, before anything else: the empty list of connections. */
void channel_init(gw_t *g);
/* Checks a /channel upgrade request: 0 proceed, else the HTTP status of the refusal in no. */
int channel_confirm(gw_t *g, struct lws *wsi, const struct route *rt, struct gw_refusal *no);
int channel_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason,
                     struct gw_pss *pss, void *in, size_t len);
/* Subscribes /channel to kernel events, and makes it the handler of kernel callbacks. */
int channel_listen(gw_t *g);
/* Closes every /channel websocket with code and reason, after what is queued for it. */
void channel_close_all(gw_t *g, int code, const char *reason);
/* kmgr hook: a kernel calls its execution's /channel client (kgw_tools). */
void channel_call(void *user, kernel_t *k, uint64_t call_id, const char *name, json_t *args,
                  json_t *kwargs, const char *exec_msg_id);

#endif
