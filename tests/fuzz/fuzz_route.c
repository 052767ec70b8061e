/* route_match on untrusted request paths. A match must carry arguments that are valid ids or
 * names, and rebuilding the path from the route and its arguments must give the input back
 * (up to one trailing slash). (fuzz_ident checks the id and name classes themselves against
 * POSIX regular expressions.) */
#include "fuzz.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ident.h"
#include "gateway/route.h"
#include "gateway/routes.h"



/* How a route is spelled, from its pattern in the table (gateway/routes.c): "%I" an id
 * argument, "%N" a name argument, "%P" the rest of the path (any bytes, at least one). Made
 * from the table so that a route added there is checked here too; what a match must be is
 * worked out below, apart from route_match's own walk. */
static const char *shape_of(const struct route_def *d)
{
    static char shape[256];
    size_t o = 0;
    for (const char *p = d->pattern; *p && o + 3 < sizeof(shape);) {
        const char *close = p[0] == '{' ? strchr(p, '}') : NULL;
        if (close) {
            shape[o++] = '%';
            shape[o++] = p[1] == 'i' ? 'I' : p[1] == 'n' ? 'N' : 'P';
            p = close + 1;
        } else {
            shape[o++] = *p++;
        }
    }
    shape[o] = '\0';
    return shape;
}

/* Rebuilds the path of a matched route into out; returns its length or -1. */
static int rebuild(const struct route *r, const char *path, size_t len, char *out, size_t outsz)
{
    const char *shape = shape_of(r->def);
    if (shape[0]) {
        size_t o = 0;
        int arg = 0;
        for (const char *p = shape; *p; p++) {
            const char *add = p;
            size_t n = 1;
            if (p[0] == '%' && p[1] == 'P') {
                FUZZ_CHECK(r->rest_len > 0 && r->rest_off + r->rest_len == len);
                add = path + r->rest_off;
                n = r->rest_len;
                p++;
            } else if (p[0] == '%') {
                FUZZ_CHECK(arg < 2);
                const char *a = r->arg[arg++];
                FUZZ_CHECK(ident_str_ok(a, p[1] == 'I' ? IDENT_UUIDISH : IDENT_KSPEC));
                add = a;
                n = strlen(a);
                p++;
            }
            FUZZ_CHECK(o + n < outsz);
            memcpy(out + o, add, n);
            o += n;
        }
        /* unused argument slots stay empty */
        for (; arg < 2; arg++)
            FUZZ_CHECK(r->arg[arg][0] == '\0');
        out[o] = '\0';
        return (int)o;
    }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = (const char *)data;
    struct route r, earlier;
    char buf[ROUTE_MAX_PATH + 1];
    size_t n_rows;
    const struct route_def *table = routes_table(&n_rows);

    int rc = route_match(table, n_rows, path, size, &r);
    FUZZ_CHECK(rc == 0 || rc == -ENOENT);
    if (rc == 0) {
        FUZZ_CHECK(r.def >= table && r.def < table + n_rows && r.def->methods != 0);
        FUZZ_CHECK(size <= ROUTE_MAX_PATH && !memchr(path, '\0', size));
        /* the first row that matches: none before it does */
        FUZZ_CHECK(route_match(table, (size_t)(r.def - table), path, size, &earlier) ==
                   -ENOENT);
        for (int i = 0; i < 2; i++)
            FUZZ_CHECK(memchr(r.arg[i], '\0', sizeof(r.arg[i])) != NULL);
        if (!strstr(shape_of(r.def), "%P"))
            FUZZ_CHECK(r.rest_off == 0 && r.rest_len == 0);
        int n = rebuild(&r, path, size, buf, sizeof(buf));
        FUZZ_CHECK(n > 0);
        FUZZ_CHECK(((size_t)n == size || ((size_t)n + 1 == size && path[n] == '/')) &&
                   memcmp(buf, path, (size_t)n) == 0);
    } else {
        FUZZ_CHECK(r.def == NULL && r.arg[0][0] == '\0' && r.arg[1][0] == '\0' &&
                   r.rest_len == 0);
    }
    return 0;
}
