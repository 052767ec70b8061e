/* The E2B-compatible API (docs/e2b.md): sandboxes over workspaces and kernels (their
 * lifetime, their end with their default kernel) and the control plane's answers in the E2B
 * OpenAPI's shapes. The sandbox plane (envd's and the code interpreter's routes) is
 * e2bsbx.c's; both share e2b_int.h. Request bodies, paths and envelopes are parsed by
 * protocol/e2bwire.c (fuzzed). */
#include "gateway/e2b.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/egpol.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/e2b_int.h"
#include "gateway/e2bwatch.h"
#include "gateway/kops.h"
#include "gateway/xexec.h"
#include "kernelmgr/kmgr.h"
#include "protocol/e2bwire.h"

/* ---- sandboxes ---- */

/* Of the tenant: another tenant's answers as a missing one. */
static void sbx_kill(struct e2b *e, struct e2bsbx *s, const char *why);

/* The sandbox if it runs: one whose default kernel is ending (shut down through another face
 * a moment ago: its listener hears of it once it is gone) is ended now, so that no answer finds
 * it half there. */
static struct e2bsbx *sbx_live(struct e2b *e, struct e2bsbx *s)
{
    if (s && s->ready && e2b__sbx_kernel_ended(e, s)) {
        sbx_kill(e, s, "its kernel ended");
        return NULL;
    }
    return s;
}

static struct e2bsbx *sbx_of(struct e2b *e, const char *id, const char *tenant)
{
    struct e2bsbx *s = e2b__sbx_find(e, id);
    return s && strcmp(s->tenant, tenant) == 0 ? sbx_live(e, s) : NULL;
}

/* Shuts its kernels down and forgets it: its tokens are refused from now on. Its streams
 * (/execute, processes) are dropped before their kernels can end them: E2B's SDKs tell a
 * killed sandbox by a connection cut mid-answer and a /health of 502, never by an output. */
