/* The warm pool: per kernelspec, kernels started before anyone asks for them, so that
 * kmgr_start can hand one out at once.
 *
 * A pooled kernel is an ordinary kernel (kernel.c: same sandbox, same connection file, same
 * life cycle) that is not in kmgr's list: no listing, culling, lookup or hook sees it, and its
 * workspace is hidden too. It has never run user code. kmgr_start takes one when the request
 * allows it (see kpool__take) and the kernel is then the request's like any other: its
 * tenant is set on its (fresh) workspace, per-kernel limits that apply after start are set,
 * and the request's KERNEL_* variables are applied (kinstance.c, kinstance__adopt).
 *
 * Rules:
 * - Size: per kernelspec, a target between the configured size and twice it. A request that
 *   finds the pool empty raises the target by one; a minute without such a miss lowers it by
 *   one (and a pooled kernel beyond the target is stopped).
 * - Refill: only while fewer than POOL_MAX_STARTING kernels (pooled or users') are starting,
 *   one spawn per loop turn, shortly after a hand-out (so the request's own replies go out
 *   first); the sandbox's set-up runs asynchronously (sbx_start_async), so a spawn holds the
 *   loop only for the fork and the uid maps. Failed starts back off (1 s doubling to 60 s).
 * - Caps: pooled and users' kernels together stay within max-kernels, and workspaces within
 *   max-workspaces and the uid slots; a user's request that needs room stops a pooled kernel
 *   first (kpool__shrink). When every workspace slot is taken, a pooled start evicts the
 *   oldest workspace kept only for downloads, as a user's start would. The pool does not
 *   refill while the host's MemAvailable is below --pool-min-available.
 * - Shutdown: pooled kernels are killed at once (they never ran user code).
 */
#include "kernelmgr/kpool_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kcapacity_int.h"
#include "kernelmgr/kinstance_int.h"
#include "kernelmgr/klaunch_int.h"
#include "kernelmgr/private.h"
#include "kernelmgr/wspace_int.h"

#define POOL_MAX_STARTING    2     /* pooled starts in flight at once */
#define POOL_REFILL_DELAY_MS 20    /* after a hand-out, before the next spawn */
#define POOL_ADAPT_MS        60000 /* a minute without a miss: the target shrinks by one */
#define POOL_MEM_RETRY_MS    5000  /* memory was short: look again */
#define POOL_BACKOFF_MIN_MS  1000
#define POOL_BACKOFF_MAX_MS  60000

static void on_refill(void *data);
static void on_adapt(void *data);

int kpool__init(kmgr_t *m, const struct kpool_ops *ops)
{
    m->pool_ops = ops;
    if (m->o.npool == 0)
        return 0;
    m->pools = calloc(m->o.npool, sizeof(*m->pools));
    if (!m->pools)
        return -ENOMEM;
    for (size_t i = 0; i < m->o.npool; i++) {
        const struct kmgr_pool_size *ps = &m->o.pool[i];
        const kspec_t *spec = kspecs_find(m->specs, ps->spec_name);
        if (ps->size <= 0)
            continue;
        if (!spec) {
            char q[96];
            log_warn("pool: no kernelspec %s; its pool is ignored",
                     log_quote(q, sizeof(q), ps->spec_name, strlen(ps->spec_name)));
            continue;
        }
        struct kpool *p = NULL;
        for (size_t j = 0; j < m->npools; j++)
            if (m->pools[j].spec == spec)
                p = &m->pools[j];
        if (!p)
            p = &m->pools[m->npools++];
        *p = (struct kpool){.spec = spec, .base = ps->size, .target = ps->size};
        log_info("pool: %d warm %s kernel%s (up to %d under demand)", p->base, spec->name,
                 p->base == 1 ? "" : "s", 2 * p->base);
    }
    if (m->npools == 0)
        return 0;
    evl_t *l = m->evl;
    if (!(m->refill = l->timer_new(l, on_refill, m)) || !(m->adapt = l->timer_new(l, on_adapt, m)))
        return -ENOMEM;
    if (m->sandbox_error[0])
        log_warn("pool: not filled: the sandbox is unavailable");
    kpool__kick(m);
    l->timer_arm(l, m->adapt, POOL_ADAPT_MS);
    return 0;
}

