/* The execute API's HTTP face (docs/execute.md): executions (gateway/xexec.c) as resources.
 * Every reader (the POST's response, GET .../events) is a subscription to its execution, a
 * cursor into the execution's events written on lws writeable callbacks, so a slow or vanished
 * reader costs nothing but its cursor. */
#include "gateway/xapi.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "gateway/http.h"
#include "gateway/kops.h"
#include "gateway/xexec.h"
#include "protocol/xevent.h"
#include "protocol/xreq.h"

#define XAPI_BATCH_BYTES (64 * 1024) /* bytes written per lws_write */

/* Where the JSON document ({"execution": MODEL, "events": [...]}) is: its head (up to the
 * events' "["), the events from the cursor, its tail. */
enum xdoc { XDOC_HEAD, XDOC_EVENTS, XDOC_TAIL, XDOC_DONE };

struct xreader {
    struct xexec_sub sub;
    struct gw_req *r;
    enum xreq_format fmt;
    int status;
    bool headers_sent;
    size_t off; /* bytes written of the piece at the cursor (an event framed, the head) */
    /* the JSON document, written from the store as the socket takes it */
    enum xdoc doc;
    char *head; /* {"execution":MODEL,"events":[ */
    size_t head_len;
};

/* The bytes of one piece of an answer (an event as framed, the document's head): up to three
 * spans, one after the other. Each is written from the store as the socket takes it, a part
 * at a time, so a reader that stops reading holds no copy of it. */
struct xpiece {
    const char *p[3];
    size_t n[3];
};

/* Appends to b the piece's bytes from *off, up to want of them; true when its end is
 * written (*off is then 0). */
static bool piece_copy(const struct xpiece *pc, size_t *off, size_t want, buf_t *b, int *rc)
{
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        if (*off < at + pc->n[i] && want > 0) {
            size_t from = *off - at, take = pc->n[i] - from < want ? pc->n[i] - from : want;
            *rc |= buf_append(b, pc->p[i] + from, take);
            *off += take;
            want -= take;
        }
        at += pc->n[i];
    }
    if (*off < at)
        return false;
    *off = 0;
    return true;
}

/* ---- readers ---- */

static void reader_free(struct xreader **p)
{
    struct xreader *rd = *p;
    if (!rd)
        return;
    xexec_unsubscribe(&rd->sub);
    free(rd->head);
    free(rd);
    *p = NULL;
}

static void reader_wake(struct xexec_sub *s)
{
    struct xreader *rd = (struct xreader *)s;
    lws_callback_on_writable(rd->r->wsi);
}

static const struct xexec_sub_ops reader_ops = {.wake = reader_wake};

static void attach(struct gw_req *r, xexec_t *x, int status, uint64_t since)
{
    struct xreader *rd = calloc(1, sizeof(*rd));
    if (!rd)
        return req_error(r, 500, "out of memory");
    rd->r = r;
    rd->status = status;
    rd->fmt = http_accept_format(r->wsi);
    xexec_subscribe(x, &rd->sub, since, &reader_ops);
    r->face = rd;
    snprintf(r->location, sizeof(r->location), "/api/executions/%s", xexec_id(x));
    lws_callback_on_writable(r->wsi);
}

/* The head; length < 0: chunked. */
static int write_head(struct gw_req *r, const char *ctype, long long length)
{
    struct xreader *rd = r->face;
    if (http_write_head(r, rd->status, ctype, "location:", r->location, length) < 0)
        return -1;
    rd->headers_sent = true;
    return 0;
}

