#include "gateway/http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "gateway/kops.h"
#include "gateway/openapi.h"
#include "gateway/reqguard.h"
#include "protocol/promtext.h"

#define RESOURCE_MAX (1 << 20)
#define TICK_MS      1000 /* the loop tick /check_liveness and /check_ready watch */
#define MAX_LAG_MS   2000 /* a tick this late means the loop was blocked */

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

int http_add_common_headers(gw_t *g, struct lws *wsi, unsigned char **p, unsigned char *end)
{
    char origin[256];
    int rc = 0;
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(security_headers); i++)
        rc |= add_header(wsi, security_headers[i][0], security_headers[i][1], p, end);
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
                         "Last-Event-ID",
                         p, end);
        rc |= add_header(wsi, "access-control-allow-methods:",
                         "GET, POST, PUT, PATCH, DELETE, OPTIONS", p, end);
        rc |= add_header(wsi, "access-control-expose-headers:",
                         "X-KGW-Self-Identify, X-KGW-Shard, Content-Disposition, Location", p,
                         end);
        rc |= add_header(wsi, "vary:", "Origin", p, end);
    }
    return rc ? -1 : 0;
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
                    const char *location, int retry_after, bool upgrade, unsigned char **p,
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
    if (upgrade || reqguard_pipelined((int)lws_get_socket_fd(wsi)))
        rc |= add_header(wsi, "connection:", "close", p, end);
    if (ctype && len > 0)
        rc |= add_header(wsi, "content-type:", ctype, p, end);
    if (location)
        rc |= add_header(wsi, "location:", location, p, end);
    if (retry_after > 0) {
        snprintf(num, sizeof(num), "%d", retry_after);
        rc |= add_header(wsi, "retry-after:", num, p, end);
    }
    rc |= http_add_common_headers(g, wsi, p, end);
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
                          const void *body, size_t len, const char *location, int retry_after)
{
    unsigned char hdr[LWS_PRE + 4096], *start = hdr + LWS_PRE, *p = start,
                                       *end = hdr + sizeof(hdr) - 1;
    if (put_head(g, wsi, status, ctype, len, location, retry_after, false, &p, end) < 0 ||
        lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) < 0)
        return -1;
    if (len > 0 && put_body(wsi, body, len, LWS_WRITE_HTTP_FINAL) < 0)
        return -1;
    return transaction_done(wsi);
}

int http_write_now(gw_t *g, struct lws *wsi, int status, const char *ctype, const void *body,
                   size_t len, const char *location)
{
    return write_response(g, wsi, status, ctype, body, len, location, 0);
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
                           retry_after);
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

#define AUTH_429_MESSAGE "too many requests or failed logins; retry later"
#define AUTH_401_MESSAGE "a valid API key is required"

int http_write_auth_error(gw_t *g, struct lws *wsi, int status, int retry_after)
{
    if (status == 429)
        return http_write_error_retry(g, wsi, 429, AUTH_429_MESSAGE, retry_after);
    return http_write_error(g, wsi, 401, AUTH_401_MESSAGE);
}

int gw_refuse(struct gw_refusal *no, int status, int retry_after, const char *message)
{
    no->status = status;
    no->retry_after = retry_after;
    no->message = message;
    return status;
}

int gw_refuse_auth(struct gw_refusal *no, int status, int retry_after)
{
    if (status == 429)
        return gw_refuse(no, 429, retry_after, AUTH_429_MESSAGE);
    return gw_refuse(no, 401, 0, AUTH_401_MESSAGE);
}

int http_refuse_upgrade(gw_t *g, struct lws *wsi, const struct gw_refusal *no)
{
    unsigned char hdr[LWS_PRE + 4096], *start = hdr + LWS_PRE, *p = start,
                                       *end = hdr + sizeof(hdr) - 1;
    size_t len;
    char *body = error_json(no->status, no->message, &len);
    if (body && put_head(g, wsi, no->status, "application/json", len, NULL, no->retry_after,
                         true, &p, end) == 0 &&
        lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) >= 0)
        put_body(wsi, body, len, LWS_WRITE_HTTP_HEADERS);
    free(body);
    return 1; /* answered: lws closes the connection */
}

bool gw_owns(const kernel_t *k, const char *tenant)
{
    return k && tenant && !strcmp(wspace_tenant(kernel_workspace(k)), tenant);
}

kernel_t *gw_kernel(gw_t *g, const char *id, const char *tenant)
{
    kernel_t *k = kmgr_find(g->km, id);
    return gw_owns(k, tenant) ? k : NULL;
}

