/* GET /metrics: the gateway's and the kernel manager's counters in the Prometheus text format
 * (protocol/promtext.h), every metric listed in docs/metrics.md. Counters are kept where the
 * events happen (kmgr_stats, gw_stats); this file only reads them, plus a few values read at
 * scrape time (kernels by state, the kernels' cgroups, this process's memory and descriptors).
 * Labels take values from small fixed sets, and kernelspec names: never an id, a tenant, an
 * address or a key. */
#include "gateway/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kcmd.h"
#include "protocol/promtext.h"

/* Label values, in the order of their enums. */
static const char *const start_paths[] = {"pool", "fork", "exec"};
static const char *const start_fails[] = {"sandbox", "timeout", "died", "spawn", "limit", "quota"};
static const char *const deaths[] = {"exit",    "signal",    "oom",    "pids",
                                     "timeout", "heartbeat", "sandbox"};
static const char *const restarts[] = {"auto", "requested"};
static const char *const exec_statuses[] = {"ok", "error", "aborted", "timeout"};
static const char *const directions[] = {"to_kernel", "to_client"};
static const char *const refusals[] = {"auth",           "lockout",   "rate_limit", "quota",
                                       "connection_cap", "bad_input", "kernel_limit"};
static const char *const faces[] = {"channels", "channel"};
static const char *const egress_results[] = {"allowed", "denied"};
static const char *const egress_directions[] = {"to_host", "to_kernel"};
/* enum kernel_state */
static const char *const kernel_states[] = {"starting", "running", "restarting", "terminating",
                                            "dead"};
#define NSTATES 5

_Static_assert(UTIL_ARRAY_SIZE(start_paths) == KMGR_START_N, "start paths");
_Static_assert(UTIL_ARRAY_SIZE(start_fails) == KMGR_FAIL_N, "start failures");
_Static_assert(UTIL_ARRAY_SIZE(deaths) == KMGR_DEATH_N, "deaths");
_Static_assert(UTIL_ARRAY_SIZE(restarts) == KMGR_RESTART_N, "restarts");
_Static_assert(UTIL_ARRAY_SIZE(exec_statuses) == KMGR_EXEC_N, "executions");
_Static_assert(UTIL_ARRAY_SIZE(directions) == KMGR_DIR_N, "directions");
_Static_assert(UTIL_ARRAY_SIZE(refusals) == GW_REFUSED_N, "refusals");
_Static_assert(UTIL_ARRAY_SIZE(faces) == GW_FACE_N, "faces");
_Static_assert(UTIL_ARRAY_SIZE(kernel_states) == NSTATES && KERNEL_DEAD == NSTATES - 1,
               "kernel states");

/* seconds late: a healthy loop's tick is under a millisecond late */
static const double lag_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                    0.1,   0.25,   0.5,   1,    2.5,   5};

void metrics_init(gw_t *g)
{
    hist_init(&g->stats.loop_lag, lag_bounds, UTIL_ARRAY_SIZE(lag_bounds));
}

/* A counter family with one label, a sample per value. */
static void counters(promtext_t *p, const char *name, const char *help, const char *label,
                     const char *const *values, const uint64_t *v, size_t n)
{
    promtext_family(p, name, "counter", help);
    for (size_t i = 0; i < n; i++)
        promtext_uint(p, name, &(struct promtext_label){label, values[i]}, 1, v[i]);
}

/* A counter family with one unlabelled sample. */
/* Secrets put into egress requests and refused, by name (never a value); "" counts names
 * beyond KSECRET_STATS_MAX and placeholders not of the kernel's. */
static void secret_counters(promtext_t *p, const struct ksecret_stats *s)
{
    static const char *const names[] = {"kgw_egress_secret_injections_total",
                                        "kgw_egress_secret_refusals_total"};
    static const char *const helps[] = {
        "Requests kernels' egress proxies put a secret's value into, by secret name",
        "Requests kernels' egress proxies refused for a secret placeholder (a host not the "
        "secret's, or not the kernel's placeholder), by secret name"};
    for (int k = 0; k < 2; k++) {
        promtext_family(p, names[k], "counter", helps[k]);
        for (size_t i = 0; i < s->n; i++)
            promtext_uint(p, names[k], &(struct promtext_label){"secret", s->v[i].name}, 1,
                          k ? s->v[i].refused : s->v[i].injected);
        promtext_uint(p, names[k], &(struct promtext_label){"secret", ""}, 1,
                      k ? s->other_refused : s->other_injected);
    }
}