static void sbx_kill(struct e2b *e, struct e2bsbx *s, const char *why)
{
    struct e2breq *q;
    list_for_each(q, &e->runs, link)
    {
        if (!q->killed && strcmp(q->sbx_id, s->id) == 0) {
            q->killed = true;
            lws_callback_on_writable(q->r->wsi);
        }
    }
    e2bwatch_sbx_end(e, s->id);
    for (size_t i = 0; i < s->nkernels; i++) {
        kernel_t *k = gw_kernel(e->g, s->kernels[i], s->tenant);
        struct kerr err;
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

/* A sample of what the sandbox's default kernel uses now (its cgroup, its workspace). */
static void sbx_sample(struct e2b *e, struct e2bsbx *s)
{
    kernel_t *k = gw_kernel(e->g, s->kernels[0], s->tenant);
    if (!k)
        return;
    struct kernel_usage u;
    kernel_usage(k, &u);
    struct e2bsample *x = &s->samples[(s->first + s->nsamples) % E2B_SAMPLES];
    if (s->nsamples == E2B_SAMPLES)
        s->first = (s->first + 1) % E2B_SAMPLES;
    else
        s->nsamples++;
    x->us = util_wall_us();
    x->cpu_ns = u.cpu_ns;
    x->mem_bytes = u.mem_bytes;
    x->disk_used = x->disk_total = -1;
    wspace_t *w = kmgr_workspace(e->g->km, s->ws_id);
    struct statvfs sv;
    if (w && statvfs(wspace_path(w), &sv) == 0) { /* its own tmpfs */
        x->disk_total = (long long)sv.f_blocks * (long long)sv.f_frsize;
        x->disk_used = x->disk_total - (long long)sv.f_bfree * (long long)sv.f_frsize;
    }
    s->sampled_ms = util_now_ms();
}

/* Pauses (on) or resumes every kernel of the sandbox (kops_pause: its processes frozen in
 * place, memory kept), for who (NULL: its autoPause). 0, or the first refusal's -errno with err
 * filled (what was paused of it is resumed again). */
static int sbx_freeze(struct e2b *e, struct e2bsbx *s, bool on, const struct gw_caller *who,
                      struct kerr *err)
{
    struct kerr mine;
    struct kerr *ke = err ? err : &mine;
    int rc = 0;
    size_t i;
    for (i = 0; i < s->nkernels && rc == 0; i++) {
        kernel_t *k = gw_kernel(e->g, s->kernels[i], s->tenant);
        if (k && kernel_paused(k) != on)
            rc = (on ? kops_pause : kops_resume)(e->g, who, k, ke);
    }
    if (rc < 0 && on) /* all or none */
        while (i-- > 0) {
            kernel_t *k = gw_kernel(e->g, s->kernels[i], s->tenant);
            if (k && kernel_paused(k))
                kops_resume(e->g, who, k, &mine);
        }
    if (rc == 0) {
        s->paused = on;
        log_info("e2b: sandbox=%s tenant=%s: %s%s", s->id, s->tenant, on ? "paused" : "resumed",
                 who ? "" : " at its timeout (autoPause)");
    } else {
        log_warn("e2b: sandbox=%s: cannot %s: %s", s->id, on ? "pause" : "resume", ke->message);
    }
    return rc;
}

static int sbx_pause(struct e2b *e, struct e2bsbx *s, const struct gw_caller *who,
                     struct kerr *err)
{
    return sbx_freeze(e, s, true, who, err);
}

/* Resumes it, with a new lifetime: t seconds (<= 0: its own) from now. */
static int sbx_resume(struct e2b *e, struct e2bsbx *s, long long t, const struct gw_caller *who,
                      struct kerr *err)
{
    int rc = sbx_freeze(e, s, false, who, err);
    if (rc == 0) {
        if (t > 0)
            s->life_s = t;
        s->end_us = util_wall_us() + s->life_s * 1000000LL;
        s->sampled_ms = 0;
    }
    return rc;
}

static void on_tick(void *data)
{
    struct e2b *e = data;
    int64_t now = util_wall_us();
    uint64_t mono = util_now_ms();
    struct list *it = e->sbxs.next;
    while (it != &e->sbxs) {
        struct e2bsbx *s = list_entry(it, struct e2bsbx, link);
        it = it->next;
        if (s->paused) /* kept while paused (as E2B keeps them); no samples */
            continue;
        if (s->ready && now >= s->end_us && (!s->auto_pause || sbx_pause(e, s, NULL, NULL) < 0))
            sbx_kill(e, s, "timeout");
        else if (s->ready && mono - s->sampled_ms >= E2B_SAMPLE_MS)
            sbx_sample(e, s);
    }
    struct e2breq *q;
    list_for_each(q, &e->runs, link)
    {
        if (q->kind == E2BREQ_WATCH) {
            e2bwatch_tick(q, mono);
            continue;
        }
        if (q->kind == E2BREQ_PROC) {
            if (!xcmd_stream_ended(q->proc->cmd) && mono - q->last_ms >= q->proc->keepalive_ms)
                e2b__proc_send(q, "{\"event\":{\"keepalive\":{}}}", 0);
            continue;
        }
        if (mono - q->last_ms >= E2B_KEEPALIVE_MS && q->sub.x && !xexec_done(q->sub.x)) {
            q->keepalive = true;
            lws_callback_on_writable(q->r->wsi);
        }
    }
    e->g->loop.evl.timer_arm(&e->g->loop.evl, e->tick, E2B_TICK_MS);
}

/* A sandbox ends with its default kernel (shut down through kgw's own API, culled, dead for
 * good); one still being created is ended by its create, which answers why. */
static void on_kernel_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    gw_t *g = user;
    struct e2b *e = g->e2b;
    (void)detail;
    if (!e || g->stopping || (ev != KERNEL_EV_DIED && ev != KERNEL_EV_GONE))
        return; /* (a stopping gateway ends every kernel: the sandboxes go with it) */
    struct e2bsbx *s = e2b__sbx_by_kernel(e, kernel_id(k));
    if (s && s->ready && strcmp(s->kernels[0], kernel_id(k)) == 0)
        sbx_kill(e, s, ev == KERNEL_EV_DIED ? "its kernel died" : "its kernel ended");
}

static const struct kmgr_listener_ops listener_ops = {.event = on_kernel_event};

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
    list_init(&e->procs);
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
    int rc = kmgr_listen(g->km, &e->listener, &listener_ops, g);
    if (rc < 0) {
        evl_timer_destroy(&g->loop.evl, &e->tick);
        free(e);
        return rc;
    }
    g->loop.evl.timer_arm(&g->loop.evl, e->tick, E2B_TICK_MS);
    g->e2b = e;
    return 0;
}

