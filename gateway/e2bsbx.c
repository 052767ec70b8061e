/* The sandbox plane of the E2B-compatible API (docs/e2b.md; e2bsbx.h): the sandbox named by
 * E2b-Sandbox-Id, with its access token, answers /health, /execute and /contexts (the code
 * interpreter's, on the execute API's executions, gateway/xexec.c), /files (the workspace
 * files, gateway/files.c; also through a signed URL, without the headers) and the Connect-RPC
 * calls of filesystem.Filesystem (gateway/e2bfs.c; its watches: gateway/e2bwatch.c) and
 * process.Process (the command streams of gateway/xcmd.c, as the commands API's: within the
 * kernel's output budget). Also what the control plane (e2b.c) shares with it (e2b_int.h):
 * the E2B error answer, finding a sandbox, a kernel's set-up. */
#include "gateway/e2bsbx.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/auth.h"
#include "gateway/e2b_int.h"
#include "gateway/e2bconn.h"
#include "gateway/e2bfs.h"
#include "gateway/e2bwatch.h"
#include "gateway/files.h"
#include "gateway/kops.h"
#include "gateway/xcmd.h"
#include "gateway/xexec.h"
#include "kernelmgr/kcmd.h"
#include "kernelmgr/kmgr.h"
#include "protocol/e2bwire.h"
#include "protocol/xreq.h"
#include "sandbox/sbx.h"

/* ---- answers ---- */

/* An error as E2B's API answers it ({"code", "message"}), with kgw's "reason"
 * beside. */
void e2b__api_error(struct gw_req *r, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *reason = status == 400   ? "Bad Request"
                         : status == 401 ? "Unauthorized"
                         : status == 404 ? "Not Found"
                         : status == 409 ? "Conflict"
                         : status == 413 ? "Payload Too Large"
                         : status == 429 ? "Too Many Requests"
                         : status == 501 ? "Not Implemented"
                         : status == 502 ? "Bad Gateway"
                         : status == 503 ? "Service Unavailable"
                                         : "Error";
    req_reply(r, status,
              json_pack("{s:i, s:s, s:s}", "code", status, "reason", reason, "message", msg));
}

/* A Connect error of a unary call: the status of its code, {"code", "message"}.
 */
static void connect_error(struct gw_req *r, const char *code, const char *msg)
{
    e2bconn_error(r, code, msg);
}

/* ---- sandboxes ---- */

struct e2bsbx *e2b__sbx_find(struct e2b *e, const char *id)
{
    struct e2bsbx *s;
    list_for_each(s, &e->sbxs, link)
    {
        if (strcmp(s->id, id) == 0)
            return s;
    }
    return NULL;
}

struct e2bsbx *e2b__sbx_by_kernel(struct e2b *e, const char *kid)
{
    struct e2bsbx *s;
    list_for_each(s, &e->sbxs, link)
    {
        for (size_t i = 0; i < s->nkernels; i++)
            if (strcmp(s->kernels[i], kid) == 0)
                return s;
    }
    return NULL;
}

/* Queues code (taken; NULL: out of memory) on k as a silent execution of who's: 0 or -ENOMEM. */
static int silent_run(gw_t *g, const struct gw_caller *who, kernel_t *k, char *code)
{
    int retry;
    xexec_t *x = code && xexec_admit(g, who->tenant, &retry) == 0 ? xexec_new(g, who, k) : NULL;
    if (!x) {
        free(code);
        return -ENOMEM;
    }
    struct xreq q = {.code = code, .silent = true, .store_history = false};
    xexec_set_request(x, &q);
    xexec_enqueue(x, k);
    return 0;
}

/* The sandbox's set-up, a silent execution queued first on each of its kernels: envVars into
 * the kernel's os.environ (and so every subprocess's; the kernel's own environment takes only
 * KERNEL_* variables of a request, docs/security.md, while an E2B sandbox's variables are any
 * the client names, in its own sandbox, as its code could set them); the working
 * directory where E2B's SDKs name the workspace, /home/user (a sandboxed kernel starts in
 * /mnt/data, the same directory); and E2B's display formatters (python/kgw_e2b.py: charts
 * and dataframes in display data, for result_line; a kernel without the gateway's Python
 * modules, or without IPython, goes without). 0 or -errno. */
int e2b__sbx_setup(gw_t *g, const struct gw_caller *who, const struct e2bsbx *s, kernel_t *k)
{
    char *text = s->env ? json_dumps(s->env, JSON_COMPACT) : strdup("{}");
    json_t *lit = text ? json_string(text) : NULL;
    char *pylit = lit ? json_dumps(lit, JSON_ENCODE_ANY) : NULL; /* a JSON string literal is
                                                                  * a Python one too */
    const char *cwd = "";
    for (size_t i = 0; i < s->nkernels; i++)
        if (strcmp(s->kernels[i], kernel_id(k)) == 0)
            cwd = s->cwds[i];
    json_t *cwdlit = json_string(cwd); /* printable ASCII: checked */
    char *pycwd = cwdlit ? json_dumps(cwdlit, JSON_ENCODE_ANY) : NULL;
    json_decref(cwdlit);
    free(text);
    json_decref(lit);
    if (!pylit || !pycwd) {
        free(pylit);
        free(pycwd);
        return -ENOMEM;
    }
    static const char fmt[] =
        "def __kgw_e2b_setup():\n"
        "    import json, os\n"
        "    os.environ.update(json.loads(%s))\n"
        "    if os.getcwd() == '" SBX_WORKSPACE_PATH "' and os.path.isdir('" E2BWIRE_HOME "'):\n"
        "        os.chdir('" E2BWIRE_HOME "')\n"
        "        os.environ['PWD'] = '" E2BWIRE_HOME "'\n"
        "    cwd = %s\n"
        "    if cwd:\n"
        "        try:\n"
        "            os.makedirs(cwd, exist_ok=True)\n"
        "            os.chdir(cwd)\n"
        "            os.environ['PWD'] = cwd\n"
        "        except OSError as e:\n"
        "            print('context cwd %%s: %%s' %% (cwd, e), file=__import__('sys').stderr)\n"
        "    try:\n"
        "        import kgw_e2b\n"
        "        kgw_e2b.install()\n"
        "    except Exception:\n"
        "        pass\n"
        "__kgw_e2b_setup()\n"
        "del __kgw_e2b_setup\n";
    char *code = NULL;
    int n = asprintf(&code, fmt, pylit, pycwd);
    free(pylit);
    free(pycwd);
    return silent_run(g, who, k, n >= 0 ? code : NULL);
}

/* ---- the sandbox plane: /execute ---- */

/* The MIME types the code interpreter gives fields of their own (the others go
 * to "extra"); e2b/chart and e2b/data are what its IPython formatters add (in kgw's,
 * python/kgw_e2b.py, installed by the set-up above). */