void kpool__remove(kmgr_t *m, kernel_t *k)
{
    for (size_t i = 0; i < m->pn; i++)
        if (m->pv[i] == k) {
            memmove(&m->pv[i], &m->pv[i + 1], (m->pn - i - 1) * sizeof(*m->pv));
            m->pn--;
            return;
        }
}

/* Kills and frees a pooled kernel and its workspace (nobody ever saw either). */
void kpool__drop(kmgr_t *m, kernel_t *k)
{
    wspace_t *ws = k->ws;
    kpool__remove(m, k);
    ws->holds++; /* kept until the kernel is freed, then removed now, without grace */
    kinstance__free(k);
    m->pool_ops->ws_remove(m, ws);
    wspace__free(ws);
}

void kpool__fini(kmgr_t *m)
{
    for (size_t i = 0; i < m->pn; i++)
        klaunch__signal(m->pv[i], SIGKILL);
    while (m->pn > 0)
        kpool__drop(m, m->pv[m->pn - 1]);
    free(m->pv);
    m->pv = NULL;
    m->pcap = 0;
    evl_timer_destroy(m->evl, &m->refill);
    evl_timer_destroy(m->evl, &m->adapt);
    free(m->pools);
    m->pools = NULL;
    m->npools = 0;
}

void kpool__kick(kmgr_t *m)
{
    if (!m->refill || m->refill_armed)
        return;
    m->refill_armed = true;
    m->evl->timer_arm(m->evl, m->refill, POOL_REFILL_DELAY_MS);
}

static void rearm(kmgr_t *m, uint64_t ms)
{
    m->refill_armed = true;
    m->evl->timer_arm(m->evl, m->refill, ms);
}

static void count(const kmgr_t *m, const struct kpool *p, int *ret_ready, int *ret_starting)
{
    int ready = 0, starting = 0;
    for (size_t i = 0; i < m->pn; i++)
        if (!p || m->pv[i]->pool == p) {
            ready += m->pv[i]->state == KERNEL_RUNNING;
            starting += m->pv[i]->state != KERNEL_RUNNING;
        }
    *ret_ready = ready;
    *ret_starting = starting;
}

bool kmgr_memory_short(const kmgr_t *m)
{
    if (m->o.pool_min_available <= 0)
        return false;
    long long avail = kcapacity__mem_available();
    return avail >= 0 && avail < m->o.pool_min_available;
}

static bool slot_free(const kmgr_t *m)
{
    for (size_t i = 0; i < m->nslots; i++)
        if (!m->slots[i])
            return true;
    return false;
}

/* Room for one more pooled kernel: -EAGAIN (wait for a kick), -ENOMEM or -EMFILE (look again
 * later). Kernels: only what users leave free. Workspaces: when all are taken, the oldest one kept
 * only for downloads makes room, as it would for the next user's start (which the pooled
 * kernel is, started early; the pool holds at most its target). */
static int room(kmgr_t *m)
{
    if (m->o.max_kernels > 0 && m->n + m->pn >= (size_t)m->o.max_kernels)
        return -EAGAIN;
    if ((m->nws >= (size_t)m->o.max_workspaces || (m->o.sandbox && !slot_free(m))) &&
        !m->pool_ops->ws_idle(m))
        return -EAGAIN;
    if (kmgr_memory_short(m))
        return -ENOMEM;
    /* descriptors: a pooled kernel leaves room for a user's start beside it */
    if (kcapacity__fd_left(m) < 2 * kcapacity__fd_per_kernel(m))
        return -EMFILE;
    return 0;
}

static void failed(kmgr_t *m, struct kpool *p)
{
    uint64_t delay = POOL_BACKOFF_MIN_MS;
    for (int i = 1; i < p->fails && delay < POOL_BACKOFF_MAX_MS; i++)
        delay *= 2;
    if (delay > POOL_BACKOFF_MAX_MS)
        delay = POOL_BACKOFF_MAX_MS;
    p->fails++;
    p->retry_at_ms = util_now_ms() + delay;
    log_warn("pool: a %s kernel failed to start; next try in %llu ms", p->spec->name,
             (unsigned long long)delay);
}

