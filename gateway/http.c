#include "gateway/http.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "gateway/auth.h"
#include "gateway/drain.h"
#include "gateway/reqguard.h"

static const char *const security_headers[][2] = {
    {"x-content-type-options:", "nosniff"},
    {"x-frame-options:", "DENY"},
    {"referrer-policy:", "no-referrer"},
    {"content-security-policy:", "default-src 'none'; frame-ancestors 'none'"},
    {"cache-control:", "no-store"},
};

static int add_header(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                      unsigned char *end)
{
    return lws_add_http_header_by_name(wsi, (const unsigned char *)name, (const unsigned char *)value,
                                (int)strlen(value), p, end);
}

static bool origin_allowed(gw_t *g, struct lws *wsi, char *origin, size_t sz)
{
    const char *allow = g->cfg.allow_origin;
    if (!allow || !allow[0])
        return false;
    if (lws_hdr_copy(wsi, origin, (int)sz, WSI_TOKEN_ORIGIN) <= 0)
        return false;
    return !strcmp(allow, "*") || !strcmp(allow, origin);
}

/* The headers of every answer; csp: the page's Content-Security-Policy instead of the API's
 * (NULL: the API's, which allows nothing). */
static int add_common_headers(gw_t *g, struct lws *wsi, const char *csp, unsigned char **p,
                              unsigned char *end)
{
    char origin[256];
    int rc = 0;
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(security_headers); i++) {
        const char *value = security_headers[i][1];
        if (csp && !strcmp(security_headers[i][0], "content-security-policy:"))
            value = csp;
        rc |= add_header(wsi, security_headers[i][0], value, p, end);
    }
    rc |= add_header(wsi, "x-kgw-self-identify:", g->instance_id, p, end);
    if (shardid_current_tag()[0]) /* lists and answers are this shard's alone */
        rc |= add_header(wsi, "x-kgw-shard:", g->instance_id, p, end);
    if (g->cfg.certfile && g->cfg.certfile[0])
        rc |= add_header(wsi, "strict-transport-security:", "max-age=31536000", p, end);
    if (origin_allowed(g, wsi, origin, sizeof(origin))) {
        rc |= add_header(wsi, "access-control-allow-origin:", origin, p, end);
        rc |= add_header(wsi, "access-control-allow-credentials:", "true", p, end);
        rc |= add_header(wsi, "access-control-allow-headers:",
                         "Authorization, Content-Type, X-API-Key, X-XSRFToken, Idempotency-Key, "
                         "Last-Event-ID, Mcp-Session-Id, MCP-Protocol-Version, Kgw-Kernel-Name",
                         p, end);
        rc |= add_header(wsi, "access-control-allow-methods:",
                         "GET, POST, PUT, PATCH, DELETE, OPTIONS", p, end);
        rc |= add_header(wsi, "access-control-expose-headers:",
                         "X-KGW-Self-Identify, X-KGW-Shard, Content-Disposition, Location, "
                         "Mcp-Session-Id",
                         p, end);
        rc |= add_header(wsi, "vary:", "Origin", p, end);
    }
    return rc ? -1 : 0;
}

int http_add_common_headers(gw_t *g, struct lws *wsi, unsigned char **p, unsigned char *end)
{
    return add_common_headers(g, wsi, NULL, p, end);
}

static int add_hdr(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                   unsigned char *end)
{
    return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
                                       (const unsigned char *)value, (int)strlen(value), p, end);
}

int http_write_head(struct gw_req *r, int status, const char *ctype, const char *name,
                    const char *value, long long length)
{
    unsigned char hdr[LWS_PRE + 2048], *start = hdr + LWS_PRE, *p = start,
                                       *end = hdr + sizeof(hdr) - 1;
    int rc = lws_add_http_header_status(r->wsi, (unsigned)status, &p, end);
    if (ctype)
        rc |= add_hdr(r->wsi, "content-type:", ctype, &p, end);
    if (name)
        rc |= add_hdr(r->wsi, name, value, &p, end);
    if (r->chunked) /* after a chunked body the connection ends (write_pending) */
        rc |= add_hdr(r->wsi, "connection:", "close", &p, end);
    rc |= http_add_common_headers(r->g, r->wsi, &p, end);
    if (length >= 0) {
        rc |= lws_add_http_header_content_length(r->wsi, (lws_filepos_t)length, &p, end);
    } else {
        rc |= add_hdr(r->wsi, "transfer-encoding:", "chunked", &p, end);
        rc |= add_hdr(r->wsi, "x-accel-buffering:", "no", &p, end);
    }
    rc |= lws_finalize_http_header(r->wsi, &p, end);
    if (rc || lws_write(r->wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) < 0)
        return -1;
    return 0;
}