static const char *const mime_fields[][2] = {
    {"text/plain", "text"},        {"text/html", "html"},
    {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
    {"image/png", "png"},          {"image/jpeg", "jpeg"},
    {"application/pdf", "pdf"},    {"text/latex", "latex"},
    {"application/json", "json"},  {"application/javascript", "javascript"},
    {"e2b/chart", "chart"},        {"e2b/data", "data"},
};

static json_t *result_line(json_t *data, bool main_result)
{
    json_t *o = json_pack("{s:s, s:b}", "type", "result", "is_main_result", main_result);
    const char *mime;
    json_t *v;
    if (!o)
        return NULL;
    json_object_foreach(data, mime, v)
    {
        const char *field = NULL;
        for (size_t i = 0; i < UTIL_ARRAY_SIZE(mime_fields); i++)
            if (strcmp(mime, mime_fields[i][0]) == 0)
                field = mime_fields[i][1];
        /* others under their MIME type: the SDKs' Result puts unknown keys in its
         * "extra" */
        if (strcmp(mime, "type") == 0 || strcmp(mime, "is_main_result") == 0)
            continue;
        const char *t = json_string_value(v);
        size_t n = json_string_length(v);
        if (strcmp(mime, "text/plain") == 0 && t && n >= 2 && (t[0] == '\'' || t[0] == '"') &&
            t[n - 1] == t[0]) /* a str's repr shown as its text, as E2B's server does */
            json_object_set_new(o, "text", json_stringn(t + 1, n - 2));
        else
            json_object_set(o, field ? field : mime, v);
    }
    return o;
}

/* The code interpreter's lines of one execute-API event (none for start and
 * clear). */
static int event_lines(struct e2breq *q, const struct xexec_event *ev, buf_t *out)
{
    json_error_t jerr;
    json_t *e = json_loadb(ev->json, ev->len, 0, &jerr);
    json_t *lines[3] = {NULL, NULL, NULL};
    int rc = 0;
    if (!e)
        return -EBADMSG;
    const char *type = ev->type;
    if (strcmp(type, "stream") == 0) {
        const char *name = json_string_value(json_object_get(e, "name"));
        lines[0] = json_pack("{s:s, s:O, s:I}", "type",
                             name && strcmp(name, "stderr") == 0 ? "stderr" : "stdout", "text",
                             json_object_get(e, "text"), "timestamp", (json_int_t)util_wall_us());
    } else if (strcmp(type, "display") == 0 || strcmp(type, "result") == 0) {
        json_t *data = json_object_get(e, "data");
        if (json_is_object(data))
            lines[0] = result_line(data, strcmp(type, "result") == 0);
    } else if (strcmp(type, "error") == 0) {
        json_t *tb = json_object_get(e, "traceback");
        buf_t t;
        buf_init(&t, SIZE_MAX);
        for (size_t i = 0; json_is_array(tb) && i < json_array_size(tb); i++) {
            const char *s = json_string_value(json_array_get(tb, i));
            if (s) {
                rc |= i ? buf_append(&t, "\n", 1) : 0;
                rc |= buf_append(&t, s, strlen(s));
            }
        }
        lines[0] = json_pack("{s:s, s:O, s:O, s:s#}", "type", "error", "name",
                             json_object_get(e, "ename"), "value", json_object_get(e, "evalue"),
                             "traceback", t.data ? t.data : "", t.len);
        buf_fini(&t);
    } else if (strcmp(type, "end") == 0) {
        const char *st = json_string_value(json_object_get(e, "status"));
        json_t *count = json_object_get(e, "execution_count");
        int n = 0;
        if (st && strcmp(st, "ok") != 0 && strcmp(st, "error") != 0) {
            const char *cause = json_string_value(json_object_get(e, "cause"));
            lines[n++] = json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
                                   strcmp(st, "timeout") == 0 ? "TimeoutError" : "KernelError",
                                   "value", cause && cause[0] ? cause : st, "traceback", st);
        }
        if (json_is_integer(count))
            lines[n++] = json_pack("{s:s, s:I}", "type", "number_of_executions", "execution_count",
                                   json_integer_value(count));
        lines[n++] = json_pack("{s:s}", "type", "end_of_execution");
    }
    for (size_t i = 0; i < 3; i++) {
        if (!lines[i])
            continue;
        char *s = json_dumps(lines[i], JSON_COMPACT);
        rc |= s ? buf_append(out, s, strlen(s)) : -ENOMEM;
        rc |= buf_append(out, "\n", 1);
        free(s);
        json_decref(lines[i]);
    }
    json_decref(e);
    (void)q;
    return rc;
}

static void run_wake(struct xexec_sub *s)
{
    struct e2breq *q = (struct e2breq *)((char *)s - offsetof(struct e2breq, sub));
    lws_callback_on_writable(q->r->wsi);
}

static const struct xexec_sub_ops run_ops = {.wake = run_wake};

/* Writes b (LWS_PRE + 24 bytes of room, then the payload) as one chunk. */
static int write_chunk(struct lws *wsi, buf_t *b, size_t room, bool last)
{
    return e2bconn_chunk(wsi, b, room, last);
}

static int run_write(struct gw_req *r, struct e2breq *q)
{
    xexec_t *x = q->sub.x;
    if (!x)
        return -1;
    if (!q->headers_sent) {
        if (http_write_head(r, 200, "application/x-ndjson", NULL, NULL, -1) < 0)
            return -1;
        q->headers_sent = true;
    }
    if (q->sub.cursor < xexec_first_seq(x))
        return -1; /* fell behind the events held */
    while (!lws_send_pipe_choked(r->wsi)) {
        static const char room[LWS_PRE + 24];
        buf_t b;
        buf_init(&b, SIZE_MAX);
        int rc = buf_append(&b, room, sizeof(room));
        if (q->keepalive) {
            rc |= buf_append(&b, "{\"type\":\"keepalive\"}\n", 21);
            q->keepalive = false;
        }
        while (rc == 0 && q->sub.cursor < xexec_next_seq(x) &&
               b.len - sizeof(room) < E2B_BATCH_BYTES) {
            struct xexec_event ev;
            xexec_event(x, q->sub.cursor, &ev);
            rc = event_lines(q, &ev, &b);
            q->sub.cursor++;
        }
        bool last = xexec_done(x) && q->sub.cursor >= xexec_next_seq(x);
        if (rc < 0) {
            buf_fini(&b);
            return -1;
        }
        if (b.len == sizeof(room) && !last) {
            buf_fini(&b);
            break;
        }
        rc = write_chunk(r->wsi, &b, sizeof(room), last);
        buf_fini(&b);
        q->last_ms = util_now_ms();
        if (rc < 0)
            return -1;
        if (last)
            return 1;
    }
    if (q->sub.cursor < xexec_next_seq(x) || lws_partial_buffered(r->wsi)) {
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
        lws_callback_on_writable(r->wsi);
    } else {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0); /* the keepalives keep it */
    }
    return 0;
}

static kernel_t *context_kernel(struct gw_req *r, struct e2bsbx *s, const char *ctx)
{
    const char *id = s->kernels[0];
    if (ctx && ctx[0]) {
        id = NULL;
        for (size_t i = 0; i < s->nkernels; i++)
            if (strcmp(s->kernels[i], ctx) == 0)
                id = s->kernels[i];
        if (!id)
            return NULL;
    }
    kernel_t *k = gw_kernel(r->g, id, s->tenant);
    if (!k || kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD)
        return NULL;
    return k;
}

/* A silent run on k that sets env (set) or puts back what the last set replaced. */
static int run_env(gw_t *g, const struct gw_caller *who, kernel_t *k, json_t *env, bool set)
{
    char *text = json_dumps(env, JSON_COMPACT);
    json_t *lit = text ? json_string(text) : NULL;
    char *pylit = lit ? json_dumps(lit, JSON_ENCODE_ANY) : NULL;
    free(text);
    json_decref(lit);
    if (!pylit)
        return -ENOMEM;
    static const char set_fmt[] =
        "def __kgw_env(d):\n"
        "    import os\n"
        "    os._kgw_saved = {k: os.environ.get(k) for k in d}\n"
        "    os.environ.update(d)\n"
        "__kgw_env(__import__('json').loads(%s))\n"
        "del __kgw_env\n";
    static const char back_fmt[] =
        "def __kgw_env(d):\n"
        "    import os\n"
        "    for k, v in getattr(os, '_kgw_saved', {}).items():\n"
        "        if v is None:\n"
        "            os.environ.pop(k, None)\n"
        "        else:\n"
        "            os.environ[k] = v\n"
        "    os._kgw_saved = {}\n"
        "__kgw_env(%s)\n"
        "del __kgw_env\n";
    char *code = NULL;
    int n = asprintf(&code, set ? set_fmt : back_fmt, pylit);
    free(pylit);
    return silent_run(g, who, k, n >= 0 ? code : NULL);
}

