/* The Model Context Protocol server (docs/mcp.md). One endpoint, /mcp, speaks MCP's Streamable
 * HTTP transport: a POST carries one JSON-RPC message (protocol/jrpc.c checks its envelope); a
 * request is answered with one JSON document, or with an SSE stream once it sends progress
 * before its result; notifications and responses get 202. initialize opens a session
 * (Mcp-Session-Id), which owns at most one kernel, started on the first tool call that needs
 * it and shut down when the session ends (DELETE, or --mcp-idle-timeout without requests).
 * The tools and the answers they make are gateway/mcptools.c's (mcp_int.h). */
#include "gateway/mcp.h"

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
#include "gateway/mcpnamed.h"
#include "gateway/xcmd.h"
#include "gateway/xexec.h"
#include "protocol/jrpc.h"
#include "protocol/jschema.h"
#include "protocol/jstr.h"

#include "gateway/mcp_int.h"


/* The revisions spoken, newest first: the newest is offered to a client asking for another. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};

/* ---- sessions ---- */

static struct mcp_session *session_find(struct mcp *m, const char *id, const char *tenant)
{
    struct mcp_session *s;
    list_for_each(s, &m->sessions, link)
    {
        if (sodium_memcmp(s->id, id, MCP_SID_LEN) == 0 && !strcmp(s->tenant, tenant))
            return s;
    }
    return NULL;
}

static void session_end(struct mcp *m, struct mcp_session *s, const char *why)
{
    struct mcp_call *c, *tmp;
    list_for_each_safe(c, tmp, &s->calls, slink)
    {
        list_remove(&c->slink);
        c->s = NULL;
    }
    kernel_t *k = s->kernel_id[0] ? gw_kernel(m->g, s->kernel_id, s->tenant) : NULL;
    struct kerr err;
    if (k && kernel_state(k) != KERNEL_TERMINATING && kernel_state(k) != KERNEL_DEAD)
        kops_shutdown(m->g, k, &err);
    if (s->named) /* its kernel stays for the name's next session */
        mcpnamed_release(m->named, s->named);
    log_info("mcp: session=%.8s tenant=%s kernel=%s%s%s: ended (%s)", s->id, s->tenant,
             s->named          ? s->named->kernel_id
             : s->kernel_id[0] ? s->kernel_id
                               : "none",
             s->named ? ", kept: named " : "", s->named ? s->named->name : "", why);
    if (audit_enabled())
        audit_event("mcp_session_end", "s:s, s:s, s:s, s:s", "tenant", s->tenant, "session", s->id,
                    "kernel", s->kernel_id, "reason", why);
    list_remove(&s->link);
    m->count--;
    free(s);
}

static void on_sweep(void *data)
{
    struct mcp *m = data;
    uint64_t now = util_now_ms(), idle = (uint64_t)m->g->cfg.mcp_idle_timeout * 1000;
    struct mcp_session *s, *tmp;
    list_for_each_safe(s, tmp, &m->sessions, link)
    {
        if (list_empty(&s->calls) && s->last_ms + idle <= now)
            session_end(m, s, "idle");
    }
    mcpnamed_sweep(m->named, idle);
    m->g->loop.evl.timer_arm(&m->g->loop.evl, m->sweep, MCP_SWEEP_MS);
}

/* ---- methods ---- */

static bool supported(const char *v)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(versions); i++)
        if (!strcmp(v, versions[i]))
            return true;
    return false;
}

