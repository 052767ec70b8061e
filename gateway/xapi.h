/* xapi.c: the execute API (docs/execute.md): POST /api/kernels/{id}/execute, the one-shot
 * POST /api/execute and executions as resources (rows of routes.c). */
#ifndef KGW_GATEWAY_XAPI_H
#define KGW_GATEWAY_XAPI_H

#include "gateway/gw.h"
#include "gateway/http.h"

void xapi_kernel_execute(struct gw_req *r);
void xapi_oneshot(struct gw_req *r);
/* GET or DELETE /api/executions/{id}, GET /api/executions/{id}/events */
void xapi_execution(struct gw_req *r);
/* The events of an execution being read (struct route_ops's write). */
int xapi_write(struct gw_req *r);
/* Frees the request's reader. */
void xapi_req_fini(struct gw_req *r);
/* Subscribes the execute API to kernel events and starts its store. */
int xapi_listen(gw_t *g);
/* Frees every execution (after the kernel manager is gone). */
void xapi_fini(gw_t *g);

#endif
