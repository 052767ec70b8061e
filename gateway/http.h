/* The REST side of the gateway: request objects and deferred responses. */
#ifndef KGW_GATEWAY_HTTP_H
#define KGW_GATEWAY_HTTP_H

#include <jansson.h>
#include <libwebsockets.h>

#include "common/buf.h"
#include "gateway/gw.h"
#include "gateway/route.h"
#include "kernelmgr/kernel.h"
#include "protocol/fpath.h"

struct fxfer; /* files.c: an upload or download in progress */

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
    int retry_after; /* seconds, for a Retry-After header (0: none) */
    char location[128];
    char fpath[FPATH_MAX + 1]; /* the {path} of a file route, checked (fpath_normalize) */
    struct fxfer *xfer;
    struct xreader *xr; /* xapi.c: an execution's events being sent */
};

/* Stores a JSON response (steals body; NULL: empty) and asks lws for a writeable callback. */
void req_reply(struct gw_req *r, int status, json_t *body);
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
/* Starts a kernel from {"name", "env"}; replies on errors itself. */
int http_start_kernel(struct gw_req *r, json_t *body,
                      void (*done)(struct gw_req *, kernel_t *, int));

/* files.c: the workspace file endpoints. check_file, listing, delete and the start of a
 * download (which then continues in files_download_write). */
void files_handle(struct gw_req *r);
/* Before an upload's body: 0 to stream the body into files_upload_body; 1 when a reply is
 * queued (the body is then discarded); -EFBIG when it is over --max-upload-bytes (answer at
 * once and close: it is not worth reading). */
int files_upload_start(struct gw_req *r, long long content_length);
/* Body bytes; failures are remembered and answered at the end. Returns 0. */
int files_upload_body(struct gw_req *r, const void *in, size_t len);
void files_upload_done(struct gw_req *r);
bool files_is_download(const struct gw_req *r);
/* On a writeable callback: -1 close, 0 more to send, 1 finished (complete the transaction). */
int files_download_write(struct gw_req *r);
void files_xfer_free(struct fxfer **x);
/* Writes a file (a normal path, protocol/fpath.h) into a workspace, replacing what is there;
 * missing directories are made. Owned by the workspace's uid. 0 or -errno. */
int files_write(wspace_t *w, const char *path, const void *data, size_t len);

/* xapi.c: the execute API (docs/execute.md) */
struct xreader;
void xapi_handle(struct gw_req *r);
/* On a writeable callback of a request reading an execution: -1 close, 0 more to come, 1
 * finished (complete the transaction). */
int xapi_write(struct gw_req *r);
void xapi_reader_free(struct xreader **x);
#endif
