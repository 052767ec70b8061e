/* mcp.c: the Model Context Protocol server (docs/mcp.md): POST and DELETE /mcp, Streamable
 * HTTP with JSON-RPC 2.0; sessions with one kernel each; tools on the executions (xexec.c) and
 * the workspace (files.c). */
#ifndef KGW_GATEWAY_MCP_H
#define KGW_GATEWAY_MCP_H

#include "gateway/gw.h"
#include "gateway/http.h"

void mcp_handle(struct gw_req *r);
/* An answer being written (struct route_ops's write): one JSON document, or an SSE stream. */
int mcp_write(struct gw_req *r);
/* Frees the request's call (an execution still running is cancelled: nobody hears it). */
void mcp_req_fini(struct gw_req *r);
/* Starts the sessions' store and its idle sweep. */
int mcp_listen(gw_t *g);
/* Frees every session (before the lws context goes: requests still open let go of theirs). */
void mcp_fini(gw_t *g);
/* Whether an MCP session or named kernel uses k (a restart in place ends such a kernel: its
 * sessions do not go over). */
bool mcp_holds(gw_t *g, kernel_t *k);

#endif