static void sbx_execute(struct gw_req *r, struct e2bsbx *s)
{
    gw_t *g = r->g;
    struct e2bwire_exec ex;
    char err[E2BWIRE_ERR_MAX];
    int retry = 1, rc;
    if (e2bwire_exec_parse(r->body.data ? r->body.data : "", r->body.len, &ex, err, sizeof(err)) <
        0)
        return e2b__api_error(r, 400, "%s", err);
    kernel_t *k = context_kernel(r, s, ex.context_id);
    if (!k) {
        e2bwire_exec_fini(&ex);
        return e2b__api_error(r, 404, "context %s not found",
                              ex.context_id[0] ? ex.context_id : "(default)");
    }
    if ((rc = xexec_admit(g, s->tenant, &retry)) < 0 ||
        (long long)xexec_waiting(g, k) >= g->cfg.max_queued_executions) {
        e2bwire_exec_fini(&ex);
        return req_error_retry(r, rc == -EBUSY ? 503 : 429, retry,
                               "too many executions queued or held; retry later");
    }
    /* per-run env_vars: set by a silent run queued before it, put back by one after it (runs
     * on one kernel go one after another) */
    if (ex.env && json_object_size(ex.env) && run_env(g, &r->caller, k, ex.env, true) < 0) {
        e2bwire_exec_fini(&ex);
        return req_error_retry(r, 503, 1, "too many executions held; retry later");
    }
    struct e2breq *q = calloc(1, sizeof(*q));
    xexec_t *x = q ? xexec_new(g, &r->caller, k) : NULL;
    if (!x) {
        free(q);
        if (ex.env && json_object_size(ex.env))
            run_env(g, &r->caller, k, ex.env, false);
        e2bwire_exec_fini(&ex);
        return req_error_retry(r, 503, 1, "too many executions held; retry later");
    }
    struct xreq xq = {.code = ex.code, .store_history = true};
    ex.code = NULL; /* taken */
    xexec_set_request(x, &xq);
    q->kind = E2BREQ_RUN;
    q->r = r;
    q->last_ms = util_now_ms();
    snprintf(q->sbx_id, sizeof(q->sbx_id), "%s", s->id);
    list_append(&g->e2b->runs, &q->link);
    r->face = q;
    xexec_subscribe(x, &q->sub, 0, &run_ops);
    xexec_enqueue(x, k);
    if (ex.env && json_object_size(ex.env))
        run_env(g, &r->caller, k, ex.env, false);
    e2bwire_exec_fini(&ex);
    lws_callback_on_writable(r->wsi);
}

/* ---- the sandbox plane: /contexts ---- */

static void ctx_remove(struct e2bsbx *s, size_t i)
{
    memmove(s->kernels[i], s->kernels[i + 1], (s->nkernels - i - 1) * sizeof(s->kernels[0]));
    memmove(s->cwds[i], s->cwds[i + 1], (s->nkernels - i - 1) * sizeof(s->cwds[0]));
    s->nkernels--;
}

static json_t *context_model(const char *id, const char *cwd)
{
    return json_pack("{s:s, s:s, s:s}", "id", id, "language", "python", "cwd",
                     cwd[0] ? cwd : E2BWIRE_HOME);
}

bool e2b__sbx_kernel_ended(struct e2b *e, const struct e2bsbx *s)
{
    kernel_t *k = gw_kernel(e->g, s->kernels[0], s->tenant);
    return !k || kernel_state(k) == KERNEL_DEAD || kernel_state(k) == KERNEL_TERMINATING;
}

static struct e2bsbx *sbx_by_ws(struct e2b *e, const char *ws_id, const char *tenant)
{
    struct e2bsbx *s;
    list_for_each(s, &e->sbxs, link)
    {
        if (strcmp(s->ws_id, ws_id) == 0 && strcmp(s->tenant, tenant) == 0)
            return s;
    }
    return NULL;
}

static void on_context(struct gw_req *r, kernel_t *k, int status)
{
    struct e2b *e = r->g->e2b;
    struct e2bsbx *s = sbx_by_ws(e, wspace_id(kernel_workspace(k)), r->caller.tenant);
    bool restart = strstr(r->fpath, "/restart") != NULL;
    if (!s) /* killed (DELETE, its timeout) meanwhile */
        return e2b__api_error(r, 502, "the sandbox is not running (killed meanwhile)");
    size_t i = 0;
    while (i < s->nkernels && strcmp(s->kernels[i], r->kernel_id) != 0)
        i++;
    if (i == s->nkernels) /* DELETE /contexts/{id} meanwhile */
        return e2b__api_error(r, 409, "the context was deleted while it %s",
                              restart ? "restarted" : "started");
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) {
        if (i > 0)
            ctx_remove(s, i);
        if (rc == -ECANCELED) /* its kernel shut down meanwhile, through another face */
            return e2b__api_error(r, 409, "the context's kernel was shut down while it %s",
                                  restart ? "restarted" : "started");
        return e2b__api_error(r, 503, "the context's kernel failed to start");
    }
    if (e2b__sbx_setup(r->g, &r->caller, s, k) < 0)
        return e2b__api_error(r, 503, "the sandbox's envVars could not be applied; retry later");
    if (restart)
        return req_reply(r, 204, NULL);
    req_reply(r, 200, context_model(r->kernel_id, s->cwds[i]));
}

static void sbx_contexts(struct gw_req *r, struct e2bsbx *s, const char *rest)
{
    gw_t *g = r->g;
    if (!rest[0] && r->method == HTTP_M_GET) {
        json_t *a = json_array();
        for (size_t i = 0; i < s->nkernels; i++)
            json_array_append_new(a, context_model(s->kernels[i], s->cwds[i]));
        return req_reply(r, 200, a);
    }
    if (!rest[0] && r->method == HTTP_M_POST) {
        json_t *body = req_json_body(r);
        if (!body)
            return;
        json_t *lang = json_object_get(body, "language"), *jcwd = json_object_get(body, "cwd");
        const char *cwd = json_string_value(jcwd);
        bool lang_ok = !lang || json_is_null(lang) ||
                       (json_is_string(lang) && strcmp(json_string_value(lang), "python") == 0);
        /* a directory of the sandbox's own file system (made if missing): the kernel may go
         * anywhere there anyway */
        bool cwd_ok = !jcwd || json_is_null(jcwd) ||
                      (cwd && cwd[0] == '/' && json_string_length(jcwd) <= E2B_CWD_MAX &&
                       util_printable(cwd, json_string_length(jcwd)));
        char cwdbuf[E2B_CWD_MAX + 1] = "";
        if (cwd_ok && cwd && strcmp(cwd, E2BWIRE_HOME) != 0)
            snprintf(cwdbuf, sizeof(cwdbuf), "%s", cwd);
        json_decref(body);
        if (!lang_ok)
            return e2b__api_error(r, 400, "only python contexts are offered (docs/e2b.md)");
        if (!cwd_ok)
            return e2b__api_error(r, 400, "\"cwd\" must be an absolute path of at most %d bytes",
                                  E2B_CWD_MAX);
        if (s->nkernels >= E2B_CONTEXTS_MAX)
            return e2b__api_error(r, 429, "a sandbox has at most %d contexts", E2B_CONTEXTS_MAX);
        json_t *req = json_pack("{s:s}", "workspace", s->ws_id);
        if (req && s->kspec[0])
            json_object_set_new(req, "name", json_string(s->kspec));
        if (req && s->env)
            json_object_set(req, "env", s->env);
        kernel_t *k;
        struct kerr kerr;
        int rc = req ? kops_start(g, &r->caller, req, &k, &kerr) : -ENOMEM;
        json_decref(req);
        if (rc < 0)
            return e2b__api_error(r, req ? kerr.status : 500, "%s",
                                  req ? kerr.message : "out of memory");
        snprintf(s->kernels[s->nkernels], sizeof(s->kernels[0]), "%s", kernel_id(k));
        snprintf(s->cwds[s->nkernels++], sizeof(s->cwds[0]), "%s", cwdbuf);
        if (req_wait_kernel(r, k, on_context) < 0)
            on_context(r, k, 0);
        return;
    }
    /* {id} or {id}/restart */
    char id[UTIL_UUID_LEN + 1];
    size_t n = strcspn(rest, "/");
    const char *tail = rest + n;
    if (n == 0 || n > UTIL_UUID_LEN)
        return e2b__api_error(r, 404, "context not found");
    memcpy(id, rest, n);
    id[n] = '\0';
    size_t i = 0;
    while (i < s->nkernels && strcmp(s->kernels[i], id) != 0)
        i++;
    kernel_t *k = i < s->nkernels ? gw_kernel(g, id, s->tenant) : NULL;
    if (!k)
        return e2b__api_error(r, 404, "context %s not found", id);
    struct kerr kerr;
    if (!tail[0] && r->method == HTTP_M_DELETE) {
        if (i == 0)
            return e2b__api_error(r, 400, "the default context ends with the sandbox");
        kops_shutdown(g, k, &kerr);
        ctx_remove(s, i);
        return req_reply(r, 204, NULL);
    }
    if (strcmp(tail, "/restart") == 0 && r->method == HTTP_M_POST) {
        int rc = kops_restart(g, k, &kerr);
        if (rc < 0 && kerr.status)
            return e2b__api_error(r, kerr.status, "%s", kerr.message);
        if (req_wait_kernel(r, k, on_context) < 0)
            req_reply(r, 204, NULL);
        return;
    }
    return e2b__api_error(r, 404, "not found");
}

