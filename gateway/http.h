/* http.c: the HTTP transport. The lws HTTP callback, request objects, body collection and
 * response writing; a request goes to its route's row (struct route_def, gateway/routes.c). */
#ifndef KGW_GATEWAY_HTTP_H
#define KGW_GATEWAY_HTTP_H

#include <jansson.h>
#include <libwebsockets.h>

#include "common/buf.h"
#include "gateway/gw.h"
#include "gateway/route.h"
#include "kernelmgr/kernel.h"
#include "protocol/fpath.h"
#include "protocol/hchunk.h"
#include "protocol/xreq.h"


/* A header of a stored response beyond the ones http.c writes itself. */
#define HTTP_MORE_HEADERS 2
struct http_hdr {
    const char *name; /* "x-next-token:" (static); NULL: none */
    char value[160];
};

struct gw_req {
    gw_t *g;
    struct lws *wsi;
    unsigned method;
    struct route route;
    const struct route_ops *ops; /* what serves its route (NULL until matched) */
    struct gw_caller caller; /* who asked (tenant "" for unauthenticated routes) */
    buf_t body;
    bool body_expected;
    bool chunked;         /* a chunked body, decoded as it comes */
    struct hchunk chunk;
    kwait_t *wait;
    void (*done)(struct gw_req *r, kernel_t *k, int status);
    char kernel_id[40]; /* kernel the pending response is about */
    /* response, written on the next writeable callback */
    bool has_response;
    int status;
    char *resp;
    size_t resp_len;
    const char *ctype;
    int retry_after; /* seconds, for a Retry-After header (0: none) */
    const char *csp; /* its Content-Security-Policy (NULL: the API's; playground.c's page) */
    char location[128];
    struct http_hdr more[HTTP_MORE_HEADERS]; /* req_add_header */
    char fpath[FPATH_MAX + 1]; /* the {path} of a file route, checked (fpath_normalize) */
    /* what the route's face keeps while it answers (its route_ops.fini frees it): files.c an
     * upload or download, xapi.c an execution's events, mcp.c a POST /mcp's answer, e2b.c a
     * stream or upload, xcmd.c a command's events, ckpt.c a checkpoint operation, sessions.c
     * the session being created */
    void *face;
};

/* Stores a JSON response (steals body; NULL: empty) and asks lws for a writeable callback. */
void req_reply(struct gw_req *r, int status, json_t *body);
/* Stores a 200 response of type ctype that takes data (malloc'd, len bytes) and asks lws for a
 * writeable callback. */
void req_reply_data(struct gw_req *r, const char *ctype, char *data, size_t len);
/* req_reply_data of a copy of data (static bytes); 500 when out of memory. */
void req_reply_copy(struct gw_req *r, const char *ctype, const void *data, size_t len);
/* A header for the response stored next (name static, like "x-next-token:"); -ENOSPC when
 * HTTP_MORE_HEADERS are set, -E2BIG when value is too long. */
int req_add_header(struct gw_req *r, const char *name, const char *value);
void req_error(struct gw_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Parses the request body as a JSON object; empty body gives {}. NULL after replying 400. */
json_t *req_json_body(struct gw_req *r);
/* req_error with a Retry-After header (429, 503). */
void req_error_retry(struct gw_req *r, int status, int retry_after, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The answer to a kernel start refused or cut short by a drain: 503 with Retry-After. */
void req_error_draining(struct gw_req *r);
/* Waits for the kernel's transition, then calls done(r, k, status). */
int req_wait_kernel(struct gw_req *r, kernel_t *k, void (*done)(struct gw_req *, kernel_t *, int));

int http_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason, struct gw_pss *pss,
                  void *in, size_t len);
/* Writes a complete response now (only inside this wsi's callback). Returns what the lws
 * callback should return. */
int http_write_now(gw_t *g, struct lws *wsi, int status, const char *ctype, const void *body,
                   size_t len, const char *location);
int http_write_error(gw_t *g, struct lws *wsi, int status, const char *message);
/* An error with Retry-After (429, 503). */
int http_write_error_retry(gw_t *g, struct lws *wsi, int status, const char *message,
                           int retry_after);
/* Answers a refused authentication (auth_request's 401 or 429). */
int http_write_auth_error(gw_t *g, struct lws *wsi, int status, int retry_after);

/* Answers a refused websocket upgrade inside LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: an HTTP/1.1
 * response with the status, a JSON body {"reason", "message"}, Content-Length and
 * Connection: close. Returns 1, what that callback returns for "answered, do not upgrade". */
int http_refuse_upgrade(gw_t *g, struct lws *wsi, const struct gw_refusal *no);
/* A complete HTTP/1.1 error response (JSON body, Content-Length, Connection: close, the
 * security headers) for writing outside lws: its length, 0 when it does not fit in outsz. */
size_t http_format_error(gw_t *g, int status, const char *message, char *out, size_t outsz);
int http_add_common_headers(gw_t *g, struct lws *wsi, unsigned char **p, unsigned char *end);
/* Writes a response head of a handler's own: the status, Content-Type (ctype NULL: none), one
 * more header (name like "location:", NULL: none), the common headers, and Content-Length, or
 * for length < 0 a chunked body that proxies must not buffer. 0, or -1 when lws failed. */
int http_write_head(struct gw_req *r, int status, const char *ctype, const char *name,
                    const char *value, long long length);
/* The stream format the request's Accept header asks for (NDJSON without one). */
enum xreq_format http_accept_format(struct lws *wsi);
/* False when the decoded path (len bytes) or query holds a control byte: a DEL where
 * gateway/reqguard.c marked an escape that cannot be decoded (%00, '%' without two hex
 * digits), or a control character, never valid in a URI. Such requests are answered 400. */
bool http_uri_decodable(struct lws *wsi, const char *path, size_t len);
/* Whether the query has an argument name (with its '=': "signature="), of any length. */
bool http_urlarg(struct lws *wsi, const char *name);
#define HTTP_UNDECODABLE_MESSAGE                                                                 \
    "undecodable request path or query: a '%' not followed by two hex digits, %00 or a "      \
    "control character (write a literal '%' as %25)"

#endif