static void m_initialize(struct mcp_call *c, json_t *params)
{
    gw_t *g = c->r->g;
    struct mcp *m = g->mcp;
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (!asked)
        return mcp__reply_error(c, 200, JRPC_INVALID_PARAMS, "'protocolVersion' must be a string");
    size_t mine = 0;
    struct mcp_session *o, *lru = NULL;
    list_for_each(o, &m->sessions, link)
    {
        if (strcmp(o->tenant, c->r->caller.tenant) != 0)
            continue;
        mine++;
        if (o->named && list_empty(&o->calls) && (!lru || o->last_ms < lru->last_ms))
            lru = o;
    }
    /* A session of a named kernel holds nothing the name does not (per-call clients often
     * leave theirs to idle out): at the limit, the one idle the longest makes room. */
    if (mine >= MCP_TENANT_MAX && lru) {
        session_end(m, lru, "evicted: the tenant's session limit was reached");
        mine--;
    }
    if (mine >= MCP_TENANT_MAX)
        return mcp__reply_error(c, 429, JRPC_INTERNAL_ERROR,
                           "this tenant has %d MCP sessions, the most at once: end some "
                           "(DELETE /mcp) or wait for idle ones to end",
                           MCP_TENANT_MAX);
    if (m->count >= MCP_SESSIONS_MAX)
        return mcp__reply_error(c, 503, JRPC_INTERNAL_ERROR, "too many MCP sessions; retry later");
    struct mcp_session *s = calloc(1, sizeof(*s));
    if (!s)
        return mcp__reply_error(c, 500, JRPC_INTERNAL_ERROR, "out of memory");
    int rc = c->kname[0] ? mcpnamed_acquire(m->named, c->r->caller.tenant, c->kname,
                                            g->cfg.mcp_named_kernels, &s->named)
                         : 0;
    if (rc < 0) {
        free(s);
        if (rc == -EDQUOT)
            return mcp__reply_error(c, 429, JRPC_INTERNAL_ERROR,
                               "this tenant has %lld named kernels, the most "
                               "(--mcp-named-kernels): use one of their names, or shut one "
                               "down (DELETE /api/kernels/{id}), or wait for an idle one to end",
                               g->cfg.mcp_named_kernels);
        return mcp__reply_error(c, 500, JRPC_INTERNAL_ERROR, "out of memory");
    }
    shardid_mint(s->id); /* a router sends the session's requests to this shard by it */
    snprintf(s->tenant, sizeof(s->tenant), "%s", c->r->caller.tenant);
    snprintf(s->version, sizeof(s->version), "%s", supported(asked) ? asked : versions[0]);
    s->last_ms = util_now_ms();
    list_init(&s->calls);
    list_append(&m->sessions, &s->link);
    m->count++;
    snprintf(c->sid, sizeof(c->sid), "%s", s->id);
    log_info("mcp: session=%.8s tenant=%s: started (protocol %s)%s%s", s->id, s->tenant, s->version,
             s->named ? ", named kernel " : "", s->named ? s->named->name : "");
    if (audit_enabled())
        audit_event("mcp_session_start", "s:s, s:s, s:s, s:s, s:s?", "tenant", s->tenant, "session",
                    s->id, "protocol", s->version, "addr", c->r->caller.addr, "kernel_name",
                    s->named ? s->named->name : NULL);
    mcp__reply(c, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", s->version,
                       "capabilities", "tools", "listChanged", 0, "serverInfo", "name", "kgw",
                       "title", "kgw kernel gateway", "version", KGW_VERSION, "instructions",
                       s->named ? "Run Python with execute_code: state (variables, imports, "
                                  "files) persists across calls, and across MCP sessions naming "
                                  "the same kernel (Kgw-Kernel-Name). Files live in the kernel's "
                                  "workspace (list_files, read_file, write_file)."
                                : "Run Python with execute_code: state (variables, imports, "
                                  "files) persists across calls in this session. Files live in "
                                  "the session's workspace (list_files, read_file, "
                                  "write_file)."));
}

static void m_ping(struct mcp_call *c, json_t *params)
{
    mcp__reply(c, json_object());
}

/* docs/mcp_tools.json's entries; before 2025-06-18 without outputSchema (no structured
 * content). */
static void m_tools_list(struct mcp_call *c, json_t *params)
{
    json_t *tools = c->r->g->mcp->tools;
    if (strcmp(c->s->version, "2025-06-18") >= 0)
        return mcp__reply(c, json_pack("{s:O}", "tools", tools));
    json_t *list = json_array(), *d;
    size_t i;
    json_array_foreach(tools, i, d)
    {
        json_t *o = json_copy(d);
        json_object_del(o, "outputSchema");
        json_array_append_new(list, o);
    }
    mcp__reply(c, json_pack("{s:o}", "tools", list));
}

/* Checks a tool's arguments against its inputSchema, then its own check; false after
 * answering -32602 with the argument and the rule it breaks. */
