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
/* Another face's use of the executions (gateway/mcp.c): xapi_run queues code on a kernel as
 * the caller's execution and subscribes to it; event gets each event (its type, a static
 * string, and its JSON text with "seq") as it is appended, the last being "end". The
 * subscription keeps the execution held; xapi_sub_destroy ends it (NULL is fine), and
 * xapi_sub_cancel cancels the execution as DELETE /api/executions/{id} does. 0, -EBUSY
 * (--max-queued-executions on the kernel), -EAGAIN (too many executions held) or -ENOMEM. */
struct xreader;
struct xapi_sub_ops {
    void (*event)(void *user, const char *type, const char *json, size_t len);
};
int xapi_run(gw_t *g, const struct gw_caller *who, kernel_t *k, const char *code,
             double timeout, const struct xapi_sub_ops *ops, void *user, struct xreader **ret);
void xapi_sub_cancel(struct xreader *rd);
void xapi_sub_destroy(struct xreader **p);
/* Subscribes the execute API to kernel events and starts its store. */
int xapi_listen(gw_t *g);
/* Frees every execution (after the kernel manager is gone). */
void xapi_fini(gw_t *g);

#endif
