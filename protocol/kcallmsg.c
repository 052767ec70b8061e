#include "protocol/kcallmsg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ident.h"
#include "common/util.h"
#include "protocol/rpc.h"

#define BUF_MIN 4096

/* ---- decoder ---- */

void kcallmsg_dec_init(kcallmsg_dec_t *d, size_t max)
{
    memset(d, 0, sizeof(*d));
    d->max = max > UINT32_MAX ? UINT32_MAX : max;
}

void kcallmsg_dec_fini(kcallmsg_dec_t *d)
{
    free(d->buf);
    d->buf = NULL;
    d->cap = 0;
}

static size_t min_sz(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Room for need payload bytes: grows geometrically with what arrives, never beyond len. */
static int reserve(kcallmsg_dec_t *d, size_t need)
{
    if (need <= d->cap)
        return 0;
    size_t cap = d->cap ? d->cap : BUF_MIN;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : 2 * cap;
    cap = min_sz(cap, d->len);
    char *b = realloc(d->buf, cap);
    if (!b)
        return -ENOMEM;
    d->buf = b;
    d->cap = cap;
    return 0;
}

int kcallmsg_dec_feed(kcallmsg_dec_t *d, const void *p, size_t n, size_t *ret_used)
{
    const unsigned char *s = p;
    size_t i = 0;

    if (d->done) {
        d->done = d->in_payload = false;
        d->len = d->got = 0;
        if (d->cap > KCALLMSG_BUF_KEEP)
            kcallmsg_dec_fini(d);
    }
    while (i < n) {
        if (d->skip > 0) {
            size_t k = min_sz(d->skip, n - i);
            d->skip -= k;
            i += k;
            continue;
        }
        if (!d->in_payload) {
            size_t k = min_sz(KCALLMSG_HDR_BYTES - d->hdr_got, n - i);
            memcpy(d->hdr + d->hdr_got, s + i, k);
            d->hdr_got += k;
            i += k;
            if (d->hdr_got < KCALLMSG_HDR_BYTES)
                break;
            d->hdr_got = 0;
            d->len = (size_t)d->hdr[0] << 24 | (size_t)d->hdr[1] << 16 | (size_t)d->hdr[2] << 8 |
                     (size_t)d->hdr[3];
            d->got = 0;
            if (d->len > d->max) {
                d->skip = d->len;
                *ret_used = i;
                return KCALLMSG_OVERSIZE;
            }
            d->in_payload = true;
            if (d->len == 0) {
                d->done = true;
                *ret_used = i;
                return KCALLMSG_FRAME;
            }
            continue;
        }
        size_t k = min_sz(d->len - d->got, n - i);
        if (reserve(d, d->got + k) < 0)
            return -ENOMEM;
        memcpy(d->buf + d->got, s + i, k);
        d->got += k;
        i += k;
        if (d->got == d->len) {
            d->done = true;
            *ret_used = i;
            return KCALLMSG_FRAME;
        }
    }
    *ret_used = i;
    return KCALLMSG_MORE;
}

void kcallmsg_dec_payload(const kcallmsg_dec_t *d, const char **ret_p, size_t *ret_n)
{
    bool ok = d->done && d->buf;
    *ret_p = ok ? d->buf : "";
    *ret_n = ok ? d->len : 0;
}

bool kcallmsg_dec_idle(const kcallmsg_dec_t *d)
{
    return d->hdr_got == 0 && d->skip == 0 && (!d->in_payload || d->done);
}

size_t kcallmsg_dec_mem(const kcallmsg_dec_t *d)
{
    return d->cap;
}

/* ---- requests ---- */

int kcallmsg_err_set(kcallmsg_err_t *e, const char *type, const char *fmt, ...)
{
    UTIL_ERROR_SET(e, type, fmt);
    return -EINVAL;
}

static bool allowed(const char *const *allow, const char *name)
{
    for (; allow && *allow; allow++)
        if (strcmp(*allow, name) == 0)
            return true;
    return false;
}

/* "a, b, c" of the allowlist, cut to fit out. */
static void list_allowed(const char *const *allow, char *out, size_t outsz)
{
    size_t o = 0;
    out[0] = '\0';
    for (; allow && *allow && o + 1 < outsz; allow++) {
        int w = snprintf(out + o, outsz - o, "%s%s", o ? ", " : "", *allow);
        if (w < 0 || (size_t)w >= outsz - o) {
            snprintf(out + o, outsz - o, "%s", o + 5 < outsz ? ", ..." : "");
            return;
        }
        o += (size_t)w;
    }
    if (!o)
        snprintf(out, outsz, "none");
}

int kcallmsg_parse(const char *p, size_t n, const char *const *allow, kcallmsg_req_t *ret,
                   kcallmsg_err_t *ret_err)
{
    char q[RPC_QUOTE_MAX], names[200];
    json_error_t jerr;
    const char *key;
    json_t *v;
    kcallmsg_req_t r;
    int rc;

    if (!util_json_depth_ok(p, n, KCALLMSG_MAX_DEPTH))
        return kcallmsg_err_set(ret_err, "ValueError",
                                "callback request nested deeper than %d levels",
                                KCALLMSG_MAX_DEPTH);
    /* no JSON_DECODE_ANY: an object or array; no JSON_ALLOW_NUL: no NUL in strings */
    json_t *root = json_loadb(p, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return -ENOMEM;
        return kcallmsg_err_set(ret_err, "ValueError",
                                "callback request is not valid JSON (at byte %d)", jerr.position);
    }
    memset(&r, 0, sizeof(r));
    if (!json_is_object(root)) {
        rc = kcallmsg_err_set(ret_err, "TypeError", "a callback request must be a JSON object");
        goto out;
    }
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "name") && strcmp(key, "args") && strcmp(key, "kwargs") &&
            strcmp(key, "parent")) {
            rc = kcallmsg_err_set(ret_err, "TypeError", "unexpected key %s in a callback request",
                                  rpc_quote(q, key, strlen(key)));
            goto out;
        }
    }
    json_t *name = json_object_get(root, "name");
    if (!json_is_string(name)) {
        rc = kcallmsg_err_set(ret_err, "TypeError", "the callback name must be a string");
        goto out;
    }
    const char *ns = json_string_value(name);
    size_t nlen = json_string_length(name);
    if (!ident_ok(ns, nlen, IDENT_PYNAME) || !allowed(allow, ns)) {
        list_allowed(allow, names, sizeof(names));
        rc = kcallmsg_err_set(ret_err, "PermissionError",
                              "callback %s is not allowed by the gateway (allowed: %s)",
                              rpc_quote(q, ns, nlen), names);
        goto out;
    }
    memcpy(r.name, ns, nlen + 1);
    json_t *args = json_object_get(root, "args"), *kwargs = json_object_get(root, "kwargs");
    json_t *parent = json_object_get(root, "parent");
    if (args && !json_is_null(args) && !json_is_array(args)) {
        rc = kcallmsg_err_set(ret_err, "TypeError", "callback args must be a list");
        goto out;
    }
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        rc = kcallmsg_err_set(ret_err, "TypeError", "callback kwargs must be a dict");
        goto out;
    }
    if (parent && !json_is_null(parent)) {
        size_t plen = json_string_length(parent);
        if (!json_is_string(parent) || plen > KCALLMSG_PARENT_MAX ||
            !util_printable(json_string_value(parent), plen)) {
            rc = kcallmsg_err_set(ret_err, "TypeError",
                                  "callback parent must be a printable string of at most %d bytes",
                                  KCALLMSG_PARENT_MAX);
            goto out;
        }
        memcpy(r.parent, json_string_value(parent), plen + 1);
    }
    r.args = json_is_array(args) ? json_incref(args) : json_array();
    r.kwargs = json_is_object(kwargs) ? json_incref(kwargs) : json_object();
    if (!r.args || !r.kwargs) {
        kcallmsg_req_fini(&r);
        rc = -ENOMEM;
        goto out;
    }
    *ret = r;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

