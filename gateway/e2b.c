/* The E2B-compatible API (docs/e2b.md): sandboxes over workspaces and kernels,
 * the control plane's answers in the E2B OpenAPI's shapes, and the sandbox
 * plane (envd's and the code interpreter's routes) on the execute API's
 * executions (gateway/xexec.c), the workspace files (gateway/files.c,
 * gateway/e2bfs.c) and Connect-RPC's JSON codec. Request bodies, paths and
 * envelopes are parsed by protocol/e2bwire.c (fuzzed). */
#include "gateway/e2b.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/auth.h"
#include "gateway/e2bfs.h"
#include "gateway/files.h"
#include "gateway/kops.h"
#include "gateway/xexec.h"
#include "kernelmgr/kcmd.h"
#include "kernelmgr/kmgr.h"
#include "protocol/e2bwire.h"
#include "protocol/xreq.h"
#include "sandbox/sbx.h"

#define E2B_ENVD_VERSION    "0.5.6" /* what the SDKs are told envd is (docs/e2b.md) */
#define E2B_CONTEXTS_MAX    8       /* kernels (code contexts) of one sandbox */
#define E2B_TOKEN_BYTES     24      /* random bytes of an access token (hex: twice) */
#define E2B_TICK_MS         1000
#define E2B_KEEPALIVE_MS    5000 /* an /execute stream idle this long gets a keepalive line */
#define E2B_BATCH_BYTES     (64 * 1024)
#define E2B_UPLOAD_FILES    64  /* files of one POST /files */
#define E2B_DEFAULT_TIMEOUT 300 /* seconds, when a create names none */
#define E2B_TEMPLATES_MAX   32
#define E2B_PROC_HELD       (256 * 1024) /* a command's output held before it is paused */
/* bytes of a file GET /files answers: it is read whole (on the loop) and held until sent, so
 * far less than --max-download-bytes (kgw's streamed GET /download is not) */
#define E2B_READ_MAX (32 * 1024 * 1024)

struct e2b_template {
    char id[E2BWIRE_TEMPLATE_MAX + 1];
    char kspec[129]; /* "" : --default-kernel */
};

/* One sandbox. */
struct e2bsbx {
    struct list link;
    char id[UTIL_UUID_LEN + 1];
    char tenant[KEYFILE_TENANT_MAX + 1];
    char template_id[E2BWIRE_TEMPLATE_MAX + 1];
    char kspec[129];
    char ws_id[WSPACE_ID_MAX + 1];
    char kernels[E2B_CONTEXTS_MAX][UTIL_UUID_LEN + 1]; /* [0]: the default context */
    size_t nkernels;
    char envd_token[2 * E2B_TOKEN_BYTES + 1];
    char traffic_token[2 * E2B_TOKEN_BYTES + 1];
    json_t *env;      /* envVars (for the contexts' kernels too), or NULL */
    json_t *metadata; /* object */
    int64_t started_us;
    int64_t end_us;     /* wall clock: expiry (while it starts: if it were ready now) */
    long long life_s;   /* its lifetime, counted from when it is ready (the create's answer) */
    bool ready;         /* its first kernel answered */
};

struct e2b {
    gw_t *g;
    struct list sbxs;
    struct list runs; /* struct e2breq.link: /execute streams */
    evl_timer_t *tick;
    struct e2b_template templates[E2B_TEMPLATES_MAX];
    size_t ntemplates;
};

/* What a request of this API keeps while it is answered. */
enum e2breq_kind { E2BREQ_RUN, E2BREQ_PUT, E2BREQ_PROC };
struct e2breq {
    enum e2breq_kind kind;
    struct gw_req *r;
    /* RUN: an /execute stream */
    struct xexec_sub sub;
    struct list link;
    bool headers_sent, keepalive;
    uint64_t last_ms;
    /* PUT: a POST /files being written */
    struct e2bput *up;
    /* PROC: a process.Process/Start stream */
    struct e2bproc *proc;
};

struct e2bproc {
    kcmd_t *cmd;
    unsigned handle; /* the "pid" the client sees (kgw's handle of the command) */
    char sbx_id[UTIL_UUID_LEN + 1];
    buf_t pend;      /* enveloped messages not yet written */
    size_t pend_off; /* bytes of pend written */
    bool ended, paused;
    uint64_t keepalive_ms; /* the client's Keepalive-Ping-Interval */
};

struct e2bput {
    files_put_t *put;
    struct files_item items[E2B_UPLOAD_FILES];
    char paths[E2B_UPLOAD_FILES][FPATH_MAX + 1];
    buf_t data[E2B_UPLOAD_FILES];
    size_t nitems;
    bool in_file, bad;
    char qpath[FPATH_MAX + 1]; /* ?path= ("" none) */
    bool has_qpath;
};

/* ---- answers ---- */

/* An error as E2B's API answers it ({"code", "message"}), with kgw's "reason"
 * beside. */
__attribute__((format(printf, 3, 4))) static void
api_error(struct gw_req *r, int status, const char *fmt, ...)
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
    req_reply(r, e2bwire_code_status(code),
              json_pack("{s:s, s:s, s:s}", "code", code, "message", msg, "reason", code));
}

/* ---- sandboxes ---- */

static struct e2bsbx *sbx_find(struct e2b *e, const char *id)
{
    struct e2bsbx *s;
    list_for_each(s, &e->sbxs, link)
    {
        if (strcmp(s->id, id) == 0)
            return s;
    }
    return NULL;
}

static void sbx_kill(struct e2b *e, struct e2bsbx *s, const char *why);

/* Whether its default kernel ended (shut down through another face: DELETE /api/kernels,
 * culled, dead): the sandbox ends with it. */
static bool sbx_kernel_ended(struct e2b *e, const struct e2bsbx *s)
{
    kernel_t *k = gw_kernel(e->g, s->kernels[0], s->tenant);
    return !k || kernel_state(k) == KERNEL_DEAD || kernel_state(k) == KERNEL_TERMINATING;
}

