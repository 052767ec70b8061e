#include "protocol/xreq.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/ident.h"

static int fail(char *err, size_t errsz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errsz, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

void xreq_fini(struct xreq *x)
{
    free(x->code);
    json_decref(x->user_expressions);
    for (size_t i = 0; i < x->nfiles; i++)
        free(x->files[i].data);
    free(x->files);
    memset(x, 0, sizeof(*x));
}

static int parse_bool(json_t *v, const char *name, bool *out, char *err, size_t errsz)
{
    if (!json_is_boolean(v))
        return fail(err, errsz, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

static int parse_user_expressions(json_t *v, struct xreq *x, char *err, size_t errsz)
{
    const char *key;
    json_t *e;
    if (!json_is_object(v))
        return fail(err, errsz, "'user_expressions' must be an object of strings");
    if (json_object_size(v) > XREQ_USER_EXPR_MAX)
        return fail(err, errsz, "'user_expressions': at most %d entries", XREQ_USER_EXPR_MAX);
    json_object_foreach(v, key, e)
    {
        if (!json_is_string(e))
            return fail(err, errsz, "'user_expressions' must be an object of strings");
    }
    x->user_expressions = json_incref(v);
    return 0;
}

static int parse_file(json_t *f, size_t i, size_t max_bytes, struct xreq_file *out, char *err,
                      size_t errsz)
{
    const char *key;
    json_t *v;
    const char *path = NULL, *content = NULL, *enc = "utf-8";
    size_t content_len = 0;
    if (!json_is_object(f))
        return fail(err, errsz, "files[%zu] must be an object {path, content, encoding}", i);
    json_object_foreach(f, key, v)
    {
        if (!strcmp(key, "path") && json_is_string(v)) {
            path = json_string_value(v);
        } else if (!strcmp(key, "content") && json_is_string(v)) {
            content = json_string_value(v);
            content_len = json_string_length(v);
        } else if (!strcmp(key, "encoding") && json_is_string(v)) {
            enc = json_string_value(v);
        } else if (!strcmp(key, "path") || !strcmp(key, "content") || !strcmp(key, "encoding")) {
            return fail(err, errsz, "files[%zu].%s must be a string", i, key);
        } else {
            return fail(err, errsz, "files[%zu]: unknown field (allowed: path, content, encoding)",
                        i);
        }
    }
    if (!path || !content)
        return fail(err, errsz, "files[%zu] needs 'path' and 'content'", i);
    if (fpath_normalize(path, json_string_length(json_object_get(f, "path")), out->path,
                        sizeof(out->path)) < 0)
        return fail(err, errsz,
                    "files[%zu].path is not a valid relative path (UTF-8, '/'-separated, no "
                    "empty, '.' or '..' components, at most %d bytes)",
                    i, FPATH_MAX);
    if (!strcmp(enc, "utf-8")) {
        if (content_len > max_bytes)
            return fail(err, errsz, "files[%zu] is larger than %zu bytes", i, max_bytes);
        out->data = malloc(content_len ? content_len : 1);
        if (!out->data)
            return fail(err, errsz, "out of memory");
        memcpy(out->data, content, content_len);
        out->len = content_len;
        return 0;
    }
    if (strcmp(enc, "base64") != 0)
        return fail(err, errsz, "files[%zu].encoding must be \"utf-8\" or \"base64\"", i);
    size_t cap = content_len / 4 * 3 + 3;
    if (cap > max_bytes + 3)
        return fail(err, errsz, "files[%zu] is larger than %zu bytes", i, max_bytes);
    out->data = malloc(cap);
    if (!out->data)
        return fail(err, errsz, "out of memory");
    const char *b64_end = NULL;
    if (sodium_base642bin(out->data, cap, content, content_len, " \t\r\n", &out->len, &b64_end,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        b64_end != content + content_len)
        return fail(err, errsz, "files[%zu].content is not valid base64", i);
    if (out->len > max_bytes)
        return fail(err, errsz, "files[%zu] is larger than %zu bytes", i, max_bytes);
    return 0;
}

static int parse_files(json_t *v, struct xreq *x, size_t max_bytes, char *err, size_t errsz)
{
    if (!json_is_array(v))
        return fail(err, errsz, "'files' must be an array");
    size_t n = json_array_size(v);
    if (n > XREQ_FILES_MAX)
        return fail(err, errsz, "'files': at most %d files", XREQ_FILES_MAX);
    x->files = calloc(n ? n : 1, sizeof(*x->files));
    if (!x->files)
        return fail(err, errsz, "out of memory");
    for (size_t i = 0; i < n; i++) {
        x->nfiles = i + 1;
        int rc = parse_file(json_array_get(v, i), i, max_bytes, &x->files[i], err, errsz);
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(x->files[j].path, x->files[i].path))
                return fail(err, errsz, "files[%zu].path appears twice", i);
    }
    return 0;
}

static int parse_field(const char *key, json_t *v, bool oneshot, size_t max_file_bytes,
                       struct xreq *x, char *err, size_t errsz)
{
    if (!strcmp(key, "code")) {
        if (!json_is_string(v))
            return fail(err, errsz, "'code' must be a string");
        x->code = strdup(json_string_value(v));
        return x->code ? 0 : fail(err, errsz, "out of memory");
    }
    if (!strcmp(key, "timeout")) {
        if (json_is_null(v))
            return 0;
        double t = json_number_value(v);
        if (!json_is_number(v) || !(t > 0) || t > XREQ_TIMEOUT_MAX)
            return fail(err, errsz, "'timeout' must be a number of seconds above 0, at most %d",
                        XREQ_TIMEOUT_MAX);
        x->timeout = t;
        return 0;
    }
    if (!strcmp(key, "store_history"))
        return parse_bool(v, key, &x->store_history, err, errsz);
    if (!strcmp(key, "silent"))
        return parse_bool(v, key, &x->silent, err, errsz);
    if (!strcmp(key, "user_expressions"))
        return parse_user_expressions(v, x, err, errsz);
    if (!oneshot && !strcmp(key, "checkpoint"))
        return parse_bool(v, key, &x->checkpoint, err, errsz);
    if (!oneshot && !strcmp(key, "rollback_on_error"))
        return parse_bool(v, key, &x->rollback_on_error, err, errsz);
    if (oneshot && !strcmp(key, "keep"))
        return parse_bool(v, key, &x->keep, err, errsz);
    if (oneshot && !strcmp(key, "kernel_name")) {
        const char *s = json_string_value(v);
        if (!s || !ident_str_ok(s, IDENT_KSPEC) || strlen(s) >= sizeof(x->kernel_name))
            return fail(err, errsz, "'kernel_name' must be a kernelspec name");
        memcpy(x->kernel_name, s, strlen(s) + 1);
        return 0;
    }
    if (oneshot && !strcmp(key, "files"))
        return parse_files(v, x, max_file_bytes, err, errsz);
    char q[72];
    size_t i;
    for (i = 0; key[i] && i < 64; i++)
        q[i] = (unsigned char)key[i] < 0x20 || (unsigned char)key[i] >= 0x7f ? '?' : key[i];
    q[i] = '\0';
    return fail(err, errsz, "unknown field '%s'%s", q,
                oneshot ? " (allowed: code, timeout, store_history, silent, user_expressions, "
                          "kernel_name, files, keep)"
                        : " (allowed: code, timeout, store_history, silent, user_expressions, "
                          "checkpoint, rollback_on_error)");
}

int xreq_parse(const char *body, size_t len, bool oneshot, size_t max_file_bytes,
               struct xreq *out, char *err, size_t errsz)
{
    json_error_t jerr;
    const char *key;
    json_t *v;
    memset(out, 0, sizeof(*out));
    out->store_history = true;
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return fail(err, errsz, "request body must be a JSON object");
    }
    int rc = 0;
    json_object_foreach(doc, key, v)
    {
        if ((rc = parse_field(key, v, oneshot, max_file_bytes, out, err, errsz)) < 0)
            break;
    }
    json_decref(doc);
    if (rc == 0 && !out->code)
        rc = fail(err, errsz, "'code' is required (a string)");
    if (rc < 0)
        xreq_fini(out);
    return rc;
}

int xreq_since(const char *s, size_t n, uint64_t *ret)
{
    uint64_t v = 0;
    if (!s || n == 0 || n > XREQ_SINCE_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    *ret = v;
    return 0;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* True when the parameters of a media range (after its first ';') hold q=0 (0, 0.0, 0.000). */
static bool q_zero(const char *p, const char *end)
{
    while (p < end) {
        while (p < end && (is_space(*p) || *p == ';'))
            p++;
        size_t rl = end > p ? (size_t)(end - p) : 0;
        const char *semi = rl ? memchr(p, ';', rl) : NULL;
        const char *pe = semi ? semi : end;
        if (pe - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
            const char *v = p + 2;
            bool zero = v < pe && *v == '0';
            if (zero && v + 1 < pe) {
                zero = v[1] == '.';
                for (const char *d = v + 2; zero && d < pe && !is_space(*d); d++)
                    zero = *d == '0';
            }
            return zero;
        }
        p = pe;
    }
    return false;
}

enum xreq_format xreq_accept(const char *s, size_t n)
{
    static const struct {
        const char *type;
        enum xreq_format f;
    } known[] = {
        {"text/event-stream", XREQ_SSE},       {"application/json", XREQ_JSON},
        {"application/x-ndjson", XREQ_NDJSON}, {"application/jsonl", XREQ_NDJSON},
    };
    if (!s)
        return XREQ_NDJSON;
    const char *p = s, *end = s + (n > XREQ_ACCEPT_MAX ? XREQ_ACCEPT_MAX : n);
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *re = comma ? comma : end;
        while (p < re && is_space(*p))
            p++;
        size_t rl = re > p ? (size_t)(re - p) : 0;
        const char *semi = rl ? memchr(p, ';', rl) : NULL;
        const char *te = semi ? semi : re;
        while (te > p && is_space(te[-1]))
            te--;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
            size_t kl = strlen(known[i].type);
            if ((size_t)(te - p) == kl && !strncasecmp(p, known[i].type, kl) &&
                !(semi && q_zero(semi, re)))
                return known[i].f;
        }
        p = comma ? comma + 1 : end;
    }
    return XREQ_NDJSON;
}

const char *xreq_format_ctype(enum xreq_format f)
{
    switch (f) {
    case XREQ_SSE:
        return "text/event-stream";
    case XREQ_JSON:
        return "application/json";
    default:
        return "application/x-ndjson";
    }
}