static void counter(promtext_t *p, const char *name, const char *help, uint64_t v)
{
    promtext_family(p, name, "counter", help);
    promtext_uint(p, name, NULL, 0, v);
}

/* A gauge family with one unlabelled sample; a negative value is unknown and leaves the family
 * out. */
static void gauge(promtext_t *p, const char *name, const char *help, long long v)
{
    if (v < 0)
        return;
    promtext_family(p, name, "gauge", help);
    promtext_uint(p, name, NULL, 0, (uint64_t)v);
}

static void kernels(promtext_t *p, const kmgr_t *km)
{
    const kspecs_t *ks = kmgr_kspecs(km);
    size_t ns = kspecs_count(ks);
    unsigned(*n)[NSTATES] = calloc(ns ? ns : 1, sizeof(*n));
    if (!n) {
        p->err = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < kmgr_count(km); i++) {
        kernel_t *k = kmgr_at(km, i);
        for (size_t s = 0; s < ns; s++)
            if (!strcmp(kspecs_at(ks, s)->name, kernel_spec_name(k))) {
                n[s][kernel_state(k)]++;
                break;
            }
    }
    promtext_family(p, "kgw_kernels", "gauge",
                    "Kernels listed (/api/kernels), by life-cycle state and kernelspec; the warm "
                    "pool's are in kgw_pool_kernels");
    for (size_t s = 0; s < ns; s++)
        for (size_t st = 0; st < NSTATES; st++)
            promtext_uint(p, "kgw_kernels",
                          (struct promtext_label[]){{"state", kernel_states[st]},
                                                    {"kernelspec", kspecs_at(ks, s)->name}},
                          2, n[s][st]);
    free(n);
}

static void pools(promtext_t *p, const kmgr_t *km)
{
    size_t np = kmgr_pool_count(km);
    struct kmgr_pool_info pi;
    promtext_family(p, "kgw_pool_kernels", "gauge",
                    "Kernels waiting in the warm pool, by kernelspec: ready to hand out, or "
                    "still starting");
    for (size_t i = 0; i < np; i++) {
        kmgr_pool_at(km, i, &pi);
        promtext_uint(p, "kgw_pool_kernels",
                      (struct promtext_label[]){{"kernelspec", pi.spec_name}, {"state", "ready"}},
                      2, (uint64_t)pi.ready);
        promtext_uint(p, "kgw_pool_kernels",
                      (struct promtext_label[]){{"kernelspec", pi.spec_name},
                                                {"state", "starting"}},
                      2, (uint64_t)pi.starting);
    }
    promtext_family(p, "kgw_pool_target", "gauge",
                    "Kernels the warm pool aims to hold now, by kernelspec (--pool N, up to 2N "
                    "under demand)");
    for (size_t i = 0; i < np; i++) {
        kmgr_pool_at(km, i, &pi);
        promtext_uint(p, "kgw_pool_target",
                      &(struct promtext_label){"kernelspec", pi.spec_name}, 1,
                      (uint64_t)pi.target);
    }
}

/* Headroom for kernels: descriptors and (reported only) memory. Values that are unknown are
 * left out. */
static void capacity(promtext_t *p, const kmgr_t *km)
{
    struct kmgr_capacity c;
    kmgr_capacity(km, &c);
    gauge(p, "kgw_open_fds", "Open descriptors of the gateway process", c.fd_open);
    gauge(p, "kgw_open_fds_limit", "The gateway's open-file limit (RLIMIT_NOFILE)", c.fd_limit);
    gauge(p, "kgw_kernel_fds",
          "Descriptors budgeted per kernel (the kernel and one client websocket)", c.fd_per_kernel);
    gauge(p, "kgw_kernel_fd_slots_free",
          "More kernels the open-file limit fits, beyond the reserve for clients", c.fd_kernels);
    gauge(p, "kgw_kernel_slots_free",
          "More kernels a client may start now: within --max-kernels and the open-file limit",
          c.kernels_free);
    gauge(p, "kgw_memory_available_bytes", "The host's MemAvailable", c.mem_available);
    gauge(p, "kgw_kernel_memory_slots_free",
          "Kernels at their --mem-limit that MemAvailable fits (reported only: kernels rarely "
          "use their whole limit)",
          c.mem_kernels);
}

