#include "gateway/route.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "common/ident.h"
#include "protocol/shardpath.h"

/* This shard's name: paths under "/s/<name>" are its own (see route_set_shard). */
static const char *route__shard;

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

int route_match(const struct route_def *table, size_t n, const char *path, size_t len,
                struct route *out)
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
    for (size_t i = 0; i < n; i++) {
        if (try_match(table[i].pattern, path, len, out) == 0) {
            out->def = &table[i];
            out->prefix_len = off;
            if (out->rest_len > 0)
                out->rest_off += off;
            return 0;
        }
        memset(out, 0, sizeof(*out));
    }
    return -ENOENT;
}