bool e2b_holds(gw_t *g, kernel_t *k)
{
    const struct e2bsbx *s;
    if (!g->e2b)
        return false;
    list_for_each(s, &g->e2b->sbxs, link)
    {
        for (size_t i = 0; i < s->nkernels; i++)
            if (!strcmp(s->kernels[i], kernel_id(k)))
                return true;
    }
    return false;
}

void e2b_fini(gw_t *g)
{
    struct e2b *e = g->e2b;
    if (!e)
        return;
    e2bwatch_fini(e);
    e2b__procs_fini(e);
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
    if (g->km) /* (kmgr_destroy forgot its listeners) */
        kmgr_unlisten(g->km, &e->listener);
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
                     s->metadata, "state", s->paused ? "paused" : "running");
}

static const struct e2b_template *template_of(struct e2b *e, const char *id)
{
    for (size_t i = 0; i < e->ntemplates; i++)
        if (strcmp(e->templates[i].id, id) == 0)
            return &e->templates[i];
    return NULL;
}

/* The tenant's egress policy narrowed to the hosts an E2B create allows out (network.allowOut,
 * as e2bwire writes them): for each, the tenant's entries naming it ("*.domain": its wildcard
 * entries for that domain), as a policy's text in *ret (malloc'd). -EPERM with why when a host
 * has none (beyond the tenant's policy), -ENOMEM. */
static int egress_of(const char *policy, json_t *hosts, char **ret, char *why, size_t whysz)
{
    int rc = -ENOMEM;
    egpol_t *all = malloc(sizeof(*all)), *sel = calloc(1, sizeof(*sel));
    char *text = malloc(EGPOL_TEXT_MAX + 1);
    char perr[160];
    size_t i;
    json_t *h;
    if (!all || !sel || !text)
        goto fail;
    if (egpol_parse(policy ? policy : "", policy ? strlen(policy) : 0, all, perr,
                    sizeof(perr)) < 0)
        all->n = 0; /* (checked when the keys were loaded) */
    json_array_foreach(hosts, i, h)
    {
        const char *host = json_string_value(h);
        bool wild = host[0] == '*' && host[1] == '.', found = false;
        for (size_t j = 0; j < all->n; j++) {
            const struct egpol_entry *en = &all->v[j];
            if (en->any || en->wild != wild || strcmp(en->host, wild ? host + 2 : host) != 0)
                continue;
            found = true;
            if (sel->n < EGPOL_MAX_ENTRIES)
                sel->v[sel->n++] = *en;
        }
        if (!found) {
            char q[160];
            snprintf(why, whysz,
                     "\"network.allowOut\": %s is not in this tenant's egress policy (the "
                     "operator's key file names the hosts a tenant's sandboxes may reach)",
                     log_quote(q, sizeof(q), host, strlen(host)));
            rc = -EPERM;
            goto fail;
        }
    }
    if (egpol_format(sel, text, EGPOL_TEXT_MAX + 1) < 0) { /* at most EGPOL_MAX_ENTRIES */
        snprintf(why, whysz, "\"network.allowOut\": the policy it makes is too long");
        rc = -EPERM;
        goto fail;
    }
    free(all);
    free(sel);
    *ret = text;
    return 0;
fail:
    free(all);
    free(sel);
    free(text);
    return rc;
}

