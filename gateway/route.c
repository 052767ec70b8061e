#include "gateway/route.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "common/ident.h"
#include "protocol/shardpath.h"

/* This shard's name: paths under "/s/<name>" are its own (see route_set_shard). */
static const char *route__shard;

/* See struct route_def for the pattern syntax. */
static const struct route_def routes[] = {
    {ROUTE_API, "/api", HTTP_M_GET, ROUTE_F_PUBLIC},
    {ROUTE_STATUS, "/api/status", HTTP_M_GET, 0},
    {ROUTE_KSPECS, "/api/kernelspecs", HTTP_M_GET, 0},
    {ROUTE_KSPEC, "/api/kernelspecs/{name}", HTTP_M_GET, 0},
    {ROUTE_KSPEC_RESOURCE, "/kernelspecs/{name}/{name}", HTTP_M_GET, 0},
    {ROUTE_KERNELS, "/api/kernels", HTTP_M_GET | HTTP_M_POST, 0},
    {ROUTE_KERNEL, "/api/kernels/{id}", HTTP_M_GET | HTTP_M_DELETE, 0},
    {ROUTE_KERNEL_INTERRUPT, "/api/kernels/{id}/interrupt", HTTP_M_POST, 0},
    {ROUTE_KERNEL_RESTART, "/api/kernels/{id}/restart", HTTP_M_POST, 0},
    {ROUTE_KERNEL_FORK, "/api/kernels/{id}/fork", HTTP_M_POST, 0},
    {ROUTE_KERNEL_EXECUTE, "/api/kernels/{id}/execute", HTTP_M_POST, 0},
    {ROUTE_KERNEL_CHANNELS, "/api/kernels/{id}/channels", HTTP_M_GET, ROUTE_F_WEBSOCKET},
    {ROUTE_KERNEL_CHECKPOINTS, "/api/kernels/{id}/checkpoints", HTTP_M_GET | HTTP_M_POST, 0},
    {ROUTE_KERNEL_CHECKPOINT, "/api/kernels/{id}/checkpoints/{id}", HTTP_M_GET | HTTP_M_DELETE, 0},
    {ROUTE_KERNEL_ROLLBACK, "/api/kernels/{id}/rollback", HTTP_M_POST, 0},
    {ROUTE_EXECUTE, "/api/execute", HTTP_M_POST, 0},
    {ROUTE_EXECUTION, "/api/executions/{id}", HTTP_M_GET | HTTP_M_DELETE, 0},
    {ROUTE_EXECUTION_EVENTS, "/api/executions/{id}/events", HTTP_M_GET, 0},
    {ROUTE_KERNEL_COMMANDS, "/api/kernels/{id}/commands", HTTP_M_POST, ROUTE_F_STDIN},
    {ROUTE_KERNEL_COMMAND, "/api/kernels/{id}/commands/{id}", HTTP_M_DELETE, 0},
    {ROUTE_MCP, "/mcp", HTTP_M_POST | HTTP_M_DELETE, 0}, /* GET: 405 (no server stream) */
    {ROUTE_SESSIONS, "/api/sessions", HTTP_M_GET | HTTP_M_POST, 0},
    {ROUTE_SESSION, "/api/sessions/{id}", HTTP_M_GET | HTTP_M_PATCH | HTTP_M_DELETE, 0},
    {ROUTE_CHANNEL, "/channel", HTTP_M_GET, ROUTE_F_WEBSOCKET},
    {ROUTE_UPLOAD, "/upload", HTTP_M_POST, ROUTE_F_UPLOAD},
    {ROUTE_UPLOAD_PATH, "/upload/{path}", HTTP_M_PUT, ROUTE_F_UPLOAD},
    {ROUTE_DOWNLOAD, "/download/{path}", HTTP_M_GET, 0},
    {ROUTE_CHECK_FILE, "/check_file/{path}", HTTP_M_GET, 0},
    {ROUTE_FILES, "/files", HTTP_M_GET, 0},
    {ROUTE_FILE, "/files/{path}", HTTP_M_DELETE, 0},
    {ROUTE_SELF_IDENTIFY, "/self_identify", HTTP_M_GET, 0},
    {ROUTE_LIVENESS, "/check_liveness", HTTP_M_GET, ROUTE_F_PUBLIC},
    {ROUTE_READY, "/check_ready", HTTP_M_GET, ROUTE_F_PUBLIC},
    {ROUTE_OPENAPI, "/openapi.json", HTTP_M_GET, 0},
    {ROUTE_METRICS, "/metrics", HTTP_M_GET, ROUTE_F_SCRAPE},
    {ROUTE_PLAYGROUND, "/", HTTP_M_GET, ROUTE_F_PUBLIC}, /* the page holds no secret */
    {ROUTE_PLAYGROUND_ASSET, "/playground/{name}", HTTP_M_GET, ROUTE_F_PUBLIC},
    {ROUTE_E2B_SANDBOXES, "/e2b/api/sandboxes", HTTP_M_GET | HTTP_M_POST, 0},
    {ROUTE_E2B_SANDBOXES_V2, "/e2b/api/v2/sandboxes", HTTP_M_GET | HTTP_M_POST, 0},
    {ROUTE_E2B_SANDBOX, "/e2b/api/sandboxes/{id}", HTTP_M_GET | HTTP_M_DELETE, 0},
    {ROUTE_E2B_TIMEOUT, "/e2b/api/sandboxes/{id}/timeout", HTTP_M_POST, 0},
    {ROUTE_E2B_CONNECT, "/e2b/api/sandboxes/{id}/connect", HTTP_M_POST, 0},
    {ROUTE_E2B_CONNECT_V2, "/e2b/api/v2/sandboxes/{id}/connect", HTTP_M_POST, 0},
    {ROUTE_E2B_API, "/e2b/api/{path}", HTTP_M_GET | HTTP_M_POST | HTTP_M_DELETE | HTTP_M_PUT | HTTP_M_PATCH, 0},
    /* authenticated by the sandbox's own access token (gateway/e2b.c), never the API key */
    {ROUTE_E2B_SBX, "/e2b/sbx/{path}", HTTP_M_GET | HTTP_M_POST | HTTP_M_DELETE, ROUTE_F_PUBLIC},
};

