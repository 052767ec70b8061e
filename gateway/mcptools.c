/* The MCP face's tools and the answers they make (docs/mcp.md): a fixed table of tools with
 * their JSON Schemas; execute_code is an execution of gateway/xexec.c (as the execute API's),
 * the file tools go through files.c, forks and restarts through kops.c. mcp.c calls these. */
#include "gateway/mcp_int.h"

#include <errno.h>
#include <stddef.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/audit.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "gateway/ckpt.h"
#include "gateway/files.h"
#include "gateway/kops.h"
#include "gateway/mcp_tools_json.h"
#include "gateway/mcpnamed.h"
#include "gateway/xcmd.h"
#include "gateway/xexec.h"
#include "protocol/fpath.h"
#include "protocol/jrpc.h"
#include "protocol/jschema.h"
#include "protocol/jstr.h"
#include "protocol/xreq.h"

static void run_execute(struct mcp_call *c, kernel_t *k);
static void run_list_files(struct mcp_call *c, kernel_t *k);
static void run_read_file(struct mcp_call *c, kernel_t *k);
static void run_write_file(struct mcp_call *c, kernel_t *k);
static void run_restart(struct mcp_call *c, kernel_t *k);
static void run_command(struct mcp_call *c, kernel_t *k);
static void run_rollback(struct mcp_call *c, kernel_t *k);
static void run_fork(struct mcp_call *c, kernel_t *k);

static bool check_path(struct mcp_call *c, const struct mcp_tool *t, json_t *args);

/* The tools: a fixed, reviewable table (no lookup outside it); what each one is, and the
 * arguments it takes, are its entry in docs/mcp_tools.json. */
static const struct mcp_tool tools[] = {
    {"execute_code", NULL, run_execute},
    {"list_files", NULL, run_list_files},
    {"read_file", check_path, run_read_file},
    {"write_file", check_path, run_write_file},
    {"restart_kernel", NULL, run_restart},
    {"run_command", NULL, run_command},
    {"rollback", NULL, run_rollback},
    {"fork", NULL, run_fork},
};

static const struct mcp_tool *tool_row(const char *name)
{
    for (size_t i = 0; name && i < UTIL_ARRAY_SIZE(tools); i++)
        if (!strcmp(tools[i].name, name))
            return &tools[i];
    return NULL;
}

/* A mistake in docs/mcp_tools.json: -EINVAL after saying where. */
static int tools_mistake(size_t i, const char *name, const char *what, const char *where)
{
    log_error("mcp: docs/mcp_tools.json: tool %zu (%.64s)%s%s: %s", i, name ? name : "no name",
              where[0] ? ": inputSchema" : "", where, what);
    return -EINVAL;
}

static int tools_check(const json_t *list)
{
    size_t i;
    const json_t *d;
    if (!json_is_array(list) || json_array_size(list) != UTIL_ARRAY_SIZE(tools)) {
        log_error("mcp: docs/mcp_tools.json: \"tools\" must list the %zu tools of mcptools.c",
                  UTIL_ARRAY_SIZE(tools));
        return -EINVAL;
    }
    json_array_foreach(list, i, d)
    {
        const char *name = json_string_value(json_object_get(d, "name"));
        const json_t *in = json_object_get(d, "inputSchema");
        struct jschema_err e;
        if (!tool_row(name))
            return tools_mistake(i, name, "not a tool of mcptools.c", "");
        for (size_t j = 0; j < i; j++)
            if (!strcmp(name, json_string_value(json_object_get(json_array_get(list, j), "name"))))
                return tools_mistake(i, name, "listed twice", "");
        if (!json_is_string(json_object_get(d, "title")) ||
            !json_is_string(json_object_get(d, "description")) ||
            !json_is_object(json_object_get(d, "outputSchema")))
            return tools_mistake(i, name, "needs a title, a description and an outputSchema", "");
        if (jschema_check(in, &e) < 0)
            return tools_mistake(i, name, e.what, e.where[0] ? e.where : "/");
        if (strcmp(json_string_value(json_object_get(in, "type")) ?: "", "object") != 0)
            return tools_mistake(i, name, "must be of type object", "/");
    }
    return 0;
}

int mcp__tools_load(json_t **ret_tools)
{
    json_error_t je;
    json_t *doc = json_loadb((const char *)kgw_mcp_tools_json, kgw_mcp_tools_json_len,
                             JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        log_error("mcp: docs/mcp_tools.json: line %d: %s", je.line, je.text);
        return json_error_code(&je) == json_error_out_of_memory ? -ENOMEM : -EINVAL;
    }
    json_t *list = json_object_get(doc, "tools");
    int rc = tools_check(list);
    if (rc == 0)
        *ret_tools = json_incref(list);
    json_decref(doc);
    return rc;
}