void kcallmsg_req_fini(kcallmsg_req_t *r)
{
    json_decref(r->args);
    json_decref(r->kwargs);
    r->args = r->kwargs = NULL;
}

/* ---- the allowlist ---- */

void kcallmsg_allow_destroy(char ***pa)
{
    char **a = *pa;
    for (size_t i = 0; a && a[i]; i++)
        free(a[i]);
    free(a);
    *pa = NULL;
}

char **kcallmsg_allow_new(const char *csv)
{
    size_t n = 1;
    for (const char *c = csv; *c; c++)
        n += *c == ',';
    char **a = calloc(n + 1, sizeof(char *));
    if (!a)
        return NULL;
    size_t k = 0;
    int err;
    for (const char *s = csv;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const char *b = s;
        while (len && (*b == ' ' || *b == '\t'))
            b++, len--;
        while (len && (b[len - 1] == ' ' || b[len - 1] == '\t'))
            len--;
        if (len) {
            if (!ident_ok(b, len, IDENT_PYNAME)) {
                err = EINVAL;
                goto fail;
            }
            if (!(a[k++] = strndup(b, len))) {
                err = ENOMEM;
                goto fail;
            }
        }
        if (!e)
            break;
        s = e + 1;
    }
    return a;
fail:
    kcallmsg_allow_destroy(&a);
    errno = err;
    return NULL;
}

/* ---- replies ---- */

static int frame(char *payload, size_t n, char **ret, size_t *ret_len)
{
    char *f = malloc(n + KCALLMSG_HDR_BYTES);
    if (!f)
        return -ENOMEM;
    f[0] = (char)(n >> 24 & 0xff);
    f[1] = (char)(n >> 16 & 0xff);
    f[2] = (char)(n >> 8 & 0xff);
    f[3] = (char)(n & 0xff);
    memcpy(f + KCALLMSG_HDR_BYTES, payload, n);
    *ret = f;
    *ret_len = n + KCALLMSG_HDR_BYTES;
    return 0;
}

int kcallmsg_encode_value(json_t *value, size_t max, char **ret, size_t *ret_len)
{
    json_t *o = json_object();
    if (!o) {
        json_decref(value);
        return -ENOMEM;
    }
    /* json_object_set_new takes the reference even when it fails */
    if (json_object_set_new(o, "value", value ? value : json_null()) < 0) {
        json_decref(o);
        return -ENOMEM;
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    int r = n > max || n > UINT32_MAX ? -EMSGSIZE : frame(s, n, ret, ret_len);
    free(s);
    return r;
}

int kcallmsg_encode_error(const char *type, const char *message, char **ret, size_t *ret_len)
{
    char msg[KCALLMSG_MESSAGE_MAX + 1];
    size_t n = 0;
    if (!type || !ident_str_ok(type, IDENT_PYNAME))
        type = "RuntimeError";
    for (const char *m = message ? message : ""; *m && n < KCALLMSG_MESSAGE_MAX; m++) {
        unsigned char c = (unsigned char)*m;
        msg[n++] = (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t' ? (char)c : '?';
    }
    msg[n] = '\0';
    json_t *o = json_pack("{s:{s:s, s:s}}", "error", "type", type, "message", msg);
    if (!o)
        return -ENOMEM;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return -ENOMEM;
    int r = frame(s, strlen(s), ret, ret_len);
    free(s);
    return r;
}