static void spawn(kmgr_t *m, struct kpool *p)
{
    long long size = m->o.sandbox ? m->o.sandbox->lim.workspace_bytes : 0;
    wspace_t *ws;
    if (m->pn == m->pcap) {
        size_t c = m->pcap ? 2 * m->pcap : 8;
        kernel_t **nv = realloc(m->pv, c * sizeof(*nv));
        if (!nv)
            return failed(m, p);
        m->pv = nv;
        m->pcap = c;
    }
    int r = m->pool_ops->new_workspace(m, "", size, true, &ws);
    if (r < 0) {
        log_warn("pool: cannot create a workspace: %s", strerror(-r));
        return failed(m, p);
    }
    ws->pooled = true;
    ws->holds++; /* a failed kinstance__new must not free it behind our back */
    kernel_t *k = kinstance__new(m, p->spec, NULL, NULL, ws, p, NULL, NULL, 0, m->pool_ops->kernel_owner);
    ws->holds--;
    if (!k) {
        m->pool_ops->ws_remove(m, ws);
        wspace__free(ws);
        return failed(m, p);
    }
    m->pv[m->pn++] = k;
    log_debug("kernel=%s: starting %s for the pool", k->id, p->spec->name);
}

static void on_refill(void *data)
{
    kmgr_t *m = data;
    uint64_t now = util_now_ms(), wake = 0;
    struct kpool *best = NULL;
    int best_deficit = 0, ready, starting;
    m->refill_armed = false;
    if (m->sandbox_error[0])
        return;
    /* users' kernels that are starting count too: the pool only uses spare time */
    count(m, NULL, &ready, &starting);
    for (size_t i = 0; i < m->n; i++)
        starting += m->v[i]->state == KERNEL_STARTING || m->v[i]->state == KERNEL_RESTARTING;
    if (starting >= POOL_MAX_STARTING)
        return; /* a kernel becoming ready or going away kicks */
    for (size_t i = 0; i < m->npools; i++) {
        struct kpool *p = &m->pools[i];
        count(m, p, &ready, &starting);
        int deficit = p->target - ready - starting;
        if (deficit <= 0)
            continue;
        if (p->retry_at_ms > now) {
            if (!wake || p->retry_at_ms < wake)
                wake = p->retry_at_ms;
            continue;
        }
        if (deficit > best_deficit) {
            best = p;
            best_deficit = deficit;
        }
    }
    if (!best) {
        if (wake)
            rearm(m, wake - now);
        return;
    }
    int r = room(m);
    if (r == -ENOMEM || r == -EMFILE) {
        log_debug("pool: %s; not refilling",
                  r == -ENOMEM ? "host memory below --pool-min-available"
                               : "the open-file limit leaves no room beside a user's start");
        rearm(m, POOL_MEM_RETRY_MS);
        return;
    }
    if (r < 0)
        return; /* a kernel or workspace going away kicks */
    spawn(m, best);
    rearm(m, 0); /* the next one, if any, on the next loop turn */
}

static void on_adapt(void *data)
{
    kmgr_t *m = data;
    uint64_t now = util_now_ms();
    for (size_t i = 0; i < m->npools; i++) {
        struct kpool *p = &m->pools[i];
        if (p->target > p->base && now - p->last_miss_ms >= POOL_ADAPT_MS) {
            p->target--;
            log_debug("pool: %s target down to %d", p->spec->name, p->target);
        }
        int ready, starting;
        count(m, p, &ready, &starting);
        for (size_t j = m->pn; j > 0 && ready + starting > p->target; j--) {
            kernel_t *k = m->pv[j - 1];
            if (k->pool == p && k->state == KERNEL_RUNNING) {
                log_info("kernel=%s: stopping a pooled %s kernel beyond the pool's target",
                         k->id, p->spec->name);
                kpool__drop(m, k);
                ready--;
            }
        }
    }
    m->evl->timer_arm(m->evl, m->adapt, POOL_ADAPT_MS);
}

