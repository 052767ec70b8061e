/* xapi.c: the execute API's HTTP face (docs/execute.md): POST /api/kernels/{id}/execute, the
 * one-shot POST /api/execute and executions as resources (rows of routes.c), on the
 * executions of gateway/xexec.c. */
#ifndef KGW_GATEWAY_XAPI_H
#define KGW_GATEWAY_XAPI_H

#include "gateway/gw.h"
#include "gateway/http.h"

void xapi_kernel_execute(struct gw_req *r);
void xapi_oneshot(struct gw_req *r);
/* GET or DELETE /api/executions/{id} */
void xapi_execution(struct gw_req *r);
/* GET /api/executions/{id}/events: the stream (xapi_write continues it) */
void xapi_execution_events(struct gw_req *r);
/* The events of an execution being read (struct route_ops's write). */
int xapi_write(struct gw_req *r);
/* Frees the request's reader. */
void xapi_req_fini(struct gw_req *r);

#endif