enum xreq_format http_accept_format(struct lws *wsi)
{
    char accept[XREQ_ACCEPT_MAX];
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_ACCEPT);
    if (n <= 0 || n >= (int)sizeof(accept) ||
        lws_hdr_copy(wsi, accept, sizeof(accept), WSI_TOKEN_HTTP_ACCEPT) < 0)
        return XREQ_NDJSON;
    return xreq_accept(accept, strlen(accept));
}

/* An answer is written whole. The connection takes the next request, or ends (-1) when the
 * client pipelined (gateway/reqguard.h) or lws says so. */
static int transaction_done(struct lws *wsi)
{
    int fd = (int)lws_get_socket_fd(wsi);
    if (reqguard_pipelined(fd))
        return -1; /* lws flushes what is buffered, then closes */
    reqguard_answered(fd);
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* Answers that refuse malformed or oversized input (kgw_requests_refused_total{bad_input});
 * the other refusals are counted where they are decided. */
static void count_refusal(gw_t *g, int status)
{
    if (status == 400 || status == 411 || status == 413 || status == 414 || status == 415 ||
        status == 422 || status == 431)
        g->stats.refused[GW_REFUSED_BAD_INPUT]++;
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 411:
        return "Length Required";
    case 413:
        return "Payload Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 507:
        return "Insufficient Storage";
    default:
        return "Error";
    }
}

/* The head of an answer into [*p, end). upgrade: an upgrade refused inside
 * LWS_CALLBACK_HTTP_CONFIRM_UPGRADE, where lws has not read the request's HTTP version yet (its
 * status line would say HTTP/1.0, which websocket clients reject as unsupported): the status
 * line is written here, the body goes out raw (put_body with LWS_WRITE_HTTP_HEADERS, outside
 * lws's body accounting) and the connection closes after it. */
static int put_head(gw_t *g, struct lws *wsi, int status, const char *ctype, size_t len,
                    const char *location, int retry_after, bool upgrade, bool close,
                    const char *csp, const struct http_hdr *more, unsigned char **p,
                    unsigned char *end)
{
    char num[24];
    int rc;
    count_refusal(g, status);
    if (upgrade) {
        char line[64];
        int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s", status, reason_phrase(status));
        rc = lws_add_http_header_by_name(wsi, NULL, (const unsigned char *)line, n, p, end);
    } else {
        rc = lws_add_http_header_status(wsi, (unsigned)status, p, end);
    }
    if (upgrade || close || reqguard_pipelined((int)lws_get_socket_fd(wsi)))
        rc |= add_header(wsi, "connection:", "close", p, end);
    if (ctype && len > 0)
        rc |= add_header(wsi, "content-type:", ctype, p, end);
    if (location)
        rc |= add_header(wsi, "location:", location, p, end);
    if (retry_after > 0) {
        snprintf(num, sizeof(num), "%d", retry_after);
        rc |= add_header(wsi, "retry-after:", num, p, end);
    }
    for (size_t i = 0; more && i < HTTP_MORE_HEADERS && more[i].name; i++)
        rc |= add_header(wsi, more[i].name, more[i].value, p, end);
    rc |= add_common_headers(g, wsi, csp, p, end);
    if (upgrade) {
        snprintf(num, sizeof(num), "%zu", len);
        rc |= add_header(wsi, "content-length:", num, p, end);
    } else {
        rc |= lws_add_http_header_content_length(wsi, len, p, end);
    }
    rc |= lws_finalize_http_header(wsi, p, end);
    return rc ? -1 : 0;
}