/* Writes payload (with LWS_PRE bytes of room before data) as one chunk. */
static int write_chunk(struct lws *wsi, buf_t *b, bool last)
{
    char head[24];
    size_t pay = b->len - LWS_PRE - sizeof(head);
    int hn = snprintf(head, sizeof(head), "%zx\r\n", pay);
    unsigned char *start = (unsigned char *)b->data + LWS_PRE + sizeof(head) - (size_t)hn;
    memcpy(start, head, (size_t)hn);
    if (buf_append(b, last ? "\r\n0\r\n\r\n" : "\r\n", last ? 7 : 2) < 0)
        return -1;
    start = (unsigned char *)b->data + LWS_PRE + sizeof(head) - (size_t)hn; /* moved? */
    size_t len = (size_t)((unsigned char *)b->data + b->len - start);
    return lws_write(wsi, start, len, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0 ? -1 : 0;
}

/* The document's head, and the whole document's length (the execution ended: its events are
 * fixed while it is read). -1 when out of memory. */
static long long doc_begin(struct xreader *rd, xexec_t *x)
{
    json_t *m = xexec_model(x);
    char *ms = m ? json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
                 : NULL;
    json_decref(m);
    buf_t b;
    buf_init(&b, SIZE_MAX);
    int rc = ms ? buf_append(&b, "{\"execution\":", 13) : -ENOMEM;
    rc |= ms ? buf_append(&b, ms, strlen(ms)) : -ENOMEM;
    rc |= buf_append(&b, ",\"events\":[", 11);
    free(ms);
    if (rc < 0) {
        buf_fini(&b);
        return -1;
    }
    rd->head = b.data; /* taken */
    rd->head_len = b.len;
    long long len = (long long)rd->head_len + 2; /* and "]}" */
    for (uint64_t seq = xexec_first_seq(x); seq < xexec_next_seq(x); seq++) {
        struct xexec_event e;
        xexec_event(x, seq, &e);
        len += (long long)e.len + (seq > xexec_first_seq(x) ? 1 : 0);
    }
    rd->doc = XDOC_HEAD;
    return len;
}

/* Appends the document's next bytes to b, up to XAPI_BATCH_BYTES after room. */
static int doc_fill(struct xreader *rd, xexec_t *x, buf_t *b, size_t room)
{
    int rc = 0;
    while (rc == 0 && rd->doc != XDOC_DONE && b->len - room < XAPI_BATCH_BYTES) {
        struct xpiece pc = {{""}, {0}};
        struct xexec_event e;
        if (rd->doc == XDOC_EVENTS && rd->sub.cursor >= xexec_next_seq(x))
            rd->doc = XDOC_TAIL;
        if (rd->doc == XDOC_HEAD) {
            pc.p[0] = rd->head;
            pc.n[0] = rd->head_len;
        } else if (rd->doc == XDOC_EVENTS) {
            xexec_event(x, rd->sub.cursor, &e);
            pc.p[0] = ",";
            pc.n[0] = rd->sub.cursor > xexec_first_seq(x) ? 1 : 0;
            pc.p[1] = e.json;
            pc.n[1] = e.len;
        } else {
            pc.p[0] = "]}";
            pc.n[0] = 2;
        }
        if (!piece_copy(&pc, &rd->off, XAPI_BATCH_BYTES - (b->len - room), b, &rc))
            break;
        if (rd->doc == XDOC_EVENTS)
            rd->sub.cursor++;
        else
            rd->doc = rd->doc == XDOC_HEAD ? XDOC_EVENTS : XDOC_DONE;
    }
    return rc;
}

/* The JSON document of an ended execution, written from its store as the socket takes it (a
 * reader that stops reading holds no copy of it): 1 once written whole. */
static int write_document(struct gw_req *r, xexec_t *x)
{
    struct xreader *rd = r->face;
    if (!rd->headers_sent) {
        rd->sub.cursor = xexec_first_seq(x);
        long long len = doc_begin(rd, x);
        if (len < 0 || write_head(r, "application/json", len) < 0)
            return -1;
    }
    if (rd->sub.cursor < xexec_first_seq(x)) /* (the store keeps what a reader reads) */
        return -1;
    while (rd->doc != XDOC_DONE && !lws_send_pipe_choked(r->wsi)) {
        buf_t b;
        buf_init(&b, SIZE_MAX);
        static const char room[LWS_PRE];
        int rc = buf_append(&b, room, sizeof(room));
        rc |= doc_fill(rd, x, &b, sizeof(room));
        if (rc < 0 || lws_write(r->wsi, (unsigned char *)b.data + LWS_PRE, b.len - LWS_PRE,
                                rd->doc == XDOC_DONE ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0) {
            buf_fini(&b);
            return -1;
        }
        buf_fini(&b);
    }
    if (rd->doc == XDOC_DONE)
        return 1;
    lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
    lws_callback_on_writable(r->wsi);
    return 0;
}

void xapi_req_fini(struct gw_req *r)
{
    struct xreader *rd = r->face;
    r->face = NULL;
    reader_free(&rd);
}

int xapi_write(struct gw_req *r)
{
    struct xreader *rd = r->face;
    if (!rd) /* not reading an execution (its answer is stored) */
        return 0;
    xexec_t *x = rd->sub.x;
    if (!x) /* dropped from the store while read */
        return -1;
    if (rd->fmt == XREQ_JSON) {
        if (xexec_done(x))
            return write_document(r, x);
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0); /* it waits for the end */
        return 0;
    }
    if (!rd->headers_sent && write_head(r, xreq_format_ctype(rd->fmt), -1) < 0)
        return -1;
    if (rd->sub.cursor < xexec_first_seq(x)) {
        log_info("xapi: execution=%s: a reader fell behind the events held; connection closed",
                 xexec_id(x));
        return -1;
    }
    while (!lws_send_pipe_choked(r->wsi)) {
        bool done = xexec_done(x);
        if (rd->sub.cursor >= xexec_next_seq(x) && !done)
            break;
        buf_t b;
        buf_init(&b, SIZE_MAX);
        static const char room[LWS_PRE + 24]; /* LWS_PRE, then the chunk's size line */
        int rc = buf_append(&b, room, sizeof(room));
        while (rc == 0 && rd->sub.cursor < xexec_next_seq(x) &&
               b.len - sizeof(room) < XAPI_BATCH_BYTES) {
            struct xexec_event e;
            char head[XEVENT_FRAME_HEAD_MAX];
            const char *tail;
            xexec_event(x, rd->sub.cursor, &e);
            int hn = xevent_frame_parts(rd->fmt, rd->sub.cursor, e.type, head, &tail);
            if (hn < 0) {
                rc = hn;
                break;
            }
            struct xpiece pc = {{head, e.json, tail}, {(size_t)hn, e.len, strlen(tail)}};
            if (!piece_copy(&pc, &rd->off, XAPI_BATCH_BYTES - (b.len - sizeof(room)), &b, &rc))
                break;
            rd->sub.cursor++;
        }
        bool last = done && rd->sub.cursor >= xexec_next_seq(x);
        if (rc == 0 && b.len == sizeof(room)) { /* nothing but the last chunk */
            static unsigned char fin[LWS_PRE + 5];
            memcpy(fin + LWS_PRE, "0\r\n\r\n", 5);
            buf_fini(&b);
            return lws_write(r->wsi, fin + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) < 0 ? -1 : 1;
        }
        if (rc < 0 || write_chunk(r->wsi, &b, last) < 0) {
            buf_fini(&b);
            return -1;
        }
        buf_fini(&b);
        if (last)
            return 1;
    }
    /* bytes to take: the store's, or a part of a write lws holds */
    if (rd->sub.cursor < xexec_next_seq(x) || xexec_done(x) || lws_partial_buffered(r->wsi)) {
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
        lws_callback_on_writable(r->wsi);
    } else {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
    }
    return 0;
}

/* ---- handlers ---- */

static void json_error_extra(struct gw_req *r, int status, const char *reason, const char *msg,
                             json_t *extra)
{
    json_t *e = json_pack("{s:s, s:s}", "reason", reason, "message", msg);
    if (e && extra)
        json_object_update(e, extra);
    json_decref(extra);
    req_reply(r, status, e);
}

/* The Idempotency-Key of the request into key ("" when none); false after answering 400. */
static bool idem_key(struct gw_req *r, char key[XEXEC_KEY_MAX + 1])
{
    key[0] = '\0';
    int n = lws_hdr_custom_length(r->wsi, "idempotency-key:", 16);
    if (n <= 0)
        return true;
    if (n > XEXEC_KEY_MAX ||
        lws_hdr_custom_copy(r->wsi, key, XEXEC_KEY_MAX + 1, "idempotency-key:", 16) < 0 ||
        !util_printable(key, strlen(key))) {
        key[0] = '\0';
        req_error(r, 400, "Idempotency-Key must be 1 to %d printable ASCII characters",
                  XEXEC_KEY_MAX);
        return false;
    }
    return true;
}

/* A POST with an Idempotency-Key seen before: true when answered (the same execution from
 * seq 0, or 422 when the body or the route differs). kernel_id: the route's kernel (NULL: a
 * one-shot). */
static bool idem_replay(struct gw_req *r, const char *kernel_id, const char *key,
                        const unsigned char *hash)
{
    xexec_t *x = xexec_by_key(r->g, key, r->caller.tenant);
    if (!x)
        return false;
    if (!xexec_same_body(x, hash)) {
        req_error(r, 422, "this Idempotency-Key was used with a different request body");
        return true;
    }
    if (!xexec_same_route(x, kernel_id)) {
        req_error(r, 422, "this Idempotency-Key was used on another route (%s)",
                  kernel_id ? "another kernel, or a one-shot execution" : "a kernel's execute");
        return true;
    }
    if (xexec_first_seq(x) > 0) { /* not run again, and its first events are gone */
        snprintf(r->location, sizeof(r->location), "/api/executions/%s", xexec_id(x));
        json_error_extra(r, 410, "Gone",
                         "this Idempotency-Key's execution ran; its first events are no longer "
                         "held (retention budget): GET its Location for the end",
                         json_pack("{s:I}", "first_seq", (json_int_t)xexec_first_seq(x)));
        return true;
    }
    attach(r, x, 200, 0);
    return true;
}

/* The Idempotency-Key of a POST (to kernel_id's execute; NULL: a one-shot) and its body's
 * hash: false when the request is answered already (a bad key, a retry of a held execution,
 * or the tenant holding its share of executions: 429). */
static bool idem_begin(struct gw_req *r, const char *kernel_id, char key[XEXEC_KEY_MAX + 1],
                       unsigned char hash[crypto_hash_sha256_BYTES])
{
    int retry = 1, rc;
    if (!idem_key(r, key))
        return false;
    crypto_hash_sha256(hash, (const unsigned char *)(r->body.data ? r->body.data : ""),
                       r->body.len);
    if (idem_replay(r, kernel_id, key, hash))
        return false;
    if ((rc = xexec_admit(r->g, r->caller.tenant, &retry)) == -EAGAIN) {
        req_error_retry(r, 429, retry,
                        "the tenant holds %lld executions (its share, "
                        "--max-executions-per-tenant) that are running or still within their "
                        "retention; retry later",
                        r->g->cfg.max_executions_per_tenant);
        return false;
    }
    if (rc < 0) {
        req_error_retry(r, 503, retry, "too many executions held; retry later");
        return false;
    }
    return true;
}

static bool parse_body(struct gw_req *r, bool oneshot, struct xreq *q)
{
    char err[256];
    if (xreq_parse(r->body.data ? r->body.data : "", r->body.len, oneshot,
                   (size_t)r->g->cfg.max_body_bytes, q, err, sizeof(err)) < 0) {
        req_error(r, 400, "%s", err);
        return false;
    }
    return true;
}

static void remember(xexec_t *x, const char *key, const unsigned char *hash, struct xreq *q)
{
    xexec_set_key(x, key, hash);
    xexec_set_request(x, q);
}

void xapi_kernel_execute(struct gw_req *r)
{
    gw_t *g = r->g;
    char key[XEXEC_KEY_MAX + 1];
    unsigned char hash[crypto_hash_sha256_BYTES];
    struct xreq q;
    kernel_t *k = gw_kernel(g, r->route.arg[0], r->caller.tenant);
    if (!k || kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD)
        return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
    struct kerr err;
    if (kops_executable(g, k, &err) < 0) /* paused: refused, never queued for its resume */
        return req_error(r, err.status, "%s", err.message);
    if (!idem_begin(r, kernel_id(k), key, hash))
        return;
    if (!parse_body(r, false, &q))
        return;
    size_t waiting = xexec_waiting(g, k);
    if ((long long)waiting >= g->cfg.max_queued_executions) {
        xreq_fini(&q);
        return req_error_retry(r, 429, 1,
                               "kernel %s has %zu executions queued or running (the limit, "
                               "--max-queued-executions); retry later",
                               kernel_id(k), waiting);
    }
    xexec_t *x = xexec_new(g, &r->caller, k);
    if (!x) {
        xreq_fini(&q);
        return req_error_retry(r, 503, 1, "too many executions held; retry later");
    }
    remember(x, key, hash, &q);
    attach(r, x, 201, 0);
    xexec_enqueue(x, k);
}

void xapi_oneshot(struct gw_req *r)
{
    gw_t *g = r->g;
    char key[XEXEC_KEY_MAX + 1];
    unsigned char hash[crypto_hash_sha256_BYTES];
    struct xreq q;
    struct kerr err;
    kernel_t *k;
    if (!idem_begin(r, NULL, key, hash))
        return;
    if (!parse_body(r, true, &q))
        return;
    json_t *start = q.kernel_name[0] ? json_pack("{s:s}", "name", q.kernel_name) : json_object();
    int rc = kops_start(g, &r->caller, start, &k, &err);
    json_decref(start);
    if (rc < 0) {
        xreq_fini(&q);
        return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
    }
    xexec_t *x = xexec_new(g, &r->caller, k);
    if (!x) {
        xreq_fini(&q);
        kops_shutdown(g, k, &err);
        return req_error_retry(r, 503, 1, "too many executions held; retry later");
    }
    bool keep = q.keep;
    remember(x, key, hash, &q);
    attach(r, x, 201, 0);
    xexec_oneshot(x, k, keep);
}

/* The caller's execution named by the route; NULL after answering 404. */
static xexec_t *route_execution(struct gw_req *r)
{
    xexec_t *x = xexec_find(r->g, r->route.arg[0], r->caller.tenant);
    if (!x)
        req_error(r, 404, "no such execution: %s", r->route.arg[0]);
    return x;
}

void xapi_execution(struct gw_req *r)
{
    xexec_t *x = route_execution(r);
    if (!x)
        return;
    if (r->method == HTTP_M_DELETE)
        xexec_cancel(x);
    req_reply(r, 200, xexec_model(x));
}

void xapi_execution_events(struct gw_req *r)
{
    xexec_t *x = route_execution(r);
    if (!x)
        return;
    /* ?since=N, or Last-Event-ID (an EventSource reconnecting) from the next one */
    uint64_t since = 0;
    char buf[512];
    const char *s = lws_get_urlarg_by_name(r->wsi, "since=", buf, sizeof(buf));
    int n = s ? 0 : lws_hdr_custom_length(r->wsi, "last-event-id:", 14);
    if (s) {
        if (xreq_since(s, strlen(s), &since) < 0)
            return req_error(r, 400, "'since' must be a sequence number (0 or more)");
    } else if (n > 0) {
        if (n >= (int)sizeof(buf) ||
            lws_hdr_custom_copy(r->wsi, buf, sizeof(buf), "last-event-id:", 14) < 0 ||
            xreq_since(buf, strlen(buf), &since) < 0)
            return req_error(r, 400, "Last-Event-ID must be a sequence number");
        since++;
    }
    if (since < xexec_first_seq(x)) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "events before seq %" PRIu64 " are no longer held (retention budget)",
                 xexec_first_seq(x));
        return json_error_extra(r, 410, "Gone", msg,
                                json_pack("{s:I}", "first_seq", (json_int_t)xexec_first_seq(x)));
    }
    attach(r, x, 200, since);
}