static bool check_args(struct mcp_call *c, const struct mcp_tool *t, const json_t *schema,
                       json_t *args)
{
    struct jschema_err e;
    if (jschema_validate(schema, args, &e) < 0) {
        if (e.where[0])
            mcp__reply_error(c, 200, JRPC_INVALID_PARAMS, "%s: argument \"%s\" %s", t->name,
                             e.where, e.what);
        else
            mcp__reply_error(c, 200, JRPC_INVALID_PARAMS, "%s: the arguments %s", t->name,
                             e.what);
        return false;
    }
    return !t->check || t->check(c, t, args);
}

static void kernel_ready(struct gw_req *r, kernel_t *k, int status)
{
    struct mcp_call *c = r->face;
    if (c->cancelled) /* while its kernel started */
        return mcp__reply_empty(c, 202);
    struct kerr err;
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) { /* shut down meanwhile (the session's end, a DELETE), or it failed */
        kops_waited_error(r->g, k, KERR_START, rc, &err);
        return mcp__tool_fail(c, "the session's kernel could not be used: %s", err.message);
    }
    if (kernel_state(k) != KERNEL_RUNNING)
        return mcp__tool_fail(c, "the session's kernel failed to start");
    c->tool->run(c, k);
}

/* A new kernel for the session's named kernel (its first, or one after the last ended), in the
 * workspace of the last one while that is kept (--workspace-grace): the result starts with a
 * note saying so, as the variables the client may expect are not there. -1 after answering. */
static int named_start(struct mcp_call *c, kernel_t **ret_k)
{
    gw_t *g = c->r->g;
    struct mcpnamed_entry *e = c->s->named;
    struct kerr err;
    kernel_t *k;
    bool again = e->starts > 0, same_ws = false;
    int rc = -ESRCH;
    if (e->workspace[0]) {
        json_t *req = json_pack("{s:s}", "workspace", e->workspace);
        rc = req ? kops_start(g, &c->r->caller, req, &k, &err) : -ENOMEM;
        json_decref(req);
        same_ws = rc == 0;
    }
    if (rc == -ESRCH) { /* (none, or its grace is over) */
        json_t *req = json_object();
        rc = kops_start(g, &c->r->caller, req, &k, &err);
        json_decref(req);
    }
    if (rc < 0) {
        mcp__tool_fail(c, "the named kernel '%s' could not be started: %s", e->name,
                  rc == -ENOMEM ? "out of memory" : err.message);
        return -1;
    }
    mcpnamed_set_kernel(e, k);
    log_info("mcp: session=%.8s: named kernel '%s' of tenant=%s: kernel=%s started%s", c->s->id,
             e->name, e->tenant, e->kernel_id, again ? " (the last one ended)" : "");
    char note[400];
    if (again)
        snprintf(note, sizeof(note),
                 "[kgw] the kernel named '%s' had ended (idle, shut down, or it died): a new one "
                 "was started, so variables and imports from earlier calls are gone; %s\n",
                 e->name, same_ws ? "workspace files are kept" : "its workspace is new (empty)");
    else
        snprintf(note, sizeof(note),
                 "[kgw] a new kernel named '%s' was started; later MCP sessions sending "
                 "Kgw-Kernel-Name: %s use it too\n",
                 e->name, e->name);
    json_array_append_new(c->content, json_pack("{s:s, s:s}", "type", "text", "text", note));
    *ret_k = k;
    return 0;
}