static int put_body(struct lws *wsi, const void *body, size_t len, enum lws_write_protocol wp)
{
    unsigned char *b = malloc(LWS_PRE + len);
    if (!b)
        return -1;
    memcpy(b + LWS_PRE, body, len);
    int w = lws_write(wsi, b + LWS_PRE, len, wp);
    free(b);
    return w < 0 ? -1 : 0;
}

static int write_response(gw_t *g, struct lws *wsi, int status, const char *ctype,
                          const void *body, size_t len, const char *location, int retry_after,
                          const char *csp, const struct http_hdr *more, bool close)
{
    /* a request with a Transfer-Encoding: lws 4.1 does not frame its body, so the connection
     * cannot take another request after it (a body answered early is not even read) */
    close = close || lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;
    unsigned char hdr[LWS_PRE + 4096], *start = hdr + LWS_PRE, *p = start,
                                       *end = hdr + sizeof(hdr) - 1;
    if (put_head(g, wsi, status, ctype, len, location, retry_after, false, close, csp, more, &p,
                 end) < 0 ||
        lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) < 0)
        return -1;
    if (len > 0 && put_body(wsi, body, len, LWS_WRITE_HTTP_FINAL) < 0)
        return -1;
    return close ? -1 : transaction_done(wsi);
}

int http_write_now(gw_t *g, struct lws *wsi, int status, const char *ctype, const void *body,
                   size_t len, const char *location)
{
    return write_response(g, wsi, status, ctype, body, len, location, 0, NULL, NULL, false);
}

static char *error_json(int status, const char *message, size_t *len)
{
    json_t *e = json_pack("{s:s, s:s}", "reason", reason_phrase(status), "message", message);
    if (!e) { /* a quoted client string that is not UTF-8: say it in ASCII */
        char ascii[512];
        size_t i;
        bool changed = false;
        for (i = 0; message[i] && i < sizeof(ascii) - 1; i++) {
            changed |= (unsigned char)message[i] >= 0x80;
            ascii[i] = (unsigned char)message[i] < 0x80 ? message[i] : '?';
        }
        ascii[i] = '\0';
        *len = 0;
        return changed ? error_json(status, ascii, len) : NULL;
    }
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    *len = s ? strlen(s) : 0;
    return s;
}

int http_write_error_retry(gw_t *g, struct lws *wsi, int status, const char *message,
                           int retry_after)
{
    size_t len;
    char *s = error_json(status, message, &len);
    int r = write_response(g, wsi, status, "application/json", s ? s : "", len, NULL,
                           retry_after, NULL, NULL, false);
    free(s);
    return r;
}

size_t http_format_error(gw_t *g, int status, const char *message, char *out, size_t outsz)
{
    size_t len, n;
    char *body = error_json(status, message, &len);
    if (!body)
        return 0;
    int w = snprintf(out, outsz,
                     "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                     "content-length: %zu\r\nconnection: close\r\n",
                     status, reason_phrase(status), len);
    n = w > 0 ? (size_t)w : outsz;
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(security_headers) && n < outsz; i++) {
        w = snprintf(out + n, outsz - n, "%s %s\r\n", security_headers[i][0],
                     security_headers[i][1]);
        n += w > 0 ? (size_t)w : outsz;
    }
    if (n < outsz) {
        w = snprintf(out + n, outsz - n, "x-kgw-self-identify: %s\r\n\r\n%s", g->instance_id, body);
        n += w > 0 ? (size_t)w : outsz;
    }
    free(body);
    return n < outsz ? n : 0;
}

int http_write_error(gw_t *g, struct lws *wsi, int status, const char *message)
{
    return http_write_error_retry(g, wsi, status, message, 0);
}

int http_write_auth_error(gw_t *g, struct lws *wsi, int status, int retry_after)
{
    if (status == 429)
        return http_write_error_retry(g, wsi, 429, GW_AUTH_429_MESSAGE, retry_after);
    return http_write_error(g, wsi, 401, GW_AUTH_401_MESSAGE);
}

int http_refuse_upgrade(gw_t *g, struct lws *wsi, const struct gw_refusal *no)
{
    unsigned char hdr[LWS_PRE + 4096], *start = hdr + LWS_PRE, *p = start,
                                       *end = hdr + sizeof(hdr) - 1;
    size_t len;
    char *body = error_json(no->status, no->message, &len);
    if (body && put_head(g, wsi, no->status, "application/json", len, NULL, no->retry_after, true,
                         false, NULL, NULL, &p, end) == 0 &&
        lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) >= 0)
        put_body(wsi, body, len, LWS_WRITE_HTTP_HEADERS);
    free(body);
    return 1; /* answered: lws closes the connection */
}

