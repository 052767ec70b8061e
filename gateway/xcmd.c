/* Commands over HTTP and for MCP (xcmd.h). A command's events are framed as they come and
 * queued for the response; when the queue (or the kernel's share of the output budget) is
 * full, the command's output is no longer read (kcmd_pause) until the client takes what is
 * queued: the command then waits on its pipe, the gateway holds a bounded amount. */
#include "gateway/xcmd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "common/obudget.h"
#include "common/util.h"
#include "gateway/kops.h"
#include "gateway/xapi.h"
#include "kernelmgr/kcmd.h"
#include "protocol/fpath.h"
#include "protocol/u8fix.h"
#include "protocol/xevent.h"
#include "protocol/xreq.h"

#define XCMD_QUEUE_MAX      (256 * 1024) /* bytes queued for a client before its command pauses */
#define XCMD_WRITE_BYTES    (64 * 1024)  /* bytes per lws_write */
#define XCMD_STDIN_RETRY_MS 20           /* a stdin pipe that was full: tried again after */

/* ---- the request body ---- */

static bool env_name_ok(const char *s)
{
    if (!s[0] || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

/* A JSON string without NUL bytes: its copy, else NULL. */
static char *str_dup(json_t *v)
{
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return NULL;
    return strdup(json_string_value(v));
}

void xcmd_spec_fini(struct xcmd_spec *s)
{
    for (size_t i = 0; s->argv && s->argv[i]; i++)
        free(s->argv[i]);
    for (size_t i = 0; s->env && s->env[i]; i++)
        free(s->env[i]);
    free(s->argv);
    free(s->env);
    free(s->cwd);
    free(s->stdin_data);
    memset(s, 0, sizeof(*s));
}

#define FAIL(...)                          \
    do {                                   \
        snprintf(err, errsz, __VA_ARGS__); \
        xcmd_spec_fini(s);                 \
        return -EINVAL;                    \
    } while (0)

int xcmd_spec_parse(json_t *body, const char *const *allowed, struct xcmd_spec *s, char *err,
                    size_t errsz)
{
    const char *key;
    json_t *v;
    memset(s, 0, sizeof(*s));
    if (!json_is_object(body))
        FAIL("the body must be a JSON object");
    json_object_foreach(body, key, v)
    {
        bool ok = false;
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(key, allowed[i]);
        if (!ok) {
            char names[128] = "";
            for (size_t i = 0; allowed[i]; i++)
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                         i ? ", " : "", allowed[i]);
            FAIL("unknown field '%.64s' (a command takes: %s)", key, names);
        }
    }
    json_t *cmd = json_object_get(body, "command"), *argv = json_object_get(body, "argv");
    if (!!cmd == !!argv)
        FAIL("give either 'command' (a string run by /bin/bash -l -c) or 'argv' (an array of "
             "strings)");
    if (cmd) {
        if (!json_is_string(cmd) || json_string_length(cmd) == 0 ||
            json_string_length(cmd) > XCMD_COMMAND_MAX)
            FAIL("'command' must be a string of 1 to %d bytes", XCMD_COMMAND_MAX);
        if (!(s->argv = calloc(5, sizeof(char *))))
            FAIL("out of memory");
        s->argv[0] = strdup("/bin/bash");
        s->argv[1] = strdup("-l");
        s->argv[2] = strdup("-c");
        if (!(s->argv[3] = str_dup(cmd)))
            FAIL("'command' must not hold NUL characters");
        if (!s->argv[0] || !s->argv[1] || !s->argv[2])
            FAIL("out of memory");
    } else {
        size_t n = json_is_array(argv) ? json_array_size(argv) : 0;
        if (n < 1 || n > 1024)
            FAIL("'argv' must be an array of 1 to 1024 strings");
        if (!(s->argv = calloc(n + 1, sizeof(char *))))
            FAIL("out of memory");
        for (size_t i = 0; i < n; i++)
            if (!(s->argv[i] = str_dup(json_array_get(argv, i))) || (i == 0 && !s->argv[0][0]))
                FAIL("'argv' must hold strings without NUL characters, the first not empty");
    }
    if ((v = json_object_get(body, "cwd")) &&
        (!(s->cwd = str_dup(v)) || !s->cwd[0] || strlen(s->cwd) > 1024))
        FAIL("'cwd' must be a path of 1 to 1024 bytes (relative: to the workspace)");
    char norm[FPATH_MAX + 1];
    if (s->cwd && s->cwd[0] != '/' &&
        fpath_normalize(s->cwd, strlen(s->cwd), norm, sizeof(norm)) < 0)
        FAIL("'cwd': a relative path names a directory inside the workspace: no '.' or '..' "
             "components, no empty ones");
    if ((v = json_object_get(body, "env"))) {
        size_t n = json_is_object(v) ? json_object_size(v) : (size_t)-1, i = 0;
        json_t *val;
        if (n > XCMD_ENV_MAX)
            FAIL("'env' must be an object of at most %d string values", XCMD_ENV_MAX);
        if (!(s->env = calloc(n + 1, sizeof(char *))))
            FAIL("out of memory");
        json_object_foreach(v, key, val)
        {
            char *sv = str_dup(val);
            if (!sv || !env_name_ok(key)) {
                free(sv);
                FAIL("'env': names must match [A-Za-z_][A-Za-z0-9_]*, values be strings "
                     "without NUL characters");
            }
            size_t len = strlen(key) + strlen(sv) + 2;
            if ((s->env[i] = malloc(len)))
                snprintf(s->env[i], len, "%s=%s", key, sv);
            free(sv);
            if (!s->env[i++])
                FAIL("out of memory");
        }
    }
    if ((v = json_object_get(body, "timeout")) &&
        (!json_is_number(v) || !(json_number_value(v) > 0) ||
         json_number_value(v) > XREQ_TIMEOUT_MAX))
        FAIL("'timeout' must be a number of seconds above 0, at most %d", XREQ_TIMEOUT_MAX);
    s->timeout = v ? json_number_value(v) : 0;
    if ((v = json_object_get(body, "stdin"))) {
        if (!json_is_string(v) || json_string_length(v) > XCMD_STDIN_MAX)
            FAIL("'stdin' must be a string of at most %d bytes", XCMD_STDIN_MAX);
        s->stdin_len = json_string_length(v);
        if (!(s->stdin_data = malloc(s->stdin_len + 1)))
            FAIL("out of memory");
        memcpy(s->stdin_data, json_string_value(v), s->stdin_len + 1);
    }
    return 0;
}

#undef FAIL

static struct kcmd_opts spec_opts(const struct xcmd_spec *s)
{
    return (struct kcmd_opts){.argv = (const char *const *)s->argv,
                              .cwd = s->cwd,
                              .env = (const char *const *)s->env,
                              .timeout_s = s->timeout,
                              .stdin_open = s->stdin_data != NULL};
}

/* ---- stdin: the body's bytes, written as the pipe takes them ---- */

struct xstdin {
    kcmd_t **cmd; /* the owner's pointer */
    evl_t *evl;
    char *data;
    size_t len, off;
    evl_timer_t *timer;
};

static void stdin_push(void *data)
{
    struct xstdin *in = data;
    while (*in->cmd && in->off < in->len) {
        int n = kcmd_write_stdin(*in->cmd, in->data + in->off, in->len - in->off);
        if (n < 0) { /* it closed its stdin, or ended: the rest is moot */
            in->off = in->len;
            break;
        }
        if (n == 0) {
            in->evl->timer_arm(in->evl, in->timer, XCMD_STDIN_RETRY_MS);
            return;
        }
        in->off += (size_t)n;
    }
    if (*in->cmd)
        kcmd_close_stdin(*in->cmd);
}

static void stdin_free(struct xstdin **p)
{
    struct xstdin *in = *p;
    if (!in)
        return;
    evl_timer_destroy(in->evl, &in->timer);
    free(in->data);
    free(in);
    *p = NULL;
}

/* Takes s's stdin bytes; writes what the pipe takes now. NULL without stdin or memory (the
 * command then gets EOF at once). */
static struct xstdin *stdin_start(evl_t *evl, kcmd_t **cmd, struct xcmd_spec *s)
{
    struct xstdin *in = s->stdin_data ? calloc(1, sizeof(*in)) : NULL;
    if (in && !(in->timer = evl->timer_new(evl, stdin_push, in))) {
        free(in);
        in = NULL;
    }
    if (!in) {
        if (s->stdin_data)
            kcmd_close_stdin(*cmd);
        return NULL;
    }
    in->cmd = cmd;
    in->evl = evl;
    in->data = s->stdin_data;
    in->len = s->stdin_len;
    s->stdin_data = NULL;
    stdin_push(in);
    return in;
}

/* ---- HTTP: POST .../commands ---- */

struct xcmd_stream {
    struct list link; /* on the commands list (DELETE finds them) */
    struct gw_req *r;
    gw_t *g;
    kcmd_t *cmd;
    struct xstdin *in;
    char id[UTIL_UUID_LEN + 1];
    char kernel_id[40];
    char tenant[KEYFILE_TENANT_MAX + 1];
    enum xreq_format fmt;
    uint64_t seq;
    buf_t q; /* framed events not written yet, from q_off */
    size_t q_off;
    struct u8fix u8[3];
    obudget_share_t *share; /* the kernel's share of the output budget, charged what q holds */
    size_t charged;
    bool headers_sent, ended, paused;
};

static struct list streams = {&streams, &streams};

static void queue_event(struct xcmd_stream *st, const char *type, json_t *ev)
{
    char *t =
        ev ? json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(ev);
    enum xreq_format f = st->fmt == XREQ_SSE ? XREQ_SSE : XREQ_NDJSON;
    size_t before = st->q.len;
    if (!t || xevent_frame(f, st->seq, type, t, strlen(t), &st->q) < 0)
        log_warn("xcmd: command=%s: an event was lost (out of memory)", st->id);
    free(t);
    st->seq++;
    size_t added = st->q.len - before;
    if (st->share && added) {
        obudget_share_charge(st->share, added);
        st->charged += added;
    }
    if (st->r)
        lws_callback_on_writable(st->r->wsi);
}

static void queue_text(struct xcmd_stream *st, int fd, const void *buf, size_t n, bool final)
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

static bool over_budget(const struct xcmd_stream *st)
{
    return st->q.len - st->q_off > XCMD_QUEUE_MAX ||
           (st->share && obudget_share_limit(st->share) &&
            obudget_share_held(st->share) > obudget_share_limit(st->share));
}

static void on_output(void *ud, int fd, const void *buf, size_t n)
{
    struct xcmd_stream *st = ud;
    queue_text(st, fd, buf, n, false);
    if (!st->paused && over_budget(st)) {
        st->paused = true;
        kcmd_pause(st->cmd, true);
    }
}

static json_t *end_json(const struct kcmd_end *e)
{
    json_t *j = json_pack("{s:s, s:o, s:o, s:f, s:s}", "status", kcmd_status_name(e->status),
                          "exit_code", e->exit_code >= 0 ? json_integer(e->exit_code) : json_null(),
                          "signal", e->signal ? json_integer(e->signal) : json_null(),
                          "duration_ms", (double)e->duration_us / 1000.0, "message", e->message);
    return j;
}

static void on_end(void *ud, const struct kcmd_end *e)
{
    struct xcmd_stream *st = ud;
    queue_text(st, 1, "", 0, true);
    queue_text(st, 2, "", 0, true);
    json_t *ev = json_pack("{s:I, s:s}", "seq", (json_int_t)st->seq, "type", "end");
    json_t *end = end_json(e);
    if (ev && end)
        json_object_update(ev, end);
    json_decref(end);
    queue_event(st, "end", ev);
    st->ended = true;
    stdin_free(&st->in);
    log_info("xcmd: command=%s kernel=%s: %s (exit %d, signal %d)", st->id, st->kernel_id,
             kcmd_status_name(e->status), e->exit_code, e->signal);
}

static const struct kcmd_cbs stream_cbs_proto = {.output = on_output, .end = on_end};

static void stream_free(struct xcmd_stream *st)
{
    stdin_free(&st->in);
    kcmd_release(&st->cmd); /* a command still running is killed: its client went away */
    list_remove(&st->link);
    if (st->share) {
        obudget_share_release(st->share, st->charged);
        obudget_share_unref(&st->share);
    }
    buf_fini(&st->q);
    free(st);
}

void xcmd_req_fini(struct gw_req *r)
{
    struct xcmd_stream *st = r->face;
    if (st) {
        st->r = NULL;
        stream_free(st);
        r->face = NULL;
    }
}

static const char *const http_fields[] = {"command", "argv",  "cwd", "env",
                                          "timeout", "stdin", NULL};

void xcmd_post(struct gw_req *r)
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
    struct xcmd_stream *st = calloc(1, sizeof(*st));
    if (!st) {
        xcmd_spec_fini(&s);
        return req_error(r, 500, "out of memory");
    }
    list_init(&st->link);
    buf_init(&st->q, SIZE_MAX);
    st->g = r->g;
    st->fmt = xapi_request_format(r->wsi);
    util_uuid(st->id);
    snprintf(st->kernel_id, sizeof(st->kernel_id), "%s", kernel_id(k));
    snprintf(st->tenant, sizeof(st->tenant), "%s", r->caller.tenant);
    if (kernel_out_share(k))
        st->share = obudget_share_ref(kernel_out_share(k));
    struct kcmd_cbs cb = stream_cbs_proto;
    cb.ud = st;
    struct kcmd_opts o = spec_opts(&s);
    struct kops_error kerr;
    if ((rc = kops_command_start(r->g, k, &o, &cb, &st->cmd, &kerr)) < 0) {
        xcmd_spec_fini(&s);
        stream_free(st);
        return req_error_retry(r, kerr.status, kerr.retry_after, "%s", kerr.message);
    }
    st->in = stdin_start(&r->g->loop.evl, &st->cmd, &s);
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

void xcmd_delete(struct gw_req *r)
{
    struct xcmd_stream *st;
    kernel_t *k = gw_kernel(r->g, r->route.arg[0], r->caller.tenant);
    if (!k)
        return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
    list_for_each(st, &streams, link)
    {
        if (!strcmp(st->id, r->route.arg[1]) && !strcmp(st->kernel_id, kernel_id(k)) &&
            !strcmp(st->tenant, r->caller.tenant)) {
            struct kops_error kerr;
            bool running = !st->ended && st->cmd &&
                           kops_command_signal(r->g, st->cmd, SIGKILL, &kerr) == 0;
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

int xcmd_write(struct gw_req *r)
{
    struct xcmd_stream *st = r->face;
    if (!st)
        return 0;
    if (!st->headers_sent) {
        enum xreq_format f = st->fmt == XREQ_SSE ? XREQ_SSE : XREQ_NDJSON;
        if (http_write_head(r, 201, xreq_format_ctype(f), "location:", r->location, -1) < 0)
            return -1;
        st->headers_sent = true;
    }
    while (!lws_send_pipe_choked(r->wsi)) {
        size_t left = st->q.len - st->q_off;
        if (left == 0 && !st->ended)
            break;
        size_t n = left < XCMD_WRITE_BYTES ? left : XCMD_WRITE_BYTES;
        bool last = st->ended && n == left;
        if (n == 0) { /* only the end of the chunked body */
            static unsigned char fin[LWS_PRE + 5];
            memcpy(fin + LWS_PRE, "0\r\n\r\n", 5);
            return lws_write(r->wsi, fin + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) < 0 ? -1 : 1;
        }
        if (write_chunk(r->wsi, st->q.data + st->q_off, n, last) < 0)
            return -1;
        st->q_off += n;
        if (st->share) {
            obudget_share_release(st->share, n);
            st->charged -= n;
        }
        if (st->q_off == st->q.len) {
            buf_reset(&st->q);
            st->q_off = 0;
        }
        if (last)
            return 1;
    }
    if (st->paused && !over_budget(st)) {
        st->paused = false;
        kcmd_pause(st->cmd, false); /* (may queue more, and the end) */
    }
    if (st->q.len > st->q_off || st->ended || lws_partial_buffered(r->wsi)) {
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
        lws_callback_on_writable(r->wsi);
    } else {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0); /* it waits for the command */
    }
    return 0;
}

/* ---- a collected run (MCP) ---- */

struct xcmd_run {
    kcmd_t *cmd;
    struct xstdin *in;
    buf_t text[3];
    struct u8fix u8[3];
    size_t max, kept;
    long long dropped;
    json_t *end;
    void (*done)(void *ud);
    void *ud;
};

static void run_output(void *ud, int fd, const void *buf, size_t n)
{
    xcmd_run_t *run = ud;
    size_t take = run->kept + n > run->max ? run->max - run->kept : n;
    run->dropped += (long long)(n - take);
    run->kept += take;
    if (take)
        u8fix_feed(&run->u8[fd], buf, take, false, &run->text[fd]);
}

static void run_end(void *ud, const struct kcmd_end *e)
{
    xcmd_run_t *run = ud;
    u8fix_feed(&run->u8[1], "", 0, true, &run->text[1]);
    u8fix_feed(&run->u8[2], "", 0, true, &run->text[2]);
    run->end = end_json(e);
    if (run->end)
        json_object_set_new(run->end, "output_dropped_bytes", json_integer(run->dropped));
    stdin_free(&run->in);
    run->done(run->ud);
}

xcmd_run_t *xcmd_run_start(gw_t *g, kernel_t *k, const struct xcmd_spec *s, size_t max,
                           void (*done)(void *ud), void *ud, char *err, size_t errsz)
{
    xcmd_run_t *run = calloc(1, sizeof(*run));
    if (!run) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        buf_init(&run->text[i], SIZE_MAX);
    run->max = max;
    run->done = done;
    run->ud = ud;
    struct kcmd_cbs cb = {.output = run_output, .end = run_end, .ud = run};
    struct kcmd_opts o = spec_opts(s);
    struct kops_error kerr;
    if (kops_command_start(g, k, &o, &cb, &run->cmd, &kerr) < 0) {
        snprintf(err, errsz, "%s", kerr.message);
        xcmd_run_free(&run);
        return NULL;
    }
    struct xcmd_spec copy = *s; /* stdin_start takes the bytes: a copy of them */
    copy.stdin_data = s->stdin_data ? malloc(s->stdin_len + 1) : NULL;
    if (copy.stdin_data)
        memcpy(copy.stdin_data, s->stdin_data, s->stdin_len);
    run->in = stdin_start(&g->loop.evl, &run->cmd, &copy);
    free(copy.stdin_data);
    return run;
}

const buf_t *xcmd_run_text(const xcmd_run_t *run, int fd)
{
    return &run->text[fd == 2 ? 2 : 1];
}

json_t *xcmd_run_end(const xcmd_run_t *run)
{
    return run->end ? json_deep_copy(run->end) : NULL;
}

void xcmd_run_cancel(gw_t *g, xcmd_run_t *run)
{
    struct kops_error kerr;
    if (run->cmd)
        kops_command_signal(g, run->cmd, SIGKILL, &kerr);
}

void xcmd_run_free(xcmd_run_t **p)
{
    xcmd_run_t *run = *p;
    if (!run)
        return;
    stdin_free(&run->in);
    kcmd_release(&run->cmd);
    for (int i = 0; i < 3; i++)
        buf_fini(&run->text[i]);
    json_decref(run->end);
    free(run);
    *p = NULL;
}