static void m_tools_call(struct mcp_call *c, json_t *params)
{
    gw_t *g = c->r->g;
    struct mcp_session *s = c->s;
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    json_t *def = NULL;
    const struct mcp_tool *t = mcp__tool_find(g->mcp, name, &def);
    if (!name)
        return mcp__reply_error(c, 200, JRPC_INVALID_PARAMS, "'name' must be a string");
    if (!t)
        return mcp__reply_error(c, 200, JRPC_INVALID_PARAMS, "unknown tool: '%.64s'", name);
    if (args && !json_is_object(args))
        return mcp__reply_error(c, 200, JRPC_INVALID_PARAMS, "'arguments' must be an object");
    json_t *none = args ? NULL : json_object();
    if (!check_args(c, t, json_object_get(def, "inputSchema"), args ? args : none)) {
        json_decref(none);
        return;
    }
    c->args = args ? json_incref(args) : none;
    c->tool = t;
    c->content = json_array();
    json_t *tok = json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (json_is_string(tok) || json_is_integer(tok))
        c->token = json_incref(tok);
    list_append(&s->calls, &c->slink);
    if (audit_enabled())
        audit_event("mcp_tool_call", "s:s, s:s, s:s", "tenant", s->tenant, "session", s->id, "tool",
                    t->name);

    if (s->named)
        mcpnamed_touch(s->named);
    const char *kid = s->named ? s->named->kernel_id : s->kernel_id;
    kernel_t *k = kid[0] ? gw_kernel(g, kid, s->tenant) : NULL;
    if (k && (kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD))
        k = NULL;
    if (!k && s->named) {
        if (named_start(c, &k) < 0)
            return;
    } else if (!k) {
        struct kerr err;
        json_t *req = json_object();
        int rc = kops_start(g, &c->r->caller, req, &k, &err);
        json_decref(req);
        if (rc < 0)
            return mcp__tool_fail(c, "the session's kernel could not be started: %s", err.message);
        snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", kernel_id(k));
        log_info("mcp: session=%.8s: kernel=%s started", s->id, s->kernel_id);
    }
    lws_set_timeout(c->r->wsi, NO_PENDING_TIMEOUT, 0);
    if (kernel_state(k) == KERNEL_RUNNING)
        return t->run(c, k);
    if (req_wait_kernel(c->r, k, kernel_ready) < 0)
        kernel_ready(c->r, k, 0);
}

/* The methods: a fixed table, sorted. */
static const struct {
    const char *name;
    void (*fn)(struct mcp_call *c, json_t *params);
    bool session; /* needs one */
} methods[] = {
    {"initialize", m_initialize, false},
    {"ping", m_ping, true},
    {"tools/call", m_tools_call, true},
    {"tools/list", m_tools_list, true},
};

static void notify(struct mcp_call *c, const struct jrpc_msg *msg)
{
    if (!strcmp(msg->method, "notifications/cancelled")) {
        json_t *id = json_object_get(msg->params, "requestId");
        struct mcp_call *o;
        list_for_each(o, &c->s->calls, slink)
        {
            if (id && json_equal(o->id, id) && !o->cancelled) {
                o->cancelled = true;
                log_info("mcp: session=%.8s: a tool call was cancelled by the client", c->s->id);
                if (o->sub.x)
                    xexec_cancel(o->sub.x);
                if (o->cmd)
                    xcmd_run_cancel(c->r->g, o->cmd);
                break;
            }
        }
    }
    mcp__reply_empty(c, 202);
}

/* ---- the transport ---- */

static bool origin_ok(struct gw_req *r)
{
    char origin[256];
    const char *allow = r->g->cfg.allow_origin;
    int n = lws_hdr_total_length(r->wsi, WSI_TOKEN_ORIGIN);
    if (n <= 0)
        return true; /* not a browser */
    if (n >= (int)sizeof(origin) ||
        lws_hdr_copy(r->wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) < 0)
        return false;
    return allow && allow[0] && (!strcmp(allow, "*") || !strcmp(allow, origin));
}

/* A header's value into out: 1, 0 when absent, -1 when longer than out can hold. */
static int header(struct gw_req *r, const char *name, char *out, size_t sz)
{
    int n = lws_hdr_custom_length(r->wsi, name, (int)strlen(name));
    if (n <= 0)
        return 0;
    if (n >= (int)sz || lws_hdr_custom_copy(r->wsi, out, (int)sz, name, (int)strlen(name)) < 0)
        return -1;
    return 1;
}

/* A standard header's value into out: 1, 0 when absent, -1 when longer than out holds. */
static int header_token(struct gw_req *r, enum lws_token_indexes t, char *out, size_t sz)
{
    int n = lws_hdr_total_length(r->wsi, t);
    if (n <= 0)
        return 0;
    if (n >= (int)sz || lws_hdr_copy(r->wsi, out, (int)sz, t) < 0)
        return -1;
    return 1;
}

/* Whether an Accept header names type (or a wildcard covering it). q-values are not weighed:
 * a client that names a type takes it. */
static bool media_ok(const char *accept, const char *type)
{
    char wild[64];
    const char *slash = strchr(type, '/');
    snprintf(wild, sizeof(wild), "%.*s/*", (int)(slash - type), type);
    return strcasestr(accept, type) || strcasestr(accept, wild) || strstr(accept, "*/*");
}