/* ---- request objects ---- */

static void req_free(struct gw_req *r)
{
    if (!r)
        return;
    kwait_cancel(&r->wait);
    if (r->ops && r->ops->fini)
        r->ops->fini(r);
    buf_fini(&r->body);
    free(r->resp);
    free(r);
}

/* Stores the response (taking data: NULL is an empty body) and asks lws for a writeable
 * callback. */
static void respond(struct gw_req *r, int status, const char *ctype, char *data, size_t len)
{
    free(r->resp);
    r->resp = data;
    r->resp_len = data ? len : 0;
    r->status = status;
    r->ctype = ctype;
    r->has_response = true;
    lws_callback_on_writable(r->wsi);
}

void req_reply(struct gw_req *r, int status, json_t *body)
{
    char *s = NULL;
    if (body) {
        s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(body);
    }
    respond(r, status, "application/json", s, s ? strlen(s) : 0);
}

void req_reply_data(struct gw_req *r, const char *ctype, char *data, size_t len)
{
    respond(r, 200, ctype, data, len);
}

void req_reply_copy(struct gw_req *r, const char *ctype, const void *data, size_t len)
{
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return req_error(r, 500, "out of memory");
    memcpy(copy, data, len);
    respond(r, 200, ctype, copy, len);
}

static void req_verror(struct gw_req *r, int status, int retry_after, const char *fmt,
                       va_list ap)
{
    char msg[512];
    size_t len = 0;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    char *s = error_json(status, msg, &len);
    r->retry_after = retry_after;
    respond(r, status, "application/json", s, len);
}

void req_error(struct gw_req *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    req_verror(r, status, 0, fmt, ap);
    va_end(ap);
}

void req_error_retry(struct gw_req *r, int status, int retry_after, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    req_verror(r, status, retry_after, fmt, ap);
    va_end(ap);
}

void req_error_draining(struct gw_req *r)
{
    req_error_retry(r, 503, DRAIN_RETRY_AFTER_S, "%s", DRAIN_MESSAGE);
}

json_t *req_json_body(struct gw_req *r)
{
    json_error_t err;
    size_t i = 0;
    while (i < r->body.len && (r->body.data[i] == ' ' || r->body.data[i] == '\n' ||
                               r->body.data[i] == '\r' || r->body.data[i] == '\t'))
        i++;
    if (i == r->body.len)
        return json_object();
    json_t *v = json_loadb(r->body.data, r->body.len, 0, &err);
    if (!json_is_object(v)) {
        json_decref(v);
        req_error(r, 400, "request body must be a JSON object");
        return NULL;
    }
    return v;
}

int req_add_header(struct gw_req *r, const char *name, const char *value)
{
    for (size_t i = 0; i < HTTP_MORE_HEADERS; i++) {
        if (r->more[i].name)
            continue;
        if (strlen(value) >= sizeof(r->more[i].value))
            return -E2BIG;
        r->more[i].name = name;
        snprintf(r->more[i].value, sizeof(r->more[i].value), "%s", value);
        return 0;
    }
    return -ENOSPC;
}

static void on_kernel_done(void *data, kernel_t *k, int status)
{
    struct gw_req *r = data;
    r->wait = NULL;
    r->done(r, k, status);
}

int req_wait_kernel(struct gw_req *r, kernel_t *k, void (*done)(struct gw_req *, kernel_t *, int))
{
    r->done = done;
    snprintf(r->kernel_id, sizeof(r->kernel_id), "%s", kernel_id(k));
    return kernel_wait(k, on_kernel_done, r, &r->wait);
}

/* The request is complete: its route's row answers it. */
static void dispatch(struct gw_req *r)
{
    gw_t *g = r->g;
    if (!(r->route.def->flags & ROUTE_F_SCRAPE))
        g->last_activity_us = util_wall_us();
    if (r->route.def->flags & ROUTE_F_WEBSOCKET)
        return req_error(r, 400, "this endpoint needs a websocket upgrade");
    if (!r->ops || !r->ops->handle)
        return req_error(r, 404, "not found");
    r->ops->handle(r);
}

