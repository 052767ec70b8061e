/* sessions: /api/sessions as jupyter_server serves it (a path/name/type bound to a kernel). */
#include "gateway/sessions.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "gateway/gw.h"
#include "gateway/http.h"
#include "gateway/drain.h"
#include "gateway/kops.h"
#include "gateway/rest.h"

#define SESSIONS_MAX        4096 /* all tenants (more: 503) */
#define SESSIONS_TENANT_MAX 256  /* one tenant's share (more: 429) */
#define FIELD_MAX    1024

typedef struct gsess {
    char id[40];
    char kernel_id[40];
    json_t *fields; /* path, name, type */
    bool started;     /* being bound to a kernel its request started (bind_kernel) */
    struct list link; /* on g->sessions */
} gsess_t;

/* A session belongs to the tenant of its kernel. */
static bool visible(gw_t *g, const gsess_t *s, const char *tenant)
{
    return gw_kernel(g, s->kernel_id, tenant) != NULL;
}

static gsess_t *find(gw_t *g, const char *id, const char *tenant)
{
    gsess_t *s;
    list_for_each(s, &g->sessions, link)
    {
        if (!strcmp(s->id, id))
            return !tenant || visible(g, s, tenant) ? s : NULL;
    }
    return NULL;
}

static void unlink_free(gw_t *g, gsess_t *s)
{
    list_remove(&s->link);
    json_decref(s->fields);
    free(s);
}

static json_t *model(gw_t *g, const gsess_t *s)
{
    kernel_t *k = kmgr_find(g->km, s->kernel_id);
    json_t *m = json_deep_copy(s->fields);
    json_object_set_new(m, "id", json_string(s->id));
    json_object_set_new(m, "kernel", k ? kernel_model(k) : json_null());
    json_object_set_new(m, "notebook", json_pack("{s:O, s:O}", "path", json_object_get(s->fields, "path"),
                                                  "name", json_object_get(s->fields, "name")));
    return m;
}

/* Copies path, name and type from the body; 0 or -EINVAL after replying. */
static int take_fields(struct gw_req *r, json_t *body, json_t *fields)
{
    static const char *const keys[] = {"path", "name", "type"};
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (!v || json_is_null(v))
            continue;
        if (!json_is_string(v) || json_string_length(v) > FIELD_MAX) {
            req_error(r, 400, "\"%s\" must be a string of at most %d bytes", keys[i], FIELD_MAX);
            return -EINVAL;
        }
        json_object_set(fields, keys[i], v);
    }
    /* older clients send {"notebook": {"path": ...}} */
    json_t *nb = json_object_get(body, "notebook");
    json_t *p = json_object_get(nb, "path");
    if (json_is_string(p) && json_string_length(p) <= FIELD_MAX && !json_object_get(body, "path"))
        json_object_set(fields, "path", p);
    return 0;
}

static void on_kernel_ready(struct gw_req *r, kernel_t *k, int status)
{
    gw_t *g = r->g;
    gsess_t *s = r->face;
    r->face = NULL;
    int rc = kops_waited(g, k, status);
    bool started = s->started;
    if (rc < 0) {
        json_decref(s->fields);
        free(s);
        if (!started) /* the kernel it names is not up (dead, shut down meanwhile): not ours */
            return req_error(r, 409, "kernel %s is not running", kernel_id(k));
        return rest_start_failed(r, k, rc);
    }
    snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", kernel_id(k));
    gsess_t *existing = find(g, s->id, NULL);
    if (!existing && r->method == HTTP_M_PATCH) { /* deleted while its new kernel started */
        if (started)
            kernel_shutdown(k, NULL);
        json_decref(s->fields);
        free(s);
        return req_error(r, 404, "Session not found: %s", r->route.arg[0]);
    }
    if (!existing) {
        list_prepend(&g->sessions, &s->link);
    } else { /* PATCH that changed the kernel */
        snprintf(existing->kernel_id, sizeof(existing->kernel_id), "%s", kernel_id(k));
        json_decref(existing->fields);
        existing->fields = s->fields;
        free(s);
        s = existing;
        return req_reply(r, 200, model(g, s));
    }
    snprintf(r->location, sizeof(r->location), "/api/sessions/%s", s->id);
    req_reply(r, 201, model(g, s));
}