/* The Kgw-Kernel-Name header into c->kname (checked: IDENT_KNAME); -1 after answering 400. */
static int kname_header(struct mcp_call *c)
{
    char v[IDENT_KNAME_MAX + 2];
    int h = header(c->r, "kgw-kernel-name:", v, sizeof(v));
    if (h == 0)
        return 0;
    if (h < 0 || !ident_str_ok(v, IDENT_KNAME)) {
        mcp__reply_error(c, 400, MCP_ERR_TRANSPORT,
                    "invalid Kgw-Kernel-Name: give 1 to %d of A-Z a-z 0-9 . _ -, the first "
                    "not . or -",
                    IDENT_KNAME_MAX);
        return -1;
    }
    if (c->r->g->cfg.mcp_named_kernels <= 0) {
        mcp__reply_error(c, 400, MCP_ERR_TRANSPORT,
                    "named kernels (Kgw-Kernel-Name) are off on this gateway "
                    "(--mcp-named-kernels=0)");
        return -1;
    }
    snprintf(c->kname, sizeof(c->kname), "%s", v);
    return 0;
}

void mcp_handle(struct gw_req *r)
{
    gw_t *g = r->g;
    struct mcp *m = g->mcp;
    char ver[MCP_VERSION_MAX], sid[MCP_SID_LEN + 2];
    struct mcp_call *c = calloc(1, sizeof(*c));
    if (!c)
        return req_error(r, 500, "out of memory");
    c->r = r;
    c->status = 200;
    buf_init(&c->out, SIZE_MAX);
    buf_init(&c->held, SIZE_MAX);
    buf_init(&c->items, SIZE_MAX);
    buf_init(&c->text, SIZE_MAX);
    list_init(&c->slink);
    r->face = c;
    if (!origin_ok(r))
        return mcp__reply_error(c, 403, MCP_ERR_TRANSPORT,
                           "Origin not allowed (DNS rebinding protection): start kgw with "
                           "--allow-origin for browser clients");
    int hv = header(r, "mcp-protocol-version:", ver, sizeof(ver));
    if (hv < 0 || (hv > 0 && !supported(ver)))
        return mcp__reply_error(c, 400, MCP_ERR_TRANSPORT,
                           "unsupported MCP-Protocol-Version: supported are %s, %s and %s",
                           versions[0], versions[1], versions[2]);
    int hs = header(r, "mcp-session-id:", sid, sizeof(sid));
    struct mcp_session *s =
        hs > 0 && strlen(sid) == MCP_SID_LEN ? session_find(m, sid, r->caller.tenant) : NULL;
    if (kname_header(c) < 0)
        return;
    if (s && c->kname[0] && (!s->named || strcmp(s->named->name, c->kname) != 0))
        return mcp__reply_error(c, 400, MCP_ERR_TRANSPORT,
                           "Kgw-Kernel-Name differs from the one the session was initialized "
                           "with: a session keeps its kernel; initialize a new one");
    if (r->method == HTTP_M_DELETE) {
        if (hs == 0)
            return mcp__reply_error(c, 400, MCP_ERR_TRANSPORT, "Mcp-Session-Id header required");
        if (!s)
            return mcp__reply_error(c, 404, MCP_ERR_NO_SESSION, "no such MCP session");
        session_end(m, s, "deleted by the client");
        return mcp__reply_empty(c, 204);
    }
    char accept[MCP_HEADER_MAX], ctype[MCP_HEADER_MAX];
    int ha = header_token(r, WSI_TOKEN_HTTP_ACCEPT, accept, sizeof(accept));
    bool json_ok = ha <= 0 || media_ok(accept, "application/json"),
         sse_ok = ha <= 0 || media_ok(accept, "text/event-stream");
    if (!json_ok && !sse_ok)
        return mcp__reply_error(c, 406, MCP_ERR_TRANSPORT,
                           "Not Acceptable: accept application/json and text/event-stream");
    int hc = header_token(r, WSI_TOKEN_HTTP_CONTENT_TYPE, ctype, sizeof(ctype));
    if (hc != 0 && (hc < 0 || strncasecmp(ctype, "application/json", 16) != 0 ||
                    (ctype[16] && ctype[16] != ';' && ctype[16] != ' ')))
        return mcp__reply_error(c, 415, MCP_ERR_TRANSPORT,
                           "Unsupported Media Type: the body must be application/json");
    c->no_sse = !sse_ok;
    struct jrpc_msg msg;
    struct jrpc_err err;
    if (jrpc_parse(r->body.data ? r->body.data : "", r->body.len, (size_t)g->cfg.max_body_bytes,
                   &msg, &err) < 0) {
        c->id = err.id;
        g->stats.refused[GW_REFUSED_BAD_INPUT]++;
        return mcp__reply_error(c, 400, (int)err.code, "%s", err.message);
    }
    c->id = msg.id ? json_incref(msg.id) : NULL;
    bool init = msg.kind == JRPC_REQUEST && !strcmp(msg.method, "initialize");
    if (!init && hs == 0) {
        jrpc_fini(&msg);
        return mcp__reply_error(c, 400, MCP_ERR_TRANSPORT,
                           "Mcp-Session-Id header required: send initialize first");
    }
    if (!init && !s) {
        jrpc_fini(&msg);
        return mcp__reply_error(c, 404, MCP_ERR_NO_SESSION,
                           "no such MCP session (it ended, or was idle too long): initialize "
                           "again");
    }
    if (s) {
        s->last_ms = util_now_ms();
        c->s = s;
        snprintf(c->sid, sizeof(c->sid), "%s", s->id);
    }
    if (msg.kind != JRPC_REQUEST) {
        if (msg.kind == JRPC_NOTIFICATION && s)
            notify(c, &msg);
        else
            mcp__reply_empty(c, 202);
        jrpc_fini(&msg);
        return;
    }
    c->sse = !json_ok; /* a client taking only event streams gets every answer as one */
    size_t i;
    for (i = 0; i < UTIL_ARRAY_SIZE(methods); i++)
        if (!strcmp(methods[i].name, msg.method))
            break;
    if (i == UTIL_ARRAY_SIZE(methods)) {
        char q[160];
        log_quote(q, sizeof(q), msg.method, strlen(msg.method));
        mcp__reply_error(c, 200, JRPC_METHOD_NOT_FOUND, "method not found: %s", q);
    } else if (init) {
        c->s = NULL; /* a new session */
        methods[i].fn(c, msg.params);
    } else {
        methods[i].fn(c, msg.params);
    }
    jrpc_fini(&msg);
}