static unsigned method_of(struct lws *wsi, unsigned *ret_tok)
{
    static const struct {
        enum lws_token_indexes tok;
        unsigned m;
    } map[] = {
        {WSI_TOKEN_GET_URI, HTTP_M_GET},       {WSI_TOKEN_POST_URI, HTTP_M_POST},
        {WSI_TOKEN_DELETE_URI, HTTP_M_DELETE}, {WSI_TOKEN_PATCH_URI, HTTP_M_PATCH},
        {WSI_TOKEN_PUT_URI, HTTP_M_PUT},       {WSI_TOKEN_OPTIONS_URI, HTTP_M_OPTIONS},
        {WSI_TOKEN_HEAD_URI, HTTP_M_HEAD},
    };
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(map); i++) {
        if (lws_hdr_total_length(wsi, map[i].tok) > 0) {
            *ret_tok = map[i].tok;
            return map[i].m;
        }
    }
    *ret_tok = WSI_TOKEN_GET_URI;
    return 0;
}

/* An answer written at once: the request object goes first (writing may close the
 * connection, and lws then frees pss). status 204: no body. */
static int answer_now(gw_t *g, struct lws *wsi, struct gw_pss *pss, int status, const char *msg)
{
    req_free(pss->req);
    pss->req = NULL;
    if (status == 204)
        return http_write_now(g, wsi, 204, NULL, NULL, 0, NULL);
    return http_write_error(g, wsi, status, msg);
}

static const char *method_name(unsigned m)
{
    switch (m) {
    case HTTP_M_GET:
        return "GET";
    case HTTP_M_POST:
        return "POST";
    case HTTP_M_PUT:
        return "PUT";
    case HTTP_M_PATCH:
        return "PATCH";
    case HTTP_M_DELETE:
        return "DELETE";
    case HTTP_M_OPTIONS:
        return "OPTIONS";
    case HTTP_M_HEAD:
        return "HEAD";
    default:
        return "other";
    }
}

/* Content-Length of the request: 0 (none given), the length, or -1 when invalid. */
static long long content_length(struct lws *wsi, bool *ret_given)
{
    char cl[32];
    *ret_given = false;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
        return 0;
    if (lws_hdr_copy(wsi, cl, sizeof(cl), WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
        return -1;
    char *end;
    errno = 0;
    long long n = strtoll(cl, &end, 10);
    if (errno || end == cl || *end || n < 0)
        return -1;
    *ret_given = true;
    return n;
}

/* The {path} of a file route into r->fpath; false after answering 400. libwebsockets has
 * already percent-decoded the request path and resolved "." and ".." segments in it; a literal
 * ';' or '&' (which it splits on) or a NUL would leave it in pieces: refused. */
static bool take_file_path(struct gw_req *r, const char *path, size_t len, unsigned tok)
{
    char q[160];
    if (lws_hdr_total_length(r->wsi, (enum lws_token_indexes)tok) != (int)len)
        return false;
    int rc = fpath_normalize(path + r->route.rest_off, r->route.rest_len, r->fpath,
                             sizeof(r->fpath));
    if (rc < 0) {
        log_quote(q, sizeof(q), path + r->route.rest_off, r->route.rest_len);
        log_info("http: invalid file path %s refused", q);
        return false;
    }
    return true;
}

bool http_uri_decodable(struct lws *wsi, const char *path, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return false;
    int total = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS);
    if (total <= 0)
        return true;
    size_t sz = 2 * (size_t)total + 2; /* lws joins the arguments with ',' */
    char *args = malloc(sz);
    int n = args ? lws_hdr_copy(wsi, args, (int)sz, WSI_TOKEN_HTTP_URI_ARGS) : -1;
    bool ok = n >= 0;
    for (int i = 0; ok && i < n; i++)
        ok = (unsigned char)args[i] >= 0x20 && args[i] != 0x7f;
    free(args);
    return ok;
}

bool http_urlarg(struct lws *wsi, const char *name)
{
    int total = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS);
    char *buf = total > 0 ? malloc((size_t)total + 1) : NULL; /* any argument fits */
    bool found = buf && lws_get_urlarg_by_name(wsi, name, buf, total + 1) != NULL;
    free(buf);
    return found;
}