/* ---- the sandbox plane: /files ---- */

static void put_free(struct e2breq *q)
{
    if (!q->up)
        return;
    files_put_cancel(&q->up->put);
    free(q->up);
    q->up = NULL;
}

static void put_done(void *data, int rc, size_t failed)
{
    struct e2breq *q = data;
    struct gw_req *r = q->r;
    q->up->put = NULL;
    if (rc < 0) {
        char qp[160];
        const char *p = q->up->paths[failed < q->up->nitems ? failed : 0];
        return e2b__api_error(r, rc == -ENOMEM || rc == -ENOSPC || rc == -EDQUOT ? 507 : 400,
                              "%s: %s", log_quote(qp, sizeof(qp), p, strlen(p)), strerror(-rc));
    }
    json_t *a = json_array();
    for (size_t i = 0; i < q->up->nitems; i++) {
        char full[sizeof(E2BWIRE_HOME) + FPATH_MAX + 2];
        snprintf(full, sizeof(full), E2BWIRE_HOME "/%s", q->up->paths[i]);
        json_array_append_new(a,
                              json_pack("{s:s, s:s, s:s}", "name", fpath_basename(q->up->paths[i]),
                                        "type", "file", "path", full));
    }
    req_reply(r, 200, a);
}

/* POST /files: multipart/form-data, each "file" part a file named by its filename (a path
 * under /home/user), or the one file of ?path= (then its filename may be missing, as a
 * FormData string value sends it); other fields are ignored, as envd ignores them. The files'
 * bytes stay in the request's body until they are written. */
static void sbx_files_post(struct gw_req *r, wspace_t *w)
{
    char ct[400], boundary[E2BWIRE_BOUNDARY_MAX + 1];
    if (lws_hdr_total_length(r->wsi, WSI_TOKEN_HTTP_CONTENT_TYPE) >= (int)sizeof(ct) ||
        lws_hdr_copy(r->wsi, ct, sizeof(ct), WSI_TOKEN_HTTP_CONTENT_TYPE) <= 0 ||
        e2bwire_boundary(ct, boundary, sizeof(boundary)) < 0)
        return e2b__api_error(r, 415, "POST /files takes multipart/form-data (\"file\" parts)");
    struct e2breq *q = calloc(1, sizeof(*q));
    if (!q)
        return e2b__api_error(r, 500, "out of memory");
    q->kind = E2BREQ_PUT;
    q->r = r;
    list_init(&q->link);
    if (!(q->up = calloc(1, sizeof(*q->up)))) {
        free(q);
        return e2b__api_error(r, 500, "out of memory");
    }
    r->face = q;
    struct e2bput *up = q->up;
    char buf[FPATH_MAX * 3 + 1];
    const char *p = lws_get_urlarg_by_name(r->wsi, "path=", buf, sizeof(buf));
    if (p) {
        if (e2bwire_path(p, strlen(p), up->qpath, sizeof(up->qpath)) <= 0)
            return e2b__api_error(r, 400, "path: only files under " E2BWIRE_HOME " are offered");
        up->has_qpath = true;
    }
    struct e2bwire_part part;
    size_t off = 0;
    int rc;
    bool bad = false;
    while (!bad && (rc = e2bwire_part_next(r->body.data ? r->body.data : "", r->body.len,
                                           boundary, &off, &part)) == 1) {
        if (strcmp(part.name, "file") != 0)
            continue;
        size_t i = up->nitems;
        if (i >= E2B_UPLOAD_FILES || (up->has_qpath && i >= 1))
            bad = true;
        else if (up->has_qpath)
            memcpy(up->paths[i], up->qpath, sizeof(up->qpath));
        else if (!part.has_filename || e2bwire_path(part.filename, strlen(part.filename),
                                                    up->paths[i], sizeof(up->paths[i])) <= 0)
            bad = true;
        if (!bad)
            up->items[up->nitems++] =
                (struct files_item){.path = up->paths[i], .data = part.data, .len = part.len};
    }
    if (rc < 0 || bad || up->nitems == 0)
        return e2b__api_error(r, 400,
                              "a multipart/form-data body of 1 to %d \"file\" parts, each "
                              "named by a path under " E2BWIRE_HOME " (or by ?path=), is "
                              "expected",
                              E2B_UPLOAD_FILES);
    size_t failed = 0;
    rc = files_put(w, up->items, up->nitems, put_done, q, &up->put, &failed);
    if (rc < 0)
        return e2b__api_error(r, rc == -ENOMEM ? 507 : 500, "cannot write the files: %s",
                              strerror(-rc));
}

static void sbx_files(struct gw_req *r, struct e2bsbx *s)
{
    wspace_t *w = kmgr_workspace(r->g->km, s->ws_id);
    if (!w)
        return e2b__api_error(r, 502, "the sandbox's workspace is gone");
    wspace_touch(w);
    if (r->method == HTTP_M_POST)
        return sbx_files_post(r, w);
    char buf[FPATH_MAX * 3 + 1], path[FPATH_MAX + 1], q[160];
    const char *p = lws_get_urlarg_by_name(r->wsi, "path=", buf, sizeof(buf));
    if (!p)
        return e2b__api_error(r, 400, "the path query parameter is required");
    int rc = e2bwire_path(p, strlen(p), path, sizeof(path));
    if (rc <= 0)
        return e2b__api_error(r, 400, "%s: only files under " E2BWIRE_HOME " are offered",
                              log_quote(q, sizeof(q), p, strlen(p)));
    unsigned char *data;
    size_t len;
    size_t max = (size_t)r->g->cfg.max_download_bytes;
    rc = files_read(w, path, max < E2B_READ_MAX ? max : E2B_READ_MAX, &data, &len);
    if (rc == -ENOENT)
        return e2b__api_error(r, 404, "file not found: %s", log_quote(q, sizeof(q), p, strlen(p)));
    if (rc == -EISDIR)
        return e2b__api_error(r, 400, "%s is not a file", log_quote(q, sizeof(q), p, strlen(p)));
    if (rc == -ELOOP || rc == -EXDEV || rc == -ENOTDIR)
        return e2b__api_error(r, 409,
                              "%s: a symbolic link, mount point or file is in the way (never "
                              "followed)",
                              log_quote(q, sizeof(q), p, strlen(p)));
    if (rc == -EFBIG)
        return e2b__api_error(r, 413,
                              "%s is over %zu bytes (the smaller of --max-download-bytes and "
                              "32 MiB here; larger files: kgw's streamed GET /download, "
                              "docs/files.md)",
                              log_quote(q, sizeof(q), p, strlen(p)),
                              max < E2B_READ_MAX ? max : (size_t)E2B_READ_MAX);
    if (rc < 0)
        return e2b__api_error(r, 500, "%s: %s", log_quote(q, sizeof(q), p, strlen(p)),
                              strerror(-rc));
    req_reply_data(r, "application/octet-stream", (char *)data, len);
}