static void on_created(struct gw_req *r, kernel_t *k, int status)
{
    struct e2b *e = r->g->e2b;
    struct e2bsbx *s = e2b__sbx_by_kernel(e, r->kernel_id);
    if (!s) /* killed (DELETE, its timeout) while its kernel started */
        return e2b__api_error(r, 409, "the sandbox was killed while it started");
    int rc = kops_waited(r->g, k, status);
    if (rc == -ECANCELED) { /* its kernel shut down meanwhile, through another face */
        sbx_kill(e, s, "its kernel was shut down while it started");
        return e2b__api_error(r, 409, "the sandbox's kernel was shut down while it started");
    }
    if (rc < 0) {
        sbx_kill(e, s, "its kernel failed to start");
        return e2b__api_error(r, 503, "the sandbox's kernel failed to start");
    }
    if (e2b__sbx_setup(r->g, &r->caller, s, k) < 0) {
        sbx_kill(e, s, "its envVars could not be applied");
        return e2b__api_error(r, 503, "the sandbox's envVars could not be applied; retry later");
    }
    s->ready = true;
    s->end_us = util_wall_us() + s->life_s * 1000000LL; /* its lifetime runs from now */
    sbx_sample(e, s);
    req_reply(r, 201, sbx_model(s));
}

static void api_create(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    struct e2bwire_create c;
    char err[E2BWIRE_ERR_MAX];
    if (e2bwire_create_parse(r->body.data ? r->body.data : "", r->body.len, &c, err, sizeof(err)) <
        0)
        return e2b__api_error(r, 400, "%s", err);
    const char *tid = c.template_id[0] ? c.template_id : "base";
    const struct e2b_template *t = template_of(e, tid);
    if (!t) {
        e2bwire_create_fini(&c);
        char q[160];
        return e2b__api_error(r, 400,
                              "template %s is not offered here (the operator maps templates to "
                              "kernelspecs with --e2b-templates)",
                              log_quote(q, sizeof(q), tid, strlen(tid)));
    }
    if (c.timeout == 0) {
        e2bwire_create_fini(&c);
        return e2b__api_error(r, 400, "\"timeout\" must be at least 1 second");
    }
    struct e2bsbx *s = calloc(1, sizeof(*s));
    json_t *req = json_object();
    if (!s || !req) {
        free(s);
        json_decref(req);
        e2bwire_create_fini(&c);
        return e2b__api_error(r, 500, "out of memory");
    }
    if (t->kspec[0])
        json_object_set_new(req, "name", json_string(t->kspec));
    if (c.env)
        json_object_set(req, "env", c.env);
    const char *policy = keyfile_egress(r->g->keys, r->caller.tenant);
    if (c.internet && !c.egress && r->g->cfg.sandbox && (!policy || !policy[0])) {
        free(s);
        json_decref(req);
        e2bwire_create_fini(&c);
        return e2b__api_error(r, 400,
                              "internet access is not offered to this tenant: kgw sandboxes reach "
                              "only the hosts of the tenant's egress policy, and it has none (pass "
                              "allowInternetAccess: false, or ask the operator for a policy)");
    }
    if (c.egress) {
        char why[200];
        char *eg = NULL;
        int erc = egress_of(policy, c.egress, &eg, why, sizeof(why));
        if (erc < 0) {
            free(s);
            json_decref(req);
            e2bwire_create_fini(&c);
            if (erc == -ENOMEM)
                return e2b__api_error(r, 500, "out of memory");
            return e2b__api_error(r, 403, "%s", why);
        }
        json_object_set_new(req, "egress", json_string(eg)); /* "": no network */
        free(eg);
    }
    kernel_t *k;
    struct kerr kerr;
    int rc = kops_start(r->g, &r->caller, req, &k, &kerr);
    json_decref(req);
    if (rc < 0) {
        free(s);
        e2bwire_create_fini(&c);
        return e2b__api_error(r, kerr.status ? kerr.status : 500, "%s", kerr.message);
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
    s->auto_pause = c.auto_pause;
    list_append(&e->sbxs, &s->link);
    log_info("e2b: sandbox=%s tenant=%s template=%s kernel=%s: created", s->id, s->tenant,
             s->template_id, s->kernels[0]);
    audit_event("e2b_sandbox_start", "s:s, s:s, s:s, s:s", "tenant", s->tenant, "sandbox", s->id,
                "kernel", s->kernels[0], "workspace", s->ws_id);
    if (req_wait_kernel(r, k, on_created) < 0)
        on_created(r, k, 0);
}

/* Whether the sandbox passes the listing's filters (not its page). */
static bool list_match(const struct e2bsbx *s, const struct e2bwire_list *l)
{
    if (!(l->states & (s->paused ? E2BWIRE_STATE_PAUSED : E2BWIRE_STATE_RUNNING)))
        return false;
    if (l->template_id[0] && strcmp(l->template_id, s->template_id) != 0)
        return false;
    if (l->started_after_us >= 0 && s->started_us < l->started_after_us)
        return false;
    const char *k;
    json_t *v;
    json_object_foreach(l->metadata, k, v)
    {
        if (!json_equal(json_object_get(s->metadata, k), v))
            return false;
    }
    return true;
}

static int list_cmp(const void *a, const void *b, void *data)
{
    const struct e2bwire_list *l = data;
    const struct e2bsbx *x = *(const struct e2bsbx *const *)a;
    const struct e2bsbx *y = *(const struct e2bsbx *const *)b;
    return e2bwire_list_before(l, x->started_us, x->id, y->started_us, y->id)   ? -1
           : e2bwire_list_before(l, y->started_us, y->id, x->started_us, x->id) ? 1
                                                                                 : 0;
}

/* The query's arguments, as lws decoded them ("name=value"), into args (at most max): their
 * count, or -E2BIG. */
static int query_args(struct lws *wsi, char *buf, size_t bufsz, const char **args, size_t max)
{
    size_t n = 0, off = 0;
    for (int i = 0;; i++) {
        int len = lws_hdr_copy_fragment(wsi, buf + off, (int)(bufsz - off),
                                        WSI_TOKEN_HTTP_URI_ARGS, i);
        if (len < 0)
            return lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, i) > 0 ? -E2BIG
                                                                               : (int)n;
        if (len == 0)
            continue;
        if (n == max)
            return -E2BIG;
        args[n++] = buf + off;
        off += (size_t)len + 1;
    }
}