/* Only what can be applied to a started kernel without cheating: a fresh workspace, and the
 * sandbox limits the pooled kernel was started with. */
static bool fits(const kmgr_t *m, bool shared_ws, const struct kmgr_limits *lim)
{
    if (shared_ws)
        return false;
    if (!lim)
        return true;
    if (!m->o.sandbox)
        return !lim->mem_bytes && !lim->cpu_millis && !lim->pids && !lim->workspace_bytes;
    const struct sbx_limits *g = &m->o.sandbox->lim;
    return (!lim->mem_bytes || lim->mem_bytes == g->mem_bytes) &&
           (!lim->cpu_millis || lim->cpu_millis == g->cpu_millis) &&
           (!lim->pids || lim->pids == g->pids) &&
           (!lim->workspace_bytes || lim->workspace_bytes == g->workspace_bytes);
}

kernel_t *kpool__take(kmgr_t *m, const kspec_t *spec, bool shared_ws,
                      const struct kmgr_limits *lim)
{
    struct kpool *p = NULL;
    for (size_t i = 0; i < m->npools; i++)
        if (m->pools[i].spec == spec)
            p = &m->pools[i];
    if (!p || !fits(m, shared_ws, lim))
        return NULL;
    kernel_t *best = NULL;
    for (size_t i = 0; i < m->pn; i++) {
        kernel_t *k = m->pv[i];
        if (k->pool != p)
            continue;
        if (k->state == KERNEL_RUNNING) {
            best = k;
            break;
        }
        if (!best && k->state == KERNEL_STARTING)
            best = k; /* the oldest start: part of its start-up is already done */
    }
    if (!best) {
        p->misses++;
        p->last_miss_ms = util_now_ms();
        if (p->target < 2 * p->base) {
            p->target++;
            log_debug("pool: %s empty; target up to %d", spec->name, p->target);
        }
        kpool__kick(m);
        return NULL;
    }
    p->handouts++;
    kpool__remove(m, best);
    kpool__kick(m);
    return best;
}

bool kpool__shrink(kmgr_t *m)
{
    if (m->pn == 0)
        return false;
    kernel_t *k = m->pv[m->pn - 1]; /* the newest: the least invested in */
    log_info("kernel=%s: stopping a pooled %s kernel to make room", k->id, k->spec->name);
    kpool__drop(m, k);
    return true;
}

void kpool__ready(kmgr_t *m, kernel_t *k)
{
    struct kpool *p = k->pool;
    p->fails = 0;
    if (!p->filled) { /* said once: operators and the start-up check look for it */
        int ready, starting;
        count(m, p, &ready, &starting);
        if (ready >= p->base) {
            p->filled = true;
            log_info("pool: %s filled (%d warm kernel%s)", p->spec->name, ready,
                     ready == 1 ? "" : "s");
        }
    }
    kpool__kick(m);
}

void kpool__lost(kmgr_t *m, kernel_t *k, bool failed_start)
{
    struct kpool *p = k->pool;
    kpool__drop(m, k);
    if (failed_start)
        failed(m, p);
    kpool__kick(m);
}

json_t *kmgr_pool_model(const kmgr_t *m)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < m->npools; i++) {
        const struct kpool *p = &m->pools[i];
        int ready, starting;
        count(m, p, &ready, &starting);
        json_object_set_new(o, p->spec->name,
                            json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "size", p->base, "target",
                                      p->target, "ready", ready, "starting", starting,
                                      "handouts", p->handouts, "misses", p->misses));
    }
    return o;
}

size_t kmgr_pool_count(const kmgr_t *m)
{
    return m->npools;
}

void kmgr_pool_at(const kmgr_t *m, size_t i, struct kmgr_pool_info *ret)
{
    const struct kpool *p = &m->pools[i];
    ret->spec_name = p->spec->name;
    ret->target = p->target;
    count(m, p, &ret->ready, &ret->starting);
}
