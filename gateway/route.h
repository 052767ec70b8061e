/* route.c: request paths (untrusted) to the rows of a route table and their arguments. The
 * rows are struct route_def: a pattern, its methods and flags, and what serves it; the gateway's
 * table is gateway/routes.c's. */
#ifndef KGW_GATEWAY_ROUTE_H
#define KGW_GATEWAY_ROUTE_H

#include <stddef.h>

enum {
    HTTP_M_GET = 1 << 0,
    HTTP_M_POST = 1 << 1,
    HTTP_M_DELETE = 1 << 2,
    HTTP_M_PATCH = 1 << 3,
    HTTP_M_PUT = 1 << 4,
    HTTP_M_OPTIONS = 1 << 5,
    HTTP_M_HEAD = 1 << 6,
};

enum {
    ROUTE_F_PUBLIC = 1 << 0,    /* answered without the API key */
    ROUTE_F_WEBSOCKET = 1 << 1, /* a websocket: GET with an upgrade */
    ROUTE_F_UPLOAD = 1 << 2,    /* the body is streamed to a file, not collected */
    ROUTE_F_SCRAPE = 1 << 3,    /* a monitor's scrape: not client activity; the one route of
                                 * the --metrics-port listener (without the key there) */
    ROUTE_F_STDIN = 1 << 4,     /* the body may carry a command's stdin beyond --max-body-bytes
                                 * (ROUTE_STDIN_EXTRA: 1 MiB, each byte JSON-escaped as \u00XX) */
};
#define ROUTE_STDIN_EXTRA (6 * (1 << 20))

#define ROUTE_MAX_PATH 2048
#define ROUTE_ARG_MAX  256

struct gw;
struct gw_req;
struct gw_pss;
struct gw_refusal;
struct lws;
struct route;

/* What serves a route: a request whose body is collected goes to handle once it is complete;
 * an upload (ROUTE_F_UPLOAD) streams its body through the upload_* calls instead. A handler that
 * streams its answer (a download, an execution's events) leaves no response stored and write
 * continues it. */
struct route_ops {
    void (*handle)(struct gw_req *r);
    /* Before an upload's body: 0 to stream the body into upload_body; 1 when a reply is
     * queued (the body is then discarded); -EFBIG when it is over --max-upload-bytes (answer at
     * once and close: it is not worth reading). */
    int (*upload_start)(struct gw_req *r, long long content_length);
    int (*upload_body)(struct gw_req *r, const void *in, size_t len); /* returns 0 */
    void (*upload_done)(struct gw_req *r);
    /* On a writeable callback while no response is stored: -1 close, 0 more to send (or
     * nothing streamed), 1 finished (the transaction completes). */
    int (*write)(struct gw_req *r);
    /* Frees what the row's handlers keep in the request (r->face). */
    void (*fini)(struct gw_req *r);
    /* ROUTE_F_WEBSOCKET: checks the upgrade (0 proceed, else the status of the refusal in no),
     * then opens the face's connection at LWS_CALLBACK_ESTABLISHED (pss->route is the route);
     * its later callbacks go to the connection's websocket base (wsconn.h). */
    int (*ws_confirm)(struct gw *g, struct lws *wsi, const struct route *rt,
                      struct gw_refusal *no);
    int (*ws_open)(struct gw *g, struct lws *wsi, struct gw_pss *pss);
};

/* One row of the route table (gateway/routes.c): a route is this row and nothing else. The
 * pattern "/" matches "/" alone. Pattern segments are literals, "{id}" (a kernel or session
 * id), "{name}" (a kernelspec or file name) or, last only, "{path}": the rest of the request
 * path (one or more bytes, '/' included; checked by the handler, see protocol/fpath.h); at most
 * two "{id}" or "{name}". */
struct route_def {
    const char *pattern;
    unsigned methods; /* allowed methods */
    unsigned flags;
    struct route_ops ops;
};

/* A match: the row, and what the path gave its arguments. */
struct route {
    const struct route_def *def; /* NULL: none */
    char arg[2][ROUTE_ARG_MAX];
    size_t rest_off, rest_len; /* "{path}": where it is in the matched path */
    size_t prefix_len;         /* the "/s/<shard>" prefix stripped before matching, or 0 */
};

/* Paths under "/s/<name>" (protocol/shardpath.h) are matched without the prefix; other
 * shards' prefixes match nothing. Set once at start-up; NULL or "": no shard. */
void route_set_shard(const char *name);
/* Matches a path (no query string) against the table (n rows; the first that matches wins).
 * 0 on a match; -ENOENT otherwise (including over-long paths and arguments that are not valid
 * ids or names). */
int route_match(const struct route_def *table, size_t n, const char *path, size_t len,
                struct route *out);

#endif
