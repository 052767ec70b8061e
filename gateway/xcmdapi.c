/* Commands over HTTP (xcmdapi.h). A command's events are framed as they come onto its stream
 * (xcmd.h: bounded by the queue and the kernel's share of the output budget, the command
 * paused while the client does not take what is queued) and written as the response. */
#include "gateway/xcmdapi.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/kops.h"
#include "gateway/xcmd.h"
#include "protocol/u8fix.h"
#include "protocol/xevent.h"
#include "protocol/xreq.h"

#define XCMD_WRITE_BYTES (64 * 1024) /* bytes per lws_write */

struct xcmdapi_stream {
    struct list link; /* on the commands list (DELETE finds them) */
    struct gw_req *r;
    gw_t *g;
    xcmd_stream_t *cmd;
    char id[UTIL_UUID_LEN + 1];
    char kernel_id[40];
    char tenant[KEYFILE_TENANT_MAX + 1];
    enum xreq_format fmt;
    uint64_t seq;
    struct u8fix u8[3];
    bool headers_sent;
};

static struct list streams = {&streams, &streams};

static void queue_event(struct xcmdapi_stream *st, const char *type, json_t *ev)
{
    char *t =
        ev ? json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(ev);
    enum xreq_format f = st->fmt == XREQ_SSE ? XREQ_SSE : XREQ_NDJSON;
    buf_t b;
    buf_init(&b, SIZE_MAX);
    if (!t || xevent_frame(f, st->seq, type, t, strlen(t), &b) < 0 ||
        xcmd_stream_send(st->cmd, b.data, b.len) < 0)
        log_warn("xcmd: command=%s: an event was lost (out of memory)", st->id);
    buf_fini(&b);
    free(t);
    st->seq++;
}

static void queue_text(struct xcmdapi_stream *st, int fd, const void *buf, size_t n, bool final)
{
    buf_t t;
    buf_init(&t, SIZE_MAX);
    if (u8fix_feed(&st->u8[fd], buf, n, final, &t) < 0 || t.len == 0) {
        buf_fini(&t);
        return;
    }
    queue_event(st, fd == 1 ? "stdout" : "stderr",
                json_pack("{s:I, s:s, s:s%}", "seq", (json_int_t)st->seq, "type",
                          fd == 1 ? "stdout" : "stderr", "text", t.data, t.len));
    buf_fini(&t);
}

static void on_output(void *ud, int fd, const void *buf, size_t n)
{
    queue_text(ud, fd, buf, n, false);
}

static void on_end(void *ud, const struct kcmd_end *e)
{
    struct xcmdapi_stream *st = ud;
    queue_text(st, 1, "", 0, true);
    queue_text(st, 2, "", 0, true);
    json_t *ev = json_pack("{s:I, s:s}", "seq", (json_int_t)st->seq, "type", "end");
    json_t *end = xcmd_end_json(e);
    if (ev && end)
        json_object_update(ev, end);
    json_decref(end);
    queue_event(st, "end", ev);
    log_info("xcmd: command=%s kernel=%s: %s (exit %d, signal %d)", st->id, st->kernel_id,
             kcmd_status_name(e->status), e->exit_code, e->signal);
}

static void on_wake(void *ud)
{
    struct xcmdapi_stream *st = ud;
    if (st->r)
        lws_callback_on_writable(st->r->wsi);
}

static const struct xcmd_stream_ops stream_ops = {
    .output = on_output, .end = on_end, .wake = on_wake};

static void stream_free(struct xcmdapi_stream *st)
{
    xcmd_stream_free(&st->cmd); /* a command still running is killed: its client went away */
    list_remove(&st->link);
    free(st);
}

void xcmdapi_req_fini(struct gw_req *r)
{
    struct xcmdapi_stream *st = r->face;
    if (st) {
        st->r = NULL;
        stream_free(st);
        r->face = NULL;
    }
}

static const char *const http_fields[] = {"command", "argv",  "cwd", "env",
                                          "timeout", "stdin", NULL};

