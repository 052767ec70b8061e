/* The event loop (common/evl.h) and libwebsockets on one libuv loop, on one thread. libuv
 * waits with epoll, so a turn costs what is ready, not what is watched: lws runs on it as a
 * foreign loop through its libuv event-lib plugin (every connection and listener a uv_poll_t),
 * kgw's own fds are uv_poll_t (no descriptor of their own, no lws wsi) and its timers
 * uv_timer_t (a heap: O(log n) to arm or disarm). */
#ifndef KGW_GATEWAY_LWSLOOP_H
#define KGW_GATEWAY_LWSLOOP_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/evl.h"
#include "common/list.h"

typedef struct lwsloop {
    evl_t evl; /* first: the evl_t pointer is the lwsloop_t pointer */
    uv_loop_t uv;
    struct lws_context *ctx; /* NULL: the loop without lws (tests) */
    /* lws's own idle handle: started after kgw's callbacks so lws looks at what they asked
     * of it (its timers, buffered input, flow control) before the loop next blocks */
    uv_idle_t *lws_idle;
    uv_idle_cb lws_idle_cb;
    uv_idle_t soon;   /* active while timers armed with 0 wait: the next turn does not block */
    struct list due;  /* those timers, in arming order */
    void *foreign[1]; /* {&uv}, for lws_context_creation_info.foreign_loops */
    bool live;        /* uv loop initialised */
} lwsloop_t;

/* Makes the loop (before lws_create_context: lwsloop_foreign() goes in its creation info).
 * -errno. */
int lwsloop_init(lwsloop_t *l);
/* What lws_context_creation_info.foreign_loops points at (with LWS_SERVER_OPTION_LIBUV). */
void **lwsloop_foreign(lwsloop_t *l);
/* lws's context, created on this loop. */
void lwsloop_attach(lwsloop_t *l, struct lws_context *ctx);
/* One turn: waits until something is ready or a timer is due and runs it. */
void lwsloop_turn(lwsloop_t *l);
/* Destroys the lws context (which closes its connections through the loop) and the loop. Every
 * watch and timer of the lower layers must be deleted before: -EBUSY when one was not (the
 * loop is then left as it is). Takes a half-made loop. */
int lwsloop_fini(lwsloop_t *l);

#endif