/* E2B's signed file URLs (docs/e2b.md): the SDKs build them on /files at the root, without
 * the E2B sandbox plane's prefix, for a client that has neither a key nor the sandbox's
 * headers. One with a signature is that plane's, which checks the signature
 * (gateway/e2bsbx.c); kgw's own GET /files (a key's) has no such argument. */
static void signed_url_route(gw_t *g, struct gw_req *r)
{
    if (strcmp(r->route.def->pattern, "/files") != 0 ||
        !(r->method & (HTTP_M_GET | HTTP_M_POST)) || !http_urlarg(r->wsi, "signature="))
        return;
    for (size_t i = 0; i < g->nroutes; i++) {
        if (strcmp(g->routes[i].pattern, "/e2b/sbx/{path}") == 0) {
            r->route.def = &g->routes[i]; /* public: the plane checks the signature */
            r->ops = &r->route.def->ops;
            snprintf(r->fpath, sizeof(r->fpath), "files");
            return;
        }
    }
}

static int on_request(gw_t *g, struct lws *wsi, struct gw_pss *pss, const char *path, size_t len)
{
    char q[160];
    unsigned tok;
    struct gw_req *r = calloc(1, sizeof(*r));
    if (!r)
        return -1;
    r->g = g;
    r->wsi = wsi;
    r->method = method_of(wsi, &tok);
    buf_init(&r->body, (size_t)g->cfg.max_body_bytes);
    pss->req = r;
    log_quote(q, sizeof(q), path, len);
    log_debug("http: %s %s", method_name(r->method), q);

    /* the --metrics-port listener serves GET /metrics, without the key, and nothing else */
    bool metrics_only = g->metrics_vhost && lws_get_vhost(wsi) == g->metrics_vhost;
    if (!http_uri_decodable(wsi, path, len))
        return answer_now(g, wsi, pss, 400, HTTP_UNDECODABLE_MESSAGE);
    if (route_match(g->routes, g->nroutes, path, len, &r->route) < 0 ||
        (metrics_only && !(r->route.def->flags & ROUTE_F_SCRAPE)))
        return answer_now(g, wsi, pss, 404, "not found");
    r->ops = &r->route.def->ops;
    if (!metrics_only)
        signed_url_route(g, r);
    if (r->route.def->flags & ROUTE_F_STDIN)
        r->body.max += ROUTE_STDIN_EXTRA;
    if (metrics_only && r->method != HTTP_M_GET)
        return answer_now(g, wsi, pss, 405, "method not allowed");
    if (r->method == HTTP_M_OPTIONS)
        return answer_now(g, wsi, pss, 204, NULL);
    if (!(r->route.def->methods & r->method))
        return answer_now(g, wsi, pss, 405, "method not allowed");
    if (!(r->route.def->flags & ROUTE_F_PUBLIC) && !metrics_only) {
        int retry = 0, st = auth_request(g, wsi, &r->caller, &retry);
        if (st) {
            req_free(pss->req);
            pss->req = NULL;
            return http_write_auth_error(g, wsi, st, retry);
        }
    }
    if (r->route.rest_len > 0 && !take_file_path(r, path, len, tok))
        return answer_now(g, wsi, pss, 400,
                          "invalid file path: give a relative path of at most 1024 bytes of "
                          "UTF-8, '/'-separated, without empty, '.' or '..' components or "
                          "control characters (percent-encode '%', '?', '#', ';', '&' and '+')");
    if (r->method & (HTTP_M_POST | HTTP_M_PATCH | HTTP_M_PUT)) {
        bool given, chunked = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;
        long long n = content_length(wsi, &given);
        if (n < 0) {
            answer_now(g, wsi, pss, 400, "invalid Content-Length");
            return -1;
        }
        if (r->route.def->flags & ROUTE_F_UPLOAD) {
            if (chunked || !given) {
                answer_now(g, wsi, pss, 411, "uploads need a Content-Length");
                return -1;
            }
            int rc = r->ops->upload_start(r, n);
            if (rc == -EFBIG) {
                log_info("http: %s: upload of %lld bytes refused", q, n);
                answer_now(g, wsi, pss, 413, "upload larger than the gateway's limit");
                return -1; /* the body is still coming: do not read it */
            }
            if (rc == 0 && n > 0)
                r->body_expected = true;
            else if (rc == 0)
                r->ops->upload_done(r);
            return 0;
        }
        if (n > (long long)r->body.max) {
            log_info("http: %s: body of %lld bytes refused", q, n);
            answer_now(g, wsi, pss, 413, "request body too large");
            return -1; /* the body is still coming: do not read it */
        }
        if (chunked) {
            char te[16];
            if (lws_hdr_copy(wsi, te, sizeof(te), WSI_TOKEN_HTTP_TRANSFER_ENCODING) <= 0 ||
                strcasecmp(te, "chunked") != 0 || given) {
                answer_now(g, wsi, pss, 400,
                           "Transfer-Encoding: only chunked is accepted, without Content-Length");
                return -1;
            }
            r->chunked = true;
            hchunk_init(&r->chunk);
        }
        if (n > 0 || chunked) {
            r->body_expected = true;
            return 0;
        }
    }
    dispatch(r);
    return 0;
}

