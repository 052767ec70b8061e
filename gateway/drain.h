/* drain.c: the graceful shutdown (its state is gw_t's drain). */
#ifndef KGW_GATEWAY_DRAIN_H
#define KGW_GATEWAY_DRAIN_H

#include <stdbool.h>

#include "gateway/gw.h"

#define DRAIN_RETRY_AFTER_S 5 /* Retry-After of what a drain refuses */
#define DRAIN_MESSAGE                                                                              \
    "the gateway is shutting down (draining): it starts no new kernels; retry on another "      \
    "instance"
#define DRAIN_CLOSE_REASON "the gateway is shutting down"
#define DRAIN_RESTART_CODE   1012 /* RFC 6455 "service restart": clients reconnect */
#define DRAIN_RESTART_REASON "service restart"
/* close_websockets: closes every face's websockets (faces_close), called when the drain
 * closes; drain.c names no face. */
int drain_init(gw_t *g, void (*close_websockets)(gw_t *g, int code, const char *reason),
               bool (*keeps)(gw_t *g, kernel_t *k));
void drain_fini(gw_t *g);
/* SIGTERM: drain (a second one: stop waiting for executions); SIGINT: close without waiting;
 * either while closing: stop now. Sets g->stopping when the loop should end. */
void drain_signal(gw_t *g, int signo);
/* SIGUSR2: a restart in place (gateway/handover.h): no new kernels, websockets closed with
 * 1012 and the kernels that cannot go over (drain_carries) shut down at once (no wait for
 * executions), then the loop ends with g->drain.restart set. -EBUSY (nothing done) when a
 * drain has begun. A stop signal after it clears g->drain.restart (every kernel ends). */
int drain_restart(gw_t *g);
/* Whether k goes over the restart under way: kmgr_carriable, and the faces keep it. */
bool drain_carries(gw_t *g, kernel_t *k);
/* A drain has begun (no new kernels); closing: websockets and kernels are going. */
bool drain_active(const gw_t *g);
bool drain_closing(const gw_t *g);

#endif