/* ---- request objects ---- */

static void req_free(struct gw_req *r)
{
    if (!r)
        return;
    kwait_cancel(&r->wait);
    files_xfer_free(&r->xfer);
    xapi_reader_free(&r->xr);
    buf_fini(&r->body);
    free(r->resp);
    free(r->pending);
    free(r);
}

void req_reply(struct gw_req *r, int status, json_t *body)
{
    free(r->resp);
    r->resp = NULL;
    r->resp_len = 0;
    if (body) {
        r->resp = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        r->resp_len = r->resp ? strlen(r->resp) : 0;
        json_decref(body);
    }
    r->status = status;
    r->ctype = "application/json";
    r->has_response = true;
    lws_callback_on_writable(r->wsi);
}

static void req_verror(struct gw_req *r, int status, int retry_after, const char *fmt,
                       va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    free(r->resp);
    r->resp = error_json(status, msg, &r->resp_len);
    r->status = status;
    r->retry_after = retry_after;
    r->ctype = "application/json";
    r->has_response = true;
    lws_callback_on_writable(r->wsi);
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

/* ---- handlers ---- */

static json_t *api_info(gw_t *g)
{
    return json_pack("{s:s, s:s, s:s}", "version", KGW_VERSION, "gateway", "kgw", "sandbox",
                     kmgr_sandbox_mode(g->km));
}

static void handle_kspecs(struct gw_req *r)
{
    gw_t *g = r->g;
    const kspecs_t *ks = kmgr_kspecs(g->km);
    json_t *all = json_object();
    for (size_t i = 0; i < kspecs_count(ks); i++) {
        const kspec_t *s = kspecs_at(ks, i);
        json_object_set_new(all, s->name, kspec_model(s));
    }
    const char *def = g->cfg.default_kernel;
    if (!kspecs_find(ks, def) && kspecs_count(ks) > 0)
        def = kspecs_at(ks, 0)->name;
    req_reply(r, 200, json_pack("{s:s, s:o}", "default", def, "kernelspecs", all));
}

static void handle_kspec(struct gw_req *r)
{
    const kspec_t *s = kspecs_find(kmgr_kspecs(r->g->km), r->route.arg[0]);
    if (!s)
        return req_error(r, 404, "Kernel spec %s not found", r->route.arg[0]);
    req_reply(r, 200, kspec_model(s));
}

static const char *mime_of(const char *file)
{
    const char *dot = strrchr(file, '.');
    if (!dot)
        return "application/octet-stream";
    if (!strcmp(dot, ".png"))
        return "image/png";
    if (!strcmp(dot, ".svg"))
        return "image/svg+xml";
    if (!strcmp(dot, ".js"))
        return "text/javascript";
    if (!strcmp(dot, ".css"))
        return "text/css";
    if (!strcmp(dot, ".json"))
        return "application/json";
    return "application/octet-stream";
}

static void handle_kspec_resource(struct gw_req *r)
{
    const kspec_t *s = kspecs_find(kmgr_kspecs(r->g->km), r->route.arg[0]);
    struct stat st;
    int fd = s ? kspec_open_resource(s, r->route.arg[1]) : -ENOENT;
    if (fd < 0)
        return req_error(r, 404, "resource not found");
    if (fstat(fd, &st) < 0 || st.st_size > RESOURCE_MAX) {
        close(fd);
        return req_error(r, 404, "resource not found");
    }
    char *data = malloc((size_t)st.st_size + 1);
    ssize_t n = data ? read(fd, data, (size_t)st.st_size) : -1;
    close(fd);
    if (n < 0) {
        free(data);
        return req_error(r, 500, "cannot read resource");
    }
    free(r->resp);
    r->resp = data;
    r->resp_len = (size_t)n;
    r->status = 200;
    r->ctype = mime_of(r->route.arg[1]);
    r->has_response = true;
    lws_callback_on_writable(r->wsi);
}

static void reply_model(struct gw_req *r, kernel_t *k, int status)
{
    if (status == 201)
        snprintf(r->location, sizeof(r->location), "/api/kernels/%s", kernel_id(k));
    req_reply(r, status, kernel_model(k));
}

static void on_started(struct gw_req *r, kernel_t *k, int status)
{
    if (status < 0) {
        if (drain_active(r->g)) /* shut down by the drain while it started */
            req_error_draining(r);
        else
            req_error(r, 500, "kernel %s failed to start", kernel_id(k));
        kernel_shutdown(k, NULL);
        return;
    }
    reply_model(r, k, 201);
}

/* Starts a kernel from a request body (kops_start); calls done when it is ready. */
int http_start_kernel(struct gw_req *r, json_t *body,
                      void (*done)(struct gw_req *, kernel_t *, int))
{
    struct kops_error err;
    kernel_t *k;
    int rc = kops_start(r->g, &r->caller, body, &k, &err);
    if (rc < 0) {
        req_error_retry(r, err.status, err.retry_after, "%s", err.message);
        return rc;
    }
    if (req_wait_kernel(r, k, done) < 0)
        done(r, k, 0);
    return 0;
}

static void handle_kernels(struct gw_req *r)
{
    gw_t *g = r->g;
    if (r->method == HTTP_M_GET) {
        json_t *a = json_array();
        for (size_t i = 0; i < kmgr_count(g->km); i++) {
            kernel_t *k = kmgr_at(g->km, i);
            if (kernel_state(k) != KERNEL_TERMINATING && gw_owns(k, r->caller.tenant))
                json_array_append_new(a, kernel_model(k));
        }
        return req_reply(r, 200, a);
    }
    json_t *body = req_json_body(r);
    if (!body)
        return;
    http_start_kernel(r, body, on_started);
    json_decref(body);
}

static void on_deleted(struct gw_req *r, kernel_t *k, int status)
{
    req_reply(r, 204, NULL);
}

static void on_restarted(struct gw_req *r, kernel_t *k, int status)
{
    if (status < 0)
        return req_error(r, 500, "kernel %s failed to restart", kernel_id(k));
    reply_model(r, k, 200);
}

static void handle_kernel(struct gw_req *r)
{
    kernel_t *k = gw_kernel(r->g, r->route.arg[0], r->caller.tenant);
    struct kops_error err;
    if (!k || (kernel_state(k) == KERNEL_TERMINATING && r->route.id != ROUTE_KERNEL))
        return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
    switch (r->route.id) {
    case ROUTE_KERNEL:
        if (r->method == HTTP_M_GET) {
            if (kernel_state(k) == KERNEL_TERMINATING)
                return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
            return reply_model(r, k, 200);
        }
        kops_shutdown(r->g, k, &err); /* as before: whatever it says, wait for the kernel */
        if (req_wait_kernel(r, k, on_deleted) < 0)
            req_reply(r, 204, NULL);
        return;
    case ROUTE_KERNEL_INTERRUPT:
        if (kops_interrupt(r->g, k, &err) < 0 && err.status)
            return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
        return req_reply(r, 204, NULL);
    case ROUTE_KERNEL_RESTART:
        if (kops_restart(r->g, k, &err) < 0 && err.status)
            return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
        if (req_wait_kernel(r, k, on_restarted) < 0)
            reply_model(r, k, 200);
        return;
    default:
        return req_error(r, 404, "not found");
    }
}

static void handle_status(struct gw_req *r)
{
    gw_t *g = r->g;
    char started[40], last[40];
    util_iso_time(started, sizeof(started), g->started_us);
    util_iso_time(last, sizeof(last), g->last_activity_us);
    req_reply(r, 200,
              json_pack("{s:s, s:s, s:i, s:i, s:o}", "started", started, "last_activity", last,
                        "connections", g->connections, "kernels", (int)kmgr_count(g->km),
                        "pool", kmgr_pool_model(g->km)));
}

/* ---- identity, liveness, readiness, description ---- */

int http_set_instance_id(gw_t *g, const char *id)
{
    if (!id || !id[0]) {
        util_uuid(g->instance_id);
        return 0;
    }
    if (!ident_str_ok(id, IDENT_INSTANCE))
        return -EINVAL;
    memcpy(g->instance_id, id, strlen(id) + 1);
    /* a named instance is a shard: its ids carry its tag, "/s/<id>/..." is its prefix */
    shardid_set_instance(g->instance_id);
    route_set_shard(g->instance_id);
    return 0;
}

static void on_tick(void *data)
{
    gw_t *g = data;
    uint64_t now = util_now_us(), due = g->tick_us + TICK_MS * 1000;
    uint64_t lag_us = now > due ? now - due : 0;
    g->loop_lag_ms = lag_us / 1000;
    hist_observe(&g->stats.loop_lag, (double)lag_us / 1e6);
    if (g->loop_lag_ms > MAX_LAG_MS)
        log_warn("event loop: a %d ms timer ran %llu ms late", TICK_MS,
                 (unsigned long long)g->loop_lag_ms);
    g->tick_us = now;
    g->loop.evl.timer_arm(&g->loop.evl, g->tick, TICK_MS);
}

int http_start_tick(gw_t *g)
{
    g->tick = g->loop.evl.timer_new(&g->loop.evl, on_tick, g);
    if (!g->tick)
        return -errno;
    g->tick_us = util_now_us();
    g->loop.evl.timer_arm(&g->loop.evl, g->tick, TICK_MS);
    return 0;
}

void http_stop_tick(gw_t *g)
{
    evl_timer_destroy(&g->loop.evl, &g->tick);
}

/* Liveness: 200 while the loop keeps time (a 1 s timer not more than 2 s late); whether
 * kernels can be started is readiness's question. */
static void handle_liveness(struct gw_req *r)
{
    gw_t *g = r->g;
    char why[160];
    if (g->loop_lag_ms > MAX_LAG_MS) {
        snprintf(why, sizeof(why), "the event loop was blocked (a timer ran %llu ms late)",
                 (unsigned long long)g->loop_lag_ms);
        return req_reply(r, 503, json_pack("{s:s, s:s}", "status", "unavailable", "reason", why));
    }
    req_reply(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* Readiness: 200 only while a new kernel would be accepted now. Unauthenticated: the reasons
 * name no host detail (paths, sizes); the log and POST /api/kernels's 503 have them. */
static void handle_readiness(struct gw_req *r)
{
    gw_t *g = r->g;
    char why[160];
    why[0] = '\0';
    if (drain_active(g))
        snprintf(why, sizeof(why), "draining: the gateway is shutting down");
    else if (g->loop_lag_ms > MAX_LAG_MS)
        snprintf(why, sizeof(why), "the event loop was blocked (a timer ran %llu ms late)",
                 (unsigned long long)g->loop_lag_ms);
    else if (kmgr_sandbox_error(g->km))
        snprintf(why, sizeof(why), "kernels cannot be started: the sandbox is unavailable");
    else if ((long long)kmgr_count(g->km) >= g->cfg.km.max_kernels)
        snprintf(why, sizeof(why), "kernel limit reached (%d)", g->cfg.km.max_kernels);
    else if (kmgr_memory_short(g->km))
        snprintf(why, sizeof(why), "host memory is short (MemAvailable below "
                                   "--pool-min-available)");
    if (why[0])
        return req_reply(r, 503, json_pack("{s:s, s:s}", "status", "unavailable", "reason", why));
    req_reply(r, 200, json_pack("{s:s}", "status", "ready"));
}

static void handle_openapi(struct gw_req *r)
{
    char *doc = malloc(kgw_openapi_json_len);
    if (!doc)
        return req_error(r, 500, "out of memory");
    memcpy(doc, kgw_openapi_json, kgw_openapi_json_len);
    free(r->resp);
    r->resp = doc;
    r->resp_len = kgw_openapi_json_len;
    r->status = 200;
    r->ctype = "application/json";
    r->has_response = true;
    lws_callback_on_writable(r->wsi);
}

/* The text is rendered on the loop: under 0.1 ms with 64 kernels (bench/scrape.py). */
static void handle_metrics(struct gw_req *r)
{
    buf_t b;
    uint64_t t0 = util_now_us();
    buf_init(&b, METRICS_MAX_BYTES);
    int rc = metrics_render(r->g, &b);
    if (rc < 0) {
        buf_fini(&b);
        log_warn("metrics: cannot render: %s", strerror(-rc));
        return req_error(r, 500, "cannot render the metrics: %s", strerror(-rc));
    }
    log_debug("metrics: %zu bytes rendered in %llu us", b.len,
              (unsigned long long)(util_now_us() - t0));
    free(r->resp);
    r->resp = b.data; /* taken over: freed with the request */
    r->resp_len = b.len;
    r->status = 200;
    r->ctype = PROMTEXT_CONTENT_TYPE;
    r->has_response = true;
    lws_callback_on_writable(r->wsi);
}

static void dispatch(struct gw_req *r)
{
    gw_t *g = r->g;
    if (r->route.id != ROUTE_METRICS) /* scrapers are not activity */
        g->last_activity_us = util_wall_us();
    switch (r->route.id) {
    case ROUTE_API:
        return req_reply(r, 200, api_info(g));
    case ROUTE_STATUS:
        return handle_status(r);
    case ROUTE_KSPECS:
        return handle_kspecs(r);
    case ROUTE_KSPEC:
        return handle_kspec(r);
    case ROUTE_KSPEC_RESOURCE:
        return handle_kspec_resource(r);
    case ROUTE_KERNELS:
        return handle_kernels(r);
    case ROUTE_KERNEL:
    case ROUTE_KERNEL_INTERRUPT:
    case ROUTE_KERNEL_RESTART:
        return handle_kernel(r);
    case ROUTE_SESSIONS:
    case ROUTE_SESSION:
        sessions_handle(g, r);
        return;
    case ROUTE_KERNEL_CHANNELS:
    case ROUTE_CHANNEL:
        return req_error(r, 400, "this endpoint needs a websocket upgrade");
    case ROUTE_DOWNLOAD:
    case ROUTE_CHECK_FILE:
    case ROUTE_FILES:
    case ROUTE_FILE:
        return files_handle(r);
    case ROUTE_KERNEL_EXECUTE:
    case ROUTE_EXECUTE:
    case ROUTE_EXECUTION:
    case ROUTE_EXECUTION_EVENTS:
        return xapi_handle(r);
    case ROUTE_SELF_IDENTIFY:
        return req_reply(r, 200, json_pack("{s:s}", "instance_id", g->instance_id));
    case ROUTE_LIVENESS:
        return handle_liveness(r);
    case ROUTE_READY:
        return handle_readiness(r);
    case ROUTE_OPENAPI:
        return handle_openapi(r);
    case ROUTE_METRICS:
        return handle_metrics(r);
    default:
        return req_error(r, 404, "not found");
    }
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
    if (route_match(path, len, &r->route) < 0 ||
        (metrics_only && r->route.id != ROUTE_METRICS))
        return answer_now(g, wsi, pss, 404, "not found");
    if (metrics_only && r->method != HTTP_M_GET)
        return answer_now(g, wsi, pss, 405, "method not allowed");
    if (r->method == HTTP_M_OPTIONS)
        return answer_now(g, wsi, pss, 204, NULL);
    if (!(r->route.methods & r->method))
        return answer_now(g, wsi, pss, 405, "method not allowed");
    if (!(r->route.flags & ROUTE_F_PUBLIC) && !metrics_only) {
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
        if (r->route.flags & ROUTE_F_UPLOAD) {
            if (chunked || !given) {
                answer_now(g, wsi, pss, 411, "uploads need a Content-Length");
                return -1;
            }
            int rc = files_upload_start(r, n);
            if (rc == -EFBIG) {
                log_info("http: %s: upload of %lld bytes refused", q, n);
                answer_now(g, wsi, pss, 413, "upload larger than the gateway's limit");
                return -1; /* the body is still coming: do not read it */
            }
            if (rc == 0 && n > 0)
                r->body_expected = true;
            else if (rc == 0)
                files_upload_done(r);
            return 0;
        }
        if (n > g->cfg.max_body_bytes) {
            log_info("http: %s: body of %lld bytes refused", q, n);
            answer_now(g, wsi, pss, 413, "request body too large");
            return -1; /* the body is still coming: do not read it */
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
    if (r && !r->has_response && files_is_download(r)) {
        int rc = files_download_write(r);
        if (rc <= 0)
            return rc;
        pss->req = NULL;
        req_free(r);
        return transaction_done(wsi);
    }
    if (r && !r->has_response && r->xr) {
        int rc = xapi_write(r);
        if (rc <= 0)
            return rc;
        pss->req = NULL;
        req_free(r);
        return transaction_done(wsi);
    }
    if (!r || !r->has_response)
        return 0;
    pss->req = NULL;
    /* a request under this shard's prefix is answered with a Location under it too */
    char loc[sizeof(r->location) + GW_INSTANCE_ID_MAX + 4];
    snprintf(loc, sizeof(loc), "%s%s%s", r->route.prefix_len ? "/s/" : "",
             r->route.prefix_len ? g->instance_id : "", r->location);
    int rc = write_response(g, wsi, r->status, r->ctype, r->resp, r->resp_len,
                            r->location[0] ? loc : NULL, r->retry_after);
    req_free(r);
    return rc;
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
        if (r->xfer)
            return files_upload_body(r, in, len);
        if (buf_append(&r->body, in, len) < 0) {
            answer_now(g, wsi, pss, 413, "request body too large");
            return -1;
        }
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (r && r->body_expected) {
            r->body_expected = false;
            if (r->xfer)
                files_upload_done(r);
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
