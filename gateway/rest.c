/* The REST API's own handlers: the gateway (/api, /api/status, identity, liveness, readiness,
 * its OpenAPI description), kernelspecs and kernels. Each is one row of gateway/routes.c. */
#include "gateway/rest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "gateway/drain.h"
#include "gateway/kops.h"
#include "gateway/openapi.h"

#define RESOURCE_MAX (1 << 20)
#define TICK_MS      1000 /* the loop tick /check_liveness and /check_ready watch */
#define MAX_LAG_MS   2000 /* a tick this late means the loop was blocked */

/* ---- the gateway ---- */

void rest_api(struct gw_req *r)
{
    gw_t *g = r->g;
    req_reply(r, 200, json_pack("{s:s, s:s, s:s}", "version", KGW_VERSION, "gateway", "kgw",
                                "sandbox", kmgr_sandbox_mode(g->km)));
}

void rest_status(struct gw_req *r)
{
    gw_t *g = r->g;
    char started[40], last[40];
    util_iso_time(started, sizeof(started), g->started_us);
    util_iso_time(last, sizeof(last), g->last_activity_us);
    req_reply(r, 200,
              json_pack("{s:s, s:s, s:i, s:i, s:o}", "started", started, "last_activity", last,
                        "connections", g->connections, "kernels", (int)kmgr_count(g->km),
                        "pool", kmgr_pool_model(g->km)));
}

void rest_self_identify(struct gw_req *r)
{
    req_reply(r, 200, json_pack("{s:s}", "instance_id", r->g->instance_id));
}

/* ---- liveness, readiness, description ---- */

static void on_tick(void *data)
{
    gw_t *g = data;
    uint64_t now = util_now_us(), due = g->tick_us + TICK_MS * 1000;
    uint64_t lag_us = now > due ? now - due : 0;
    g->loop_lag_ms = lag_us / 1000;
    hist_observe(&g->stats.loop_lag, (double)lag_us / 1e6);
    if (g->loop_lag_ms > MAX_LAG_MS)
        log_warn("event loop: a %d ms timer ran %llu ms late", TICK_MS,
                 (unsigned long long)g->loop_lag_ms);
    g->tick_us = now;
    g->loop.evl.timer_arm(&g->loop.evl, g->tick, TICK_MS);
}

int rest_start_tick(gw_t *g)
{
    g->tick = g->loop.evl.timer_new(&g->loop.evl, on_tick, g);
    if (!g->tick)
        return -errno;
    g->tick_us = util_now_us();
    g->loop.evl.timer_arm(&g->loop.evl, g->tick, TICK_MS);
    return 0;
}

void rest_stop_tick(gw_t *g)
{
    evl_timer_destroy(&g->loop.evl, &g->tick);
}


/* Liveness: 200 while the loop keeps time (a 1 s timer not more than 2 s late); whether
 * kernels can be started is readiness's question. */