static int write_head(struct mcp_call *c, const char *ctype, long long length)
{
    if (http_write_head(c->r, c->status, ctype, c->sid[0] ? "mcp-session-id:" : NULL, c->sid,
                        length) < 0)
        return -1;
    c->head_sent = true;
    return 0;
}

/* The next bytes of c->out (at most MCP_WRITE_BYTES) as one chunk, and the last chunk after
 * them when last and they are out's end. 1: all of out is written. */
static int write_chunk(struct mcp_call *c, bool last)
{
    size_t len = c->out.len - c->out_off;
    len = len > MCP_WRITE_BYTES ? MCP_WRITE_BYTES : len;
    bool end = c->out_off + len == c->out.len;
    last = last && end;
    char head[24];
    int hn = snprintf(head, sizeof(head), "%zx\r\n", len);
    size_t n = len ? (size_t)hn + len + 2 : 0;
    unsigned char *b = malloc(LWS_PRE + n + 5);
    if (!b)
        return -1;
    unsigned char *p = b + LWS_PRE;
    if (len) {
        memcpy(p, head, (size_t)hn);
        memcpy(p + hn, c->out.data + c->out_off, len);
        memcpy(p + hn + len, "\r\n", 2);
    }
    if (last) {
        memcpy(p + n, "0\r\n\r\n", 5);
        n += 5;
    }
    c->out_off += len;
    int w = lws_write(c->r->wsi, p, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP);
    free(b);
    if (w < 0)
        return -1;
    if (end) {
        buf_reset(&c->out);
        c->out_off = 0;
    }
    return end ? 1 : 0;
}

/* A reader that has bytes to take: closed if it takes none for --stall-timeout. */
static int write_later(struct gw_req *r)
{
    lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
    lws_callback_on_writable(r->wsi);
    return 0;
}

