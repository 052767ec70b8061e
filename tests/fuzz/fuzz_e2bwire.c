/* The E2B-compatible API's parsers (protocol/e2bwire.c) on arbitrary bytes; the first byte picks
 * the parser. Invariants: a path accepted is a normal workspace-relative path (fpath) or ""
 * (the workspace), never absolute, never with a "." or ".." component; parsed bodies hold only
 * bounded, checked values; an envelope parsed lies within the input and under the limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#include "protocol/e2bwire.h"
#include "protocol/fpath.h"

static void check_path(const char *p)
{
    size_t n = strlen(p);
    FUZZ_CHECK(n <= FPATH_MAX);
    if (n == 0)
        return;
    char tmp[FPATH_MAX + 1];
    FUZZ_CHECK(fpath_normalize(p, n, tmp, sizeof(tmp)) == (int)n);
    FUZZ_CHECK(strcmp(tmp, p) == 0);
}

/* The listing's query: the input's lines are its arguments. */
static void check_list(char *copy, size_t n)
{
    const char *args[40];
    size_t na = 0;
    char *p = copy;
    char *end = copy + n;
    while (p < end && na < 40) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break; /* the last line has no end: a NUL would be outside the input */
        *nl = '\0';
        args[na++] = p;
        p = nl + 1;
    }
    struct e2bwire_list l;
    char err[E2BWIRE_ERR_MAX];
    if (e2bwire_list_parse(args, na, &l, err, sizeof(err)) == 0) {
        FUZZ_CHECK(l.limit >= 1 && l.limit <= E2BWIRE_LIST_LIMIT_MAX);
        FUZZ_CHECK(l.states && !(l.states & ~3u));
        FUZZ_CHECK(!l.metadata || json_object_size(l.metadata) <= E2BWIRE_MAP_MAX);
        FUZZ_CHECK(!l.has_token || l.token_us >= 0);
        if (l.has_token) { /* the token round-trips */
            char tok[96];
            e2bwire_list_token(tok, sizeof(tok), l.token_us, l.token_id);
            const char *a[1] = {NULL};
            char arg[128];
            snprintf(arg, sizeof(arg), "nextToken=%s", tok);
            a[0] = arg;
            struct e2bwire_list l2;
            FUZZ_CHECK(e2bwire_list_parse(a, 1, &l2, err, sizeof(err)) == 0);
            FUZZ_CHECK(l2.token_us == l.token_us && strcmp(l2.token_id, l.token_id) == 0);
            e2bwire_list_fini(&l2);
        }
        e2bwire_list_fini(&l);
    } else {
        FUZZ_CHECK(memchr(err, '\0', sizeof(err)) && err[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] == 0xfe || data[0] == 0xfd) { /* SendInput, CloseStdin */
        char *body = malloc(size - 1 ? size - 1 : 1);
        if (body) {
            memcpy(body, data + 1, size - 1);
            unsigned pid;
            uint8_t *bytes = NULL;
            size_t n = 0;
            char err[E2BWIRE_ERR_MAX];
            bool close = data[0] == 0xfd;
            if (e2bwire_input_parse(body, size - 1, &pid, close ? NULL : &bytes, &n, err,
                                    sizeof(err)) == 0)
                FUZZ_CHECK(close || n <= size);
            free(bytes);
            free(body);
        }
        return 0;
    }
    if (data[0] == 0xff) { /* the listing's query (the other first bytes: as before) */
        char *q = malloc(size - 1 ? size - 1 : 1);
        if (q) {
            memcpy(q, data + 1, size - 1);
            check_list(q, size - 1);
            free(q);
        }
        return 0;
    }
    uint8_t which = data[0] % 11;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    char *copy = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    if (!copy)
        return 0;
    memcpy(copy, in, n);
    char err[E2BWIRE_ERR_MAX];
    static const char *const methods[] = {"ListDir", "Stat", "MakeDir", "Remove", "Move"};
    switch (which) {
    case 0: {
        struct e2bwire_create c;
        if (e2bwire_create_parse(copy, n, &c, err, sizeof(err)) == 0) {
            FUZZ_CHECK(strlen(c.template_id) <= E2BWIRE_TEMPLATE_MAX);
            FUZZ_CHECK(c.timeout >= -1 && c.timeout <= E2BWIRE_TIMEOUT_MAX);
            FUZZ_CHECK(!c.env || json_object_size(c.env) <= E2BWIRE_MAP_MAX);
            e2bwire_create_fini(&c);
        } else {
            FUZZ_CHECK(memchr(err, '\0', sizeof(err)) && err[0]);
        }
        break;
    }
    case 1: {
        long long t = -2;
        if (e2bwire_timeout_parse(copy, n, data[0] & 0x10, &t, err, sizeof(err)) == 0)
            FUZZ_CHECK(t >= -1 && t <= E2BWIRE_TIMEOUT_MAX);
        if (e2bwire_pause_parse(copy, n, err, sizeof(err)) < 0) /* the same shape of body */
            FUZZ_CHECK(memchr(err, '\0', sizeof(err)) && err[0]);
        break;
    }
    case 2: {
        struct e2bwire_exec x;
        if (e2bwire_exec_parse(copy, n, &x, err, sizeof(err)) == 0) {
            FUZZ_CHECK(x.code != NULL);
            FUZZ_CHECK(strlen(x.context_id) < sizeof(x.context_id));
            e2bwire_exec_fini(&x);
        }
        break;
    }
    case 3: {
        char out[FPATH_MAX + 1];
        int rc = e2bwire_path(copy, n, out, sizeof(out));
        if (rc >= 0) {
            FUZZ_CHECK((size_t)rc == strlen(out));
            check_path(out);
        }
        break;
    }
    case 4:
    case 5:
    case 6:
    case 7: {
        struct e2bwire_fsreq f;
        const char *m = methods[(data[0] >> 4) % 5];
        if (e2bwire_fsreq_parse(m, copy, n, &f, err, sizeof(err)) == 0) {
            check_path(f.path);
            check_path(f.path2);
            FUZZ_CHECK(f.depth >= 1 && f.depth <= 8);
        }
        break;
    }
    case 9: {
        struct e2bwire_start st;
        if (e2bwire_start_parse(copy, n, &st, err, sizeof(err)) == 0) {
            size_t na = 0;
            FUZZ_CHECK(st.argv[0] && st.argv[0][0]);
            while (st.argv[na])
                na++;
            FUZZ_CHECK(na <= E2BWIRE_ARGS_MAX + 1);
            for (size_t i = 0; st.env[i]; i++)
                FUZZ_CHECK(strchr(st.env[i], '=') && st.env[i][0] != '=');
            if (st.cwd_abs) /* elsewhere in the sandbox: absolute, printable */
                FUZZ_CHECK(st.cwd[0] == '/' && strlen(st.cwd) <= FPATH_MAX);
            else
                check_path(st.cwd);
            e2bwire_start_fini(&st);
        }
        break;
    }
    case 10: {
        unsigned pid;
        int sig = 0;
        if (e2bwire_signal_parse(copy, n, &pid, &sig, err, sizeof(err)) == 0)
            FUZZ_CHECK(sig == 9 || sig == 15);
        break;
    }
    default: {
        uint8_t flags;
        size_t off, len, used;
        size_t max = (size_t)(data[0] >> 4) * 64;
        if (e2bwire_envelope_parse((const uint8_t *)copy, n, max, &flags, &off, &len, &used) == 0) {
            FUZZ_CHECK(off == 5 && used == off + len && used <= n && len <= max);
            FUZZ_CHECK(!(flags & E2BWIRE_ENV_COMPRESSED));
            buf_t b;
            buf_init(&b, SIZE_MAX);
            FUZZ_CHECK(e2bwire_envelope_write(&b, flags, copy + off, len) == 0);
            FUZZ_CHECK(b.len == used && memcmp(b.data, copy, used) == 0);
            buf_fini(&b);
        }
        break;
    }
    }
    free(copy);
    return 0;
}
