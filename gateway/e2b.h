/* e2b.c: the E2B-compatible API (docs/e2b.md), rows of routes.c. An E2B sandbox
 * is a kgw workspace with its kernels (the first is the default code context,
 * more come from POST /contexts), owned by the tenant of the X-API-KEY that
 * created it, with a lifetime (its timeout: expiry shuts its kernels down) and
 * two random access tokens that the sandbox plane accepts and nothing else
 * does; they die with the sandbox. Control plane, under /e2b/api (the kgw key):
 * POST /sandboxes, POST /v2/sandboxes, GET [/v2]/sandboxes, GET and DELETE
 * /sandboxes/{id}, POST /sandboxes/{id}/timeout, POST
 * [/v2]/sandboxes/{id}/connect. Sandbox plane, under /e2b/sbx (the sandbox
 * named by E2b-Sandbox-Id, its X-Access-Token or E2B-Traffic-Access-Token):
 * /health, /execute, /contexts, /files and the Connect-RPC calls of
 * filesystem.Filesystem and process.Process (e2bsbx.h). */
#ifndef KGW_GATEWAY_E2B_H
#define KGW_GATEWAY_E2B_H

#include "gateway/gw.h"
#include "gateway/http.h"

/* Parses --e2b-templates and starts the sandboxes' clock; e2b_fini drops them
 * all. */
int e2b_listen(gw_t *g);
void e2b_fini(gw_t *g);
/* Whether a sandbox uses k (a restart in place ends such a kernel: sandboxes do not go
 * over). */
bool e2b_holds(gw_t *g, kernel_t *k);

/* The control plane's routes (authenticated as other routes): GET and POST [/v2]/sandboxes,
 * GET and DELETE /sandboxes/{id}, POST /sandboxes/{id}/timeout, POST /sandboxes/{id}/connect
 * (200) and /v2/sandboxes/{id}/connect (201), and the rest of /e2b/api (e2b_api_other: a
 * sandbox's metrics; 404 for an unknown sandbox, else 501, not offered). */
void e2b_sandboxes(struct gw_req *r);
void e2b_sandbox(struct gw_req *r);
void e2b_timeout(struct gw_req *r);
void e2b_connect(struct gw_req *r);
void e2b_connect_v2(struct gw_req *r);
/* POST /sandboxes/{id}/pause, POST /sandboxes/{id}/resume (connect resumes too) */
void e2b_pause(struct gw_req *r);
void e2b_resume(struct gw_req *r);
void e2b_api_other(struct gw_req *r);

#endif