/* GET /sandboxes, GET /v2/sandboxes: the tenant's sandboxes through the query's filters, newest
 * first unless asked otherwise, a page at a time (X-Next-Token names the next page's first). */
static void api_list(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    char buf[8192], err[E2BWIRE_ERR_MAX];
    const char *args[32];
    struct e2bwire_list l;
    int n = query_args(r->wsi, buf, sizeof(buf), args, UTIL_ARRAY_SIZE(args));
    if (n < 0)
        return e2b__api_error(r, 400, "the query is over %zu bytes or %zu parameters", sizeof(buf),
                              UTIL_ARRAY_SIZE(args));
    if (e2bwire_list_parse(args, (size_t)n, &l, err, sizeof(err)) < 0)
        return e2b__api_error(r, 400, "%s", err);
    size_t count = 0, total = 0, running = 0;
    struct e2bsbx *s;
    list_for_each(s, &e->sbxs, link)
    {
        count++;
    }
    struct e2bsbx **v = calloc(count ? count : 1, sizeof(*v));
    json_t *a = json_array();
    if (!v || !a) {
        free(v);
        json_decref(a);
        e2bwire_list_fini(&l);
        return e2b__api_error(r, 500, "out of memory");
    }
    list_for_each(s, &e->sbxs, link)
    {
        if (strcmp(s->tenant, r->caller.tenant) == 0 && list_match(s, &l) &&
            !(s->ready && e2b__sbx_kernel_ended(e, s))) {
            running += !s->paused;
            v[total++] = s;
        }
    }
    qsort_r(v, total, sizeof(*v), list_cmp, &l);
    size_t i = 0, taken = 0;
    while (i < total && l.has_token &&
           e2bwire_list_before(&l, v[i]->started_us, v[i]->id, l.token_us, l.token_id))
        i++;
    for (; i < total && taken < l.limit; i++, taken++)
        json_array_append_new(a, sbx_detail(e, v[i]));
    if (i < total) {
        char tok[96];
        e2bwire_list_token(tok, sizeof(tok), v[i]->started_us, v[i]->id);
        req_add_header(r, "x-next-token:", tok);
    }
    if (l.states & E2BWIRE_STATE_RUNNING) { /* E2B: only when running ones were asked for */
        char num[32];
        snprintf(num, sizeof(num), "%zu", running);
        req_add_header(r, "x-total-running:", num);
    }
    free(v);
    e2bwire_list_fini(&l);
    req_reply(r, 200, a);
}

