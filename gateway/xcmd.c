/* Commands in a kernel's sandbox for the faces (xcmd.h): a client's command spec read and
 * checked, its stdin bytes fed as the pipe takes them, a command streamed to its clients
 * (taps, each with its own queue) within the kernel's output budget (the commands API's routes, xcmdapi.c, and E2B's processes frame
 * its events), and a run whose output is collected (MCP's run_command). */
#include "gateway/xcmd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/obudget.h"
#include "common/util.h"
#include "gateway/kops.h"
#include "protocol/fpath.h"
#include "protocol/u8fix.h"
#include "protocol/xreq.h"

#define XCMD_STDIN_RETRY_MS 20 /* a stdin pipe that was full: tried again after */

/* ---- the request body ---- */

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
            if (!sv || !util_env_name_ok(key)) {
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

struct kcmd_opts xcmd_spec_opts(const struct xcmd_spec *s)
{
    return (struct kcmd_opts){.argv = (const char *const *)s->argv,
                              .cwd = s->cwd,
                              .env = (const char *const *)s->env,
                              .timeout_s = s->timeout,
                              .stdin_open = s->stdin_data != NULL};
}

/* ---- stdin: the body's bytes, written as the pipe takes them ---- */

struct xcmd_stdin {
    kcmd_t **cmd; /* the owner's pointer */
    evl_t *evl;
    char *data;
    size_t len, off, max;
    bool closing; /* close the pipe once data is written */
    evl_timer_t *timer;
};

static void stdin_push(void *data)
{
    struct xcmd_stdin *in = data;
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
    in->off = in->len = 0; /* all written: the buffer is empty again */
    if (*in->cmd && in->closing)
        kcmd_close_stdin(*in->cmd);
}

void xcmd_stdin_free(struct xcmd_stdin **p)
{
    struct xcmd_stdin *in = *p;
    if (!in)
        return;
    evl_timer_destroy(in->evl, &in->timer);
    free(in->data);
    free(in);
    *p = NULL;
}

struct xcmd_stdin *xcmd_stdin_new(evl_t *evl, kcmd_t **cmd, size_t max)
{
    struct xcmd_stdin *in = calloc(1, sizeof(*in));
    if (in && !(in->timer = evl->timer_new(evl, stdin_push, in))) {
        free(in);
        in = NULL;
    }
    if (!in)
        return NULL;
    in->cmd = cmd;
    in->evl = evl;
    in->max = max;
    return in;
}

int xcmd_stdin_write(struct xcmd_stdin *in, const void *buf, size_t n)
{
    if (in->closing)
        return -EPIPE;
    if (n > in->max - (in->len - in->off))
        return -ENOBUFS;
    if (in->off > 0) { /* what is written goes: the rest to the front */
        memmove(in->data, in->data + in->off, in->len - in->off);
        in->len -= in->off;
        in->off = 0;
    }
    char *d = realloc(in->data, in->len + n + 1);
    if (!d)
        return -ENOMEM;
    in->data = d;
    memcpy(in->data + in->len, buf, n);
    in->len += n;
    stdin_push(in);
    return 0;
}

void xcmd_stdin_close(struct xcmd_stdin *in)
{
    in->closing = true;
    if (in->off >= in->len)
        stdin_push(in);
}

struct xcmd_stdin *xcmd_stdin_start(evl_t *evl, kcmd_t **cmd, struct xcmd_spec *s)
{
    struct xcmd_stdin *in = s->stdin_data ? xcmd_stdin_new(evl, cmd, s->stdin_len) : NULL;
    if (!in) {
        if (s->stdin_data)
            kcmd_close_stdin(*cmd);
        return NULL;
    }
    in->data = s->stdin_data; /* taken */
    in->len = s->stdin_len;
    s->stdin_data = NULL;
    in->closing = true;
    stdin_push(in);
    return in;
}

json_t *xcmd_end_json(const struct kcmd_end *e)
{
    json_t *j = json_pack("{s:s, s:o, s:o, s:f, s:s}", "status", kcmd_status_name(e->status),
                          "exit_code", e->exit_code >= 0 ? json_integer(e->exit_code) : json_null(),
                          "signal", e->signal ? json_integer(e->signal) : json_null(),
                          "duration_ms", (double)e->duration_us / 1000.0, "message", e->message);
    return j;
}

/* ---- a command streamed to its clients, within the kernel's output budget ---- */

/* One client's queue: framed events not written yet, from off, charged to the share. */
struct xcmd_tap {
    xcmd_stream_t *s; /* NULL once the stream is gone */
    struct list link; /* s->taps (not for s->own) */
    buf_t q;
    size_t off, charged;
    obudget_share_t *share;
    void (*wake)(void *ud);
    void *ud;
};

struct xcmd_stream {
    gw_t *g;
    kcmd_t *cmd;
    struct xcmd_stdin *in; /* NULL: no stdin (or no memory to feed it: it got EOF) */
    const struct xcmd_stream_ops *ops;
    void *ud;
    struct xcmd_tap own; /* the starting client's queue (until xcmd_stream_detach) */
    bool own_attached;
    struct list taps; /* struct xcmd_tap.link: the clients attached since */
    obudget_share_t *share; /* the kernel's share of the output budget */
    bool ended, paused;
};

static bool tap_full(const struct xcmd_tap *t)
{
    return t->q.len - t->off > XCMD_QUEUE_MAX;
}

/* With a client attached: one of them holds over XCMD_QUEUE_MAX, or the kernel's share is
 * over its limit. With none, the output is read and dropped: never over. */
static bool over_budget(const xcmd_stream_t *s)
{
    bool any = s->own_attached || !list_empty(&s->taps);
    if (!any)
        return false;
    if (s->share && obudget_share_limit(s->share) &&
        obudget_share_held(s->share) > obudget_share_limit(s->share))
        return true;
    if (s->own_attached && tap_full(&s->own))
        return true;
    const struct xcmd_tap *t;
    list_for_each(t, &s->taps, link)
    {
        if (tap_full(t))
            return true;
    }
    return false;
}

static void resume_if_room(xcmd_stream_t *s)
{
    if (s->paused && !over_budget(s)) {
        s->paused = false;
        kcmd_pause(s->cmd, false); /* (may queue more, and the end) */
    }
}

static void tap_init(struct xcmd_tap *t, xcmd_stream_t *s, void (*wake)(void *ud), void *ud)
{
    t->s = s;
    t->wake = wake;
    t->ud = ud;
    buf_init(&t->q, SIZE_MAX);
    list_init(&t->link);
    if (s->share)
        t->share = obudget_share_ref(s->share);
}

/* What it holds is released (and its queue emptied). */
static void tap_fini(struct xcmd_tap *t)
{
    if (t->share) {
        obudget_share_release(t->share, t->charged);
        obudget_share_unref(&t->share);
    }
    t->charged = 0;
    t->off = 0;
    buf_fini(&t->q);
}

int xcmd_tap_send(xcmd_tap_t *t, const void *framed, size_t n)
{
    if (!t->s || buf_append(&t->q, framed, n) < 0)
        return -ENOMEM;
    if (t->share && n) {
        obudget_share_charge(t->share, n);
        t->charged += n;
    }
    t->wake(t->ud);
    return 0;
}

size_t xcmd_tap_pending(const xcmd_tap_t *t, const char **ret)
{
    *ret = t->q.data ? t->q.data + t->off : "";
    return t->q.len - t->off;
}

void xcmd_tap_taken(xcmd_tap_t *t, size_t n)
{
    t->off += n;
    if (t->share) {
        obudget_share_release(t->share, n);
        t->charged -= n;
    }
    if (t->off == t->q.len) {
        buf_reset(&t->q);
        t->off = 0;
    }
    if (t->s)
        resume_if_room(t->s);
}

bool xcmd_tap_ended(const xcmd_tap_t *t)
{
    return !t->s || t->s->ended;
}

xcmd_tap_t *xcmd_tap_new(xcmd_stream_t *s, void (*wake)(void *ud), void *ud)
{
    xcmd_tap_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    tap_init(t, s, wake, ud);
    list_append(&s->taps, &t->link);
    return t;
}

void xcmd_tap_free(xcmd_tap_t **p)
{
    xcmd_tap_t *t = *p;
    if (!t)
        return;
    list_remove(&t->link);
    tap_fini(t);
    if (t->s)
        resume_if_room(t->s); /* it may have been the slow one */
    free(t);
    *p = NULL;
}

int xcmd_stream_send(xcmd_stream_t *s, const void *framed, size_t n)
{
    int rc = 0;
    if (s->own_attached && xcmd_tap_send(&s->own, framed, n) < 0)
        rc = -ENOMEM;
    xcmd_tap_t *t;
    list_for_each(t, &s->taps, link)
    {
        if (xcmd_tap_send(t, framed, n) < 0)
            rc = -ENOMEM;
    }
    return rc;
}

void xcmd_stream_detach(xcmd_stream_t *s)
{
    if (!s->own_attached)
        return;
    s->own_attached = false;
    tap_fini(&s->own);
    resume_if_room(s);
}

static void stream_output(void *ud, int fd, const void *buf, size_t n)
{
    xcmd_stream_t *s = ud;
    if (!s->own_attached && list_empty(&s->taps))
        return; /* nobody attached: read and dropped */
    s->ops->output(s->ud, fd, buf, n);
    if (!s->paused && over_budget(s)) {
        s->paused = true; /* a client is slow: the command waits on its full pipe */
        kcmd_pause(s->cmd, true);
    }
}

static void stream_end(void *ud, const struct kcmd_end *e)
{
    xcmd_stream_t *s = ud;
    s->ops->end(s->ud, e);
    s->ended = true;
    xcmd_stdin_free(&s->in);
}

static void own_wake(void *ud)
{
    xcmd_stream_t *s = ud;
    s->ops->wake(s->ud);
}

xcmd_stream_t *xcmd_stream_start(
    gw_t *g, kernel_t *k, const struct kcmd_opts *o, const struct xcmd_stream_ops *ops, void *ud,
    struct kerr *err)
{
    xcmd_stream_t *s = calloc(1, sizeof(*s));
    if (!s) {
        kerr_make(KERR_COMMAND_START, -ENOMEM, NULL, err);
        return NULL;
    }
    s->g = g;
    s->ops = ops;
    s->ud = ud;
    list_init(&s->taps);
    if (kernel_out_share(k))
        s->share = obudget_share_ref(kernel_out_share(k));
    tap_init(&s->own, s, own_wake, s);
    s->own_attached = true;
    struct kcmd_cbs cb = {.output = stream_output, .end = stream_end, .ud = s};
    if (kops_command_start(g, k, o, &cb, &s->cmd, err) < 0) {
        xcmd_stream_free(&s);
        return NULL;
    }
    if (o->stdin_open && !(s->in = xcmd_stdin_new(&g->loop.evl, &s->cmd, XCMD_STDIN_MAX)))
        kcmd_close_stdin(s->cmd); /* no memory to feed it: EOF now, its input refused */
    return s;
}

size_t xcmd_stream_pending(const xcmd_stream_t *s, const char **ret)
{
    return xcmd_tap_pending(&s->own, ret);
}

void xcmd_stream_taken(xcmd_stream_t *s, size_t n)
{
    xcmd_tap_taken(&s->own, n);
}

bool xcmd_stream_ended(const xcmd_stream_t *s)
{
    return s->ended;
}

int xcmd_stream_signal(xcmd_stream_t *s, int sig, struct kerr *err)
{
    return kops_command_signal(s->g, s->cmd, sig, err);
}

int xcmd_stream_input(xcmd_stream_t *s, const void *buf, size_t n)
{
    return s->in ? xcmd_stdin_write(s->in, buf, n) : -EBADF;
}

int xcmd_stream_close_input(xcmd_stream_t *s)
{
    if (!s->in)
        return -EBADF;
    xcmd_stdin_close(s->in);
    return 0;
}

void xcmd_stream_free(xcmd_stream_t **p)
{
    xcmd_stream_t *s = *p;
    if (!s)
        return;
    xcmd_stdin_free(&s->in);
    kcmd_release(&s->cmd);
    xcmd_stream_detach(s);
    while (!list_empty(&s->taps)) { /* they outlive it, ended */
        xcmd_tap_t *t = list_first(&s->taps, xcmd_tap_t, link);
        list_remove(&t->link);
        list_init(&t->link);
        t->s = NULL;
    }
    obudget_share_unref(&s->share);
    free(s);
    *p = NULL;
}

/* ---- a collected run (MCP) ---- */

struct xcmd_run {
    kcmd_t *cmd;
    struct xcmd_stdin *in;
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
    run->end = xcmd_end_json(e);
    if (run->end)
        json_object_set_new(run->end, "output_dropped_bytes", json_integer(run->dropped));
    xcmd_stdin_free(&run->in);
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
    struct kcmd_opts o = xcmd_spec_opts(s);
    struct kerr kerr;
    if (kops_command_start(g, k, &o, &cb, &run->cmd, &kerr) < 0) {
        snprintf(err, errsz, "%s", kerr.message);
        xcmd_run_free(&run);
        return NULL;
    }
    struct xcmd_spec copy = *s; /* xcmd_stdin_start takes the bytes: a copy of them */
    copy.stdin_data = s->stdin_data ? malloc(s->stdin_len + 1) : NULL;
    if (copy.stdin_data)
        memcpy(copy.stdin_data, s->stdin_data, s->stdin_len);
    run->in = xcmd_stdin_start(&g->loop.evl, &run->cmd, &copy);
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
    struct kerr kerr;
    if (run->cmd)
        kops_command_signal(g, run->cmd, SIGKILL, &kerr);
}

void xcmd_run_free(xcmd_run_t **p)
{
    xcmd_run_t *run = *p;
    if (!run)
        return;
    xcmd_stdin_free(&run->in);
    kcmd_release(&run->cmd);
    for (int i = 0; i < 3; i++)
        buf_fini(&run->text[i]);
    json_decref(run->end);
    free(run);
    *p = NULL;
}
