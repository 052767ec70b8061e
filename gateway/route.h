/* The HTTP route table: request paths (untrusted) to routes and their arguments. */
#ifndef KGW_GATEWAY_ROUTE_H
#define KGW_GATEWAY_ROUTE_H

#include <stddef.h>

enum route_id {
    ROUTE_NONE = 0,
    ROUTE_API,
    ROUTE_STATUS,
    ROUTE_KSPECS,
    ROUTE_KSPEC,
    ROUTE_KSPEC_RESOURCE,
    ROUTE_KERNELS,
    ROUTE_KERNEL,
    ROUTE_KERNEL_INTERRUPT,
    ROUTE_KERNEL_RESTART,
    ROUTE_KERNEL_CHANNELS,
    ROUTE_KERNEL_CHECKPOINTS,
    ROUTE_KERNEL_CHECKPOINT,
    ROUTE_KERNEL_ROLLBACK,
    ROUTE_SESSIONS,
    ROUTE_SESSION,
    ROUTE_CHANNEL,
    ROUTE_UPLOAD,
    ROUTE_UPLOAD_PATH,
    ROUTE_DOWNLOAD,
    ROUTE_CHECK_FILE,
    ROUTE_FILES,
    ROUTE_FILE,
    ROUTE_SELF_IDENTIFY,
    ROUTE_LIVENESS,
    ROUTE_READY,
    ROUTE_OPENAPI,
    ROUTE_METRICS,
    ROUTE_KERNEL_EXECUTE,
    ROUTE_EXECUTE,
    ROUTE_EXECUTION,
    ROUTE_EXECUTION_EVENTS,
    ROUTE_KERNEL_COMMANDS,
    ROUTE_KERNEL_COMMAND,
    ROUTE_MCP,
    ROUTE_PLAYGROUND,
    ROUTE_PLAYGROUND_ASSET,
    ROUTE_KERNEL_FORK,
    ROUTE_E2B_SANDBOXES,    /* the E2B-compatible API (gateway/e2b.c) */
    ROUTE_E2B_SANDBOXES_V2,
    ROUTE_E2B_SANDBOX,
    ROUTE_E2B_TIMEOUT,
    ROUTE_E2B_CONNECT,
    ROUTE_E2B_CONNECT_V2,
    ROUTE_E2B_API,          /* the rest of its control plane: not offered (501) */
    ROUTE_E2B_SBX,          /* its sandbox plane */
    ROUTE_N /* the number of ids (gateway/routes.c has a row for each) */
};

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

/* One row of the route table. The pattern "/" matches "/" alone. Pattern segments are literals, "{id}" (a kernel or session
 * id), "{name}" (a kernelspec or file name) or, last only, "{path}": the rest of the request
 * path (one or more bytes, '/' included; checked by the handler, see protocol/fpath.h). */
struct route_def {
    enum route_id id;
    const char *pattern;
    unsigned methods; /* allowed methods */
    unsigned flags;
};

struct route {
    enum route_id id;
    unsigned methods; /* allowed methods */
    unsigned flags;
    char arg[2][ROUTE_ARG_MAX];
    size_t rest_off, rest_len; /* "{path}": where it is in the matched path */
    size_t prefix_len;         /* the "/s/<shard>" prefix stripped before matching, or 0 */
};

/* Paths under "/s/<name>" (protocol/shardpath.h) are matched without the prefix; other
 * shards' prefixes match nothing. Set once at start-up; NULL or "": no shard. */
void route_set_shard(const char *name);
/* Matches a path (no query string). 0 on a match; -ENOENT otherwise (including over-long
 * paths and arguments that are not valid ids or names). */
int route_match(const char *path, size_t len, struct route *out);
/* The table itself, for documentation checks: route_at(i) for i < route_count(). */
size_t route_count(void);
const struct route_def *route_at(size_t i);

#endif