/* Binds s to the kernel named in body.kernel ({"id"} or {"name"}), then replies. */
static void bind_kernel(struct gw_req *r, gsess_t *s, json_t *kbody)
{
    gw_t *g = r->g;
    json_t *kid = json_object_get(kbody, "id");
    r->face = s;
    if (json_is_string(kid)) {
        kernel_t *k = gw_kernel(g, json_string_value(kid), r->caller.tenant);
        if (!k) {
            r->face = NULL;
            json_decref(s->fields);
            free(s);
            return req_error(r, 404, "Kernel does not exist");
        }
        if (req_wait_kernel(r, k, on_kernel_ready) < 0)
            on_kernel_ready(r, k, 0);
        return;
    }
    json_t *start = json_pack("{s:O?}", "name", json_object_get(kbody, "name"));
    s->started = true;
    if (rest_start_kernel(r, start, on_kernel_ready) < 0 && r->face) {
        r->face = NULL;
        json_decref(s->fields);
        free(s);
    }
    json_decref(start);
}

static gsess_t *sess_new(const char *id, json_t *fields)
{
    gsess_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    list_init(&s->link);
    if (id)
        snprintf(s->id, sizeof(s->id), "%s", id);
    else
        shardid_mint(s->id);
    s->fields = fields;
    return s;
}

static void create(struct gw_req *r, json_t *body)
{
    gw_t *g = r->g;
    size_t n = 0, mine = 0;
    gsess_t *it;
    list_for_each(it, &g->sessions, link)
    {
        n++;
        mine += visible(g, it, r->caller.tenant);
    }
    if (mine >= SESSIONS_TENANT_MAX)
        return req_error_retry(r, 429, 1,
                               "the tenant has %zu sessions, its share (%d); delete some first",
                               mine, SESSIONS_TENANT_MAX);
    if (n >= SESSIONS_MAX)
        return req_error(r, 503, "too many sessions");
    json_t *nb = json_object_get(body, "notebook");
    if (!json_is_string(json_object_get(body, "path")) &&
        !json_is_string(json_object_get(nb, "path")))
        return req_error(r, 400, "Missing field in JSON data: path");
    json_t *fields = json_pack("{s:s, s:s, s:s}", "path", "", "name", "", "type", "notebook");
    if (take_fields(r, body, fields) < 0) {
        json_decref(fields);
        return;
    }
    /* jupyter_server returns the existing session for a path that already has one */
    const char *path = json_string_value(json_object_get(fields, "path"));
    if (path[0]) {
        list_for_each(it, &g->sessions, link)
        {
            if (!strcmp(json_string_value(json_object_get(it->fields, "path")), path) &&
                visible(g, it, r->caller.tenant)) {
                json_decref(fields);
                snprintf(r->location, sizeof(r->location), "/api/sessions/%s", it->id);
                return req_reply(r, 201, model(g, it));
            }
        }
    }
    gsess_t *s = sess_new(NULL, fields);
    if (!s) {
        json_decref(fields);
        return req_error(r, 500, "out of memory");
    }
    json_t *kbody = json_object_get(body, "kernel");
    if (kbody && !json_is_object(kbody) && !json_is_null(kbody)) {
        json_decref(fields);
        free(s);
        return req_error(r, 400, "\"kernel\" must be an object");
    }
    bind_kernel(r, s, kbody);
}

static void patch(struct gw_req *r, gsess_t *s, json_t *body)
{
    json_t *fields = json_deep_copy(s->fields);
    if (take_fields(r, body, fields) < 0) {
        json_decref(fields);
        return;
    }
    json_t *kbody = json_object_get(body, "kernel");
    if (json_is_object(kbody) && (json_object_get(kbody, "id") || json_object_get(kbody, "name"))) {
        json_t *kid = json_object_get(kbody, "id");
        if (!json_is_string(kid) || strcmp(json_string_value(kid), s->kernel_id) != 0) {
            gsess_t *tmp = sess_new(s->id, fields);
            if (!tmp) {
                json_decref(fields);
                return req_error(r, 500, "out of memory");
            }
            return bind_kernel(r, tmp, kbody);
        }
    }
    json_decref(s->fields);
    s->fields = fields;
    req_reply(r, 200, model(r->g, s));
}

