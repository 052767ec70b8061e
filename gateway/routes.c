/* The route table: one row per route, its path pattern, methods and flags, and what serves it.
 * gateway/route.c matches a path against it (pure, unit-tested and fuzzed); the transport
 * (http.c, and main.c for websocket upgrades) calls the row it matched. The first row that
 * matches wins: a more specific pattern comes before a "{path}" that would take it too. Where
 * to add a route: docs/architecture.md. */
#include "gateway/routes.h"

#include "gateway/channel.h"
#include "gateway/ckptapi.h"
#include "gateway/e2b.h"
#include "gateway/e2bsbx.h"
#include "gateway/filesapi.h"
#include "gateway/gfork.h"
#include "gateway/mcp.h"
#include "gateway/metrics.h"
#include "gateway/playground.h"
#include "gateway/rest.h"
#include "gateway/sessions.h"
#include "gateway/wschan.h"
#include "gateway/xapi.h"
#include "gateway/xcmdapi.h"

#define GET    HTTP_M_GET
#define POST   HTTP_M_POST
#define PUT    HTTP_M_PUT
#define PATCH  HTTP_M_PATCH
#define DELETE HTTP_M_DELETE
#define HANDLE(fn) {.handle = fn}
#define UPLOAD(start)                                                                            \
    {.upload_start = start, .upload_body = filesapi_upload_body,                                 \
     .upload_done = filesapi_upload_done, .fini = filesapi_req_fini}
#define FILES(fn) {.handle = fn, .write = filesapi_download_write, .fini = filesapi_req_fini}
#define EXECUTES(fn) {.handle = fn, .write = xapi_write, .fini = xapi_req_fini}
#define CKPT(fn) {.handle = fn, .fini = ckptapi_req_fini}
#define SESSIONS(fn) {.handle = fn, .fini = sessions_req_fini}
#define WEBSOCKET(confirm, open) {.ws_confirm = confirm, .ws_open = open}

static const struct route_def routes[] = {
    {"/api", GET, ROUTE_F_PUBLIC, HANDLE(rest_api)},
    {"/api/status", GET, 0, HANDLE(rest_status)},
    {"/api/kernelspecs", GET, 0, HANDLE(rest_kspecs)},
    {"/api/kernelspecs/{name}", GET, 0, HANDLE(rest_kspec)},
    {"/kernelspecs/{name}/{name}", GET, 0, HANDLE(rest_kspec_resource)},
    {"/api/kernels", GET | POST, 0, HANDLE(rest_kernels)},
    {"/api/kernels/{id}", GET | DELETE, 0, HANDLE(rest_kernel)},
    {"/api/kernels/{id}/interrupt", POST, 0, HANDLE(rest_kernel_interrupt)},
    {"/api/kernels/{id}/restart", POST, 0, HANDLE(rest_kernel_restart)},
    {"/api/kernels/{id}/pause", POST, 0, HANDLE(rest_kernel_pause)},
    {"/api/kernels/{id}/resume", POST, 0, HANDLE(rest_kernel_resume)},
    {"/api/kernels/{id}/fork", POST, 0, HANDLE(gfork_kernel)},
    {"/api/kernels/{id}/execute", POST, 0, EXECUTES(xapi_kernel_execute)},
    {"/api/kernels/{id}/channels", GET, ROUTE_F_WEBSOCKET, WEBSOCKET(wschan_confirm, wschan_open)},
    {"/api/kernels/{id}/checkpoints", GET | POST, 0, CKPT(ckptapi_list)},
    {"/api/kernels/{id}/checkpoints/{id}", GET | DELETE, 0, CKPT(ckptapi_one)},
    {"/api/kernels/{id}/rollback", POST, 0, CKPT(ckptapi_rollback)},
    {"/api/execute", POST, 0, EXECUTES(xapi_oneshot)},
    {"/api/executions/{id}", GET | DELETE, 0, EXECUTES(xapi_execution)},
    {"/api/executions/{id}/events", GET, 0, EXECUTES(xapi_execution_events)},
    {"/api/kernels/{id}/commands", POST, ROUTE_F_STDIN,
     {.handle = xcmdapi_post, .write = xcmdapi_write, .fini = xcmdapi_req_fini}},
    {"/api/kernels/{id}/commands/{id}", DELETE, 0, HANDLE(xcmdapi_delete)},
    /* GET: 405 (no server stream) */
    {"/mcp", POST | DELETE, 0, {.handle = mcp_handle, .write = mcp_write, .fini = mcp_req_fini}},
    {"/api/sessions", GET | POST, 0, SESSIONS(sessions_all)},
    {"/api/sessions/{id}", GET | PATCH | DELETE, 0, SESSIONS(sessions_one)},
    {"/channel", GET, ROUTE_F_WEBSOCKET, WEBSOCKET(channel_confirm, channel_open)},
    {"/upload", POST, ROUTE_F_UPLOAD, UPLOAD(filesapi_post_start)},
    {"/upload/{path}", PUT, ROUTE_F_UPLOAD, UPLOAD(filesapi_put_start)},
    {"/download/{path}", GET, 0, FILES(filesapi_download)},
    {"/check_file/{path}", GET, 0, FILES(filesapi_check_file)},
    {"/files", GET, 0, FILES(filesapi_list)},
    {"/files/{path}", DELETE, 0, FILES(filesapi_delete)},
    {"/self_identify", GET, 0, HANDLE(rest_self_identify)},
    {"/check_liveness", GET, ROUTE_F_PUBLIC, HANDLE(rest_liveness)},
    {"/check_ready", GET, ROUTE_F_PUBLIC, HANDLE(rest_readiness)},
    {"/openapi.json", GET, 0, HANDLE(rest_openapi)},
    {"/metrics", GET, ROUTE_F_SCRAPE, HANDLE(metrics_handle)},
    {"/", GET, ROUTE_F_PUBLIC, HANDLE(playground_page)}, /* the page holds no secret */
    {"/playground/{name}", GET, ROUTE_F_PUBLIC, HANDLE(playground_asset)},
    /* the E2B-compatible API (e2b.c): its control plane, and the rest of it (not offered) */
    {"/e2b/api/sandboxes", GET | POST, 0, HANDLE(e2b_sandboxes)},
    {"/e2b/api/v2/sandboxes", GET | POST, 0, HANDLE(e2b_sandboxes)},
    {"/e2b/api/sandboxes/{id}", GET | DELETE, 0, HANDLE(e2b_sandbox)},
    {"/e2b/api/sandboxes/{id}/timeout", POST, 0, HANDLE(e2b_timeout)},
    {"/e2b/api/sandboxes/{id}/connect", POST, 0, HANDLE(e2b_connect)},
    {"/e2b/api/v2/sandboxes/{id}/connect", POST, 0, HANDLE(e2b_connect_v2)},
    {"/e2b/api/sandboxes/{id}/pause", POST, 0, HANDLE(e2b_pause)},
    {"/e2b/api/sandboxes/{id}/resume", POST, 0, HANDLE(e2b_resume)},
    {"/e2b/api/{path}", GET | POST | DELETE | PUT | PATCH, 0, HANDLE(e2b_api_other)},
    /* its sandbox plane, authenticated by the sandbox's own access token (e2bsbx.c), never the
     * API key */
    {"/e2b/sbx/{path}", GET | POST | DELETE, ROUTE_F_PUBLIC,
     {.handle = e2bsbx_handle, .write = e2bsbx_write, .fini = e2bsbx_req_fini}},
};

const struct route_def *routes_table(size_t *ret_n)
{
    *ret_n = sizeof(routes) / sizeof(routes[0]);
    return routes;
}