/* The caller's sandbox of a /sandboxes/{id} route; NULL after answering 404. */
static struct e2bsbx *route_sandbox(struct gw_req *r)
{
    struct e2bsbx *s = sbx_of(r->g->e2b, r->route.arg[0], r->caller.tenant);
    if (!s)
        e2b__api_error(r, 404, "sandbox %s not found", r->route.arg[0]);
    return s;
}

void e2b_sandboxes(struct gw_req *r)
{
    return r->method == HTTP_M_POST ? api_create(r) : api_list(r);
}

void e2b_sandbox(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    struct e2bsbx *s = route_sandbox(r);
    if (!s)
        return;
    if (r->method == HTTP_M_DELETE) {
        sbx_kill(e, s, "killed");
        return req_reply(r, 204, NULL);
    }
    req_reply(r, 200, sbx_detail(e, s));
}

/* route_sandbox, and the body's timeout into *ret_t (-1 when absent and not required); NULL
 * after answering. */
static struct e2bsbx *route_sandbox_timeout(struct gw_req *r, bool required, long long *ret_t)
{
    char err[E2BWIRE_ERR_MAX];
    struct e2bsbx *s = route_sandbox(r);
    if (s && e2bwire_timeout_parse(r->body.data ? r->body.data : "", r->body.len, required,
                                   ret_t, err, sizeof(err)) < 0) {
        e2b__api_error(r, 400, "%s", err);
        return NULL;
    }
    return s;
}

void e2b_timeout(struct gw_req *r)
{
    long long t;
    struct e2bsbx *s = route_sandbox_timeout(r, true, &t);
    if (!s)
        return;
    if (t == 0) /* as a create's: DELETE ends a sandbox */
        return e2b__api_error(r, 400, "\"timeout\" must be at least 1 second");
    s->end_us = util_wall_us() + t * 1000000LL;
    s->life_s = t; /* while it starts: from when it is ready */
    req_reply(r, 204, NULL);
}

/* Connect, answered with status (v1 200, v2 201): the tokens again; a timeout only extends
 * the lifetime. */
static void api_connect(struct gw_req *r, int status)
{
    long long t;
    struct e2bsbx *s = route_sandbox_timeout(r, false, &t);
    if (!s)
        return;
    if (s->paused) { /* resumed: 201 */
        struct kerr err;
        if (sbx_resume(r->g->e2b, s, t, &r->caller, &err) < 0)
            return e2b__api_error(r, err.status ? err.status : 500, "%s", err.message);
        return req_reply(r, 201, sbx_model(s));
    }
    if (t > 0 && util_wall_us() + t * 1000000LL > s->end_us)
        s->end_us = util_wall_us() + t * 1000000LL;
    if (t > s->life_s && !s->ready)
        s->life_s = t;
    req_reply(r, status, sbx_model(s));
}

