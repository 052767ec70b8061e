/* The REST side of the gateway: request objects and deferred responses. */
#ifndef KGW_GATEWAY_HTTP_H
#define KGW_GATEWAY_HTTP_H

#include <jansson.h>
#include <libwebsockets.h>

#include "common/buf.h"
#include "gateway/gw.h"
#include "gateway/route.h"
#include "kernelmgr/kernel.h"

struct gw_req {
    gw_t *g;
    struct lws *wsi;
    unsigned method;
    struct route route;
    struct gw_caller caller; /* who asked (tenant "" for unauthenticated routes) */
    buf_t body;
    bool body_expected;
    kwait_t *wait;
    void (*done)(struct gw_req *r, kernel_t *k, int status);
    char kernel_id[40]; /* kernel the pending response is about */
    void *pending;      /* sessions.c: session being created */
    /* response, written on the next writeable callback */
    bool has_response;
    int status;
    char *resp;
    size_t resp_len;
    const char *ctype;
    char location[128];
};

/* Stores a JSON response (steals body; NULL: empty) and asks lws for a writeable callback. */
void req_reply(struct gw_req *r, int status, json_t *body);
void req_error(struct gw_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Parses the request body as a JSON object; empty body gives {}. NULL after replying 400. */
json_t *req_json_body(struct gw_req *r);
/* Waits for the kernel's transition, then calls done(r, k, status). */
int req_wait_kernel(struct gw_req *r, kernel_t *k, void (*done)(struct gw_req *, kernel_t *, int));
/* Starts a kernel from {"name", "env"}; replies on errors itself. */
int http_start_kernel(struct gw_req *r, json_t *body,
                      void (*done)(struct gw_req *, kernel_t *, int));

#endif