static int write_pending(gw_t *g, struct lws *wsi, struct gw_pss *pss)
{
    struct gw_req *r = pss->req;
    if (r && !r->has_response && r->ops && r->ops->write) { /* an answer streamed */
        int rc = r->ops->write(r);
        if (rc <= 0)
            return rc;
        bool close = r->chunked;
        pss->req = NULL;
        req_free(r);
        return close ? -1 : transaction_done(wsi);
    }
    if (!r || !r->has_response)
        return 0;
    pss->req = NULL;
    /* a request under this shard's prefix is answered with a Location under it too */
    char loc[sizeof(r->location) + GW_INSTANCE_ID_MAX + 4];
    snprintf(loc, sizeof(loc), "%s%s%s", r->route.prefix_len ? "/s/" : "",
             r->route.prefix_len ? g->instance_id : "", r->location);
    /* after a chunked body the connection ends: lws would not find the next request */
    bool close = r->chunked;
    int rc = write_response(g, wsi, r->status, r->ctype, r->resp, r->resp_len,
                            r->location[0] ? loc : NULL, r->retry_after, r->csp, r->more, close);
    req_free(r);
    return close ? -1 : rc;
}

int http_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason, struct gw_pss *pss,
                  void *in, size_t len)
{
    struct gw_req *r = pss ? pss->req : NULL;
    switch (reason) {
    case LWS_CALLBACK_HTTP:
        if (r) { /* keep-alive: the previous request never got its answer written */
            req_free(r);
            pss->req = NULL;
        }
        return on_request(g, wsi, pss, in, in ? strlen(in) : 0);
    case LWS_CALLBACK_HTTP_BODY:
        if (!r || !r->body_expected)
            return 0;
        if (r->chunked) { /* lws hands chunked bodies over as they are: decoded here */
            size_t used = 0;
            int rc = hchunk_feed(&r->chunk, in, len, &r->body, &used);
            if (rc < 0) {
                answer_now(g, wsi, pss, rc == -EINVAL ? 400 : 413,
                           rc == -EINVAL ? "malformed chunked request body"
                                         : "request body too large");
                return -1;
            }
            if (rc == 1) {
                r->body_expected = false;
                dispatch(r);
            }
            return 0;
        }
        if (r->route.def->flags & ROUTE_F_UPLOAD)
            return r->ops->upload_body(r, in, len);
        if (buf_append(&r->body, in, len) < 0) {
            answer_now(g, wsi, pss, 413, "request body too large");
            return -1;
        }
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (r && r->body_expected) {
            r->body_expected = false;
            if (r->route.def->flags & ROUTE_F_UPLOAD)
                r->ops->upload_done(r);
            else
                dispatch(r);
        }
        return 0;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return write_pending(g, wsi, pss);
    case LWS_CALLBACK_CLOSED_HTTP:
        if (r) {
            pss->req = NULL;
            req_free(r);
        }
        return 0;
    default:
        return 0;
    }
}