void e2b_connect(struct gw_req *r)
{
    api_connect(r, 200);
}

void e2b_connect_v2(struct gw_req *r)
{
    api_connect(r, 201);
}

/* POST /sandboxes/{id}/pause: 204; 409 when paused already (the SDKs' "was already paused"),
 * or when it cannot be (still starting, a kernel restarting). */
void e2b_pause(struct gw_req *r)
{
    char err[E2BWIRE_ERR_MAX];
    struct kerr kerr;
    struct e2bsbx *s = route_sandbox(r);
    if (!s)
        return;
    if (e2bwire_pause_parse(r->body.data ? r->body.data : "", r->body.len, err, sizeof(err)) < 0)
        return e2b__api_error(r, 400, "%s", err);
    if (s->paused)
        return e2b__api_error(r, 409, "sandbox %s is already paused", s->id);
    if (!s->ready)
        return e2b__api_error(r, 409, "sandbox %s is still starting", s->id);
    if (sbx_pause(r->g->e2b, s, &r->caller, &kerr) < 0)
        return e2b__api_error(r, kerr.status ? kerr.status : 500, "%s", kerr.message);
    req_reply(r, 204, NULL);
}

/* POST /sandboxes/{id}/resume (deprecated for connect): 201 the Sandbox; 409 when it runs. */
void e2b_resume(struct gw_req *r)
{
    long long t;
    struct kerr err;
    struct e2bsbx *s = route_sandbox_timeout(r, false, &t);
    if (!s)
        return;
    if (!s->paused)
        return e2b__api_error(r, 409, "sandbox %s is already running", s->id);
    if (sbx_resume(r->g->e2b, s, t, &r->caller, &err) < 0)
        return e2b__api_error(r, err.status ? err.status : 500, "%s", err.message);
    req_reply(r, 201, sbx_model(s));
}

/* What E2B's API offers under a sandbox that kgw does not, by the path's last part. */
static const struct {
    const char *action;
    const char *what;
} not_offered[] = {
    {"refreshes", "refreshes"},
    {"logs", "sandbox logs"},             {"snapshots", "snapshots"},
    {"network", "network updates"},
};

/* The query argument name (with its '=') as Unix seconds into *ret, left alone when absent:
 * 0, or -EINVAL for anything but 1 to 12 digits. */
static int unix_seconds(struct lws *wsi, const char *name, long long *ret)
{
    char v[64];                        /* lws copies "name=value" into it, not the value */
    const char *a = lws_get_urlarg_by_name(wsi, name, v, sizeof(v));
    size_t n = a ? strlen(a) : 0;
    if (!a) /* absent, or too long for v: the latter is refused, never ignored */
        return http_urlarg(wsi, name) ? -EINVAL : 0;
    if (n == 0 || n > 12 || strspn(a, "0123456789") != n)
        return -EINVAL;
    *ret = strtoll(a, NULL, 10);
    return 0;
}

/* GET /sandboxes/{id}/metrics[?start=&end=] (Unix seconds): the samples kept, oldest first,
 * as E2B's SandboxMetric (CPU over the interval before each; its limits, or the host's). */