/* ---- the sandbox plane: Connect-RPC ---- */

static bool connect_streaming(struct lws *wsi)
{
    char ct[64];
    return lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE) < (int)sizeof(ct) &&
           lws_hdr_copy(wsi, ct, sizeof(ct), WSI_TOKEN_HTTP_CONTENT_TYPE) > 0 &&
           strncmp(ct, "application/connect+", 20) == 0;
}

/* A streaming call answered at once with its end: 200, one end-stream envelope
 * holding the error (Connect's streaming protocol has no error status). */
static void connect_stream_error(struct gw_req *r, const char *code, const char *msg)
{
    e2bconn_stream_error(r, code, msg);
}

/* ---- the sandbox plane: process.Process on the command streams of xcmd.h ---- */

static bool header(struct lws *wsi, const char *name, char *out, size_t outsz);

/* One envelope framed into b: 0 or -ENOMEM. */
static int proc_frame(buf_t *b, const char *json, uint8_t flags)
{
    buf_init(b, SIZE_MAX);
    return e2bwire_envelope_write(b, flags, json, strlen(json));
}

/* Queues one envelope for this stream alone (a message, or with E2BWIRE_ENV_END its end). */
void e2b__proc_send(struct e2breq *q, const char *json, uint8_t flags)
{
    buf_t b;
    if (!q->tap || proc_frame(&b, json, flags) < 0 || xcmd_tap_send(q->tap, b.data, b.len) < 0)
        log_debug("e2b: a process stream: its event lost (no memory, or its command is gone)");
    buf_fini(&b);
    q->last_ms = util_now_ms();
}

/* Queues one envelope for every stream attached to the command. */
static void proc_send_all(struct e2bproc *p, const char *json, uint8_t flags)
{
    buf_t b;
    if (proc_frame(&b, json, flags) < 0 || xcmd_stream_send(p->cmd, b.data, b.len) < 0)
        log_warn("e2b: command %u: out of memory for its events", p->handle);
    buf_fini(&b);
}

static void proc_output(void *ud, int fd, const void *buf, size_t n)
{
    struct e2bproc *p = ud;
    size_t bn = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
    static const char *const heads[] = {"{\"event\":{\"data\":{\"stdout\":\"",
                                        "{\"event\":{\"data\":{\"stderr\":\""};
    const char *head = heads[fd == 2];
    size_t hn = strlen(head);
    char *msg = malloc(hn + bn + 8);
    if (!msg) {
        log_warn("e2b: command %u: out of memory for its output", p->handle);
        return;
    }
    memcpy(msg, head, hn);
    sodium_bin2base64(msg + hn, bn, buf, n, sodium_base64_VARIANT_ORIGINAL);
    memcpy(msg + strlen(msg), "\"}}}", 5);
    proc_send_all(p, msg, 0);
    free(msg);
}

static void proc_end(void *ud, const struct kcmd_end *e)
{
    struct e2bproc *p = ud;
    char status[64];
    if (e->exit_code >= 0)
        snprintf(status, sizeof(status), "exit status %d", e->exit_code);
    else if (e->signal)
        snprintf(status, sizeof(status), "signal: %s", strsignal(e->signal));
    else
        snprintf(status, sizeof(status), "%s", kcmd_status_name(e->status));
    json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", e->exit_code, "exited",
                            e->exit_code >= 0, "status", status);
    if (end && e->message && e->message[0])
        json_object_set_new(end, "error", json_string(e->message));
    else if (end && e->status != KCMD_OK && e->status != KCMD_ERROR)
        json_object_set_new(end, "error", json_string(kcmd_status_name(e->status)));
    json_t *ev = end ? json_pack("{s:{s:o}}", "event", "end", end) : NULL;
    char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    if (s)
        proc_send_all(p, s, 0);
    free(s);
    proc_send_all(p, "{}", E2BWIRE_ENV_END);
    log_info("e2b: command %u: %s%s", p->handle, status, p->clients ? "" : " (detached)");
    if (!p->clients) /* (not inside its own callback) */
        p->g->loop.evl.timer_arm(&p->g->loop.evl, p->reap, 0);
}

static void proc_wake(void *ud)
{
    struct e2breq *q = ud;
    lws_callback_on_writable(q->r->wsi);
}

/* (nothing for the stream itself: each client's tap wakes its own connection) */
static void proc_wake_none(void *ud)
{
    (void)ud;
}

static const struct xcmd_stream_ops proc_ops = {
    .output = proc_output, .end = proc_end, .wake = proc_wake_none};

static void proc_free(struct e2bproc **pp)
{
    struct e2bproc *p = *pp;
    if (!p)
        return;
    list_remove(&p->link);
    xcmd_stream_free(&p->cmd); /* kills it if it still runs; no callback after */
    evl_timer_destroy(&p->g->loop.evl, &p->reap);
    json_decref(p->config);
    free(p);
    *pp = NULL;
}

static void proc_reap(void *data)
{
    struct e2bproc *p = data;
    if (!p->clients && xcmd_stream_ended(p->cmd))
        proc_free(&p);
}

void e2b__procs_fini(struct e2b *e)
{
    struct e2breq *q;
    list_for_each(q, &e->runs, link)
    {
        if (q->kind == E2BREQ_PROC) {
            xcmd_tap_free(&q->tap);
            q->proc = NULL;
        }
    }
    while (!list_empty(&e->procs)) {
        struct e2bproc *p = list_first(&e->procs, struct e2bproc, link);
        proc_free(&p);
    }
}

/* A stream for the request r attached to p: q, r->face, the start event queued. 0 or
 * -ENOMEM. */
static int proc_attach(struct gw_req *r, struct e2bproc *p)
{
    struct e2breq *q = calloc(1, sizeof(*q));
    if (!q || !(q->tap = xcmd_tap_new(p->cmd, proc_wake, q))) {
        free(q);
        return -ENOMEM;
    }
    q->kind = E2BREQ_PROC;
    q->r = r;
    q->proc = p;
    snprintf(q->sbx_id, sizeof(q->sbx_id), "%s", p->sbx_id);
    p->clients++;
    r->face = q;
    list_append(&r->g->e2b->runs, &q->link);
    char msg[64];
    snprintf(msg, sizeof(msg), "{\"event\":{\"start\":{\"pid\":%u}}}", p->handle);
    e2b__proc_send(q, msg, 0);
    return 0;
}

/* The command of that pid in the sandbox, still running, or NULL. */
static struct e2bproc *proc_find(struct e2b *e, const struct e2bsbx *s, unsigned pid)
{
    struct e2bproc *p;
    list_for_each(p, &e->procs, link)
    {
        if (p->handle == pid && strcmp(p->sbx_id, s->id) == 0 && !xcmd_stream_ended(p->cmd))
            return p;
    }
    return NULL;
}

