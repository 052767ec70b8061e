/* The E2B-compatible API's parsers (protocol/e2bwire.c) on arbitrary bytes; the first byte picks
 * the parser. Invariants: a path accepted is a normal workspace-relative path (fpath) or ""
 * (the workspace), never absolute, never with a "." or ".." component; parsed bodies hold only
 * bounded, checked values; an envelope parsed lies within the input and under the limit. */
#include <errno.h>
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

/* A signed URL's parts (lines: path, operation, user, token, expiration): the expiration is
 * taken only as an integer; the signature is "v1_" and 43 base64 characters, the same each
 * time. */
static void check_signature(char *copy, size_t n)
{
    char *part[5] = {"", "", "", "", NULL};
    size_t np = 0;
    char *p = copy, *end = copy + n;
    while (p < end && np < 5) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        *nl = '\0';
        part[np++] = p;
        p = nl + 1;
    }
    long long exp = 0;
    bool has_exp = part[4] && e2bwire_expiration_parse(part[4], &exp) == 0;
    if (has_exp) { /* digits only, after an optional sign */
        const char *d = part[4] + (part[4][0] == '+' || part[4][0] == '-');
        FUZZ_CHECK(d[0] && strspn(d, "0123456789") == strlen(d));
    }
    char a[E2BWIRE_SIGNATURE_LEN + 1], b[E2BWIRE_SIGNATURE_LEN + 1];
    e2bwire_signature(part[0], part[1], part[2], part[3], has_exp ? &exp : NULL, a);
    e2bwire_signature(part[0], part[1], part[2], part[3], has_exp ? &exp : NULL, b);
    FUZZ_CHECK(strlen(a) == E2BWIRE_SIGNATURE_LEN && memcmp(a, "v1_", 3) == 0);
    FUZZ_CHECK(strspn(a + 3, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") ==
               E2BWIRE_SIGNATURE_LEN - 3);
    FUZZ_CHECK(strcmp(a, b) == 0);
}

/* What read() gave from inotify: every record lies within it, and the walk ends. */
static void check_inotify(const uint8_t *buf, size_t n)
{
    size_t off = 0, nl, steps = 0;
    int wd, rc;
    uint32_t mask;
    const char *name;
    while ((rc = e2bwire_inotify_next(buf, n, &off, &wd, &mask, &name, &nl)) == 1) {
        FUZZ_CHECK(off <= n && (const uint8_t *)name >= buf && (const uint8_t *)name + nl <= buf + off);
        FUZZ_CHECK(!memchr(name, '\0', nl));
        const char *types[E2BWIRE_WATCH_TYPES];
        FUZZ_CHECK(e2bwire_watch_types(mask, types) <= E2BWIRE_WATCH_TYPES);
        FUZZ_CHECK(++steps <= n);
    }
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
}

/* A Content-Type line, then a multipart/form-data body: every part lies within the body,
 * after the one before it, with bounded names; the walk ends. */
static void check_multipart(char *copy, size_t n)
{
    char *nl = memchr(copy, '\n', n);
    if (!nl)
        return;
    *nl = '\0';
    char b[E2BWIRE_BOUNDARY_MAX + 1];
    if (e2bwire_boundary(copy, b, sizeof(b)) < 0)
        return;
    FUZZ_CHECK(b[0] && strlen(b) <= E2BWIRE_BOUNDARY_MAX);
    const char *body = nl + 1;
    size_t len = n - (size_t)(body - copy), off = 0, last_end = 0, steps = 0;
    struct e2bwire_part part;
    int rc;
    while ((rc = e2bwire_part_next(body, len, b, &off, &part)) == 1) {
        FUZZ_CHECK(part.data >= body + last_end && part.data + part.len <= body + len);
        FUZZ_CHECK(off > (size_t)(part.data - body) + part.len && off <= len);
        FUZZ_CHECK(strlen(part.name) < sizeof(part.name));
        FUZZ_CHECK(strlen(part.filename) <= FPATH_MAX && (part.has_filename || !part.filename[0]));
        last_end = (size_t)(part.data - body) + part.len;
        FUZZ_CHECK(++steps <= len);
    }
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] >= 0xfa && data[0] <= 0xfc) { /* multipart, inotify records, a signed URL */
        char *body = malloc(size - 1 ? size - 1 : 1);
        if (body) {
            memcpy(body, data + 1, size - 1);
            if (data[0] == 0xfa)
                check_multipart(body, size - 1);
            else if (data[0] == 0xfb)
                check_inotify((const uint8_t *)body, size - 1);
            else
                check_signature(body, size - 1);
            free(body);
        }
        return 0;
    }
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
    static const char *const methods[] = {"ListDir",  "Stat",          "MakeDir",
                                          "Remove",   "Move",          "WatchDir",
                                          "CreateWatcher", "GetWatcherEvents", "RemoveWatcher"};
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
        const char *m = methods[(data[0] >> 4) % 9];
        if (e2bwire_fsreq_parse(m, copy, n, &f, err, sizeof(err)) == 0) {
            check_path(f.path);
            check_path(f.path2);
            FUZZ_CHECK(f.depth >= 1 && f.depth <= 8);
            size_t wn = strlen(f.watcher); /* a watcher id: [A-Za-z0-9_-], bounded */
            FUZZ_CHECK(wn <= E2BWIRE_WATCHER_MAX);
            for (size_t i = 0; i < wn; i++)
                FUZZ_CHECK(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
                                  f.watcher[i]));
            FUZZ_CHECK(!f.recursive || strstr(m, "Watch"));
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