void rest_liveness(struct gw_req *r)
{
    gw_t *g = r->g;
    char why[160];
    if (g->loop_lag_ms > MAX_LAG_MS) {
        snprintf(why, sizeof(why), "the event loop was blocked (a timer ran %llu ms late)",
                 (unsigned long long)g->loop_lag_ms);
        return req_reply(r, 503, json_pack("{s:s, s:s}", "status", "unavailable", "reason", why));
    }
    req_reply(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* Readiness: 200 only while a new kernel would be accepted now. Unauthenticated: the reasons
 * name no host detail (paths, sizes); the log and POST /api/kernels's 503 have them. */
void rest_readiness(struct gw_req *r)
{
    gw_t *g = r->g;
    char why[160];
    struct kmgr_capacity cap;
    why[0] = '\0';
    kmgr_capacity(g->km, &cap);
    if (drain_active(g))
        snprintf(why, sizeof(why), "draining: the gateway is shutting down");
    else if (g->loop_lag_ms > MAX_LAG_MS)
        snprintf(why, sizeof(why), "the event loop was blocked (a timer ran %llu ms late)",
                 (unsigned long long)g->loop_lag_ms);
    else if (kmgr_sandbox_error(g->km))
        snprintf(why, sizeof(why), "kernels cannot be started: the sandbox is unavailable");
    else if ((long long)kmgr_count(g->km) >= g->cfg.km.max_kernels)
        snprintf(why, sizeof(why), "kernel limit reached (%d)", g->cfg.km.max_kernels);
    else if (cap.fd_kernels == 0)
        snprintf(why, sizeof(why), "kernel capacity reached: the open-file limit leaves no "
                                   "room for another kernel");
    else if (kmgr_memory_short(g->km))
        snprintf(why, sizeof(why), "host memory is short (MemAvailable below "
                                   "--pool-min-available)");
    if (why[0])
        return req_reply(r, 503, json_pack("{s:s, s:s, s:I}", "status", "unavailable", "reason",
                                           why, "kernels_free", (json_int_t)cap.kernels_free));
    req_reply(r, 200, json_pack("{s:s, s:I}", "status", "ready", "kernels_free",
                                (json_int_t)cap.kernels_free));
}

void rest_openapi(struct gw_req *r)
{
    req_reply_copy(r, "application/json", kgw_openapi_json, kgw_openapi_json_len);
}


/* ---- kernelspecs ---- */

void rest_kspecs(struct gw_req *r)
{
    gw_t *g = r->g;
    const kspecs_t *ks = kmgr_kspecs(g->km);
    json_t *all = json_object();
    for (size_t i = 0; i < kspecs_count(ks); i++) {
        const kspec_t *s = kspecs_at(ks, i);
        json_object_set_new(all, s->name, kspec_model(s));
    }
    const char *def = g->cfg.default_kernel;
    if (!kspecs_find(ks, def) && kspecs_count(ks) > 0)
        def = kspecs_at(ks, 0)->name;
    req_reply(r, 200, json_pack("{s:s, s:o}", "default", def, "kernelspecs", all));
}

void rest_kspec(struct gw_req *r)
{
    const kspec_t *s = kspecs_find(kmgr_kspecs(r->g->km), r->route.arg[0]);
    if (!s)
        return req_error(r, 404, "Kernel spec %s not found", r->route.arg[0]);
    req_reply(r, 200, kspec_model(s));
}

static const char *mime_of(const char *file)
{
    const char *dot = strrchr(file, '.');
    if (!dot)
        return "application/octet-stream";
    if (!strcmp(dot, ".png"))
        return "image/png";
    if (!strcmp(dot, ".svg"))
        return "image/svg+xml";
    if (!strcmp(dot, ".js"))
        return "text/javascript";
    if (!strcmp(dot, ".css"))
        return "text/css";
    if (!strcmp(dot, ".json"))
        return "application/json";
    return "application/octet-stream";
}

void rest_kspec_resource(struct gw_req *r)
{
    const kspec_t *s = kspecs_find(kmgr_kspecs(r->g->km), r->route.arg[0]);
    struct stat st;
    int fd = s ? kspec_open_resource(s, r->route.arg[1]) : -ENOENT;
    if (fd < 0)
        return req_error(r, 404, "resource not found");
    if (fstat(fd, &st) < 0 || st.st_size > RESOURCE_MAX) {
        close(fd);
        return req_error(r, 404, "resource not found");
    }
    char *data = malloc((size_t)st.st_size + 1);
    ssize_t n = data ? read(fd, data, (size_t)st.st_size) : -1;
    close(fd);
    if (n < 0) {
        free(data);
        return req_error(r, 500, "cannot read resource");
    }
    req_reply_data(r, mime_of(r->route.arg[1]), data, (size_t)n);
}


/* ---- kernels ---- */

static void reply_model(struct gw_req *r, kernel_t *k, int status)
{
    if (status == 201)
        snprintf(r->location, sizeof(r->location), "/api/kernels/%s", kernel_id(k));
    req_reply(r, status, kernel_model(k));
}

void rest_start_failed(struct gw_req *r, kernel_t *k, int code)
{
    struct kerr err;
    kops_waited_error(r->g, k, KERR_START, code, &err);
    req_error_retry(r, err.status, err.retry_after, "%s", err.message);
    kernel_shutdown(k, NULL);
}

static void on_started(struct gw_req *r, kernel_t *k, int status)
{
    int rc = kops_waited(r->g, k, status);
    if (rc < 0)
        return rest_start_failed(r, k, rc);
    reply_model(r, k, 201);
}

int rest_start_kernel(struct gw_req *r, json_t *body,
                      void (*done)(struct gw_req *, kernel_t *, int))
{
    struct kerr err;
    kernel_t *k;
    int rc = kops_start(r->g, &r->caller, body, &k, &err);
    if (rc < 0) {
        req_error_retry(r, err.status, err.retry_after, "%s", err.message);
        return rc;
    }
    if (req_wait_kernel(r, k, done) < 0)
        done(r, k, 0);
    return 0;
}

void rest_kernels(struct gw_req *r)
{
    gw_t *g = r->g;
    if (r->method == HTTP_M_GET) {
        json_t *a = json_array();
        for (size_t i = 0; i < kmgr_count(g->km); i++) {
            kernel_t *k = kmgr_at(g->km, i);
            if (kernel_state(k) != KERNEL_TERMINATING && gw_owns(k, r->caller.tenant))
                json_array_append_new(a, kernel_model(k));
        }
        return req_reply(r, 200, a);
    }
    json_t *body = req_json_body(r);
    if (!body)
        return;
    rest_start_kernel(r, body, on_started);
    json_decref(body);
}

static void on_deleted(struct gw_req *r, kernel_t *k, int status)
{
    req_reply(r, 204, NULL);
}

static void on_restarted(struct gw_req *r, kernel_t *k, int status)
{
    struct kerr err;
    int rc = kops_waited(r->g, k, status);
    if (rc < 0) {
        kops_waited_error(r->g, k, KERR_RESTART, rc, &err);
        return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
    }
    reply_model(r, k, 200);
}

/* The kernel of the request's {id}, if the caller's; NULL after answering 404. A kernel
 * shutting down is only seen by DELETE (and GET, which says it is gone). */
static kernel_t *req_kernel(struct gw_req *r, bool terminating_ok)
{
    kernel_t *k = gw_kernel(r->g, r->route.arg[0], r->caller.tenant);
    if (!k || (kernel_state(k) == KERNEL_TERMINATING && !terminating_ok)) {
        req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
        return NULL;
    }
    return k;
}

void rest_kernel(struct gw_req *r)
{
    struct kerr err;
    kernel_t *k = req_kernel(r, true);
    if (!k)
        return;
    if (r->method == HTTP_M_GET) {
        if (kernel_state(k) == KERNEL_TERMINATING)
            return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
        return reply_model(r, k, 200);
    }
    kops_shutdown(r->g, k, &err); /* as before: whatever it says, wait for the kernel */
    if (req_wait_kernel(r, k, on_deleted) < 0)
        req_reply(r, 204, NULL);
}

/* Runs op (kops_interrupt, kops_restart) on the request's kernel: the kernel, or NULL after
 * replying (no such kernel, or op's error). */
static kernel_t *kernel_op(struct gw_req *r, int (*op)(gw_t *, kernel_t *, struct kerr *))
{
    struct kerr err;
    kernel_t *k = req_kernel(r, false);
    if (k && op(r->g, k, &err) < 0 && err.status) {
        req_error_retry(r, err.status, err.retry_after, "%s", err.message);
        return NULL;
    }
    return k;
}

void rest_kernel_interrupt(struct gw_req *r)
{
    if (kernel_op(r, kops_interrupt))
        req_reply(r, 204, NULL);
}

void rest_kernel_restart(struct gw_req *r)
{
    kernel_t *k = kernel_op(r, kops_restart);
    if (k && req_wait_kernel(r, k, on_restarted) < 0)
        reply_model(r, k, 200);
}

/* POST /api/kernels/{id}/pause and /resume: the kernel's model (200), or 409. */
static void pause_op(struct gw_req *r, bool on)
{
    struct kerr err;
    kernel_t *k = req_kernel(r, false);
    if (!k)
        return;
    if ((on ? kops_pause : kops_resume)(r->g, &r->caller, k, &err) < 0)
        return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
    reply_model(r, k, 200);
}

void rest_kernel_pause(struct gw_req *r)
{
    pause_op(r, true);
}

void rest_kernel_resume(struct gw_req *r)
{
    pause_op(r, false);
}