/* The sandbox if it runs: one whose default kernel ended is ended now (as the tick would, a
 * second later), so that no answer finds it half there. */
static struct e2bsbx *sbx_live(struct e2b *e, struct e2bsbx *s)
{
    if (s && sbx_kernel_ended(e, s)) {
        sbx_kill(e, s, "its kernel ended");
        return NULL;
    }
    return s;
}

/* Of the tenant: another tenant's answers as a missing one. */
static struct e2bsbx *sbx_of(struct e2b *e, const char *id, const char *tenant)
{
    struct e2bsbx *s = sbx_find(e, id);
    return s && strcmp(s->tenant, tenant) == 0 ? sbx_live(e, s) : NULL;
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

static struct e2bsbx *sbx_by_kernel(struct e2b *e, const char *kid)
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

/* Shuts its kernels down and forgets it: its tokens are refused from now on. */
static void sbx_kill(struct e2b *e, struct e2bsbx *s, const char *why)
{
    for (size_t i = 0; i < s->nkernels; i++) {
        kernel_t *k = gw_kernel(e->g, s->kernels[i], s->tenant);
        struct kops_error err;
        if (k && kernel_state(k) != KERNEL_TERMINATING && kernel_state(k) != KERNEL_DEAD)
            kops_shutdown(e->g, k, &err);
    }
    log_info("e2b: sandbox=%s tenant=%s: %s", s->id, s->tenant, why);
    audit_event("e2b_sandbox_end", "s:s, s:s, s:s", "tenant", s->tenant, "sandbox", s->id, "why",
                why);
    list_remove(&s->link);
    sodium_memzero(s->envd_token, sizeof(s->envd_token));
    sodium_memzero(s->traffic_token, sizeof(s->traffic_token));
    json_decref(s->env);
    json_decref(s->metadata);
    free(s);
}

static void proc_send(struct e2breq *q, const char *json, uint8_t flags);

static void on_tick(void *data)
{
    struct e2b *e = data;
    int64_t now = util_wall_us();
    uint64_t mono = util_now_ms();
    struct list *it = e->sbxs.next;
    while (it != &e->sbxs) {
        struct e2bsbx *s = list_entry(it, struct e2bsbx, link);
        it = it->next;
        if (s->ready && now >= s->end_us)
            sbx_kill(e, s, "timeout");
        else
            sbx_live(e, s);
    }
    struct e2breq *q;
    list_for_each(q, &e->runs, link)
    {
        if (q->kind == E2BREQ_PROC) {
            if (!q->proc->ended && mono - q->last_ms >= q->proc->keepalive_ms)
                proc_send(q, "{\"event\":{\"keepalive\":{}}}", 0);
            continue;
        }
        if (mono - q->last_ms >= E2B_KEEPALIVE_MS && q->sub.x && !xexec_done(q->sub.x)) {
            q->keepalive = true;
            lws_callback_on_writable(q->r->wsi);
        }
    }
    e->g->loop.evl.timer_arm(&e->g->loop.evl, e->tick, E2B_TICK_MS);
}

static int parse_templates(struct e2b *e, const char *spec)
{
    const char *p = spec;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (n > 0) {
            if (!eq || eq == p || e->ntemplates >= E2B_TEMPLATES_MAX)
                return -EINVAL;
            struct e2b_template *t = &e->templates[e->ntemplates];
            size_t in = (size_t)(eq - p), kn = n - in - 1;
            if (in > E2BWIRE_TEMPLATE_MAX || kn >= sizeof(t->kspec))
                return -EINVAL;
            memcpy(t->id, p, in);
            t->id[in] = '\0';
            memcpy(t->kspec, eq + 1, kn);
            t->kspec[kn] = '\0';
            e->ntemplates++;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

int e2b_listen(gw_t *g)
{
    struct e2b *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->g = g;
    list_init(&e->sbxs);
    list_init(&e->runs);
    if (parse_templates(e, g->cfg.e2b_templates ? g->cfg.e2b_templates : "") < 0) {
        log_error("--e2b-templates: expected TEMPLATE=KERNELSPEC[,...] (at most %d)",
                  E2B_TEMPLATES_MAX);
        free(e);
        return -EINVAL;
    }
    if (!(e->tick = g->loop.evl.timer_new(&g->loop.evl, on_tick, e))) {
        free(e);
        return -ENOMEM;
    }
    g->loop.evl.timer_arm(&g->loop.evl, e->tick, E2B_TICK_MS);
    g->e2b = e;
    return 0;
}

void e2b_fini(gw_t *g)
{
    struct e2b *e = g->e2b;
    if (!e)
        return;
    while (!list_empty(&e->runs)) { /* their requests are closed after this */
        struct e2breq *q = list_first(&e->runs, struct e2breq, link);
        list_remove(&q->link);
        list_init(&q->link);
    }
    while (!list_empty(&e->sbxs)) {
        struct e2bsbx *s = list_first(&e->sbxs, struct e2bsbx, link);
        list_remove(&s->link);
        json_decref(s->env);
        json_decref(s->metadata);
        free(s);
    }
    evl_timer_destroy(&g->loop.evl, &e->tick);
    free(e);
    g->e2b = NULL;
}

/* ---- the control plane ---- */

static void iso(char *out, size_t n, int64_t us)
{
    util_iso_time(out, n, us);
}

/* The create and connect answer (E2B's Sandbox). */
static json_t *sbx_model(const struct e2bsbx *s)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:n}", "templateID", s->template_id,
                     "alias", s->template_id, "sandboxID", s->id, "clientID", "kgw", "envdVersion",
                     E2B_ENVD_VERSION, "envdAccessToken", s->envd_token, "trafficAccessToken",
                     s->traffic_token, "domain");
}

/* GET /sandboxes/{id} and the listing's items (E2B's SandboxDetail,
 * ListedSandbox). */
