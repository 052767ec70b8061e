/* auth.c: API keys, tenants and the client's address. */
#ifndef KGW_GATEWAY_AUTH_H
#define KGW_GATEWAY_AUTH_H

#include <libwebsockets.h>
#include <stddef.h>

#include "gateway/gw.h"
#include "gateway/ratelimit.h"

/* Loads --key-file (if any) plus the single key (if any). -errno with a reason in err. */
int auth_setup(gw_t *g, const char *single_key, char *err, size_t errsz);
/* SIGHUP: reloads the key file; on error the old keys stay. */
void auth_reload(gw_t *g);
/* The client's address: the socket peer, or X-Forwarded-For from a --trusted-proxies peer. */
void auth_peer(gw_t *g, struct lws *wsi, char out[RL_ADDR_MAX]);
/* Authenticates a request (Authorization: token|bearer, X-API-Key or ?token=): 0 (out filled),
 * 401 (no or wrong key), 429 (address over its failed-login limit, or tenant over its request
 * rate: retry_after seconds). Counts failures, writes log lines and audit events. */
int auth_request(gw_t *g, struct lws *wsi, struct gw_caller *out, int *retry_after);
/* Counts a websocket message against the tenant's rate; over it, reading that websocket pauses
 * until the bucket refills (main.c resumes it on LWS_CALLBACK_TIMER). */
void auth_ws_message(gw_t *g, struct lws *wsi, const char *tenant);
/* The tenant of the key a request presents, or NULL; no side effects. */
const char *auth_tenant(gw_t *g, struct lws *wsi);

#endif