/* A streaming call's one envelope: its message in *ret_off, *ret_n; else answered (false). */
static bool proc_envelope(struct gw_req *r, const char *what, size_t *ret_off, size_t *ret_n)
{
    uint8_t flags;
    size_t used;
    int rc = e2bwire_envelope_parse((const uint8_t *)(r->body.data ? r->body.data : ""),
                                    r->body.len, E2BWIRE_ENVELOPE_MAX, &flags, ret_off, ret_n,
                                    &used);
    if (rc < 0 || used != r->body.len) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "one Connect envelope (uncompressed) holding a %s is expected", what);
        connect_stream_error(r, "invalid_argument", msg);
        return false;
    }
    return true;
}

static unsigned proc_handles = 1000;

static void proc_start(struct gw_req *r, struct e2bsbx *s)
{
    gw_t *g = r->g;
    char msg[256];
    size_t off, n;
    if (!proc_envelope(r, "StartRequest", &off, &n))
        return;
    struct e2bwire_start st;
    int rc = e2bwire_start_parse(r->body.data + off, n, &st, msg, sizeof(msg));
    if (rc < 0)
        return connect_stream_error(r, e2bwire_code_name(rc), msg);
    if (st.cwd_abs && !g->cfg.sandbox) { /* no file system of its own: the host's */
        e2bwire_start_fini(&st);
        return connect_stream_error(r, "permission_denied",
                                    "\"process.cwd\": only directories under " E2BWIRE_HOME
                                    " (this gateway runs kernels unsandboxed)");
    }
    kernel_t *k = context_kernel(r, s, NULL);
    wspace_t *w = kmgr_workspace(g->km, s->ws_id);
    if (!k || !w) {
        e2bwire_start_fini(&st);
        return connect_stream_error(r, "unavailable", "the sandbox's kernel is not running");
    }
    /* the sandbox's envVars, then the command's own */
    const char *env[2 * E2BWIRE_MAP_MAX + 2];
    char *envbuf[E2BWIRE_MAP_MAX];
    size_t ne = 0, nb = 0;
    const char *ek;
    json_t *ev;
    json_object_foreach(s->env, ek, ev)
    {
        if (nb < E2BWIRE_MAP_MAX && asprintf(&envbuf[nb], "%s=%s", ek, json_string_value(ev)) >= 0)
            env[ne++] = envbuf[nb++];
    }
    /* where E2B's SDKs expect it: the shell's pwd says /home/user/... (the same directory) */
    char pwd[sizeof(E2BWIRE_HOME) + FPATH_MAX + 8];
    if (st.cwd_abs)
        snprintf(pwd, sizeof(pwd), "PWD=%s", st.cwd);
    else
        snprintf(pwd, sizeof(pwd), "PWD=" E2BWIRE_HOME "%s%s", st.cwd[0] ? "/" : "", st.cwd);
    if (g->cfg.sandbox)
        env[ne++] = pwd;
    for (size_t i = 0; st.env[i]; i++)
        env[ne++] = st.env[i];
    env[ne] = NULL;
    char cwd[FPATH_MAX + 512]; /* sandboxed: under /home/user, as the kernel works there */
    if (st.cwd_abs)
        snprintf(cwd, sizeof(cwd), "%s", st.cwd);
    else
        snprintf(cwd, sizeof(cwd), "%s%s%s", g->cfg.sandbox ? SBX_E2B_HOME : wspace_path(w),
                 st.cwd[0] ? "/" : "", st.cwd);
    struct e2bproc *p = calloc(1, sizeof(*p));
    if (p && !(p->reap = g->loop.evl.timer_new(&g->loop.evl, proc_reap, p))) {
        free(p);
        p = NULL;
    }
    if (!p) {
        e2bwire_start_fini(&st);
        for (size_t i = 0; i < nb; i++)
            free(envbuf[i]);
        return connect_stream_error(r, "resource_exhausted", "out of memory");
    }
    p->g = g;
    list_init(&p->link);
    p->handle = proc_handles++;
    snprintf(p->sbx_id, sizeof(p->sbx_id), "%s", s->id);
    p->keepalive_ms = 50000;
    char ka[16];
    if (header(r->wsi, "keepalive-ping-interval:", ka, sizeof(ka))) {
        long v = strtol(ka, NULL, 10);
        if (v >= 1 && v <= 3600)
            p->keepalive_ms = (uint64_t)v * 1000;
    }
    struct kcmd_opts o = {.argv = st.argv, .cwd = cwd, .env = env, .stdin_open = st.stdin_open};
    /* the call's deadline (the SDKs' timeoutMs) ends the command, as envd's does: it outlives
       its client, not its deadline */
    if (header(r->wsi, "connect-timeout-ms:", ka, sizeof(ka))) {
        long long v = strtoll(ka, NULL, 10);
        if (v > 0)
            o.timeout_s = v > XREQ_TIMEOUT_MAX * 1000LL ? XREQ_TIMEOUT_MAX : (double)v / 1000.0;
    }
    json_t *args = json_array();
    for (size_t i = 1; st.argv[i]; i++)
        json_array_append_new(args, json_string(st.argv[i]));
    p->config = json_pack("{s:s, s:o, s:{}, s:s}", "cmd", st.argv[0], "args", args, "envs",
                          "cwd", cwd);
    struct kerr kerr;
    p->cmd = xcmd_stream_start(g, k, &o, &proc_ops, p, &kerr);
    e2bwire_start_fini(&st);
    for (size_t i = 0; i < nb; i++)
        free(envbuf[i]);
    if (!p->cmd) {
        proc_free(&p);
        return connect_stream_error(
            r, kerr.code == -EAGAIN ? "resource_exhausted" : e2bwire_code_name(kerr.code),
            kerr.message);
    }
    /* every client (this one too) is a tap of it: it runs on when they go (the command says
       nothing before the loop's next turn) */
    xcmd_stream_detach(p->cmd);
    list_append(&g->e2b->procs, &p->link);
    if (proc_attach(r, p) < 0) {
        proc_free(&p);
        return connect_stream_error(r, "resource_exhausted", "out of memory");
    }
    log_info("e2b: sandbox=%s: command %u started", s->id, p->handle);
}

/* process.Process/Connect: a stream attached to a command of this sandbox still running (its
 * start event, then its events from now on), beside any other. */
static void proc_connect(struct gw_req *r, struct e2bsbx *s)
{
    char msg[256];
    size_t off, n;
    unsigned pid;
    if (!proc_envelope(r, "ConnectRequest", &off, &n))
        return;
    if (e2bwire_input_parse(r->body.data + off, n, &pid, NULL, NULL, msg, sizeof(msg)) < 0)
        return connect_stream_error(r, "invalid_argument", msg);
    struct e2bproc *p = proc_find(r->g->e2b, s, pid);
    if (!p) {
        snprintf(msg, sizeof(msg), "process %u not found", pid);
        return connect_stream_error(r, "not_found", msg);
    }
    if (proc_attach(r, p) < 0)
        return connect_stream_error(r, "resource_exhausted", "out of memory");
    log_info("e2b: sandbox=%s: command %u: a client attached (%zu)", s->id, pid, p->clients);
}