static json_t *sbx_detail(struct e2b *e, const struct e2bsbx *s)
{
    char started[40], end[40];
    iso(started, sizeof(started), s->started_us);
    iso(end, sizeof(end), s->end_us);
    wspace_t *w = kmgr_workspace(e->g->km, s->ws_id);
    long long disk = w ? wspace_size_limit(w) / (1024 * 1024) : 0;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:I, s:O, s:s}", "templateID",
                     s->template_id, "alias", s->template_id, "sandboxID", s->id, "clientID", "kgw",
                     "startedAt", started, "endAt", end, "envdVersion", E2B_ENVD_VERSION,
                     "cpuCount", 1, "memoryMB", 0, "diskSizeMB", (json_int_t)disk, "metadata",
                     s->metadata, "state", "running");
}

static const struct e2b_template *template_of(struct e2b *e, const char *id)
{
    for (size_t i = 0; i < e->ntemplates; i++)
        if (strcmp(e->templates[i].id, id) == 0)
            return &e->templates[i];
    return NULL;
}

/* envVars into the kernel's os.environ (and so every subprocess's), by a silent
 * execution queued first on it: the kernel's own environment takes only
 * KERNEL_* variables of a request (docs/security.md), while an E2B sandbox's
 * variables are any the client names, in its own sandbox, as its code could set
 * them. 0 or -errno. */
