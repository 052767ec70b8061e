/* The event loop (common/evl.h) on libwebsockets' own loop: fds are adopted as raw file
 * descriptors, timers are lws "sul" timers. */
#ifndef KGW_GATEWAY_LWSLOOP_H
#define KGW_GATEWAY_LWSLOOP_H

#include <libwebsockets.h>

#include "common/evl.h"

#define LWSLOOP_PROTOCOL "kgw-io"

typedef struct lwsloop {
    evl_t evl; /* first: the evl_t pointer is the lwsloop_t pointer */
    struct lws_context *ctx;
    struct lws_vhost *vh;
} lwsloop_t;

void lwsloop_init(lwsloop_t *l, struct lws_context *ctx, struct lws_vhost *vh);
/* The protocol callback for adopted fds (listed in the vhost's protocols). */
int lwsloop_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len);

#endif
