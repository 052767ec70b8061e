/* The handlers of the routes: one row per route id. The patterns, methods and flags are
 * gateway/route.c's (pure matching, unit-tested and fuzzed); the transport (http.c, and main.c
 * for websocket upgrades) calls the row of the route it matched. Where to add a route:
 * docs/architecture.md. */
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

#define UPLOAD                                                                                   \
    .upload_start = filesapi_upload_start, .upload_body = filesapi_upload_body,                  \
    .upload_done = filesapi_upload_done, .fini = filesapi_req_fini
#define FILES                                                                                    \
    .handle = filesapi_handle, .write = filesapi_download_write, .fini = filesapi_req_fini
#define EXECUTES .write = xapi_write, .fini = xapi_req_fini
#define CKPT(fn) .handle = fn, .fini = ckptapi_req_fini

static const struct route_ops routes[ROUTE_N] = {
    [ROUTE_API] = {.handle = rest_api},
    [ROUTE_STATUS] = {.handle = rest_status},
    [ROUTE_KSPECS] = {.handle = rest_kspecs},
    [ROUTE_KSPEC] = {.handle = rest_kspec},
    [ROUTE_KSPEC_RESOURCE] = {.handle = rest_kspec_resource},
    [ROUTE_KERNELS] = {.handle = rest_kernels},
    [ROUTE_KERNEL] = {.handle = rest_kernel},
    [ROUTE_KERNEL_INTERRUPT] = {.handle = rest_kernel_interrupt},
    [ROUTE_KERNEL_RESTART] = {.handle = rest_kernel_restart},
    [ROUTE_KERNEL_FORK] = {.handle = gfork_kernel},
    [ROUTE_KERNEL_EXECUTE] = {.handle = xapi_kernel_execute, EXECUTES},
    [ROUTE_KERNEL_CHECKPOINTS] = {CKPT(ckptapi_list)},
    [ROUTE_KERNEL_CHECKPOINT] = {CKPT(ckptapi_one)},
    [ROUTE_KERNEL_ROLLBACK] = {CKPT(ckptapi_rollback)},
    [ROUTE_KERNEL_CHANNELS] = {.ws_confirm = wschan_confirm, .ws_open = wschan_open},
    [ROUTE_EXECUTE] = {.handle = xapi_oneshot, EXECUTES},
    [ROUTE_EXECUTION] = {.handle = xapi_execution, EXECUTES},
    [ROUTE_EXECUTION_EVENTS] = {.handle = xapi_execution, EXECUTES},
    [ROUTE_KERNEL_COMMANDS] = {.handle = xcmdapi_post, .write = xcmdapi_write,
                               .fini = xcmdapi_req_fini},
    [ROUTE_KERNEL_COMMAND] = {.handle = xcmdapi_delete},
    [ROUTE_MCP] = {.handle = mcp_handle, .write = mcp_write, .fini = mcp_req_fini},
    [ROUTE_SESSIONS] = {.handle = sessions_handle, .fini = sessions_req_fini},
    [ROUTE_SESSION] = {.handle = sessions_handle, .fini = sessions_req_fini},
    [ROUTE_CHANNEL] = {.ws_confirm = channel_confirm, .ws_open = channel_open},
    [ROUTE_UPLOAD] = {UPLOAD},
    [ROUTE_UPLOAD_PATH] = {UPLOAD},
    [ROUTE_DOWNLOAD] = {FILES},
    [ROUTE_CHECK_FILE] = {FILES},
    [ROUTE_FILES] = {FILES},
    [ROUTE_FILE] = {FILES},
    [ROUTE_SELF_IDENTIFY] = {.handle = rest_self_identify},
    [ROUTE_LIVENESS] = {.handle = rest_liveness},
    [ROUTE_READY] = {.handle = rest_readiness},
    [ROUTE_OPENAPI] = {.handle = rest_openapi},
    [ROUTE_METRICS] = {.handle = metrics_handle},
    [ROUTE_PLAYGROUND] = {.handle = playground_page},
    [ROUTE_PLAYGROUND_ASSET] = {.handle = playground_asset},
    [ROUTE_E2B_SANDBOXES] = {.handle = e2b_api},
    [ROUTE_E2B_SANDBOXES_V2] = {.handle = e2b_api},
    [ROUTE_E2B_SANDBOX] = {.handle = e2b_api},
    [ROUTE_E2B_TIMEOUT] = {.handle = e2b_api},
    [ROUTE_E2B_CONNECT] = {.handle = e2b_api},
    [ROUTE_E2B_CONNECT_V2] = {.handle = e2b_api},
    [ROUTE_E2B_API] = {.handle = e2b_api},
    [ROUTE_E2B_SBX] = {.handle = e2bsbx_handle, .write = e2bsbx_write, .fini = e2bsbx_req_fini},
};

const struct route_ops *routes_table(void)
{
    return routes;
}
