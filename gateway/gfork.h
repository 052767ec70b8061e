/* POST /api/kernels/{id}/fork: a new kernel holding the state of a running kernel, or of one
 * of its checkpoints (docs/checkpoints.md "Fork"); MCP's fork tool (gateway/mcp.c) forks
 * through the same gfork_start. */
#ifndef KGW_GATEWAY_GFORK_H
#define KGW_GATEWAY_GFORK_H

#include <stddef.h>

#include "kernelmgr/kernel.h"

struct gw_req;

/* Why a fork was refused: an HTTP status and a message both faces give. */
struct gfork_error {
    int status;
    int retry_after; /* seconds for Retry-After; 0: none */
    char message[400];
};

/* The route's handler. */
void gfork_kernel(struct gw_req *r);

/* Forks parent (the caller's, found by the caller; running) now, or from its checkpoint cp
 * (NULL: now), audited as kernel_fork for r's caller. The new kernel is in *ret_k, starting:
 * wait for it (req_wait_kernel) and, if that fails, take the reason from gfork_failed and shut
 * it down. -ENOENT: no such checkpoint, -EBUSY: not running, -ETOOMANYREFS: at the fork limit,
 * or kmgr_fork's refusals; err says why. */
int gfork_start(
    struct gw_req *r, kernel_t *parent, const char *cp, kernel_t **ret_k, struct gfork_error *err);

/* Why the fork k did not become ready (kops_waited's code < 0): status and message. */
void gfork_failed(
    const struct gw_req *r, kernel_t *k, int code, int *status, char *msg, size_t len);

#endif