void sessions_req_fini(struct gw_req *r)
{
    gsess_t *s = r->face;
    r->face = NULL;
    if (s) {
        json_decref(s->fields);
        free(s);
    }
}

void sessions_all(struct gw_req *r)
{
    gw_t *g = r->g;
    if (r->method == HTTP_M_GET) {
        json_t *a = json_array();
        gsess_t *s;
        list_for_each(s, &g->sessions, link)
        {
            if (visible(g, s, r->caller.tenant))
                json_array_append_new(a, model(g, s));
        }
        return req_reply(r, 200, a);
    }
    json_t *body = req_json_body(r);
    if (body)
        create(r, body);
    json_decref(body);
}

void sessions_one(struct gw_req *r)
{
    gw_t *g = r->g;
    gsess_t *s = find(g, r->route.arg[0], r->caller.tenant);
    if (!s)
        return req_error(r, 404, "Session not found: %s", r->route.arg[0]);
    if (r->method == HTTP_M_GET) {
        req_reply(r, 200, model(g, s));
    } else if (r->method == HTTP_M_PATCH) {
        json_t *body = req_json_body(r);
        if (body)
            patch(r, s, body);
        json_decref(body);
    } else { /* DELETE: the session's kernel goes with it, as in jupyter_server */
        kernel_t *k = kmgr_find(g->km, s->kernel_id);
        unlink_free(g, s);
        struct kerr err;
        if (k)
            kops_shutdown(g, k, &err); /* answered 204 whatever it says, as DELETE /api/kernels */
        req_reply(r, 204, NULL);
    }
}

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    gw_t *g = user;
    gsess_t *s, *next;
    (void)detail;
    if (ev != KERNEL_EV_GONE)
        return;
    list_for_each_safe(s, next, &g->sessions, link)
    {
        if (!strcmp(s->kernel_id, kernel_id(k)))
            unlink_free(g, s);
    }
}

static const struct kmgr_listener_ops listener_ops = {.event = on_event};

int sessions_listen(gw_t *g)
{
    return kmgr_listen(g->km, &g->sess_listener, &listener_ops, g);
}

void sessions_init(gw_t *g)
{
    list_init(&g->sessions);
}

json_t *sessions_export(gw_t *g)
{
    json_t *a = json_array();
    gsess_t *s;
    list_for_each(s, &g->sessions, link)
    {
        kernel_t *k = kmgr_find(g->km, s->kernel_id);
        if (a && k && drain_carries(g, k))
            json_array_append_new(a, json_pack("{s:s, s:s, s:O}", "id", s->id, "kernel_id",
                                               s->kernel_id, "fields", s->fields));
    }
    return a;
}

void sessions_import(gw_t *g, const json_t *rec)
{
    json_t *v;
    size_t i, n = 0;
    json_array_foreach(rec, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        const char *kid = json_string_value(json_object_get(v, "kernel_id"));
        json_t *fields = json_object_get(v, "fields");
        gsess_t *s;
        if (!id || !kid || strlen(id) >= sizeof(s->id) || !json_is_object(fields) ||
            !kmgr_find(g->km, kid) || find(g, id, NULL) || n >= SESSIONS_MAX ||
            !(s = calloc(1, sizeof(*s))))
            continue;
        snprintf(s->id, sizeof(s->id), "%s", id);
        snprintf(s->kernel_id, sizeof(s->kernel_id), "%s", kid);
        s->fields = json_deep_copy(fields);
        list_prepend(&g->sessions, &s->link);
        n++;
    }
    if (n)
        log_info("restart: %zu session%s carried over", n, n == 1 ? "" : "s");
}

void sessions_free_all(gw_t *g)
{
    while (!list_empty(&g->sessions))
        unlink_free(g, list_first(&g->sessions, gsess_t, link));
}
