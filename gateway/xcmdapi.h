/* xcmdapi.c: commands over HTTP (docs/commands.md), rows of routes.c: POST
 * /api/kernels/{id}/commands streams a command's events (NDJSON or SSE, as the execute API),
 * DELETE /api/kernels/{id}/commands/{command_id} cancels it. The commands themselves are
 * xcmd.h's. */
#ifndef KGW_GATEWAY_XCMDAPI_H
#define KGW_GATEWAY_XCMDAPI_H

#include "gateway/http.h"

void xcmdapi_post(struct gw_req *r);
void xcmdapi_delete(struct gw_req *r);
int xcmdapi_write(struct gw_req *r);
void xcmdapi_req_fini(struct gw_req *r);

#endif
