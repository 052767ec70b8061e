/* drain: a graceful shutdown on SIGTERM (docs/architecture.md, "Drain").
 *
 * serving --SIGTERM--> draining --no executions, or --drain-timeout, or a second signal-->
 * closing --kernels gone and websockets closed, or a bound--> the loop ends.
 *
 * Draining: no new kernels (kmgr_drain: kmgr_start says -ESHUTDOWN, answered 503 with
 * Retry-After; the warm pool's kernels are killed), /check_ready is 503, and clients keep
 * their websockets while the executions already sent (kmgr_executions) finish. Closing: every
 * websocket is closed with 1001 after what is queued for it, and every kernel is shut down
 * the usual way; main.c's exit path then removes what is left (processes, cgroups, runtime
 * directory). SIGINT skips the wait; a signal while closing ends the loop at once. SIGUSR2
 * (drain_restart) closes at once too, with 1012 "service restart", and shuts down only the
 * kernels that cannot go over (drain_carries): main.c then hands the others over and execs
 * kgw in place (gateway/handover.h). */
#include "gateway/drain.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>

#include "common/log.h"
#include "common/util.h"
#include "gateway/gw.h"

#define DRAIN_TICK_MS     100  /* how often a drain looks at executions and kernels */
#define DRAIN_QUIET_TICKS 2    /* ticks in a row without executions before closing */
#define DRAIN_LOG_MS      5000 /* progress lines at least this often */
#define DRAIN_CLOSE_MS    3000 /* closing's bound beyond --shutdown-grace-ms (SIGTERM, SIGKILL) */

static double since_s(const gw_t *g)
{
    return (double)(util_now_ms() - g->drain.started_ms) / 1000.0;
}

static void finish(gw_t *g)
{
    log_info("drain: done after %.1f s; %s", since_s(g),
             g->drain.restart ? "restarting in place" : "exiting");
    g->drain.phase = GW_STOPPED;
    g->loop.evl.timer_disarm(&g->loop.evl, g->drain.timer);
    g->stopping = true;
    lws_cancel_service(g->ctx);
}

bool drain_carries(gw_t *g, kernel_t *k)
{
    return g->drain.restart && kmgr_carriable(k) && (!g->drain.keeps || g->drain.keeps(g, k));
}

/* The kernels closing waits for: all, but those a restart carries over. */
static size_t ending(gw_t *g)
{
    size_t n = 0;
    for (size_t i = 0; i < kmgr_count(g->km); i++)
        n += !drain_carries(g, kmgr_at(g->km, i));
    return n;
}

/* Closes every websocket (1001, after what is queued) and shuts every kernel down. forced:
 * executions are still running; each such kernel is interrupted first, so that it ends them
 * and honours the shutdown_request instead of waiting out --shutdown-grace-ms. */
static void close_all(gw_t *g, bool forced)
{
    size_t n = ending(g);
    int code = g->drain.restart ? DRAIN_RESTART_CODE : 1001;
    const char *reason = g->drain.restart ? DRAIN_RESTART_REASON : DRAIN_CLOSE_REASON;
    g->drain.phase = GW_CLOSING;
    g->drain.deadline_ms = util_now_ms() + (uint64_t)g->cfg.km.shutdown_grace_ms + DRAIN_CLOSE_MS;
    log_info("drain: closing %d websocket%s (%d) and shutting down %zu kernel%s", g->connections,
             g->connections == 1 ? "" : "s", code, n, n == 1 ? "" : "s");
    /* requests still in flight get their end before the websockets close */
    for (size_t i = 0; i < kmgr_count(g->km); i++)
        kernel_fail_pending(kmgr_at(g->km, i), KERNEL_OUT_SHUTDOWN, reason);
    g->drain.close_websockets(g, code, reason);
    /* kernel_shutdown never removes a kernel from the list before it returns */
    for (size_t i = 0; i < kmgr_count(g->km); i++) {
        kernel_t *k = kmgr_at(g->km, i);
        if (drain_carries(g, k))
            continue;
        if (forced && kernel_executions(k) > 0 && kernel_interrupt(k) == 0)
            log_info("kernel=%s: drain: interrupting its execution", kernel_id(k));
        kernel_shutdown(k, reason);
    }
    g->loop.evl.timer_arm(&g->loop.evl, g->drain.timer, 0);
}

