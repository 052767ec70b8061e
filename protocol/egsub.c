/* Placeholders in egress request heads (see egsub.h). */
#include "protocol/egsub.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* The offset of the next placeholder in p[0..n), or n. */
static size_t next_ph(const char *p, size_t n)
{
    size_t i = 0;
    while (i + EGSUB_PH_LEN <= n) {
        const char *m = memmem(p + i, n - i, EGSUB_PREFIX, EGSUB_PREFIX_LEN);
        if (!m || (size_t)(m - p) + EGSUB_PH_LEN > n)
            return n;
        size_t at = (size_t)(m - p), k;
        for (k = 0; k < 32 && is_hex(m[EGSUB_PREFIX_LEN + k]); k++)
            ;
        if (k == 32)
            return at;
        i = at + 1;
    }
    return n;
}

int egsub_apply(const char *head, size_t len, egsub_resolve_fn resolve, void *ctx, char **ret,
                size_t *ret_len, const char **why)
{
    struct {
        size_t at;
        const char *val;
        size_t vlen;
    } sub[EGSUB_MAX];
    size_t n = 0, out_len = len;
    *ret = NULL;
    *ret_len = 0;
    for (size_t at = next_ph(head, len); at < len;
         at = at + EGSUB_PH_LEN + next_ph(head + at + EGSUB_PH_LEN, len - at - EGSUB_PH_LEN)) {
        if (n == EGSUB_MAX) {
            *why = "too many secret placeholders in the request head";
            return -EMSGSIZE;
        }
        const char *val = NULL;
        size_t vlen = 0;
        int r = resolve(ctx, head + at, &val, &vlen, why);
        if (r < 0)
            return r;
        sub[n].at = at;
        sub[n].val = val;
        sub[n].vlen = vlen;
        n++;
        out_len = out_len - EGSUB_PH_LEN + vlen;
        if (out_len > EGSUB_OUT_MAX) {
            *why = "request head too large with its secrets";
            return -EMSGSIZE;
        }
    }
    if (n == 0)
        return 0;
    char *out = malloc(out_len ? out_len : 1), *o = out;
    if (!out)
        return -ENOMEM;
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(o, head + from, sub[i].at - from);
        o += sub[i].at - from;
        memcpy(o, sub[i].val, sub[i].vlen);
        o += sub[i].vlen;
        from = sub[i].at + EGSUB_PH_LEN;
    }
    memcpy(o, head + from, len - from);
    *ret = out;
    *ret_len = out_len;
    return (int)n;
}
