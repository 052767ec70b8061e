/* conns.c: client connections by descriptor. */
#ifndef KGW_GATEWAY_CONNS_H
#define KGW_GATEWAY_CONNS_H

#include <libwebsockets.h>
#include <stddef.h>

#include "gateway/gw.h"
#include "gateway/route.h"

/* conns.c: client connections by descriptor. Each counts against its address's open
 * connections (--max-connections-per-address) and, until its request headers are complete,
 * against the address's connections in their header phase (--max-header-connections-per-
 * address); one at either limit is refused at accept. A connection whose headers are not
 * complete within --header-timeout is answered 408 (plain HTTP) and closed. */
/* NULL + errno. slots: the descriptor limit. */
conns_t *conns_new(gw_t *g, size_t slots);
void conns_destroy(conns_t **c);
/* LWS_CALLBACK_FILTER_NETWORK_CONNECTION: 0 accept, 1 refuse. */
int conns_accept(conns_t *c, const struct lws_filter_network_conn_args *a);
/* LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: lws made the accepted connection's wsi. */
void conns_started(conns_t *c, struct lws *wsi);
/* Request headers complete (LWS_CALLBACK_HTTP, a websocket upgrade): the header phase ends. */
void conns_headers_done(conns_t *c, struct lws *wsi);
/* LWS_CALLBACK_WSI_DESTROY (any wsi) */
void conns_closed(conns_t *c, struct lws *wsi);
/* A websocket's route, matched at its upgrade (LWS_CALLBACK_HTTP_CONFIRM_UPGRADE), kept with
 * its connection until LWS_CALLBACK_ESTABLISHED takes it: 0, -ENOENT (not a connection of
 * ours) or -ENOMEM. */
int conns_set_route(conns_t *c, struct lws *wsi, const struct route *rt);
/* Moves the route kept by conns_set_route into out: 0, or -ENOENT when there is none. */
int conns_take_route(conns_t *c, struct lws *wsi, struct route *out);

#endif