static int apply_env(gw_t *g, const struct gw_caller *who, const struct e2bsbx *s, kernel_t *k)
{
    if (!s->env || json_object_size(s->env) == 0)
        return 0;
    char *text = json_dumps(s->env, JSON_COMPACT);
    json_t *lit = text ? json_string(text) : NULL;
    char *pylit = lit ? json_dumps(lit, JSON_ENCODE_ANY) : NULL; /* a JSON string literal is
                                                                  * a Python one too */
    free(text);
    json_decref(lit);
    if (!pylit)
        return -ENOMEM;
    static const char pre[] = "__import__('os').environ.update(__import__('json').loads(";
    size_t n = strlen(pre) + strlen(pylit) + 3;
    char *code = malloc(n);
    if (code)
        snprintf(code, n, "%s%s))", pre, pylit);
    free(pylit);
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

static void on_created(struct gw_req *r, kernel_t *k, int status)
{
    struct e2b *e = r->g->e2b;
    struct e2bsbx *s = sbx_by_kernel(e, r->kernel_id);
    if (!s) /* killed (DELETE, its timeout) while its kernel started */
        return api_error(r, 409, "the sandbox was killed while it started");
    int rc = kops_waited(r->g, k, status);
    if (rc == -ECANCELED) { /* its kernel shut down meanwhile, through another face */
        sbx_kill(e, s, "its kernel was shut down while it started");
        return api_error(r, 409, "the sandbox's kernel was shut down while it started");
    }
    if (rc < 0) {
        sbx_kill(e, s, "its kernel failed to start");
        return api_error(r, 503, "the sandbox's kernel failed to start");
    }
    if (apply_env(r->g, &r->caller, s, k) < 0) {
        sbx_kill(e, s, "its envVars could not be applied");
        return api_error(r, 503, "the sandbox's envVars could not be applied; retry later");
    }
    s->ready = true;
    s->end_us = util_wall_us() + s->life_s * 1000000LL; /* its lifetime runs from now */
    req_reply(r, 201, sbx_model(s));
}

static void api_create(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    struct e2bwire_create c;
    char err[E2BWIRE_ERR_MAX];
    if (e2bwire_create_parse(r->body.data ? r->body.data : "", r->body.len, &c, err, sizeof(err)) <
        0)
        return api_error(r, 400, "%s", err);
    const char *tid = c.template_id[0] ? c.template_id : "base";
    const struct e2b_template *t = template_of(e, tid);
    if (!t) {
        e2bwire_create_fini(&c);
        char q[160];
        return api_error(r, 400,
                         "template %s is not offered here (the operator maps templates to "
                         "kernelspecs with --e2b-templates)",
                         log_quote(q, sizeof(q), tid, strlen(tid)));
    }
    if (c.timeout == 0) {
        e2bwire_create_fini(&c);
        return api_error(r, 400, "\"timeout\" must be at least 1 second");
    }
    struct e2bsbx *s = calloc(1, sizeof(*s));
    json_t *req = json_object();
    if (!s || !req) {
        free(s);
        json_decref(req);
        e2bwire_create_fini(&c);
        return api_error(r, 500, "out of memory");
    }
    if (t->kspec[0])
        json_object_set_new(req, "name", json_string(t->kspec));
    if (c.env)
        json_object_set(req, "env", c.env);
    kernel_t *k;
    struct kops_error kerr;
    int rc = kops_start(r->g, &r->caller, req, &k, &kerr);
    json_decref(req);
    if (rc < 0) {
        free(s);
        e2bwire_create_fini(&c);
        return api_error(r, kerr.status ? kerr.status : 500, "%s", kerr.message);
    }
    util_uuid(s->id);
    snprintf(s->tenant, sizeof(s->tenant), "%s", r->caller.tenant);
    snprintf(s->template_id, sizeof(s->template_id), "%s", tid);
    snprintf(s->kspec, sizeof(s->kspec), "%s", t->kspec);
    snprintf(s->ws_id, sizeof(s->ws_id), "%s", wspace_id(kernel_workspace(k)));
    snprintf(s->kernels[0], sizeof(s->kernels[0]), "%s", kernel_id(k));
    s->nkernels = 1;
    util_random_hex(s->envd_token, E2B_TOKEN_BYTES);
    util_random_hex(s->traffic_token, E2B_TOKEN_BYTES);
    s->env = c.env; /* taken */
    s->metadata = c.metadata ? c.metadata : json_object();
    s->started_us = util_wall_us();
    s->life_s = c.timeout > 0 ? c.timeout : E2B_DEFAULT_TIMEOUT;
    s->end_us = s->started_us + s->life_s * 1000000LL;
    list_append(&e->sbxs, &s->link);
    log_info("e2b: sandbox=%s tenant=%s template=%s kernel=%s: created", s->id, s->tenant,
             s->template_id, s->kernels[0]);
    audit_event("e2b_sandbox_start", "s:s, s:s, s:s, s:s", "tenant", s->tenant, "sandbox", s->id,
                "kernel", s->kernels[0], "workspace", s->ws_id);
    if (req_wait_kernel(r, k, on_created) < 0)
        on_created(r, k, 0);
}

static void api_list(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    json_t *a = json_array();
    struct e2bsbx *s, *next;
    list_for_each_safe(s, next, &e->sbxs, link)
    {
        if (strcmp(s->tenant, r->caller.tenant) == 0 && sbx_live(e, s))
            json_array_append_new(a, sbx_detail(e, s));
    }
    req_reply(r, 200, a);
}

static void api_sandbox(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    struct e2bsbx *s = sbx_of(e, r->route.arg[0], r->caller.tenant);
    char err[E2BWIRE_ERR_MAX];
    long long t;
    if (!s)
        return api_error(r, 404, "sandbox %s not found", r->route.arg[0]);
    switch (r->route.id) {
    case ROUTE_E2B_SANDBOX:
        if (r->method == HTTP_M_DELETE) {
            sbx_kill(e, s, "killed");
            return req_reply(r, 204, NULL);
        }
        return req_reply(r, 200, sbx_detail(e, s));
    case ROUTE_E2B_TIMEOUT:
        if (e2bwire_timeout_parse(r->body.data ? r->body.data : "", r->body.len, true, &t, err,
                                  sizeof(err)) < 0)
            return api_error(r, 400, "%s", err);
        if (t == 0) /* as a create's: DELETE ends a sandbox */
            return api_error(r, 400, "\"timeout\" must be at least 1 second");
        s->end_us = util_wall_us() + t * 1000000LL;
        s->life_s = t; /* while it starts: from when it is ready */
        return req_reply(r, 204, NULL);
    default: /* connect, v1 and v2: the tokens again; a timeout only extends the
                lifetime */
        if (e2bwire_timeout_parse(r->body.data ? r->body.data : "", r->body.len, false, &t, err,
                                  sizeof(err)) < 0)
            return api_error(r, 400, "%s", err);
        if (t > 0 && util_wall_us() + t * 1000000LL > s->end_us)
            s->end_us = util_wall_us() + t * 1000000LL;
        if (t > s->life_s && !s->ready)
            s->life_s = t;
        return req_reply(r, r->route.id == ROUTE_E2B_CONNECT ? 200 : 201, sbx_model(s));
    }
}

void e2b_api(struct gw_req *r)
{
    switch (r->route.id) {
    case ROUTE_E2B_SANDBOXES:
    case ROUTE_E2B_SANDBOXES_V2:
        return r->method == HTTP_M_POST ? api_create(r) : api_list(r);
    case ROUTE_E2B_SANDBOX:
    case ROUTE_E2B_TIMEOUT:
    case ROUTE_E2B_CONNECT:
    case ROUTE_E2B_CONNECT_V2:
        return api_sandbox(r);
    default:
        return api_error(r, 501, "/e2b/api/%s is not offered by kgw (docs/e2b.md lists what is)",
                         r->fpath);
    }
}

/* ---- the sandbox plane: /execute ---- */

/* The MIME types the code interpreter gives fields of their own (the others go
 * to "extra"). */
static const char *const mime_fields[][2] = {
    {"text/plain", "text"},        {"text/html", "html"},
    {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
    {"image/png", "png"},          {"image/jpeg", "jpeg"},
    {"application/pdf", "pdf"},    {"text/latex", "latex"},
    {"application/json", "json"},  {"application/javascript", "javascript"},
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
        if (strcmp(mime, "type") != 0 && strcmp(mime, "is_main_result") != 0)
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
    char head[24];
    size_t pay = b->len - room;
    int hn = snprintf(head, sizeof(head), "%zx\r\n", pay);
    if (buf_append(b, last ? "\r\n0\r\n\r\n" : "\r\n", last ? 7 : 2) < 0)
        return -1;
    unsigned char *start = (unsigned char *)b->data + room - (size_t)hn;
    memcpy(start, head, (size_t)hn);
    size_t len = (size_t)((unsigned char *)b->data + b->len - start);
    return lws_write(wsi, start, len, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0 ? -1 : 0;
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

static void sbx_execute(struct gw_req *r, struct e2bsbx *s)
{
    gw_t *g = r->g;
    struct e2bwire_exec ex;
    char err[E2BWIRE_ERR_MAX];
    int retry = 1, rc;
    if (e2bwire_exec_parse(r->body.data ? r->body.data : "", r->body.len, &ex, err, sizeof(err)) <
        0)
        return api_error(r, 400, "%s", err);
    kernel_t *k = context_kernel(r, s, ex.context_id);
    if (!k) {
        e2bwire_exec_fini(&ex);
        return api_error(r, 404, "context %s not found",
                         ex.context_id[0] ? ex.context_id : "(default)");
    }
    if ((rc = xexec_admit(g, s->tenant, &retry)) < 0 ||
        (long long)xexec_waiting(g, k) >= g->cfg.max_queued_executions) {
        e2bwire_exec_fini(&ex);
        return req_error_retry(r, rc == -EBUSY ? 503 : 429, retry,
                               "too many executions queued or held; retry later");
    }
    struct e2breq *q = calloc(1, sizeof(*q));
    xexec_t *x = q ? xexec_new(g, &r->caller, k) : NULL;
    if (!x) {
        free(q);
        e2bwire_exec_fini(&ex);
        return req_error_retry(r, 503, 1, "too many executions held; retry later");
    }
    struct xreq xq = {.code = ex.code, .store_history = true};
    ex.code = NULL; /* taken */
    xexec_set_request(x, &xq);
    q->kind = E2BREQ_RUN;
    q->r = r;
    q->last_ms = util_now_ms();
    list_append(&g->e2b->runs, &q->link);
    r->e2b = q;
    xexec_subscribe(x, &q->sub, 0, &run_ops);
    xexec_enqueue(x, k);
    lws_callback_on_writable(r->wsi);
}

/* ---- the sandbox plane: /contexts ---- */

static json_t *context_model(const char *id)
{
    return json_pack("{s:s, s:s, s:s}", "id", id, "language", "python", "cwd", E2BWIRE_HOME);
}

static void on_context(struct gw_req *r, kernel_t *k, int status)
{
    struct e2b *e = r->g->e2b;
    struct e2bsbx *s = sbx_by_ws(e, wspace_id(kernel_workspace(k)), r->caller.tenant);
    bool restart = strstr(r->fpath, "/restart") != NULL;
    if (!s) /* killed (DELETE, its timeout) meanwhile */
        return api_error(r, 502, "sandbox %s is not running", "(killed meanwhile)");
    size_t i = 0;
    while (i < s->nkernels && strcmp(s->kernels[i], r->kernel_id) != 0)
        i++;
    if (i == s->nkernels) /* DELETE /contexts/{id} meanwhile */
        return api_error(r, 409, "the context was deleted while it %s",
                         restart ? "restarted" : "started");
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) {
        if (i > 0) {
            memmove(s->kernels[i], s->kernels[i + 1],
                    (s->nkernels - i - 1) * sizeof(s->kernels[0]));
            s->nkernels--;
        }
        if (rc == -ECANCELED) /* its kernel shut down meanwhile, through another face */
            return api_error(r, 409, "the context's kernel was shut down while it %s",
                             restart ? "restarted" : "started");
        return api_error(r, 503, "the context's kernel failed to start");
    }
    if (apply_env(r->g, &r->caller, s, k) < 0)
        return api_error(r, 503, "the sandbox's envVars could not be applied; retry later");
    if (restart)
        return req_reply(r, 204, NULL);
    req_reply(r, 200, context_model(r->kernel_id));
}

static void sbx_contexts(struct gw_req *r, struct e2bsbx *s, const char *rest)
{
    gw_t *g = r->g;
    if (!rest[0] && r->method == HTTP_M_GET) {
        json_t *a = json_array();
        for (size_t i = 0; i < s->nkernels; i++)
            json_array_append_new(a, context_model(s->kernels[i]));
        return req_reply(r, 200, a);
    }
    if (!rest[0] && r->method == HTTP_M_POST) {
        json_t *body = req_json_body(r);
        if (!body)
            return;
        json_t *lang = json_object_get(body, "language"), *cwd = json_object_get(body, "cwd");
        bool ok = (!lang || json_is_null(lang) ||
                   (json_is_string(lang) && strcmp(json_string_value(lang), "python") == 0)) &&
                  (!cwd || json_is_null(cwd) ||
                   (json_is_string(cwd) && strcmp(json_string_value(cwd), E2BWIRE_HOME) == 0));
        json_decref(body);
        if (!ok)
            return api_error(r, 400, "only python contexts in " E2BWIRE_HOME " are offered");
        if (s->nkernels >= E2B_CONTEXTS_MAX)
            return api_error(r, 429, "a sandbox has at most %d contexts", E2B_CONTEXTS_MAX);
        json_t *req = json_pack("{s:s}", "workspace", s->ws_id);
        if (req && s->kspec[0])
            json_object_set_new(req, "name", json_string(s->kspec));
        if (req && s->env)
            json_object_set(req, "env", s->env);
        kernel_t *k;
        struct kops_error kerr;
        int rc = req ? kops_start(g, &r->caller, req, &k, &kerr) : -ENOMEM;
        json_decref(req);
        if (rc < 0)
            return api_error(r, req ? kerr.status : 500, "%s",
                             req ? kerr.message : "out of memory");
        snprintf(s->kernels[s->nkernels++], sizeof(s->kernels[0]), "%s", kernel_id(k));
        if (req_wait_kernel(r, k, on_context) < 0)
            on_context(r, k, 0);
        return;
    }
    /* {id} or {id}/restart */
    char id[UTIL_UUID_LEN + 1];
    size_t n = strcspn(rest, "/");
    const char *tail = rest + n;
    if (n == 0 || n > UTIL_UUID_LEN)
        return api_error(r, 404, "context not found");
    memcpy(id, rest, n);
    id[n] = '\0';
    size_t i = 0;
    while (i < s->nkernels && strcmp(s->kernels[i], id) != 0)
        i++;
    kernel_t *k = i < s->nkernels ? gw_kernel(g, id, s->tenant) : NULL;
    if (!k)
        return api_error(r, 404, "context %s not found", id);
    struct kops_error kerr;
    if (!tail[0] && r->method == HTTP_M_DELETE) {
        if (i == 0)
            return api_error(r, 400, "the default context ends with the sandbox");
        kops_shutdown(g, k, &kerr);
        memmove(s->kernels[i], s->kernels[i + 1], (s->nkernels - i - 1) * sizeof(s->kernels[0]));
        s->nkernels--;
        return req_reply(r, 204, NULL);
    }
    if (strcmp(tail, "/restart") == 0 && r->method == HTTP_M_POST) {
        int rc = kops_restart(g, k, &kerr);
        if (rc < 0 && kerr.status)
            return api_error(r, kerr.status, "%s", kerr.message);
        if (req_wait_kernel(r, k, on_context) < 0)
            req_reply(r, 204, NULL);
        return;
    }
    return api_error(r, 404, "not found");
}

/* ---- the sandbox plane: /files ---- */

static void put_free(struct e2breq *q)
{
    if (!q->up)
        return;
    files_put_cancel(&q->up->put);
    for (size_t i = 0; i < E2B_UPLOAD_FILES; i++)
        buf_fini(&q->up->data[i]);
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
        return api_error(r, rc == -ENOMEM || rc == -ENOSPC || rc == -EDQUOT ? 507 : 400, "%s: %s",
                         log_quote(qp, sizeof(qp), p, strlen(p)), strerror(-rc));
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

static int spa_cb(void *data,
                  const char *name,
                  const char *filename,
                  char *buf,
                  int len,
                  enum lws_spa_fileupload_states state)
{
    struct e2breq *q = data;
    switch (state) {
    case LWS_UFS_OPEN: {
        const char *p = q->up->has_qpath ? "" : filename ? filename : "";
        if (q->up->bad || strcmp(name, "file") != 0 || q->up->nitems >= E2B_UPLOAD_FILES ||
            (q->up->has_qpath && q->up->nitems >= 1)) {
            q->up->bad = true;
            return 0;
        }
        size_t i = q->up->nitems;
        if (q->up->has_qpath)
            memcpy(q->up->paths[i], q->up->qpath, sizeof(q->up->qpath));
        else if (e2bwire_path(p, strlen(p), q->up->paths[i], sizeof(q->up->paths[i])) <= 0)
            q->up->bad = true;
        q->up->in_file = !q->up->bad;
        return 0;
    }
    case LWS_UFS_CONTENT:
    case LWS_UFS_FINAL_CONTENT:
        if (q->up->in_file && len > 0 && buf &&
            buf_append(&q->up->data[q->up->nitems], buf, (size_t)len) < 0)
            q->up->bad = true;
        if (state == LWS_UFS_FINAL_CONTENT && q->up->in_file) {
            q->up->in_file = false;
            q->up->nitems++;
        }
        return 0;
    default:
        return 0;
    }
}

static void sbx_files_post(struct gw_req *r, wspace_t *w)
{
    char ct[200];
    if (lws_hdr_total_length(r->wsi, WSI_TOKEN_HTTP_CONTENT_TYPE) >= (int)sizeof(ct) ||
        lws_hdr_copy(r->wsi, ct, sizeof(ct), WSI_TOKEN_HTTP_CONTENT_TYPE) <= 0 ||
        strncmp(ct, "multipart/form-data", 19) != 0 || !strstr(ct, "boundary="))
        return api_error(r, 415, "POST /files takes multipart/form-data (\"file\" parts)");
    struct e2breq *q = calloc(1, sizeof(*q));
    if (!q)
        return api_error(r, 500, "out of memory");
    q->kind = E2BREQ_PUT;
    q->r = r;
    list_init(&q->link);
    if (!(q->up = calloc(1, sizeof(*q->up)))) {
        free(q);
        return api_error(r, 500, "out of memory");
    }
    for (size_t i = 0; i < E2B_UPLOAD_FILES; i++)
        buf_init(&q->up->data[i], (size_t)r->g->cfg.max_body_bytes);
    r->e2b = q;
    char buf[FPATH_MAX * 3 + 1];
    const char *p = lws_get_urlarg_by_name(r->wsi, "path=", buf, sizeof(buf));
    if (p) {
        if (e2bwire_path(p, strlen(p), q->up->qpath, sizeof(q->up->qpath)) <= 0)
            return api_error(r, 400, "path: only files under " E2BWIRE_HOME " are offered");
        q->up->has_qpath = true;
    }
    static const char *const params[] = {"path"};
    struct lwsac *ac = NULL;
    lws_spa_create_info_t si = {.param_names = params,
                                .count_params = 1,
                                .max_storage = 4096,
                                .opt_cb = spa_cb,
                                .opt_data = q,
                                .ac = &ac};
    struct lws_spa *spa = lws_spa_create_via_info(r->wsi, &si);
    if (!spa)
        return api_error(r, 500, "out of memory");
    int rc = r->body.len ? lws_spa_process(spa, r->body.data, (int)r->body.len) : 0;
    lws_spa_finalize(spa);
    lws_spa_destroy(spa);
    if (rc < 0 || q->up->bad || q->up->in_file || q->up->nitems == 0)
        return api_error(r, 400,
                         "a multipart/form-data body of 1 to %d \"file\" parts, each "
                         "named by a path under " E2BWIRE_HOME " (or by ?path=), is "
                         "expected",
                         E2B_UPLOAD_FILES);
    for (size_t i = 0; i < q->up->nitems; i++)
        q->up->items[i] =
            (struct files_item){.path = q->up->paths[i],
                                .data = q->up->data[i].data ? q->up->data[i].data : "",
                                .len = q->up->data[i].len};
    size_t failed = 0;
    rc = files_put(w, q->up->items, q->up->nitems, put_done, q, &q->up->put, &failed);
    if (rc < 0)
        return api_error(r, rc == -ENOMEM ? 507 : 500, "cannot write the files: %s", strerror(-rc));
}

static void sbx_files(struct gw_req *r, struct e2bsbx *s)
{
    wspace_t *w = kmgr_workspace(r->g->km, s->ws_id);
    if (!w)
        return api_error(r, 502, "the sandbox's workspace is gone");
    wspace_touch(w);
    if (r->method == HTTP_M_POST)
        return sbx_files_post(r, w);
    char buf[FPATH_MAX * 3 + 1], path[FPATH_MAX + 1], q[160];
    const char *p = lws_get_urlarg_by_name(r->wsi, "path=", buf, sizeof(buf));
    if (!p)
        return api_error(r, 400, "the path query parameter is required");
    int rc = e2bwire_path(p, strlen(p), path, sizeof(path));
    if (rc <= 0)
        return api_error(r, 400, "%s: only files under " E2BWIRE_HOME " are offered",
                         log_quote(q, sizeof(q), p, strlen(p)));
    unsigned char *data;
    size_t len;
    size_t max = (size_t)r->g->cfg.max_download_bytes;
    rc = files_read(w, path, max < E2B_READ_MAX ? max : E2B_READ_MAX, &data, &len);
    if (rc == -ENOENT)
        return api_error(r, 404, "file not found: %s", log_quote(q, sizeof(q), p, strlen(p)));
    if (rc == -EISDIR)
        return api_error(r, 400, "%s is not a file", log_quote(q, sizeof(q), p, strlen(p)));
    if (rc == -ELOOP || rc == -EXDEV || rc == -ENOTDIR)
        return api_error(r, 409,
                         "%s: a symbolic link, mount point or file is in the way (never "
                         "followed)",
                         log_quote(q, sizeof(q), p, strlen(p)));
    if (rc == -EFBIG)
        return api_error(r, 413,
                         "%s is over %zu bytes (the smaller of --max-download-bytes and 32 MiB "
                         "here; larger files: kgw's streamed GET /download, docs/files.md)",
                         log_quote(q, sizeof(q), p, strlen(p)),
                         max < E2B_READ_MAX ? max : (size_t)E2B_READ_MAX);
    if (rc < 0)
        return api_error(r, 500, "%s: %s", log_quote(q, sizeof(q), p, strlen(p)), strerror(-rc));
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
    json_t *end = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
    char *s = end ? json_dumps(end, JSON_COMPACT) : NULL;
    json_decref(end);
    buf_t b;
    buf_init(&b, SIZE_MAX);
    if (!s || e2bwire_envelope_write(&b, E2BWIRE_ENV_END, s, strlen(s)) < 0) {
        free(s);
        buf_fini(&b);
        return api_error(r, 500, "out of memory");
    }
    free(s);
    req_reply_data(r, "application/connect+json", b.data, b.len); /* takes b's data */
}

/* ---- the sandbox plane: process.Process on kernelmgr/kcmd.h ---- */

static bool header(struct lws *wsi, const char *name, char *out, size_t outsz);

/* Queues one envelope (a message, or with E2BWIRE_ENV_END the end of the stream). */
static void proc_send(struct e2breq *q, const char *json, uint8_t flags)
{
    struct e2bproc *p = q->proc;
    if (e2bwire_envelope_write(&p->pend, flags, json, strlen(json)) < 0)
        log_warn("e2b: command %u: out of memory for its events", p->handle);
    q->last_ms = util_now_ms();
    lws_callback_on_writable(q->r->wsi);
}

static void proc_output(void *ud, int fd, const void *buf, size_t n)
{
    struct e2breq *q = ud;
    struct e2bproc *p = q->proc;
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
    proc_send(q, msg, 0);
    free(msg);
    if (!p->paused && p->pend.len - p->pend_off > E2B_PROC_HELD) {
        p->paused = true; /* the reader is slow: the command waits on its full pipe */
        kcmd_pause(p->cmd, true);
    }
}

static void proc_end(void *ud, const struct kcmd_end *e)
{
    struct e2breq *q = ud;
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
        proc_send(q, s, 0);
    free(s);
    proc_send(q, "{}", E2BWIRE_ENV_END);
    q->proc->ended = true;
    log_info("e2b: command %u: %s", q->proc->handle, status);
}

static unsigned proc_handles = 1000;

static void proc_start(struct gw_req *r, struct e2bsbx *s)
{
    gw_t *g = r->g;
    char msg[256];
    uint8_t flags;
    size_t off, n, used;
    int rc = e2bwire_envelope_parse((const uint8_t *)(r->body.data ? r->body.data : ""),
                                    r->body.len, E2BWIRE_ENVELOPE_MAX, &flags, &off, &n, &used);
    if (rc < 0 || used != r->body.len)
        return connect_stream_error(r, "invalid_argument",
                                    "one Connect envelope (uncompressed) holding a StartRequest "
                                    "is expected");
    struct e2bwire_start st;
    rc = e2bwire_start_parse(r->body.data + off, n, &st, msg, sizeof(msg));
    if (rc < 0)
        return connect_stream_error(r, e2bwire_code_name(rc), msg);
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
    snprintf(pwd, sizeof(pwd), "PWD=" E2BWIRE_HOME "%s%s", st.cwd[0] ? "/" : "", st.cwd);
    if (g->cfg.sandbox)
        env[ne++] = pwd;
    for (size_t i = 0; st.env[i]; i++)
        env[ne++] = st.env[i];
    env[ne] = NULL;
    char cwd[FPATH_MAX + 512];
    if (st.cwd[0])
        snprintf(cwd, sizeof(cwd), "%s/%s", g->cfg.sandbox ? SBX_WORKSPACE_PATH : wspace_path(w),
                 st.cwd);
    struct e2breq *q = calloc(1, sizeof(*q));
    struct e2bproc *p = q ? calloc(1, sizeof(*p)) : NULL;
    if (!p) {
        free(q);
        e2bwire_start_fini(&st);
        for (size_t i = 0; i < nb; i++)
            free(envbuf[i]);
        return connect_stream_error(r, "resource_exhausted", "out of memory");
    }
    q->kind = E2BREQ_PROC;
    q->r = r;
    q->proc = p;
    list_init(&q->link);
    buf_init(&p->pend, SIZE_MAX);
    p->handle = proc_handles++;
    snprintf(p->sbx_id, sizeof(p->sbx_id), "%s", s->id);
    p->keepalive_ms = 50000;
    char ka[16];
    if (header(r->wsi, "keepalive-ping-interval:", ka, sizeof(ka))) {
        long v = strtol(ka, NULL, 10);
        if (v >= 1 && v <= 3600)
            p->keepalive_ms = (uint64_t)v * 1000;
    }
    struct kcmd_opts o = {.argv = st.argv, .cwd = st.cwd[0] ? cwd : NULL, .env = env};
    struct kcmd_cbs cb = {.output = proc_output, .end = proc_end, .ud = q};
    /* the request holds the stream before the command can say anything */
    r->e2b = q;
    list_append(&g->e2b->runs, &q->link);
    rc = kcmd_start(k, &o, &cb, &p->cmd);
    e2bwire_start_fini(&st);
    for (size_t i = 0; i < nb; i++)
        free(envbuf[i]);
    if (rc < 0) {
        list_remove(&q->link);
        r->e2b = NULL;
        buf_fini(&p->pend);
        free(p);
        free(q);
        snprintf(msg, sizeof(msg), "the command could not start: %s", strerror(-rc));
        return connect_stream_error(r, rc == -EAGAIN ? "resource_exhausted" : e2bwire_code_name(rc),
                                    msg);
    }
    log_info("e2b: sandbox=%s: command %u started", s->id, p->handle);
    snprintf(msg, sizeof(msg), "{\"event\":{\"start\":{\"pid\":%u}}}", p->handle);
    /* first, before any output the start may already have queued */
    buf_t first;
    buf_init(&first, SIZE_MAX);
    if (e2bwire_envelope_write(&first, 0, msg, strlen(msg)) == 0 &&
        buf_append(&first, p->pend.data ? p->pend.data : "", p->pend.len) == 0) {
        buf_fini(&p->pend);
        p->pend = first;
    } else {
        buf_fini(&first);
    }
    q->last_ms = util_now_ms();
    lws_callback_on_writable(r->wsi);
}

static int proc_write(struct gw_req *r, struct e2breq *q)
{
    struct e2bproc *p = q->proc;
    if (!q->headers_sent) {
        if (http_write_head(r, 200, "application/connect+json", NULL, NULL, -1) < 0)
            return -1;
        q->headers_sent = true;
    }
    while (!lws_send_pipe_choked(r->wsi)) {
        static const char room[LWS_PRE + 24];
        size_t left = p->pend.len - p->pend_off;
        size_t take = left < E2B_BATCH_BYTES ? left : E2B_BATCH_BYTES;
        bool last = p->ended && take == left;
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
        rc |= buf_append(&b, p->pend.data + p->pend_off, take);
        rc = rc < 0 ? rc : write_chunk(r->wsi, &b, sizeof(room), last);
        buf_fini(&b);
        if (rc < 0)
            return -1;
        p->pend_off += take;
        if (p->pend_off == p->pend.len) {
            buf_reset(&p->pend);
            p->pend_off = 0;
        }
        if (last)
            return 1;
    }
    if (p->paused && p->pend.len - p->pend_off <= E2B_PROC_HELD / 2) {
        p->paused = false;
        kcmd_pause(p->cmd, false);
    }
    if (p->pend.len > p->pend_off || lws_partial_buffered(r->wsi)) {
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
    struct e2breq *q;
    list_for_each(q, &r->g->e2b->runs, link)
    {
        if (q->kind == E2BREQ_PROC && q->proc->handle == pid &&
            strcmp(q->proc->sbx_id, s->id) == 0 && !q->proc->ended) {
            int rc = kcmd_signal(q->proc->cmd, sig);
            if (rc < 0 && rc != -ESRCH)
                return connect_error(r, e2bwire_code_name(rc), strerror(-rc));
            return req_reply(r, 200, json_object());
        }
    }
    snprintf(msg, sizeof(msg), "process %u not found", pid);
    return connect_error(r, "not_found", msg);
}

static void sbx_rpc(struct gw_req *r, struct e2bsbx *s, const char *service, const char *method)
{
    bool stream = connect_streaming(r->wsi);
    char msg[256];
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
    if (strcmp(service, "process.Process") == 0 && strcmp(method, "SendSignal") == 0 && !stream)
        return proc_signal(r, s);
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
    int nl = (int)strlen(name);
    int n = lws_hdr_custom_length(wsi, name, nl);
    return n > 0 && n < (int)outsz && lws_hdr_custom_copy(wsi, out, (int)outsz, name, nl) >= 0;
}

static bool token_ok(const char *presented, const char *want)
{
    size_t n = strlen(want);
    return strlen(presented) == n && sodium_memcmp(presented, want, n) == 0;
}

void e2b_sbx(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    char id[UTIL_UUID_LEN + 2], tok[2 * E2B_TOKEN_BYTES + 2];
    const char *path = r->fpath;
    if (!header(r->wsi, "e2b-sandbox-id:", id, sizeof(id)))
        return api_error(r, 400,
                         "the E2b-Sandbox-Id header names the sandbox (set "
                         "E2B_SANDBOX_URL to this gateway's /e2b/sbx)");
    struct e2bsbx *s = sbx_live(e, sbx_find(e, id));
    if (!s || !s->ready)
        return api_error(r, 502, "sandbox %s is not running", s ? s->id : "(unknown)");
    bool authed =
        (header(r->wsi, "x-access-token:", tok, sizeof(tok)) && token_ok(tok, s->envd_token)) ||
        (header(r->wsi, "e2b-traffic-access-token:", tok, sizeof(tok)) &&
         token_ok(tok, s->traffic_token));
    sodium_memzero(tok, sizeof(tok));
    if (strcmp(path, "health") == 0 && r->method == HTTP_M_GET)
        return req_reply(r, 204, NULL);
    if (!authed) {
        log_info("e2b: sandbox=%s: a request without its access token refused", s->id);
        return api_error(r, 401, "this sandbox's access token is required (X-Access-Token)");
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
    return api_error(r, 404, "%s is not offered on the sandbox plane (docs/e2b.md)",
                     r->route.rest_len ? "this route" : "/");
}

int e2b_write(struct gw_req *r)
{
    struct e2breq *q = r->e2b;
    if (q && q->kind == E2BREQ_PROC)
        return proc_write(r, q);
    if (!q || q->kind != E2BREQ_RUN)
        return 0;
    return run_write(r, q);
}

void e2b_req_fini(struct gw_req *r)
{
    struct e2breq *q = r->e2b;
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
        if (!q->proc->ended)
            log_info("e2b: command %u: the client went away; killed", q->proc->handle);
        kcmd_release(&q->proc->cmd); /* kills it if it still runs; no callback after */
        buf_fini(&q->proc->pend);
        free(q->proc);
        list_remove(&q->link);
    } else {
        put_free(q);
    }
    free(q);
    r->e2b = NULL;
}