const struct mcp_tool *mcp__tool_find(const struct mcp *m, const char *name, json_t **ret_def)
{
    size_t i;
    json_t *d;
    json_array_foreach(m->tools, i, d)
    {
        if (name && !strcmp(json_string_value(json_object_get(d, "name")), name)) {
            *ret_def = d;
            return tool_row(name);
        }
    }
    return NULL;
}

/* ---- answers ---- */

/* A message's JSON text (compact: no raw new line), framed as the answer is. */
static void call_send_text(struct mcp_call *c, const char *s, size_t n)
{
    int rc = 0;
    buf_t *o = c->sse && !c->filling ? &c->held : &c->out;
    if (c->sse)
        rc |= buf_append(o, "event: message\ndata: ", 21);
    rc |= buf_append(o, s, n);
    if (c->sse)
        rc |= buf_append(o, "\n\n", 2);
    if (rc < 0)
        log_warn("mcp: out of memory: a message was cut");
    lws_callback_on_writable(c->r->wsi);
}

/* A message written into b (rc: how that went), then b's end. */
static void call_send_buf(struct mcp_call *c, buf_t *b, int rc)
{
    if (rc < 0)
        log_warn("mcp: out of memory: a message was dropped");
    else
        call_send_text(c, b->data, b->len);
    buf_fini(b);
}

/* A message framed already in b (rc: how making it went), taken without a copy when nothing
 * waits before it. */
static void call_send_framed(struct mcp_call *c, buf_t *b, int rc)
{
    buf_t *o = c->sse && !c->filling ? &c->held : &c->out;
    if (rc < 0) {
        log_warn("mcp: out of memory: a message was dropped");
    } else if (o->len == 0) {
        buf_fini(o);
        *o = *b;
        buf_init(b, SIZE_MAX);
    } else if (buf_append(o, b->data, b->len) < 0) {
        log_warn("mcp: out of memory: a message was cut");
    }
    buf_fini(b);
    lws_callback_on_writable(c->r->wsi);
}