void xcmdapi_post(struct gw_req *r)
{
    char err[256];
    struct xcmd_spec s;
    kernel_t *k = gw_kernel(r->g, r->route.arg[0], r->caller.tenant);
    if (!k || kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD)
        return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
    json_t *body = req_json_body(r);
    if (!body)
        return;
    int rc = xcmd_spec_parse(body, http_fields, &s, err, sizeof(err));
    json_decref(body);
    if (rc < 0)
        return req_error(r, 400, "%s", err);
    struct xcmdapi_stream *st = calloc(1, sizeof(*st));
    if (!st) {
        xcmd_spec_fini(&s);
        return req_error(r, 500, "out of memory");
    }
    list_init(&st->link);
    st->g = r->g;
    st->fmt = http_accept_format(r->wsi);
    util_uuid(st->id);
    snprintf(st->kernel_id, sizeof(st->kernel_id), "%s", kernel_id(k));
    snprintf(st->tenant, sizeof(st->tenant), "%s", r->caller.tenant);
    struct kcmd_opts o = xcmd_spec_opts(&s);
    struct kerr kerr;
    if (!(st->cmd = xcmd_stream_start(r->g, k, &o, &stream_ops, st, &kerr))) {
        xcmd_spec_fini(&s);
        stream_free(st);
        return req_error_retry(r, kerr.status, kerr.retry_after, "%s", kerr.message);
    }
    if (s.stdin_data) { /* its bytes, then the end */
        xcmd_stream_input(st->cmd, s.stdin_data, s.stdin_len);
        xcmd_stream_close_input(st->cmd);
    }
    xcmd_spec_fini(&s);
    list_append(&streams, &st->link);
    st->r = r;
    r->face = st;
    snprintf(r->location, sizeof(r->location), "/api/kernels/%s/commands/%s", st->kernel_id,
             st->id);
    queue_event(st, "start",
                json_pack("{s:I, s:s, s:s, s:s}", "seq", (json_int_t)st->seq, "type", "start",
                          "command_id", st->id, "kernel_id", st->kernel_id));
    log_info("xcmd: command=%s kernel=%s tenant=%s: started", st->id, st->kernel_id, st->tenant);
}

void xcmdapi_delete(struct gw_req *r)
{
    struct xcmdapi_stream *st;
    kernel_t *k = gw_kernel(r->g, r->route.arg[0], r->caller.tenant);
    if (!k)
        return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
    list_for_each(st, &streams, link)
    {
        if (!strcmp(st->id, r->route.arg[1]) && !strcmp(st->kernel_id, kernel_id(k)) &&
            !strcmp(st->tenant, r->caller.tenant)) {
            struct kerr kerr;
            bool running = !xcmd_stream_ended(st->cmd) &&
                           xcmd_stream_signal(st->cmd, SIGKILL, &kerr) == 0;
            return req_reply(r, 202,
                             json_pack("{s:s, s:s}", "command_id", st->id, "state",
                                       running ? "cancelling" : "ended"));
        }
    }
    req_error(r, 404, "no such command: %s", r->route.arg[1]);
}

/* Writes len bytes of p as one chunk of the chunked response (last: and its end). */
static int write_chunk(struct lws *wsi, const char *p, size_t len, bool last)
{
    char head[24];
    int hn = snprintf(head, sizeof(head), "%zx\r\n", len);
    size_t total = (size_t)hn + len + (last ? 7 : 2);
    unsigned char *b = malloc(LWS_PRE + total);
    if (!b)
        return -1;
    unsigned char *o = b + LWS_PRE;
    memcpy(o, head, (size_t)hn);
    memcpy(o + hn, p, len);
    memcpy(o + hn + len, last ? "\r\n0\r\n\r\n" : "\r\n", last ? 7 : 2);
    int rc = lws_write(wsi, o, total, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0 ? -1 : 0;
    free(b);
    return rc;
}

int xcmdapi_write(struct gw_req *r)
{
    struct xcmdapi_stream *st = r->face;
    if (!st)
        return 0;
    if (!st->headers_sent) {
        enum xreq_format f = st->fmt == XREQ_SSE ? XREQ_SSE : XREQ_NDJSON;
        if (http_write_head(r, 201, xreq_format_ctype(f), "location:", r->location, -1) < 0)
            return -1;
        st->headers_sent = true;
    }
    while (!lws_send_pipe_choked(r->wsi)) {
        const char *p;
        bool ended = xcmd_stream_ended(st->cmd);
        size_t left = xcmd_stream_pending(st->cmd, &p);
        if (left == 0 && !ended)
            break;
        size_t n = left < XCMD_WRITE_BYTES ? left : XCMD_WRITE_BYTES;
        bool last = ended && n == left;
        if (n == 0) { /* only the end of the chunked body */
            static unsigned char fin[LWS_PRE + 5];
            memcpy(fin + LWS_PRE, "0\r\n\r\n", 5);
            return lws_write(r->wsi, fin + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) < 0 ? -1 : 1;
        }
        if (write_chunk(r->wsi, p, n, last) < 0)
            return -1;
        xcmd_stream_taken(st->cmd, n);
        if (last)
            return 1;
    }
    const char *p;
    if (xcmd_stream_pending(st->cmd, &p) || xcmd_stream_ended(st->cmd) ||
        lws_partial_buffered(r->wsi)) {
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
        lws_callback_on_writable(r->wsi);
    } else {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0); /* it waits for the command */
    }
    return 0;
}
