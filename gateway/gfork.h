/* POST /api/kernels/{id}/fork: a new kernel holding the state of a running kernel, or of one
 * of its checkpoints (docs/checkpoints.md "Fork"), through kops_fork (as MCP's fork tool). */
#ifndef KGW_GATEWAY_GFORK_H
#define KGW_GATEWAY_GFORK_H

#include <stddef.h>

#include "kernelmgr/kernel.h"

struct gw_req;

/* The route's handler. */
void gfork_kernel(struct gw_req *r);

#endif