static void call_send(struct mcp_call *c, json_t *msg)
{
    char *s = msg ? json_dumps(msg, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(msg);
    if (!s) {
        log_warn("mcp: out of memory: a message was dropped");
        return;
    }
    call_send_text(c, s, strlen(s));
    free(s);
}

static void call_done(struct mcp_call *c)
{
    c->done = true;
    if (c->s) {
        c->s->last_ms = util_now_ms();
        list_remove(&c->slink);
        if (c->s->named)
            mcpnamed_touch(c->s->named);
    }
    lws_callback_on_writable(c->r->wsi);
}

void mcp__reply(struct mcp_call *c, json_t *result)
{
    call_send(c, jrpc_result(c->id, result));
    call_done(c);
}

/* msg made valid UTF-8 for JSON: a formatted message may end inside a character (%.64s, or
 * cut at its buffer's size); anything else not UTF-8 becomes '?'. */
static void utf8_fix(char *msg)
{
    size_t n = strlen(msg);
    for (int i = 0; i < 4 && n > 0; i++) {
        json_t *v = json_stringn(msg, n);
        json_decref(v);
        if (v)
            break;
        msg[--n] = '\0';
    }
    json_t *v = json_string(msg);
    if (!v)
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
    json_decref(v);
}

/* A JSON-RPC error; HTTP status 200 for a request the transport took, else 400, 403, 404. */
/* fmt's message for JSON: into msg (size bytes), made valid UTF-8. */
static void vformat(char *msg, size_t size, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void vformat(char *msg, size_t size, const char *fmt, va_list ap)
{
    vsnprintf(msg, size, fmt, ap);
    utf8_fix(msg);
}

void mcp__reply_error(struct mcp_call *c, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void mcp__reply_error(struct mcp_call *c, int status, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vformat(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (status >= 400)
        log_info("mcp: refused (%d): %s", status, msg);
    c->status = status;
    call_send(c, jrpc_error(c->id, code, msg));
    call_done(c);
}

/* No body: 202 (a notification or response taken; a cancelled request), 204 (DELETE). */
void mcp__reply_empty(struct mcp_call *c, int status)
{
    c->status = status;
    call_done(c);
}

/* Appends a string literal's bytes. */
#define BUF_LIT(b, s) buf_append((b), s, sizeof(s) - 1)

void mcp__text_flush(struct mcp_call *c);
static void item_append(struct mcp_call *c, json_t *item);

/* Appends s, then the JSON text of v (compact, as call_send writes it). */
static int append_json(buf_t *b, const char *s, json_t *v)
{
    char *j = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    int rc = j ? buf_append(b, s, strlen(s)) : -ENOMEM;
    if (rc == 0)
        rc = buf_append(b, j, strlen(j));
    free(j);
    return rc;
}

/* The tool's result from c->content, then c->items, c->is_error and c->structured: the JSON-RPC
 * response {"jsonrpc", "id", "result": {"content", "isError", "structuredContent"}} written
 * around the items' text. */
static void tool_reply(struct mcp_call *c)
{
    mcp__text_flush(c);
    if (c->truncated)
        item_append(c, json_pack("{s:s, s:s}", "type", "text", "text",
                                 "[kgw] output beyond the MCP result limit was left out"));
    if (c->structured) {
        /* and its text, for clients of revisions before structured content */
        char *t = json_dumps(c->structured, JSON_COMPACT | JSON_REAL_PRECISION(9));
        if (t)
            item_append(c, json_pack("{s:s, s:s}", "type", "text", "text", t));
        free(t);
    }
    buf_t b;
    buf_init(&b, SIZE_MAX);
    char *first = c->content ? json_dumps(c->content, JSON_COMPACT | JSON_REAL_PRECISION(9))
                             : strdup("[]");
    size_t fn = first ? strlen(first) - 2 : 0; /* its items, without [ ] */
    json_t *null = json_null();
    int rc = c->sse ? buf_append(&b, "event: message\ndata: ", 21) : 0;
    rc |= first ? append_json(&b, "{\"jsonrpc\":\"2.0\",\"id\":", c->id ? c->id : null)
                : -ENOMEM;
    rc |= BUF_LIT(&b, ",\"result\":{\"content\":[");
    rc |= buf_append(&b, first ? first + 1 : "", fn);
    rc |= buf_append(&b, ",", fn && c->items.len ? 1 : 0);
    rc |= buf_append(&b, c->items.data ? c->items.data : "", c->items.len);
    rc |= BUF_LIT(&b, "],\"isError\":");
    rc |= buf_append(&b, c->is_error ? "true" : "false", c->is_error ? 4 : 5);
    if (c->structured)
        rc |= append_json(&b, ",\"structuredContent\":", c->structured);
    rc |= BUF_LIT(&b, "}}");
    if (c->sse)
        rc |= buf_append(&b, "\n\n", 2);
    free(first);
    buf_fini(&c->items); /* (in the answer now) */
    buf_fini(&c->text);
    call_send_framed(c, &b, rc);
    call_done(c);
}

void mcp__tool_fail(struct mcp_call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void mcp__tool_fail(struct mcp_call *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vformat(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_decref(c->content);
    c->content = json_pack("[{s:s, s:s}]", "type", "text", "text", msg);
    buf_reset(&c->items);
    buf_reset(&c->text);
    c->text_kind = NULL;
    json_decref(c->structured);
    c->structured = NULL;
    c->is_error = true;
    tool_reply(c);
}

/* One more content item (its JSON text) after those in c->items. */
static void item_text(struct mcp_call *c, const char *s, size_t n)
{
    if ((c->items.len && buf_append(&c->items, ",", 1) < 0) || buf_append(&c->items, s, n) < 0)
        log_warn("mcp: out of memory: output was dropped");
}

static void item_append(struct mcp_call *c, json_t *item)
{
    char *s = item ? json_dumps(item, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(item);
    if (s)
        item_text(c, s, strlen(s));
    free(s);
}

/* The pending text item into c->items. */
void mcp__text_flush(struct mcp_call *c)
{
    if (!c->text_kind)
        return;
    static const char head[] = "{\"type\":\"text\",\"text\":\"";
    if ((c->items.len && buf_append(&c->items, ",", 1) < 0) ||
        buf_append(&c->items, head, sizeof(head) - 1) < 0 ||
        buf_append(&c->items, c->text.data ? c->text.data : "", c->text.len) < 0 ||
        BUF_LIT(&c->items, "\"}") < 0)
        log_warn("mcp: out of memory: output was dropped");
    buf_reset(&c->text);
    c->text_kind = NULL;
}

static void add_content(struct mcp_call *c, json_t *item, size_t bytes)
{
    if (!item)
        return;
    if (c->content_bytes + bytes > MCP_RESULT_MAX) {
        c->truncated = true;
        json_decref(item);
        return;
    }
    mcp__text_flush(c);
    c->content_bytes += bytes;
    item_append(c, item);
}

/* Text output: esc, JSON-escaped text (a JSON string literal without its quotes) of n bytes,
 * joined to the previous text item when it is of the same kind (kind: a static string). */
static void add_text_json(struct mcp_call *c, const char *kind, const char *esc, size_t esc_n,
                          size_t n)
{
    if (c->content_bytes + n > MCP_RESULT_MAX) {
        c->truncated = true;
        return;
    }
    if (!c->text_kind || strcmp(c->text_kind, kind) != 0) {
        mcp__text_flush(c);
        c->text_kind = kind;
    }
    if (buf_append(&c->text, esc, esc_n) < 0) {
        c->truncated = true;
        return;
    }
    c->content_bytes += n;
}

/* Text output (n bytes of UTF-8). */
static void add_text(struct mcp_call *c, const char *kind, const char *text, size_t n)
{
    json_t *v = json_stringn(text, n);
    char *lit = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    if (!lit) {
        log_warn("mcp: not UTF-8, or out of memory: output was dropped");
        return;
    }
    add_text_json(c, kind, lit + 1, strlen(lit) - 2, n);
    free(lit);
}

/* Whether the call sends progress notifications (the first one makes the answer SSE): asked
 * as the execution's events come, the notifications themselves are made later, as the socket
 * takes them (progress_fill). */
static bool progress_on(struct mcp_call *c)
{
    if (!c->token || c->done || c->no_sse)
        return false;
    if (!c->sse && c->out.len == 0)
        c->sse = true;
    return c->sse;
}

void mcp__progress(struct mcp_call *c, const char *text, size_t len)
{
    size_t n = jstr_utf8_cut(text, len, MCP_PROGRESS_MAX);
    c->progress += 1;
    call_send(c, jrpc_notification("notifications/progress",
                                   json_pack("{s:O, s:f, s:s%}", "progressToken", c->token,
                                             "progress", c->progress, "message", text, n)));
}

/* Progress of output that is a JSON string literal (lit) of n bytes of text: the literal is
 * the notification's message as it is when it is within MCP_PROGRESS_MAX, else it is cut. */
static void progress_json(struct mcp_call *c, jspan_t lit, size_t n)
{
    if (n > MCP_PROGRESS_MAX) {
        char *t = malloc(lit.n);
        size_t tn;
        if (t && jstr_decode(lit.p, lit.n, t, &tn) == 0)
            mcp__progress(c, t, tn);
        free(t);
        return;
    }
    c->progress += 1;
    buf_t b;
    buf_init(&b, SIZE_MAX);
    json_t *p = json_real(c->progress);
    int rc = append_json(&b, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
                             "\"params\":{\"progressToken\":",
                         c->token);
    rc |= append_json(&b, ",\"progress\":", p);
    rc |= BUF_LIT(&b, ",\"message\":");
    rc |= buf_append(&b, lit.p, lit.n);
    rc |= BUF_LIT(&b, "}}");
    json_decref(p);
    call_send_buf(c, &b, rc);
}

/* A traceback without its terminal colours. */
static char *plain_traceback(json_t *ev)
{
    buf_t b;
    buf_init(&b, MCP_RESULT_MAX);
    json_t *line;
    size_t i;
    json_array_foreach(json_object_get(ev, "traceback"), i, line)
    {
        const char *s = json_string_value(line);
        for (; s && *s; s++) {
            if (*s == '\x1b' && s[1] == '[') {
                s += 2;
                while (*s && !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
                    s++;
                if (!*s)
                    break;
                continue;
            }
            buf_append(&b, s, 1);
        }
        buf_append(&b, "\n", 1);
    }
    if (b.len == 0) {
        const char *en = json_string_value(json_object_get(ev, "ename"));
        const char *ev2 = json_string_value(json_object_get(ev, "evalue"));
        char tmp[1024];
        snprintf(tmp, sizeof(tmp), "%s: %s\n", en ? en : "Error", ev2 ? ev2 : "");
        utf8_fix(tmp);
        buf_append(&b, tmp, strlen(tmp));
    }
    char *out = malloc(b.len + 1);
    if (out) {
        memcpy(out, b.data ? b.data : "", b.len);
        out[b.len] = '\0';
    }
    buf_fini(&b);
    return out;
}

/* A display or result: an image for PNG and JPEG, else its text/plain. */
static void add_display(struct mcp_call *c, json_t *ev)
{
    static const char *const images[] = {"image/png", "image/jpeg"};
    json_t *data = json_object_get(ev, "data");
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(images); i++) {
        const char *b64 = json_string_value(json_object_get(data, images[i]));
        if (b64) {
            /* (Jupyter may wrap base64 in lines: MCP wants it plain) */
            size_t n = strlen(b64);
            char *p = malloc(n + 1), *q = p;
            if (!p)
                return;
            for (const char *s = b64; *s; s++)
                if (*s != '\n' && *s != '\r')
                    *q++ = *s;
            *q = '\0';
            add_content(
                c, json_pack("{s:s, s:s, s:s}", "type", "image", "data", p, "mimeType", images[i]),
                (size_t)(q - p));
            free(p);
            progress_on(c);
            return;
        }
    }
    const char *text = json_string_value(json_object_get(data, "text/plain"));
    if (text) {
        char *t = malloc(strlen(text) + 2);
        if (!t)
            return;
        size_t n = (size_t)sprintf(t, "%s\n", text);
        add_text(c, "result", t, n);
        progress_on(c);
        free(t);
    }
}

/* A stream event's output, from its JSON string literals: not parsed, not decoded (it is
 * written into the result and the progress notifications as the literal it already is). */
static void on_stream(struct mcp_call *c, const struct xexec_event *e)
{
    char name[64]; /* "stderr" however escaped is shorter */
    size_t nn = 0;
    bool err = e->name.n <= sizeof(name) && jstr_decode(e->name.p, e->name.n, name, &nn) == 0 &&
               nn == 6 && !memcmp(name, "stderr", 6);
    /* (the store holds checked literals: the kernel's, checked, or jansson's) */
    add_text_json(c, err ? "stderr" : "stdout", e->text.p + 1, e->text.n - 2, e->text_len);
    progress_on(c);
}

static void on_exec_event(struct mcp_call *c, const struct xexec_event *e)
{
    if (c->done)
        return;
    if (e->text.p)
        return on_stream(c, e);
    json_t *ev = json_loadb(e->json, e->len, 0, NULL);
    const char *type = e->type;
    if (!ev)
        return;
    if (!strcmp(type, "display") || !strcmp(type, "result")) {
        add_display(c, ev);
    } else if (!strcmp(type, "error")) {
        char *tb = plain_traceback(ev);
        c->is_error = true;
        if (tb) {
            add_text(c, "error", tb, strlen(tb));
            progress_on(c);
        }
        free(tb);
    } else if (!strcmp(type, "end")) {
        const char *st = json_string_value(json_object_get(ev, "status"));
        const char *cause = json_string_value(json_object_get(ev, "cause"));
        json_object_del(ev, "seq");
        json_object_del(ev, "type");
        if (!st || strcmp(st, "ok") != 0)
            c->is_error = true;
        if (st && strcmp(st, "ok") != 0 && strcmp(st, "error") != 0) {
            char note[400];
            snprintf(note, sizeof(note), "[kgw] the execution ended: %s%s%.300s\n", st,
                     cause && cause[0] ? ": " : "", cause ? cause : "");
            utf8_fix(note);
            add_text(c, "note", note, strlen(note));
        }
        mcp__text_flush(c);
        c->structured = json_incref(ev);
        if (c->cancelled) /* the client gave up on it: no response (the stream just ends) */
            c->sse ? call_done(c) : mcp__reply_empty(c, 202);
        else
            tool_reply(c);
    }
    json_decref(ev);
}

/* Each new event of the execution, in order (those dropped for the budget unseen are skipped). */
static void sub_wake(struct xexec_sub *s)
{
    struct mcp_call *c = (struct mcp_call *)((char *)s - offsetof(struct mcp_call, sub));
    while (s->x && s->cursor < xexec_next_seq(s->x)) {
        struct xexec_event e;
        if (s->cursor < xexec_first_seq(s->x))
            s->cursor = xexec_first_seq(s->x);
        xexec_event(s->x, s->cursor++, &e);
        on_exec_event(c, &e);
    }
    if (c->sse) /* its progress, as the socket takes it */
        lws_callback_on_writable(c->r->wsi);
}

static const struct xexec_sub_ops sub_ops = {.wake = sub_wake};

/* The progress notification of an event the result has taken in (as on_exec_event told it). */
static void progress_event(struct mcp_call *c, const struct xexec_event *e)
{
    if (e->text.p)
        return progress_json(c, e->text, e->text_len);
    if (strcmp(e->type, "display") != 0 && strcmp(e->type, "result") != 0 &&
        strcmp(e->type, "error") != 0)
        return;
    json_t *ev = json_loadb(e->json, e->len, 0, NULL);
    if (!ev)
        return;
    if (!strcmp(e->type, "error")) {
        char *tb = plain_traceback(ev);
        if (tb)
            mcp__progress(c, tb, strlen(tb));
        free(tb);
        return json_decref(ev);
    }
    static const char *const images[] = {"image/png", "image/jpeg"};
    json_t *data = json_object_get(ev, "data");
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(images); i++) {
        if (json_string_value(json_object_get(data, images[i]))) {
            char note[64];
            snprintf(note, sizeof(note), "[%s image]\n", images[i]);
            mcp__progress(c, note, strlen(note));
            return json_decref(ev);
        }
    }
    const char *text = json_string_value(json_object_get(data, "text/plain"));
    char *t = text ? malloc(strlen(text) + 2) : NULL;
    if (t) {
        size_t n = (size_t)sprintf(t, "%s\n", text);
        mcp__progress(c, t, n);
    }
    free(t);
    json_decref(ev);
}

/* Whether every event the result took in has had its progress made. */
bool mcp__progress_caught_up(const struct mcp_call *c)
{
    return !c->sse || !c->sub.x || c->pcur >= c->sub.cursor;
}

/* Makes the next progress notifications into out (about MCP_WRITE_BYTES), then, once they
 * are all made, the messages held after them. */
void mcp__progress_fill(struct mcp_call *c)
{
    xexec_t *x = c->sub.x;
    if (!c->token && x) /* an event stream without a progress token: nothing to tell */
        c->pcur = c->sub.cursor;
    c->filling = true;
    while (c->sse && x && c->pcur < c->sub.cursor && c->out.len < MCP_WRITE_BYTES) {
        struct xexec_event e;
        if (c->pcur < xexec_first_seq(x)) /* dropped for the tenant's budget: not told */
            c->pcur = xexec_first_seq(x);
        if (c->pcur >= c->sub.cursor)
            break;
        xexec_event(x, c->pcur++, &e);
        progress_event(c, &e);
    }
    c->filling = false;
    if (mcp__progress_caught_up(c) && c->held.len) {
        buf_t b = c->held; /* (taken without a copy when out is empty) */
        buf_init(&c->held, SIZE_MAX);
        c->filling = true;
        call_send_framed(c, &b, 0);
        c->filling = false;
    }
}

/* ---- tools ---- */

static void run_execute(struct mcp_call *c, kernel_t *k)
{
    gw_t *g = c->r->g;
    json_t *t = json_object_get(c->args, "timeout");
    struct xreq q = {.timeout = t ? json_number_value(t) : 0.0,
                     .store_history = true,
                     .checkpoint = json_is_true(json_object_get(c->args, "checkpoint")),
                     .rollback_on_error =
                         json_is_true(json_object_get(c->args, "rollback_on_error"))};
    struct kerr ke;
    if (kops_executable(g, k, &ke) < 0) /* paused: refused, not queued */
        return mcp__tool_fail(c, "%s", ke.message);
    if ((long long)xexec_waiting(g, k) >= g->cfg.max_queued_executions)
        return mcp__tool_fail(c,
                         "the session's kernel has %lld executions queued or running (the "
                         "limit); retry later",
                         g->cfg.max_queued_executions);
    if (!(q.code = strdup(json_string_value(json_object_get(c->args, "code")))))
        return mcp__tool_fail(c, "out of memory");
    xexec_t *x = xexec_new(g, &c->r->caller, k);
    if (!x) {
        int err = errno;
        xreq_fini(&q);
        return mcp__tool_fail(c, "the execution could not be started: %s",
                         err == EAGAIN ? "too many executions held; retry later"
                                       : strerror(err));
    }
    xexec_set_request(x, &q);
    xexec_subscribe(x, &c->sub, 0, &sub_ops);
    sub_wake(&c->sub); /* its start */
    xexec_enqueue(x, k);
}

static void command_done(void *ud)
{
    struct mcp_call *c = ud;
    for (int fd = 1; fd <= 2; fd++) {
        const buf_t *t = xcmd_run_text(c->cmd, fd);
        if (t->len)
            item_append(c, json_pack("{s:s, s:s%}", "type", "text", "text", t->data, t->len));
    }
    c->structured = xcmd_run_end(c->cmd);
    const char *st = json_string_value(json_object_get(c->structured, "status"));
    c->is_error = !st || strcmp(st, "ok") != 0;
    if (c->cancelled) /* the client gave up on it: no response (the stream just ends) */
        c->sse ? call_done(c) : mcp__reply_empty(c, 202);
    else
        tool_reply(c);
}

static void run_command(struct mcp_call *c, kernel_t *k)
{
    static const char *const fields[] = {"command", "timeout", NULL};
    struct xcmd_spec s;
    char err[256];
    if (xcmd_spec_parse(c->args, fields, &s, err, sizeof(err)) < 0)
        return mcp__tool_fail(c, "%s", err);
    c->cmd = xcmd_run_start(c->r->g, k, &s, MCP_RESULT_MAX / 2, command_done, c, err,
                            sizeof(err));
    xcmd_spec_fini(&s);
    if (!c->cmd)
        return mcp__tool_fail(c, "%s", err);
}

static void run_list_files(struct mcp_call *c, kernel_t *k)
{
    json_t *l = files_list(kernel_workspace(k));
    if (!l)
        return mcp__tool_fail(c, "the workspace cannot be listed");
    c->structured = l;
    tool_reply(c);
}

/* read_file's and write_file's "path" (a string, as their schema says): a normal relative
 * path, refused before the session's kernel starts. */
static bool check_path(struct mcp_call *c, const struct mcp_tool *t, json_t *args)
{
    json_t *v = json_object_get(args, "path");
    char path[FPATH_MAX + 1];
    if (json_is_string(v) &&
        fpath_normalize(json_string_value(v), json_string_length(v), path, sizeof(path)) >= 0)
        return true;
    mcp__reply_error(c, 200, JRPC_INVALID_PARAMS,
                     "%s: argument \"path\" must be a relative path of at most %d bytes, "
                     "'/'-separated, without empty, '.' or '..' components or control "
                     "characters",
                     t->name, FPATH_MAX);
    return false;
}

/* The tool's "path" argument (checked by check_path), normalized into out. */
static bool tool_path(struct mcp_call *c, char out[FPATH_MAX + 1])
{
    json_t *p = json_object_get(c->args, "path");
    if (fpath_normalize(json_string_value(p), json_string_length(p), out, FPATH_MAX + 1) < 0) {
        mcp__tool_fail(c, "invalid path");
        return false;
    }
    return true;
}

static const char *file_error(int rc)
{
    switch (rc) {
    case -ENOENT:
    case -ENOTDIR:
    case -ELOOP:
    case -EXDEV:
        return "no such file";
    case -EISDIR:
        return "not a regular file";
    case -EFBIG:
        return "larger than the read limit";
    default:
        return strerror(-rc);
    }
}

static void run_read_file(struct mcp_call *c, kernel_t *k)
{
    char path[FPATH_MAX + 1];
    unsigned char *data = NULL;
    size_t len = 0;
    if (!tool_path(c, path))
        return;
    long long lim = c->r->g->cfg.max_download_bytes;
    size_t max = lim < MCP_READ_MAX ? (size_t)lim : MCP_READ_MAX;
    int rc = files_read(kernel_workspace(k), path, max, &data, &len);
    if (rc < 0)
        return mcp__tool_fail(c, "cannot read %s: %s%s", path, file_error(rc),
                         rc == -EFBIG ? " (4 MiB, or --max-download-bytes)" : "");
    if (audit_enabled())
        audit_event("mcp_file_read", "s:s, s:s, s:s, s:I", "tenant", c->r->caller.tenant,
                    "workspace", wspace_id(kernel_workspace(k)), "path", path, "bytes",
                    (json_int_t)len);
    json_t *text = json_stringn((const char *)data, len); /* NULL: not UTF-8 (or a NUL) */
    const char *enc = text ? "utf-8" : "base64";
    json_decref(c->content); /* the empty list every call starts with */
    if (text) {
        c->content = json_pack("[{s:s, s:o}]", "type", "text", "text", text);
    } else {
        size_t bl = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
        char *b64 = malloc(bl);
        char uri[FPATH_MAX + 32];
        snprintf(uri, sizeof(uri), "kgw-workspace:///%s", path);
        if (b64)
            sodium_bin2base64(b64, bl, data, len, sodium_base64_VARIANT_ORIGINAL);
        c->content =
            b64 ? json_pack("[{s:s, s:{s:s, s:s, s:s}}]", "type", "resource", "resource", "uri",
                            uri, "mimeType", "application/octet-stream", "blob", b64)
                : NULL;
        free(b64);
    }
    free(data);
    if (!c->content) {
        c->content = json_array();
        return mcp__tool_fail(c, "out of memory");
    }
    c->structured =
        json_pack("{s:s, s:I, s:s}", "path", path, "size", (json_int_t)len, "encoding", enc);
    tool_reply(c);
}

static void write_file_end(struct mcp_call *c, int rc)
{
    free(c->bin);
    c->bin = NULL;
    if (rc < 0)
        return mcp__tool_fail(c, "cannot write %s: %s", c->item_path, strerror(-rc));
    if (audit_enabled())
        audit_event("mcp_file_write", "s:s, s:s, s:s, s:I", "tenant", c->r->caller.tenant,
                    "workspace", c->ws, "path", c->item_path, "bytes", (json_int_t)c->item.len);
    c->structured =
        json_pack("{s:s, s:I}", "path", c->item_path, "size", (json_int_t)c->item.len);
    tool_reply(c);
}

static void file_written(void *data, int rc, size_t failed)
{
    struct mcp_call *c = data;
    (void)failed;
    c->put = NULL;
    write_file_end(c, rc);
}

static void run_write_file(struct mcp_call *c, kernel_t *k)
{
    char path[FPATH_MAX + 1];
    if (!tool_path(c, path))
        return;
    json_t *ct = json_object_get(c->args, "content");
    const char *enc = json_string_value(json_object_get(c->args, "encoding"));
    const char *s = json_string_value(ct);
    size_t n = json_string_length(ct), len = n;
    unsigned char *bin = NULL;
    if (enc && !strcmp(enc, "base64")) {
        bin = malloc(n + 1);
        if (!bin || sodium_base642bin(bin, n + 1, s, n, "\n\r ", &len, NULL,
                                      sodium_base64_VARIANT_ORIGINAL) != 0) {
            free(bin);
            return mcp__reply_error(c, 200, JRPC_INVALID_PARAMS, "'content' is not valid base64");
        }
    }
    /* charged to the kernel by a child the loop watches: no wait here */
    snprintf(c->item_path, sizeof(c->item_path), "%s", path);
    snprintf(c->ws, sizeof(c->ws), "%s", wspace_id(kernel_workspace(k)));
    c->bin = bin;
    c->item = (struct files_item){.path = c->item_path, .data = bin ? (const void *)bin : s,
                                  .len = len};
    size_t failed;
    int rc = files_put(kernel_workspace(k), &c->item, 1, file_written, c, &c->put, &failed);
    if (rc != 0)
        write_file_end(c, rc < 0 ? rc : 0);
}

static void restarted(struct gw_req *r, kernel_t *k, int status)
{
    struct mcp_call *c = r->face;
    struct kerr err;
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) { /* shut down meanwhile (the session's end, a DELETE), or it failed */
        kops_waited_error(r->g, k, KERR_RESTART, rc, &err);
        return mcp__tool_fail(c, "%s", err.message);
    }
    if (kernel_state(k) != KERNEL_RUNNING)
        return mcp__tool_fail(c, "the kernel did not come back after its restart");
    c->structured = json_pack("{s:s, s:s}", "kernel_id", kernel_id(k), "status", "restarted");
    tool_reply(c);
}

static void run_restart(struct mcp_call *c, kernel_t *k)
{
    struct kerr err;
    if (kops_restart(c->r->g, k, &err) < 0 && err.status)
        return mcp__tool_fail(c, "%s", err.message);
    if (req_wait_kernel(c->r, k, restarted) < 0)
        restarted(c->r, k, 0);
}

static void rolled_back(void *data, const struct kerr *err, json_t *rec)
{
    struct gw_req *r = data;
    struct mcp_call *c = r->face;
    c->ck = NULL;
    if (err)
        return mcp__tool_fail(c, "%s", err->message);
    c->structured = json_pack("{s:O, s:O, s:O, s:O}", "id", json_object_get(rec, "id"),
                              "kernel_id", json_object_get(rec, "kernel_id"), "execution_count",
                              json_object_get(rec, "execution_count"), "files",
                              json_object_get(rec, "files"));
    tool_reply(c);
}

static void run_rollback(struct mcp_call *c, kernel_t *k)
{
    struct kerr err;
    const char *cp = json_string_value(json_object_get(c->args, "checkpoint"));
    if (!ident_str_ok(cp, IDENT_UUIDISH))
        return mcp__tool_fail(c, "'checkpoint' is not a checkpoint id");
    const struct ckpt_asker a = {.who = &c->r->caller, .done = rolled_back, .data = c->r};
    if (!(c->ck = ckpt_rollback(c->r->g, k, &a, cp, &err)))
        mcp__tool_fail(c, "%s", err.message);
}

static void forked(struct gw_req *r, kernel_t *k, int status)
{
    struct mcp_call *c = r->face;
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) {
        struct kerr err;
        kops_fork_failed(r->g, k, rc, &err);
        kernel_shutdown(k, NULL);
        return mcp__tool_fail(c, "%s", err.message);
    }
    const char *cp = json_string_value(json_object_get(c->args, "checkpoint"));
    c->structured = json_pack(
        "{s:s, s:O, s:s, s:o}", "kernel_id", kernel_id(k), "name", json_object_get(c->args, "name"),
        "forked_from", kernel_forked_from(k), "checkpoint", cp ? json_string(cp) : json_null());
    tool_reply(c);
}

/* fork {"name", "checkpoint"?}: the session's kernel forked (kops_fork, as the REST route)
 * into a new kernel that becomes the tenant's named kernel "name" (Kgw-Kernel-Name), for a
 * session with a name or without: the name must have no kernel. */
static void run_fork(struct mcp_call *c, kernel_t *k)
{
    gw_t *g = c->r->g;
    const char *name = json_string_value(json_object_get(c->args, "name"));
    const char *cp = json_string_value(json_object_get(c->args, "checkpoint"));
    if (g->cfg.mcp_named_kernels <= 0)
        return mcp__tool_fail(c, "a fork becomes a named kernel, and named kernels are off on this "
                            "gateway (--mcp-named-kernels=0)");
    if (!ident_str_ok(name, IDENT_KNAME))
        return mcp__tool_fail(c,
                         "'name' is not a kernel name: give 1 to %d of A-Z a-z 0-9 . _ -, the "
                         "first not . or -",
                         IDENT_KNAME_MAX);
    if (cp && !ident_str_ok(cp, IDENT_UUIDISH))
        return mcp__tool_fail(c, "'checkpoint' is not a checkpoint id");
    struct mcpnamed_entry *e;
    int rc = mcpnamed_claim(g->mcp->named, c->r->caller.tenant, name, g->cfg.mcp_named_kernels, &e);
    if (rc == -EEXIST)
        return mcp__tool_fail(c,
                         "the name '%s' is taken: a kernel of yours has it (running or "
                         "starting); pick another name, or shut that kernel down first",
                         name);
    if (rc == -EDQUOT)
        return mcp__tool_fail(c,
                         "this tenant has %lld named kernels, the most (--mcp-named-kernels): "
                         "shut one down (DELETE /api/kernels/{id}) or fork into one whose "
                         "kernel has ended",
                         g->cfg.mcp_named_kernels);
    if (rc < 0)
        return mcp__tool_fail(c, "out of memory");
    kernel_t *fk;
    struct kerr err;
    rc = kops_fork(g, &c->r->caller, k, cp, &fk, &err);
    if (rc == 0)
        mcpnamed_set_kernel(e, fk);
    mcpnamed_release(g->mcp->named, e);
    if (rc < 0)
        return mcp__tool_fail(c, "%s", err.message);
    log_info("mcp: session=%.8s: kernel=%s forked%s%s into kernel=%s, named '%s' of tenant=%s",
             c->s ? c->s->id : "-", kernel_id(k), cp ? " from checkpoint " : "", cp ? cp : "",
             kernel_id(fk), name, c->r->caller.tenant);
    if (req_wait_kernel(c->r, fk, forked) < 0)
        forked(c->r, fk, 0);
}