/* VmRSS of this process, bytes (-1: unknown). */
static long long resident_bytes(void)
{
    char buf[128];
    long long size, resident;
    if (util_read_small("/proc/self/statm", buf, sizeof(buf)) < 0 ||
        sscanf(buf, "%lld %lld", &size, &resident) != 2)
        return -1;
    return resident * sysconf(_SC_PAGESIZE);
}

int metrics_render(gw_t *g, buf_t *out)
{
    promtext_t pt, *p = &pt;
    const struct kmgr_stats *ks = kmgr_stats(g->km);
    struct kmgr_usage u;
    promtext_init(p, out);

    promtext_family(p, "kgw_build_info", "gauge", "Always 1: the gateway's version");
    promtext_uint(p, "kgw_build_info", &(struct promtext_label){"version", KGW_VERSION}, 1, 1);

    kernels(p, g->km);
    counters(p, "kgw_kernel_starts_total",
             "Kernels started for clients and ready, by how: from the warm pool, forked by the "
             "fork server, or exec'd",
             "path", start_paths, ks->starts, KMGR_START_N);
    promtext_family(p, "kgw_kernel_start_seconds", "histogram",
                    "Time from a client's start request to the kernel being ready, by path");
    for (size_t i = 0; i < KMGR_START_N; i++)
        promtext_hist(p, "kgw_kernel_start_seconds",
                      &(struct promtext_label){"path", start_paths[i]}, 1, &ks->start_seconds[i]);
    counters(p, "kgw_kernel_start_failures_total",
             "Kernels clients asked for that did not start, by reason", "reason", start_fails,
             ks->start_failures, KMGR_FAIL_N);
    counters(p, "kgw_kernel_deaths_total",
             "Kernel processes (pooled ones too) that ended without being asked to, by cause",
             "cause", deaths, ks->deaths, KMGR_DEATH_N);
    counters(p, "kgw_kernel_restarts_total",
             "Kernel restarts: automatic (after a death, or an execution over its wall time) or "
             "requested by a client",
             "cause", restarts, ks->restarts, KMGR_RESTART_N);
    counters(p, "kgw_executions_total",
             "Executions (execute_request, from the kernel's busy to its idle), by how they ended",
             "status", exec_statuses, ks->executions, KMGR_EXEC_N);
    promtext_family(p, "kgw_execution_seconds", "histogram",
                    "Duration of executions, every status");
    promtext_hist(p, "kgw_execution_seconds", NULL, 0, &ks->exec_seconds);

    promtext_family(p, "kgw_websocket_connections", "gauge",
                    "Open websockets: kernel channels (/api/kernels/{id}/channels) and the RPC "
                    "face (/channel)");
    for (size_t i = 0; i < GW_FACE_N; i++)
        promtext_uint(p, "kgw_websocket_connections", &(struct promtext_label){"face", faces[i]},
                      1, (uint64_t)(g->stats.websockets[i] > 0 ? g->stats.websockets[i] : 0));
    counters(p, "kgw_messages_total",
             "Jupyter messages relayed: to kernels for clients, and from kernels for clients "
             "(an iopub message once, however many clients watch)",
             "direction", directions, ks->messages, KMGR_DIR_N);
    counters(p, "kgw_message_bytes_total",
             "Bytes of the messages in kgw_messages_total (header, parent header, metadata, "
             "content, buffers)",
             "direction", directions, ks->message_bytes, KMGR_DIR_N);
    counters(p, "kgw_requests_refused_total",
             "Requests, websocket upgrades, connections and RPC calls refused, by reason",
             "reason", refusals, g->stats.refused, GW_REFUSED_N);

    pools(p, g->km);
    counter(p, "kgw_fork_server_restarts_total",
            "Times the fork server was started again (it died, failed, or was recycled)",
            ks->fork_server_restarts);
    promtext_family(p, "kgw_commands_total", "counter",
                    "Commands run in kernels' sandboxes (docs/commands.md) that ended, by status");
    for (int i = 0; i < KMGR_CMD_STATUS_N; i++)
        promtext_uint(p, "kgw_commands_total",
                      &(struct promtext_label){"status", kcmd_status_name((enum kcmd_status)i)},
                      1, ks->commands[i]);
    counter(p, "kgw_sandbox_setup_failures_total", "Kernel processes whose sandbox set-up failed",
            ks->sandbox_setup_failures);
    counter(p, "kgw_kernel_shutdown_forced_total",
            "kernel processes still running after shutdown_request and the grace period "
            "(--shutdown-grace-ms), then signalled",
            ks->shutdown_forced);
    counters(p, "kgw_egress_connections_total",
             "Connections to kernels' egress proxies, by whether they were let through", "result",
             egress_results, (const uint64_t[]){ks->egress.allowed, ks->egress.denied}, 2);
    counters(p, "kgw_egress_bytes_total",
             "Bytes kernels' egress proxies relayed, to hosts and from them to kernels",
             "direction", egress_directions,
             (const uint64_t[]){ks->egress.bytes_out, ks->egress.bytes_in}, 2);
    secret_counters(p, &ks->secrets);

    kmgr_usage(g->km, &u); /* absent where not accounted: no sandbox, or no CPU accounting */
    gauge(p, "kgw_kernels_memory_bytes",
          "Memory charged to the kernels' cgroups (pooled kernels too), their tmpfs files included",
          u.mem_bytes);
    if (u.cpu_ns >= 0) {
        promtext_family(p, "kgw_kernels_cpu_seconds_total", "counter",
                        "CPU time of the kernels' cgroups since the gateway started (kernels "
                        "gone included)");
        promtext_double(p, "kgw_kernels_cpu_seconds_total", NULL, 0, (double)u.cpu_ns / 1e9);
    }

    gauge(p, "kgw_output_buffer_bytes",
          "Kernel output the gateway holds for clients now (client queues), all kernels",
          (long long)g->out_budget.held);
    gauge(p, "kgw_output_buffer_peak_bytes", "The most kgw_output_buffer_bytes has been",
          (long long)g->out_budget.peak);
    gauge(p, "kgw_output_buffer_limit_bytes", "--output-buffer-bytes, the budget of them",
          (long long)g->out_budget.limit);
    counter(p, "kgw_output_dropped_messages_total",
            "Kernel messages dropped: their kernel was over its output buffer share",
            g->out_budget.dropped);
    counter(p, "kgw_output_dropped_bytes_total", "Bytes of those messages",
            g->out_budget.dropped_bytes);
    gauge(p, "kgw_resident_memory_bytes", "Resident memory of the gateway process",
          resident_bytes());
    capacity(p, g->km);
    promtext_family(p, "kgw_loop_lag_seconds", "histogram",
                    "How late the event loop's 1 s timer ran, each second");
    promtext_hist(p, "kgw_loop_lag_seconds", NULL, 0, &g->stats.loop_lag);
    return promtext_status(p);
}

/* The text is rendered on the loop: under 0.1 ms with 64 kernels (bench/scrape.py). */
void metrics_handle(struct gw_req *r)
{
    buf_t b;
    uint64_t t0 = util_now_us();
    buf_init(&b, METRICS_MAX_BYTES);
    int rc = metrics_render(r->g, &b);
    if (rc < 0) {
        buf_fini(&b);
        log_warn("metrics: cannot render: %s", strerror(-rc));
        return req_error(r, 500, "cannot render the metrics: %s", strerror(-rc));
    }
    log_debug("metrics: %zu bytes rendered in %llu us", b.len,
              (unsigned long long)(util_now_us() - t0));
    req_reply_data(r, PROMTEXT_CONTENT_TYPE, b.data, b.len); /* taken over: freed with r */
}