static int proc_write(struct gw_req *r, struct e2breq *q)
{
    if (!q->tap) /* the gateway ends */
        return -1;
    if (!q->headers_sent) {
        if (http_write_head(r, 200, "application/connect+json", NULL, NULL, -1) < 0)
            return -1;
        q->headers_sent = true;
    }
    while (!lws_send_pipe_choked(r->wsi)) {
        static const char room[LWS_PRE + 24];
        const char *pend;
        bool ended = xcmd_tap_ended(q->tap);
        size_t left = xcmd_tap_pending(q->tap, &pend);
        size_t take = left < E2B_BATCH_BYTES ? left : E2B_BATCH_BYTES;
        bool last = ended && take == left;
        if (take == 0 && !last)
            break;
        if (take == 0) { /* only the last chunk */
            static unsigned char fin[LWS_PRE + 5];
            memcpy(fin + LWS_PRE, "0\r\n\r\n", 5);
            return lws_write(r->wsi, fin + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) < 0 ? -1 : 1;
        }
        buf_t b;
        buf_init(&b, SIZE_MAX);
        int rc = buf_append(&b, room, sizeof(room));
        rc |= buf_append(&b, pend, take);
        rc = rc < 0 ? rc : write_chunk(r->wsi, &b, sizeof(room), last);
        buf_fini(&b);
        if (rc < 0)
            return -1;
        xcmd_tap_taken(q->tap, take);
        if (last)
            return 1;
    }
    const char *pend;
    if (xcmd_tap_pending(q->tap, &pend) || lws_partial_buffered(r->wsi)) {
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
        lws_callback_on_writable(r->wsi);
    } else {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0); /* the keepalives keep it */
    }
    return 0;
}

static void proc_signal(struct gw_req *r, struct e2bsbx *s)
{
    char msg[256];
    unsigned pid;
    int sig;
    if (e2bwire_signal_parse(r->body.data ? r->body.data : "", r->body.len, &pid, &sig, msg,
                             sizeof(msg)) < 0)
        return connect_error(r, "invalid_argument", msg);
    struct e2bproc *p = proc_find(r->g->e2b, s, pid);
    if (p) {
        struct kerr kerr;
        int rc = xcmd_stream_signal(p->cmd, sig, &kerr);
        if (rc < 0 && rc != -ESRCH)
            return connect_error(r, e2bwire_code_name(rc), kerr.message);
        return req_reply(r, 200, json_object());
    }
    snprintf(msg, sizeof(msg), "process %u not found", pid);
    return connect_error(r, "not_found", msg);
}

/* process.Process/List: the sandbox's commands still running (attached or not), each with
 * its config. */
static void proc_list(struct gw_req *r, struct e2bsbx *s)
{
    json_t *a = json_array();
    struct e2bproc *p;
    list_for_each(p, &r->g->e2b->procs, link)
    {
        if (xcmd_stream_ended(p->cmd) || strcmp(p->sbx_id, s->id) != 0)
            continue;
        json_t *j = json_pack("{s:I}", "pid", (json_int_t)p->handle);
        if (j && p->config)
            json_object_set(j, "config", p->config);
        json_array_append_new(a, j);
    }
    req_reply(r, 200, json_pack("{s:o}", "processes", a));
}

/* process.Process/SendInput and CloseStdin: bytes for (or the end of) the stdin of a command
 * of this sandbox started with "stdin": true. */
static void proc_input(struct gw_req *r, struct e2bsbx *s, bool close)
{
    char msg[256];
    unsigned pid;
    uint8_t *data = NULL;
    size_t n = 0;
    if (e2bwire_input_parse(r->body.data ? r->body.data : "", r->body.len, &pid,
                            close ? NULL : &data, &n, msg, sizeof(msg)) < 0)
        return connect_error(r, "invalid_argument", msg);
    struct e2bproc *p = proc_find(r->g->e2b, s, pid);
    if (p) {
        int rc = close ? xcmd_stream_close_input(p->cmd) : xcmd_stream_input(p->cmd, data, n);
        free(data);
        if (rc == -EBADF)
            return connect_error(r, "failed_precondition",
                                 "the process was started without stdin (stdin: true)");
        if (rc == -EPIPE)
            return connect_error(r, "failed_precondition", "the process's stdin is closed");
        if (rc == -ENOBUFS)
            return connect_error(r, "resource_exhausted",
                                 "the process has not read the stdin sent before (1 MiB waits)");
        if (rc < 0)
            return connect_error(r, "internal", strerror(-rc));
        return req_reply(r, 200, json_object());
    }
    free(data);
    snprintf(msg, sizeof(msg), "process %u not found", pid);
    return connect_error(r, "not_found", msg);
}

static void sbx_rpc(struct gw_req *r, struct e2bsbx *s, const char *service, const char *method)
{
    bool stream = connect_streaming(r->wsi);
    char msg[256];
    if (strcmp(service, "filesystem.Filesystem") == 0 &&
        (stream ? strcmp(method, "WatchDir") == 0
                : strcmp(method, "CreateWatcher") == 0 ||
                      strcmp(method, "GetWatcherEvents") == 0 ||
                      strcmp(method, "RemoveWatcher") == 0))
        return e2bwatch_rpc(r, s, method, stream);
    if (strcmp(service, "filesystem.Filesystem") == 0 && !stream &&
        (strcmp(method, "Stat") == 0 || strcmp(method, "ListDir") == 0 ||
         strcmp(method, "MakeDir") == 0 || strcmp(method, "Remove") == 0 ||
         strcmp(method, "Move") == 0)) {
        struct e2bwire_fsreq f;
        int rc = e2bwire_fsreq_parse(method, r->body.data ? r->body.data : "", r->body.len, &f, msg,
                                     sizeof(msg));
        if (rc < 0)
            return connect_error(r, e2bwire_code_name(rc), msg);
        wspace_t *w = kmgr_workspace(r->g->km, s->ws_id);
        if (!w)
            return connect_error(r, "unavailable", "the sandbox's workspace is gone");
        wspace_touch(w);
        json_t *ans = NULL;
        if (strcmp(method, "Stat") == 0)
            rc = e2bfs_stat(w, f.path, &ans);
        else if (strcmp(method, "ListDir") == 0)
            rc = e2bfs_list(w, f.path, f.depth, &ans);
        else if (strcmp(method, "MakeDir") == 0)
            rc = e2bfs_mkdir(w, f.path, &ans);
        else if (strcmp(method, "Remove") == 0)
            rc = e2bfs_remove(w, f.path, &ans);
        else
            rc = e2bfs_move(w, f.path, f.path2, &ans);
        if (rc < 0) {
            snprintf(msg, sizeof(msg), "%s%s%s: %s", E2BWIRE_HOME, f.path[0] ? "/" : "", f.path,
                     rc == -ELOOP || rc == -EXDEV ? "a symbolic link or mount point is "
                                                    "in the way (never followed)"
                                                  : strerror(-rc));
            return connect_error(r, e2bwire_code_name(rc), msg);
        }
        return req_reply(r, 200, ans);
    }
    if (strcmp(service, "process.Process") == 0 && strcmp(method, "Start") == 0 && stream)
        return proc_start(r, s);
    if (strcmp(service, "process.Process") == 0 && strcmp(method, "Connect") == 0 && stream)
        return proc_connect(r, s);
    if (strcmp(service, "process.Process") == 0 && strcmp(method, "SendSignal") == 0 && !stream)
        return proc_signal(r, s);
    if (strcmp(service, "process.Process") == 0 && strcmp(method, "List") == 0 && !stream)
        return proc_list(r, s);
    if (strcmp(service, "process.Process") == 0 && strcmp(method, "SendInput") == 0 && !stream)
        return proc_input(r, s, false);
    if (strcmp(service, "process.Process") == 0 && strcmp(method, "CloseStdin") == 0 && !stream)
        return proc_input(r, s, true);
    snprintf(msg, sizeof(msg), "%.64s/%.64s is not offered by kgw (docs/e2b.md)", service, method);
    if (stream)
        return connect_stream_error(r, "unimplemented", msg);
    return connect_error(r, "unimplemented", msg);
}

/* ---- the sandbox plane ---- */

/* The header's value into out (NUL-terminated); false when missing or too long.
 */
