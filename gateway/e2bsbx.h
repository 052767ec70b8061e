/* e2bsbx.c: the sandbox plane of the E2B-compatible API (docs/e2b.md), under /e2b/sbx: the
 * sandbox named by E2b-Sandbox-Id, its X-Access-Token or E2B-Traffic-Access-Token; /health,
 * /execute, /contexts, /files and the Connect-RPC calls of filesystem.Filesystem and
 * process.Process. The sandboxes and the control plane are e2b.h's. */
#ifndef KGW_GATEWAY_E2BSBX_H
#define KGW_GATEWAY_E2BSBX_H

#include "gateway/http.h"

/* /e2b/sbx/{path} (public: authenticated here by the sandbox's tokens). */
void e2bsbx_handle(struct gw_req *r);
/* route_ops write and fini: an /execute or process stream, a POST /files being written. */
int e2bsbx_write(struct gw_req *r);
void e2bsbx_req_fini(struct gw_req *r);

#endif