size_t route_count(void)
{
    return sizeof(routes) / sizeof(routes[0]);
}

const struct route_def *route_at(size_t i)
{
    return i < route_count() ? &routes[i] : NULL;
}

/* Next segment of p (after a leading '/'); returns its length or -1 at the end. */
static int next_seg(const char **p, const char *end, const char **seg)
{
    if (*p >= end || **p != '/')
        return -1;
    (*p)++;
    *seg = *p;
    while (*p < end && **p != '/')
        (*p)++;
    return (int)(*p - *seg);
}

static int try_match(const char *pattern, const char *path, size_t len, struct route *out)
{
    const char *pp = pattern, *pend = pattern + strlen(pattern);
    const char *p = path, *end = path + len;
    int nargs = 0;
    if (pend - pattern == 1) /* "/": the root alone, no "//" */
        return len == 1 && path[0] == '/' ? 0 : -ENOENT;
    while (pp < pend) {
        const char *pseg = NULL, *seg = NULL;
        int pn = next_seg(&pp, pend, &pseg);
        int n = next_seg(&p, end, &seg);
        if (n < 0 || pn < 0)
            return -ENOENT;
        if (pseg[0] == '{' && pseg[1] == 'p') { /* {path}: the rest, at least one byte */
            if (seg == end)
                return -ENOENT;
            out->rest_off = (size_t)(seg - path);
            out->rest_len = (size_t)(end - seg);
            return 0;
        }
        if (pseg[0] == '{') {
            if (n == 0 || n >= ROUTE_ARG_MAX || nargs >= 2)
                return -ENOENT;
            if (!ident_ok(seg, (size_t)n, pseg[1] == 'i' ? IDENT_UUIDISH : IDENT_KSPEC))
                return -ENOENT;
            memcpy(out->arg[nargs], seg, (size_t)n);
            out->arg[nargs++][n] = '\0';
        } else if (n != pn || memcmp(seg, pseg, (size_t)n) != 0) {
            return -ENOENT;
        }
    }
    /* one optional trailing slash */
    if (p < end && !(p + 1 == end && *p == '/'))
        return -ENOENT;
    return 0;
}

void route_set_shard(const char *name)
{
    route__shard = name && name[0] ? name : NULL;
}

int route_match(const char *path, size_t len, struct route *out)
{
    size_t off = 0;
    memset(out, 0, sizeof(*out));
    if (len == 0 || len > ROUTE_MAX_PATH || memchr(path, '\0', len))
        return -ENOENT;
    if (shardpath_split(path, len, route__shard, &off) < 0)
        return -ENOENT; /* another shard's prefix: the router sent it astray */
    path += off;
    len -= off;
    if (len == 0)
        return -ENOENT;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (try_match(routes[i].pattern, path, len, out) == 0) {
            out->id = routes[i].id;
            out->methods = routes[i].methods;
            out->flags = routes[i].flags;
            out->prefix_len = off;
            if (out->rest_len > 0)
                out->rest_off += off;
            return 0;
        }
        memset(out, 0, sizeof(*out));
    }
    return -ENOENT;
}