static void api_metrics(struct gw_req *r, struct e2bsbx *s)
{
    struct e2b *e = r->g->e2b;
    long long from = -1, to = -1;
    if (unix_seconds(r->wsi, "start=", &from) < 0)
        return e2b__api_error(r, 400, "\"start\" must be Unix seconds");
    if (unix_seconds(r->wsi, "end=", &to) < 0)
        return e2b__api_error(r, 400, "\"end\" must be Unix seconds");
    kernel_t *k = gw_kernel(e->g, s->kernels[0], s->tenant);
    struct kernel_usage u = {.mem_limit = 0, .cpu_millis = 0};
    if (k)
        kernel_usage(k, &u);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long long cpus = u.cpu_millis > 0 ? (u.cpu_millis + 999) / 1000 : ncpu > 0 ? ncpu : 1;
    long long mem_total = u.mem_limit > 0 ? u.mem_limit
                                          : (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    double cpu_share = u.cpu_millis > 0 ? (double)u.cpu_millis / 1000.0 : (double)cpus;
    json_t *out = json_array();
    for (size_t i = 0; i < s->nsamples; i++) {
        const struct e2bsample *x = &s->samples[(s->first + i) % E2B_SAMPLES];
        const struct e2bsample *p = i ? &s->samples[(s->first + i - 1) % E2B_SAMPLES] : NULL;
        long long secs = x->us / 1000000;
        if ((from >= 0 && secs < from) || (to >= 0 && secs > to))
            continue;
        double pct = 0;
        if (p && x->cpu_ns >= 0 && p->cpu_ns >= 0 && x->us > p->us)
            pct = 100.0 * (double)(x->cpu_ns - p->cpu_ns) / 1000.0 /
                  ((double)(x->us - p->us) * cpu_share);
        char ts[40];
        iso(ts, sizeof(ts), x->us);
        json_array_append_new(
            out, json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp", ts,
                           "timestampUnix", (json_int_t)secs, "cpuCount", (json_int_t)cpus,
                           "cpuUsedPct", pct < 0 ? 0.0 : pct, "memUsed",
                           (json_int_t)(x->mem_bytes > 0 ? x->mem_bytes : 0), "memTotal",
                           (json_int_t)mem_total, "memCache", (json_int_t)0, "diskUsed",
                           (json_int_t)(x->disk_used > 0 ? x->disk_used : 0), "diskTotal",
                           (json_int_t)(x->disk_total > 0 ? x->disk_total : 0)));
    }
    req_reply(r, 200, out);
}

/* A path under /e2b/api no route of kgw's matched: one naming a sandbox that is not there (or
 * whose id is not one kgw gives) is 404, as E2B answers it; the rest is 501 and says what is
 * not offered. */
void e2b_api_other(struct gw_req *r)
{
    struct e2b *e = r->g->e2b;
    const char *p = r->fpath;
    if (strncmp(p, "v2/", 3) == 0)
        p += 3;
    if (strncmp(p, "sandboxes/", 10) == 0) {
        const char *id = p + 10, *slash = strchr(id, '/');
        size_t idn = slash ? (size_t)(slash - id) : strlen(id);
        const char *action = slash ? slash + 1 : "";
        char sid[UTIL_UUID_LEN + 1] = "";
        if (idn == UTIL_UUID_LEN)
            memcpy(sid, id, idn);
        if (idn > 0 && !strchr(action, '/') && !sbx_of(e, sid, r->caller.tenant)) {
            char q[160];
            return e2b__api_error(r, 404, "sandbox %s not found", log_quote(q, sizeof(q), id, idn));
        }
        struct e2bsbx *s = sbx_of(e, sid, r->caller.tenant);
        if (strcmp(action, "metrics") == 0 && r->method == HTTP_M_GET && s)
            return api_metrics(r, s);
        for (size_t i = 0; i < UTIL_ARRAY_SIZE(not_offered); i++)
            if (strcmp(action, not_offered[i].action) == 0)
                return e2b__api_error(r, 501, "%s is not offered by kgw (docs/e2b.md)",
                                      not_offered[i].what);
    }
    char q[160];
    return e2b__api_error(r, 501, "/e2b/api/%s is not offered by kgw (docs/e2b.md lists what is)",
                          log_quote(q, sizeof(q), r->fpath, strlen(r->fpath)));
}