static bool header(struct lws *wsi, const char *name, char *out, size_t outsz)
{
    return e2bconn_header(wsi, name, out, outsz);
}

static bool token_ok(const char *presented, const char *want)
{
    size_t n = strlen(want);
    return strlen(presented) == n && sodium_memcmp(presented, want, n) == 0;
}

/* ---- the sandbox plane: signed file URLs ---- */

/* GET or POST /files with a URL the SDKs signed with the sandbox's envdAccessToken
 * (downloadUrl, uploadUrl: protocol/e2bwire.h), sent without the sandbox's headers, mostly to
 * /files at the root (http.c passes those here): the sandbox is the one whose token signed it,
 * compared in constant time. Refused as envd refuses: 401 "invalid signature", 401
 * "signature is already expired". */
static void sbx_signed(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    /* every argument fits every buffer below, so /files reads the path that was signed */
    if (lws_hdr_total_length(r->wsi, WSI_TOKEN_HTTP_URI_ARGS) > FPATH_MAX * 3)
        return e2b__api_error(r, 400, "the query is over %d bytes", FPATH_MAX * 3);
    char path[FPATH_MAX * 3 + 1], user[FPATH_MAX * 3 + 1], sig[FPATH_MAX * 3 + 1];
    char exps[FPATH_MAX * 3 + 1], want[E2BWIRE_SIGNATURE_LEN + 1];
    const char *p = lws_get_urlarg_by_name(r->wsi, "path=", path, sizeof(path));
    const char *u = lws_get_urlarg_by_name(r->wsi, "username=", user, sizeof(user));
    const char *g = lws_get_urlarg_by_name(r->wsi, "signature=", sig, sizeof(sig));
    const char *x = lws_get_urlarg_by_name(r->wsi, "signature_expiration=", exps, sizeof(exps));
    long long exp = 0;
    if (x && e2bwire_expiration_parse(x, &exp) < 0)
        return e2b__api_error(r, 400, "signature_expiration: Unix seconds are expected");
    char id[UTIL_UUID_LEN + 2] = "";
    bool one = header(r->wsi, "e2b-sandbox-id:", id, sizeof(id));
    const char *op = r->method == HTTP_M_GET ? "read" : "write";
    struct e2bsbx *s, *found = NULL;
    list_for_each(s, &e->sbxs, link)
    {
        if (found || !s->ready || s->paused || (one && strcmp(s->id, id) != 0) ||
            e2b__sbx_kernel_ended(e, s))
            continue;
        e2bwire_signature(p ? p : "", op, u ? u : "", s->envd_token, x ? &exp : NULL, want);
        if (g && token_ok(g, want))
            found = s;
    }
    sodium_memzero(want, sizeof(want));
    if (!found) {
        log_info("e2b: a file URL with a wrong signature refused");
        return e2b__api_error(r, 401, "invalid signature");
    }
    if (x && exp < util_wall_us() / 1000000)
        return e2b__api_error(r, 401, "signature is already expired");
    snprintf(r->caller.tenant, sizeof(r->caller.tenant), "%s", found->tenant);
    auth_peer(r->g, r->wsi, r->caller.addr);
    sbx_files(r, found);
}

void e2bsbx_handle(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    char id[UTIL_UUID_LEN + 2], tok[2 * E2B_TOKEN_BYTES + 2];
    const char *path = r->fpath;
    if (strcmp(path, "files") == 0 && http_urlarg(r->wsi, "signature=") &&
        lws_hdr_custom_length(r->wsi, "x-access-token:", 15) <= 0 &&
        lws_hdr_custom_length(r->wsi, "e2b-traffic-access-token:", 25) <= 0)
        return sbx_signed(r); /* a signed URL, maybe without the sandbox's id */
    if (!header(r->wsi, "e2b-sandbox-id:", id, sizeof(id)))
        return e2b__api_error(r, 400,
                              "the E2b-Sandbox-Id header names the sandbox (set "
                              "E2B_SANDBOX_URL to this gateway's /e2b/sbx)");
    struct e2bsbx *s = e2b__sbx_find(e, id);
    if (s && e2b__sbx_kernel_ended(e, s)) /* ending: its listener ends it in a moment */
        s = NULL;
    if (!s || !s->ready)
        return e2b__api_error(r, 502, "sandbox %s is not running", s ? s->id : "(unknown)");
    if (s->paused) /* as E2B's proxy: not running (its /health too); connect resumes it */
        return e2b__api_error(r, 502, "sandbox %s is paused", s->id);
    bool authed =
        (header(r->wsi, "x-access-token:", tok, sizeof(tok)) && token_ok(tok, s->envd_token)) ||
        (header(r->wsi, "e2b-traffic-access-token:", tok, sizeof(tok)) &&
         token_ok(tok, s->traffic_token));
    sodium_memzero(tok, sizeof(tok));
    if (strcmp(path, "health") == 0 && r->method == HTTP_M_GET)
        return req_reply(r, 204, NULL);
    if (!authed) {
        log_info("e2b: sandbox=%s: a request without its access token refused", s->id);
        return e2b__api_error(r, 401, "this sandbox's access token is required (X-Access-Token)");
    }
    snprintf(r->caller.tenant, sizeof(r->caller.tenant), "%s", s->tenant);
    auth_peer(r->g, r->wsi, r->caller.addr);
    const char *slash = strchr(path, '/');
    if (strcmp(path, "execute") == 0 && r->method == HTTP_M_POST)
        return sbx_execute(r, s);
    if (strcmp(path, "contexts") == 0)
        return sbx_contexts(r, s, "");
    if (strncmp(path, "contexts/", 9) == 0)
        return sbx_contexts(r, s, path + 9);
    if (strcmp(path, "files") == 0 && (r->method == HTTP_M_GET || r->method == HTTP_M_POST))
        return sbx_files(r, s);
    if (slash && r->method == HTTP_M_POST && !strchr(slash + 1, '/') &&
        (size_t)(slash - path) < 64) {
        char service[64];
        memcpy(service, path, (size_t)(slash - path));
        service[slash - path] = '\0';
        return sbx_rpc(r, s, service, slash + 1);
    }
    return e2b__api_error(r, 404, "%s is not offered on the sandbox plane (docs/e2b.md)",
                          r->route.rest_len ? "this route" : "/");
}

int e2bsbx_write(struct gw_req *r)
{
    struct e2breq *q = r->face;
    if (q && q->killed)
        return -1;
    if (q && q->kind == E2BREQ_PROC)
        return proc_write(r, q);
    if (q && q->kind == E2BREQ_WATCH)
        return e2bwatch_write(q);
    if (!q || q->kind != E2BREQ_RUN)
        return 0;
    return run_write(r, q);
}

void e2bsbx_req_fini(struct gw_req *r)
{
    struct e2breq *q = r->face;
    if (!q)
        return;
    if (q->kind == E2BREQ_RUN) {
        xexec_t *x = q->sub.x;
        bool running = x && !xexec_done(x);
        xexec_unsubscribe(&q->sub);
        if (running) {
            log_info("e2b: execution=%s: the client went away; cancelled", xexec_id(x));
            xexec_cancel(x);
        }
        list_remove(&q->link);
    } else if (q->kind == E2BREQ_PROC) {
        struct e2bproc *p = q->proc;
        xcmd_tap_free(&q->tap);
        if (p && --p->clients == 0 && xcmd_stream_ended(p->cmd))
            proc_free(&p);
        else if (p && !xcmd_stream_ended(p->cmd))
            log_info("e2b: command %u: a client went away; it runs on (%zu attached)",
                     p->handle, p->clients);
        list_remove(&q->link);
    } else if (q->kind == E2BREQ_WATCH) {
        e2bwatch_destroy(&q->watch);
        list_remove(&q->link);
    } else {
        put_free(q);
    }
    free(q);
    r->face = NULL;
}
