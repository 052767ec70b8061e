/* POST /api/kernels/{id}/fork: a new kernel holding the state of a running kernel, or of one
 * of its checkpoints (docs/checkpoints.md "Fork"). */
#ifndef KGW_GATEWAY_GFORK_H
#define KGW_GATEWAY_GFORK_H

#include <stdbool.h>
#include <stddef.h>

struct gw_req;

/* The route's handler. */
void gfork_kernel(struct gw_req *r);
/* Whether the n bytes at s are a checkpoint id: [A-Za-z0-9][A-Za-z0-9_-]{0,63}. */
bool gfork_checkpoint_ok(const char *s, size_t n);

#endif