static void on_tick(void *data)
{
    gw_t *g = data;
    uint64_t now = util_now_ms();
    if (g->drain.phase == GW_DRAINING) {
        size_t n = kmgr_executions(g->km);
        g->drain.quiet = n == 0 ? g->drain.quiet + 1 : 0;
        if (g->drain.quiet >= DRAIN_QUIET_TICKS) {
            log_info("drain: no execution running after %.1f s", since_s(g));
            return close_all(g, false);
        }
        if (now >= g->drain.deadline_ms) {
            log_info("drain: --drain-timeout of %lld s reached with %zu execution%s running",
                     g->cfg.drain_timeout, n, n == 1 ? "" : "s");
            return close_all(g, true);
        }
        if (n > 0 && (n != g->drain.execs || now - g->drain.logged_ms >= DRAIN_LOG_MS)) {
            log_info("drain: %zu execution%s running; %.0f s left", n, n == 1 ? "" : "s",
                     (double)(g->drain.deadline_ms - now) / 1000.0);
            g->drain.logged_ms = now;
        }
        g->drain.execs = n;
    } else if (g->drain.phase == GW_CLOSING) {
        size_t n = ending(g);
        if (n == 0 && g->connections == 0)
            return finish(g);
        if (now >= g->drain.deadline_ms) {
            log_warn("drain: %zu kernel%s and %d websocket%s still open after %lld ms; stopping", n,
                     n == 1 ? "" : "s", g->connections, g->connections == 1 ? "" : "s",
                     (long long)g->cfg.km.shutdown_grace_ms + DRAIN_CLOSE_MS);
            return finish(g);
        }
    } else {
        return;
    }
    g->loop.evl.timer_arm(&g->loop.evl, g->drain.timer, DRAIN_TICK_MS);
}

int drain_init(gw_t *g, void (*close_websockets)(gw_t *g, int code, const char *reason),
               bool (*keeps)(gw_t *g, kernel_t *k))
{
    g->drain.close_websockets = close_websockets;
    g->drain.keeps = keeps;
    g->drain.timer = g->loop.evl.timer_new(&g->loop.evl, on_tick, g);
    return g->drain.timer ? 0 : -errno;
}

void drain_fini(gw_t *g)
{
    evl_timer_destroy(&g->loop.evl, &g->drain.timer);
}

bool drain_active(const gw_t *g)
{
    return g->drain.phase != GW_SERVING;
}

bool drain_closing(const gw_t *g)
{
    return g->drain.phase >= GW_CLOSING;
}

void drain_signal(gw_t *g, int signo)
{
    const char *name = signo == SIGINT ? "SIGINT" : "SIGTERM";
    g->drain.restart = false; /* a stop wins over a restart under way */
    if (!g->km) { /* no kernel manager yet: nothing to drain */
        g->drain.phase = GW_STOPPED;
        g->stopping = true;
        lws_cancel_service(g->ctx);
        return;
    }
    switch (g->drain.phase) {
    case GW_SERVING:
        g->drain.started_ms = util_now_ms();
        g->drain.logged_ms = g->drain.started_ms;
        g->drain.deadline_ms = g->drain.started_ms + (uint64_t)g->cfg.drain_timeout * 1000;
        g->drain.phase = GW_DRAINING;
        g->drain.execs = kmgr_executions(g->km);
        if (signo == SIGINT || g->cfg.drain_timeout == 0) {
            log_info("drain: %s: accepting no new kernels; not waiting for the %zu execution%s "
                     "running",
                     name, g->drain.execs, g->drain.execs == 1 ? "" : "s");
            kmgr_drain(g->km);
            return close_all(g, g->drain.execs > 0);
        }
        log_info("drain: %s: accepting no new kernels; %zu kernel%s, %zu execution%s running, "
                 "%d websocket%s; waiting up to %lld s for the executions",
                 name, kmgr_count(g->km), kmgr_count(g->km) == 1 ? "" : "s", g->drain.execs,
                 g->drain.execs == 1 ? "" : "s", g->connections, g->connections == 1 ? "" : "s",
                 g->cfg.drain_timeout);
        kmgr_drain(g->km);
        g->loop.evl.timer_arm(&g->loop.evl, g->drain.timer, 0);
        return;
    case GW_DRAINING:
        log_info("drain: %s again: not waiting for the %zu execution%s running", name,
                 kmgr_executions(g->km), kmgr_executions(g->km) == 1 ? "" : "s");
        return close_all(g, true);
    case GW_CLOSING:
        log_info("drain: %s while closing: stopping now", name);
        return finish(g);
    case GW_STOPPED:
        return;
    }
}

int drain_restart(gw_t *g)
{
    if (g->drain.phase != GW_SERVING)
        return -EBUSY;
    g->drain.restart = true;
    if (!g->km) { /* no kernel manager yet: nothing to close */
        g->drain.phase = GW_STOPPED;
        g->stopping = true;
        lws_cancel_service(g->ctx);
        return 0;
    }
    g->drain.started_ms = g->drain.logged_ms = util_now_ms();
    g->drain.phase = GW_DRAINING;
    g->drain.execs = kmgr_executions(g->km);
    kmgr_drain(g->km);
    size_t n = kmgr_count(g->km), end = ending(g);
    log_info("drain: SIGUSR2: restarting in place; %zu kernel%s go%s over, %zu end%s; %d "
             "websocket%s close",
             n - end, n - end == 1 ? "" : "s", n - end == 1 ? "es" : "", end, end == 1 ? "s" : "",
             g->connections, g->connections == 1 ? "" : "s");
    close_all(g, g->drain.execs > 0);
    return 0;
}