/* The JSON answer (Content-Length), written from c->out as the socket takes it. */
static int write_plain(struct gw_req *r, struct mcp_call *c)
{
    if (!c->head_sent &&
        write_head(c, c->out.len ? "application/json" : NULL, (long long)c->out.len) < 0)
        return -1;
    while (c->out_off < c->out.len && !lws_send_pipe_choked(r->wsi)) {
        size_t len = c->out.len - c->out_off;
        len = len > MCP_WRITE_BYTES ? MCP_WRITE_BYTES : len;
        unsigned char *b = malloc(LWS_PRE + len);
        if (!b)
            return -1;
        memcpy(b + LWS_PRE, c->out.data + c->out_off, len);
        c->out_off += len;
        int w = lws_write(r->wsi, b + LWS_PRE, len,
                          c->out_off == c->out.len ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP);
        free(b);
        if (w < 0)
            return -1;
    }
    return c->out_off < c->out.len ? write_later(r) : 1;
}

int mcp_write(struct gw_req *r)
{
    struct mcp_call *c = r->face;
    if (!c)
        return 0;
    if (!c->sse) {
        if (!c->done) {
            lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
            return 0;
        }
        return write_plain(r, c);
    }
    if (!c->head_sent && write_head(c, "text/event-stream", -1) < 0)
        return -1;
    for (;;) {
        if (c->out_off == c->out.len)
            mcp__progress_fill(c);
        bool last = c->done && mcp__progress_caught_up(c) && c->held.len == 0;
        if (c->out_off == c->out.len && !last)
            break;
        if (lws_send_pipe_choked(r->wsi))
            return write_later(r);
        int rc = write_chunk(c, last);
        if (rc < 0)
            return -1;
        if (rc == 1 && last)
            return 1;
    }
    if (lws_partial_buffered(r->wsi)) /* a part of a write lws holds */
        return write_later(r);
    lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
    return 0;
}

void mcp_req_fini(struct gw_req *r)
{
    struct mcp_call *c = r->face;
    if (!c)
        return;
    ckpt_op_cancel(&c->ck); /* a rollback goes on without its caller */
    if (c->sub.x && !c->done) /* the client went away: nobody hears the execution */
        xexec_cancel(c->sub.x);
    xexec_unsubscribe(&c->sub);
    xcmd_run_free(&c->cmd); /* a command still running: its client went away */
    files_put_cancel(&c->put);
    free(c->bin);
    list_remove(&c->slink);
    json_decref(c->id);
    json_decref(c->token);
    json_decref(c->args);
    json_decref(c->content);
    json_decref(c->structured);
    buf_fini(&c->out);
    buf_fini(&c->held);
    buf_fini(&c->items);
    buf_fini(&c->text);
    free(c);
    r->face = NULL;
}

int mcp_listen(gw_t *g)
{
    struct mcp *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->g = g;
    list_init(&m->sessions);
    if (!(m->sweep = g->loop.evl.timer_new(&g->loop.evl, on_sweep, m))) {
        free(m);
        return -ENOMEM;
    }
    int rc = mcp__tools_load(&m->tools);
    if (rc < 0 || !(m->named = mcpnamed_new(g))) {
        json_decref(m->tools);
        evl_timer_destroy(&g->loop.evl, &m->sweep);
        free(m);
        return rc < 0 ? rc : -ENOMEM;
    }
    g->loop.evl.timer_arm(&g->loop.evl, m->sweep, MCP_SWEEP_MS);
    g->mcp = m;
    return 0;
}

bool mcp_holds(gw_t *g, kernel_t *k)
{
    const struct mcp_session *s;
    if (!g->mcp)
        return false;
    if (g->mcp->named && mcpnamed_holds(g->mcp->named, kernel_id(k)))
        return true;
    list_for_each(s, &g->mcp->sessions, link)
    {
        if (!strcmp(s->kernel_id, kernel_id(k)))
            return true;
    }
    return false;
}

void mcp_fini(gw_t *g)
{
    struct mcp *m = g->mcp;
    if (!m)
        return;
    while (!list_empty(&m->sessions)) {
        struct mcp_session *s = list_first(&m->sessions, struct mcp_session, link);
        while (!list_empty(&s->calls)) { /* (their requests are closed after this) */
            struct mcp_call *c = list_first(&s->calls, struct mcp_call, slink);
            list_remove(&c->slink);
            c->s = NULL;
        }
        list_remove(&s->link);
        free(s);
    }
    evl_timer_destroy(&g->loop.evl, &m->sweep);
    mcpnamed_destroy(&m->named);
    json_decref(m->tools);
    free(m);
    g->mcp = NULL;
}
