/* The execute API (docs/execute.md): executions as resources. An execution is queued per
 * kernel, sent as an execute_request through the API's own kconn session on that kernel, and
 * its iopub output becomes numbered events kept in the execution's own store; every reader
 * (the POST's response, GET .../events) is a cursor into that store, written on lws writeable
 * callbacks, so a slow or vanished reader costs nothing but its cursor. Finished executions
 * are kept for --execution-retention seconds within --execution-budget-bytes per tenant. */
#include "gateway/xapi.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "gateway/files.h"
#include "gateway/http.h"
#include "gateway/kops.h"
#include "gateway/wsnap.h"
#include "kernelmgr/kconn.h"
#include "protocol/xevent.h"
#include "protocol/xreq.h"

#define XAPI_BATCH_BYTES  (64 * 1024) /* events written per lws_write */
#define XAPI_STALL_SECS   60          /* a reader that takes nothing this long is cut */
#define XAPI_SWEEP_MS     1000        /* retention checks */
#define XAPI_KEY_MAX      128         /* bytes of an Idempotency-Key */
#define XAPI_MAX_EXECS    100000      /* executions held at once, all tenants */
#define XAPI_EXEC_BYTES   (sizeof(xexec_t) + 256) /* an execution's own memory, in budgets */
#define XAPI_REINTERRUPT_MS 500       /* a cancelled or timed-out execution: interrupt again */
#define XAPI_INTERRUPTS_MAX 20
#define XAPI_RESTART_AFTER  10 /* interrupts a timed-out execution ignored: restart the kernel */

enum xstate { X_QUEUED, X_RUNNING, X_DONE };

static const char *const state_names[] = {"queued", "running", "done"};

struct xevt {
    uint64_t seq;
    const char *type; /* a static string */
    size_t len;
    char json[];
};

struct xtenant {
    struct list link;
    size_t bytes; /* events held by its executions */
    char name[KEYFILE_TENANT_MAX + 1];
};

struct xkern;

typedef struct xexec {
    struct list link;  /* xapi.execs, oldest first */
    struct list qlink; /* xkern.queue while queued */
    struct xapi *xa;
    struct xkern *xk; /* while queued or running */
    struct xtenant *tn;
    char id[UTIL_UUID_LEN + 1];
    char kernel_id[40];
    char workspace_id[WSPACE_ID_MAX + 1];
    char msg_id[40]; /* of its execute_request, once sent */
    enum xstate state;
    struct xevt **ev; /* held events: seq first_seq .. next_seq - 1 */
    size_t nev, cap;
    uint64_t first_seq, next_seq;
    json_t *end; /* the end event, once done */
    struct xreq req;
    int64_t queued_wall_us;
    uint64_t sent_us, done_ms;
    bool begun; /* the kernel runs its code (execute_input; busy when silent) */
    bool restarted; /* over its timeout, it ignored the interrupts: the kernel was restarted */
    int interrupts;
    bool aborted; /* the kernel answered "aborted" (another client's execution failed) */
    bool evicted; /* its events were dropped for the budget: freed by the next sweep */
    bool cancelled, timed_out, saw_error, reply_error, idle_seen, oneshot, keep, gone;
    json_int_t exec_count; /* -1: unknown */
    wsnap_t *before;
    evl_timer_t *timer;  /* the request's timeout */
    evl_timer_t *settle; /* idle came: the end, unless exec_end comes first */
    evl_timer_t *after;  /* one-shot: delete the kernel after the end */
    kwait_t *wait;       /* one-shot: the kernel's start */
    char key[XAPI_KEY_MAX + 1];
    unsigned char body_hash[crypto_hash_sha256_BYTES];
    struct list readers;
} xexec_t;

/* The API's state on one kernel (kernel_data of the listener's slot). */
struct xkern {
    kernel_t *k;
    kconn_t *kc;
    struct list queue; /* xexec_t.qlink, in order */
    size_t nqueued;
    xexec_t *running;
    evl_timer_t *pump; /* the next one is sent from the loop, never inside a kernel's event */
    /* the outcome of the last execution the kernel process did not finish (exec_end): the
     * queued ones end alike when it restarts */
    const char *died_status;
    char died_cause[256];
    gw_t *g;
    char session[UTIL_UUID_LEN + 1];
};

struct xreader {
    struct list link; /* xexec_t.readers */
    xexec_t *x;
    struct gw_req *r;
    enum xreq_format fmt;
    uint64_t cursor;
    int status;
    bool headers_sent;
};

struct xapi {
    gw_t *g;
    struct list execs;
    size_t count;
    struct list tenants;
    evl_timer_t *sweep;
};

static void interrupt_now(xexec_t *x);
static void finish(xexec_t *x, const char *status, const char *cause,
                   const struct kernel_exec_end *e);
static void pump(struct xkern *xk);

/* ---- the store ---- */

static struct xtenant *tenant_get(struct xapi *xa, const char *name)
{
    struct xtenant *t;
    list_for_each(t, &xa->tenants, link)
    {
        if (!strcmp(t->name, name))
            return t;
    }
    if (!(t = calloc(1, sizeof(*t))))
        return NULL;
    snprintf(t->name, sizeof(t->name), "%s", name);
    list_append(&xa->tenants, &t->link);
    return t;
}

static void wake(xexec_t *x)
{
    struct xreader *rd;
    list_for_each(rd, &x->readers, link)
    {
        lws_callback_on_writable(rd->r->wsi);
    }
}

static void drop_front(xexec_t *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        x->tn->bytes -= x->ev[i]->len;
        free(x->ev[i]);
    }
    memmove(x->ev, x->ev + n, (x->nev - n) * sizeof(*x->ev));
    x->nev -= n;
    x->first_seq += n;
}

static void exec_free(xexec_t *x)
{
    struct xreader *rd, *tmp;
    list_for_each_safe(rd, tmp, &x->readers, link)
    {
        list_remove(&rd->link);
        rd->x = NULL;
    }
    evl_t *evl = &x->xa->g->loop.evl;
    evl_timer_destroy(evl, &x->timer);
    evl_timer_destroy(evl, &x->settle);
    evl_timer_destroy(evl, &x->after);
    kwait_cancel(&x->wait);
    drop_front(x, x->nev);
    free(x->ev);
    json_decref(x->end);
    xreq_fini(&x->req);
    wsnap_destroy(&x->before);
    list_remove(&x->link);
    x->xa->count--;
    x->tn->bytes -= XAPI_EXEC_BYTES;
    free(x);
}

/* Over the tenant's budget: the events of finished executions nobody reads go first (oldest
 * first; the execution itself, with its end, is freed by the next sweep), then the oldest
 * events of x itself (readers behind them are cut; a replay answers 410). Nothing is unlinked
 * here: callers may be walking the list. */
static void enforce_budget(struct xapi *xa, xexec_t *x)
{
    size_t budget = (size_t)xa->g->cfg.execution_budget_bytes;
    xexec_t *o;
    if (x->tn->bytes <= budget)
        return;
    list_for_each(o, &xa->execs, link)
    {
        if (x->tn->bytes <= budget)
            return;
        if (o != x && o->tn == x->tn && o->state == X_DONE && list_empty(&o->readers) &&
            o->nev > 0) {
            drop_front(o, o->nev);
            o->evicted = true;
        }
    }
    size_t n = 0, freed = 0;
    while (n + 1 < x->nev && x->tn->bytes - freed > budget)
        freed += x->ev[n++]->len;
    if (n > 0) {
        log_info("xapi: execution=%s: over the tenant's budget of %zu bytes; its first %zu "
                 "events dropped",
                 x->id, budget, n);
        drop_front(x, n);
    }
}

/* Appends an event (ev: its fields but seq; taken). */
static void emit(xexec_t *x, json_t *ev, const char *type)
{
    if (!ev)
        return;
    json_t *o = json_pack("{s:I}", "seq", (json_int_t)x->next_seq); /* seq first */
    if (o)
        json_object_update(o, ev);
    json_decref(ev);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
                : NULL;
    json_decref(o);
    size_t len = s ? strlen(s) : 0;
    struct xevt *e = s ? malloc(sizeof(*e) + len + 1) : NULL;
    if (e && x->nev == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        struct xevt **v = realloc(x->ev, cap * sizeof(*v));
        if (v) {
            x->ev = v;
            x->cap = cap;
        }
    }
    if (!e || x->nev == x->cap) {
        log_warn("xapi: execution=%s: out of memory: event dropped", x->id);
        free(s);
        free(e);
        return;
    }
    e->seq = x->next_seq++;
    e->type = type;
    e->len = len;
    memcpy(e->json, s, len + 1);
    free(s);
    x->ev[x->nev++] = e;
    x->tn->bytes += len;
    enforce_budget(x->xa, x);
    wake(x);
}

static xexec_t *exec_find(struct xapi *xa, const char *id, const char *tenant)
{
    xexec_t *x;
    list_for_each(x, &xa->execs, link)
    {
        if (!strcmp(x->id, id) && !strcmp(x->tn->name, tenant))
            return x;
    }
    return NULL;
}

static xexec_t *exec_by_key(struct xapi *xa, const char *key, const char *tenant)
{
    xexec_t *x;
    list_for_each(x, &xa->execs, link)
    {
        if (x->key[0] && !strcmp(x->key, key) && !strcmp(x->tn->name, tenant))
            return x;
    }
    return NULL;
}

static void on_sweep(void *data)
{
    struct xapi *xa = data;
    uint64_t now = util_now_ms(), keep = (uint64_t)xa->g->cfg.execution_retention * 1000;
    xexec_t *x, *tmp;
    list_for_each_safe(x, tmp, &xa->execs, link)
    {
        if (x->state == X_DONE && (x->evicted || x->done_ms + keep <= now) &&
            list_empty(&x->readers))
            exec_free(x);
    }
    xa->g->loop.evl.timer_arm(&xa->g->loop.evl, xa->sweep, XAPI_SWEEP_MS);
}

/* ---- kernels ---- */

static void on_reply(void *user, kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    struct xkern *xk = user;
    xexec_t *x = xk->running;
    jhdr_t ph;
    if (!x || chan != JCHAN_SHELL || strcmp(h->msg_type, "execute_reply") != 0 ||
        jhdr_parse(m->part[JPART_PARENT], &ph) < 0 || strcmp(ph.msg_id, x->msg_id) != 0)
        return;
    json_t *c2 = json_loadb(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, 0, NULL);
    json_t *n = json_object_get(c2, "execution_count");
    const char *st = json_string_value(json_object_get(c2, "status"));
    if (json_is_integer(n))
        x->exec_count = json_integer_value(n);
    if (st && strcmp(st, "ok") != 0)
        x->reply_error = true;
    if (st && !strcmp(st, "aborted"))
        x->aborted = true;
    json_decref(c2);
}

static const struct kconn_ops kconn_ops = {.reply = on_reply};

static void on_pump(void *data)
{
    pump(data);
}

static void pump_soon(struct xkern *xk)
{
    xk->g->loop.evl.timer_arm(&xk->g->loop.evl, xk->pump, 0);
}

static struct xkern *xkern_get(gw_t *g, kernel_t *k)
{
    struct xkern *xk = kernel_data(k, g->xapi_listener.slot);
    if (xk)
        return xk;
    if (!(xk = calloc(1, sizeof(*xk))))
        return NULL;
    if (!(xk->pump = g->loop.evl.timer_new(&g->loop.evl, on_pump, xk))) {
        free(xk);
        return NULL;
    }
    xk->g = g;
    xk->k = k;
    list_init(&xk->queue);
    util_uuid(xk->session);
    kernel_set_data(k, g->xapi_listener.slot, xk);
    return xk;
}

static void xkern_free(gw_t *g, struct xkern *xk)
{
    kernel_set_data(xk->k, g->xapi_listener.slot, NULL);
    evl_timer_destroy(&g->loop.evl, &xk->pump);
    kconn_destroy(&xk->kc);
    free(xk);
}

static char *execute_content(const struct xreq *q)
{
    json_t *ue = q->user_expressions ? json_incref(q->user_expressions) : json_object();
    json_t *c = json_pack("{s:s, s:b, s:b, s:o, s:b, s:b}", "code", q->code, "silent", q->silent,
                          "store_history", q->store_history, "user_expressions", ue,
                          "allow_stdin", 0, "stop_on_error", 0);
    char *s = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    return s;
}

static int send_execute(struct xkern *xk, xexec_t *x)
{
    if (!xk->kc && !(xk->kc = kconn_new(xk->k, xk->session, &kconn_ops, xk)))
        return -errno;
    char *hdr = jmsg_new_header("execute_request", xk->session, x->msg_id);
    char *body = execute_content(&x->req);
    int rc = -ENOMEM;
    if (hdr && body) {
        jmsg_t m;
        jhdr_t h;
        jmsg_own(&m, &h, hdr, x->msg_id, "execute_request", NULL, body);
        rc = kconn_send(xk->kc, JCHAN_SHELL, &m, &h);
    }
    free(hdr);
    free(body);
    return rc;
}

static void start_next(struct xkern *xk)
{
    gw_t *g = NULL;
    xexec_t *x = list_first(&xk->queue, xexec_t, qlink);
    list_remove(&x->qlink);
    list_init(&x->qlink);
    xk->nqueued--;
    g = x->xa->g;
    wspace_t *w = kmgr_workspace(g->km, x->workspace_id);
    if (w)
        x->before = wsnap_take(wspace_path(w), WSNAP_MAX_ENTRIES, WSNAP_MAX_DEPTH);
    int rc = send_execute(xk, x);
    if (rc < 0) {
        char cause[160];
        snprintf(cause, sizeof(cause), "the execution could not be sent to the kernel: %s",
                 strerror(-rc));
        x->xk = NULL;
        finish(x, "error", cause, NULL);
        return;
    }
    free(x->req.code); /* sent: not needed any more (it is not kept for retention) */
    x->req.code = NULL;
    json_decref(x->req.user_expressions);
    x->req.user_expressions = NULL;
    x->state = X_RUNNING;
    x->sent_us = util_now_us();
    xk->running = x;
    if (x->req.timeout > 0)
        g->loop.evl.timer_arm(&g->loop.evl, x->timer, (uint64_t)(x->req.timeout * 1000.0));
    wake(x);
}

/* Sends the next queued execution when the kernel runs and has none of ours in progress. */
static void pump(struct xkern *xk)
{
    while (!xk->running && !list_empty(&xk->queue) && kernel_state(xk->k) == KERNEL_RUNNING)
        start_next(xk);
}

static void on_iopub(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    gw_t *g = user;
    struct xkern *xk = kernel_data(k, g->xapi_listener.slot);
    xexec_t *x = xk ? xk->running : NULL;
    jhdr_t ph;
    if (!x || !memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, x->msg_id,
                      strlen(x->msg_id)) ||
        jhdr_parse(m->part[JPART_PARENT], &ph) < 0 || strcmp(ph.msg_id, x->msg_id) != 0)
        return;
    json_t *c = json_loadb(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, 0, NULL);
    if (!strcmp(h->msg_type, "status")) {
        const char *st = json_string_value(json_object_get(c, "execution_state"));
        if (st && !strcmp(st, "idle") && !x->idle_seen) {
            x->idle_seen = true;
            g->loop.evl.timer_arm(&g->loop.evl, x->settle, 0);
        } else if (st && !strcmp(st, "busy") && x->req.silent) {
            x->begun = true;
        }
    } else if (!strcmp(h->msg_type, "execute_input")) {
        json_t *n = json_object_get(c, "execution_count");
        if (json_is_integer(n))
            x->exec_count = json_integer_value(n);
        x->begun = true;
        if (x->cancelled || x->timed_out)
            interrupt_now(x);
    } else {
        const char *type = NULL;
        json_t *ev = xevent_from_iopub(h->msg_type, c, &type);
        if (ev && !strcmp(type, "error"))
            x->saw_error = true;
        if (ev && !strcmp(type, "result") &&
            json_is_integer(json_object_get(ev, "execution_count")))
            x->exec_count = json_integer_value(json_object_get(ev, "execution_count"));
        emit(x, ev, type);
    }
    json_decref(c);
}

static void on_exec_end(void *user, kernel_t *k, const struct kernel_exec_end *e)
{
    gw_t *g = user;
    struct xkern *xk = kernel_data(k, g->xapi_listener.slot);
    xexec_t *x = xk ? xk->running : NULL;
    if (!x || strcmp(e->msg_id, x->msg_id) != 0)
        return;
    log_debug("xapi: execution=%s kernel=%s: exec_end %s cpu_ns=%lld peak=%lld", x->id,
              x->kernel_id, kernel_outcome_status(e->outcome), e->cpu_ns, e->peak_mem_bytes);
    const char *cause = e->cause;
    if (e->outcome != KERNEL_OUT_OK && e->outcome != KERNEL_OUT_ERROR &&
        e->outcome != KERNEL_OUT_TIMEOUT && e->outcome != KERNEL_OUT_OUTPUT_LIMIT) {
        xk->died_status = kernel_outcome_status(e->outcome);
        snprintf(xk->died_cause, sizeof(xk->died_cause), "%s", e->cause);
    }
    if (e->outcome == KERNEL_OUT_ERROR && x->aborted && !x->saw_error)
        cause = "the kernel aborted the request: an earlier execution on it failed";
    finish(x, kernel_outcome_status(e->outcome), cause, e);
}

/* idle came and no exec_end followed in the same turn: the end as the API sees it */
static void on_settle(void *data)
{
    xexec_t *x = data;
    if (x->state == X_RUNNING)
        finish(x, x->saw_error || x->reply_error ? "error" : "ok",
               x->aborted && !x->saw_error
                   ? "the kernel aborted the request: an earlier execution on it failed"
                   : "",
               NULL);
}

static void end_queued(struct xkern *xk, const char *status, const char *cause)
{
    while (!list_empty(&xk->queue)) {
        xexec_t *x = list_first(&xk->queue, xexec_t, qlink);
        list_remove(&x->qlink);
        list_init(&x->qlink);
        xk->nqueued--;
        x->xk = NULL;
        finish(x, status, cause, NULL);
    }
}

/* The running execution and every queued one end (the kernel's own queue is answered alike).
 * The kernel manager has told the running one's end already (exec_end) when it could: this
 * is for what it could not. */
static void end_all(struct xkern *xk, const char *status, const char *cause)
{
    if (xk->running)
        finish(xk->running, status, cause, NULL);
    end_queued(xk, status, cause);
}

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    gw_t *g = user;
    struct xkern *xk = kernel_data(k, g->xapi_listener.slot);
    char cause[256];
    snprintf(cause, sizeof(cause), "%s%s%s", ev == KERNEL_EV_RESTART ? "the kernel was restarted"
                                             : ev == KERNEL_EV_GONE  ? "the kernel was shut down"
                                                                     : "the kernel died",
             detail && detail[0] ? ": " : "", detail ? detail : "");
    if (ev == KERNEL_EV_GONE) { /* (one-shot executions wait for their kernel without an xk) */
        xexec_t *x;
        list_for_each(x, &g->xapi->execs, link)
        {
            if (strcmp(x->kernel_id, kernel_id(k)) != 0)
                continue;
            x->gone = true;
            if (x->wait) { /* its kernel never started: the wait goes with the kernel */
                kwait_cancel(&x->wait);
                finish(x, "shutdown", cause, NULL);
            }
        }
    }
    if (!xk)
        return;
    switch (ev) {
    case KERNEL_EV_STARTED:
        xk->died_status = NULL;
        pump_soon(xk);
        return;
    case KERNEL_EV_RESTARTING: /* as the requests in the kernel's own queue: none run after */
        if (xk->died_status)
            end_all(xk, xk->died_status, xk->died_cause);
        else
            end_all(xk, "kernel_died", cause);
        xk->died_status = NULL;
        return;
    case KERNEL_EV_RESTART: /* the running one hears its end from the kernel (exec_end) */
        end_queued(xk, "kernel_restarted", cause);
        return;
    case KERNEL_EV_DIED:
        end_all(xk, "kernel_died", cause);
        return;
    case KERNEL_EV_GONE:
        end_all(xk, "shutdown", cause);
        xkern_free(g, xk);
        return;
    default:
        return;
    }
}

/* The kernel manager's notices about an execution (output cut, wall time exceeded) reach its
 * readers as a stderr stream, as they reach Jupyter clients. */
static void on_notice(void *user, kernel_t *k, jspan_t parent, const char *text)
{
    gw_t *g = user;
    struct xkern *xk = kernel_data(k, g->xapi_listener.slot);
    xexec_t *x = xk ? xk->running : NULL;
    if (!x || !memmem(parent.p, parent.n, x->msg_id, strlen(x->msg_id)))
        return;
    char line[300];
    snprintf(line, sizeof(line), "[kgw] %s\n", text);
    emit(x, json_pack("{s:s, s:s, s:s}", "type", "stream", "name", "stderr", "text", line),
         "stream");
}

static const struct kmgr_listener_ops listener_ops = {
    .iopub = on_iopub, .event = on_event, .notice = on_notice, .exec_end = on_exec_end};

/* ---- the life of an execution ---- */

/* Interrupts the kernel for a cancelled or timed-out execution once it runs the code (a SIGINT
 * before that is lost: ipykernel ignores it between requests), again every
 * XAPI_REINTERRUPT_MS while the execution goes on. */
static void interrupt_now(xexec_t *x)
{
    gw_t *g = x->xa->g;
    struct kops_error err;
    kernel_t *k = kmgr_find(g->km, x->kernel_id);
    if (x->state != X_RUNNING)
        return;
    if (!k) {
        finish(x, "cancelled", "", NULL);
        return;
    }
    if (x->begun) {
        x->interrupts++;
        kops_interrupt(g, k, &err);
    }
    if (x->interrupts < XAPI_INTERRUPTS_MAX)
        g->loop.evl.timer_arm(&g->loop.evl, x->timer, XAPI_REINTERRUPT_MS);
}

static void on_timeout(void *data)
{
    xexec_t *x = data;
    if (x->state != X_RUNNING)
        return;
    if (!x->cancelled && !x->timed_out) {
        x->timed_out = true;
        log_info("xapi: execution=%s kernel=%s: over its timeout of %g s: interrupting it",
                 x->id, x->kernel_id, x->req.timeout);
    }
    gw_t *g = x->xa->g;
    kernel_t *k = kmgr_find(g->km, x->kernel_id);
    struct kops_error err;
    if (k && x->timed_out && !x->cancelled && !x->restarted &&
        x->interrupts >= XAPI_RESTART_AFTER) {
        /* as the gateway's own wall-time limit: a kernel that ignores SIGINT is restarted */
        log_info("xapi: execution=%s kernel=%s: the interrupts were ignored: restarting the "
                 "kernel",
                 x->id, x->kernel_id);
        x->restarted = true; /* the restart answers the execution before it returns */
        x->restarted = kops_restart(g, k, &err) == 0;
        if (x->restarted)
            return;
    }
    interrupt_now(x);
}

static void on_after(void *data)
{
    xexec_t *x = data;
    gw_t *g = x->xa->g;
    struct kops_error err;
    kernel_t *k = x->gone ? NULL : kmgr_find(g->km, x->kernel_id);
    if (k && kernel_state(k) != KERNEL_TERMINATING)
        kops_shutdown(g, k, &err);
}

static void finish(xexec_t *x, const char *status, const char *cause,
                   const struct kernel_exec_end *e)
{
    gw_t *g = x->xa->g;
    char why[256];
    if (x->state == X_DONE)
        return;
    evl_t *evl = &g->loop.evl;
    evl->timer_disarm(evl, x->timer);
    evl->timer_disarm(evl, x->settle);
    kwait_cancel(&x->wait);
    if (x->xk && x->xk->running == x)
        x->xk->running = NULL;
    struct xkern *xk = x->xk;
    x->xk = NULL;
    bool ran = x->state == X_RUNNING;
    if (x->cancelled && (!ran || x->interrupts > 0 || strcmp(status, "ok") != 0)) {
        /* (one that ended well before an interrupt reached it says so) */
        status = "cancelled";
        cause = ran ? "cancelled by a client: the kernel was interrupted"
                    : "cancelled by a client before it ran";
    } else if (x->timed_out && (!strcmp(status, "error") || !strcmp(status, "ok") ||
                                x->restarted)) {
        snprintf(why, sizeof(why), "the execution exceeded its timeout of %g s: %s",
                 x->req.timeout,
                 x->restarted ? "it ignored the interrupt, and the kernel was restarted"
                              : "interrupted");
        status = "timeout";
        cause = why;
    }
    json_t *files = json_null();
    wspace_t *w = kmgr_workspace(g->km, x->workspace_id);
    if (x->before && w) {
        wsnap_t *after = wsnap_take(wspace_path(w), WSNAP_MAX_ENTRIES, WSNAP_MAX_DEPTH);
        if (after) {
            json_decref(files);
            files = wsnap_diff(x->before, after, WSNAP_MAX_LIST);
            wsnap_destroy(&after);
        }
    }
    wsnap_destroy(&x->before);
    if (!files)
        files = json_null();
    double dur = e && e->duration_us > 0 ? (double)e->duration_us / 1000.0
                 : ran                   ? (double)(util_now_us() - x->sent_us) / 1000.0
                                         : 0.0;
    json_t *end = json_pack(
        "{s:s, s:s, s:s, s:f, s:o, s:o, s:o, s:o, s:s, s:s}", "type", "end", "status", status,
        "cause", cause ? cause : "", "duration_ms", dur, "cpu_ms",
        e && e->cpu_ns >= 0 ? json_real((double)e->cpu_ns / 1e6) : json_null(),
        "peak_memory_bytes",
        e && e->peak_mem_bytes >= 0 ? json_integer((json_int_t)e->peak_mem_bytes) : json_null(),
        "execution_count", x->exec_count >= 0 ? json_integer(x->exec_count) : json_null(), "files",
        files, "workspace_id", x->workspace_id, "execution_id", x->id);
    if (end && (!x->oneshot || x->keep))
        json_object_set_new(end, "kernel_id", json_string(x->kernel_id));
    x->state = X_DONE;
    x->done_ms = util_now_ms();
    if (end) {
        x->end = json_incref(end);
        emit(x, end, "end");
    }
    if (audit_enabled())
        audit_event("execute_api", "s:s, s:s, s:s, s:s, s:f", "tenant", x->tn->name, "kernel",
                    x->kernel_id, "execution", x->id, "status", status, "duration_ms", dur);
    log_debug("xapi: execution=%s kernel=%s: %s", x->id, x->kernel_id, status);
    if (x->oneshot && !x->keep && !x->gone)
        evl->timer_arm(evl, x->after, 0);
    if (xk)
        pump_soon(xk);
}

static void enqueue(xexec_t *x, kernel_t *k)
{
    gw_t *g = x->xa->g;
    struct xkern *xk = xkern_get(g, k);
    if (!xk)
        return finish(x, "error", "out of memory", NULL);
    x->xk = xk;
    list_append(&xk->queue, &x->qlink);
    xk->nqueued++;
    pump_soon(xk);
}

static xexec_t *exec_new(struct xapi *xa, const struct gw_caller *who, kernel_t *k)
{
    if (xa->count >= XAPI_MAX_EXECS) { /* the oldest finished one nobody reads goes first */
        xexec_t *o;
        list_for_each(o, &xa->execs, link)
        {
            if (o->state == X_DONE && list_empty(&o->readers))
                break;
        }
        if (&o->link == &xa->execs) {
            errno = EAGAIN;
            return NULL;
        }
        exec_free(o);
    }
    xexec_t *x = calloc(1, sizeof(*x));
    struct xtenant *tn = tenant_get(xa, who->tenant);
    evl_t *evl = &xa->g->loop.evl;
    if (!x || !tn) {
        free(x);
        errno = ENOMEM;
        return NULL;
    }
    x->xa = xa;
    x->tn = tn;
    tn->bytes += XAPI_EXEC_BYTES;
    x->exec_count = -1;
    list_init(&x->readers);
    list_init(&x->qlink);
    shardid_mint(x->id); /* a router finds its shard from it (docs/scale-out.md) */
    snprintf(x->kernel_id, sizeof(x->kernel_id), "%s", kernel_id(k));
    snprintf(x->workspace_id, sizeof(x->workspace_id), "%s", wspace_id(kernel_workspace(k)));
    x->queued_wall_us = util_wall_us();
    x->timer = evl->timer_new(evl, on_timeout, x);
    x->settle = evl->timer_new(evl, on_settle, x);
    x->after = evl->timer_new(evl, on_after, x);
    list_append(&xa->execs, &x->link);
    xa->count++;
    if (!x->timer || !x->settle || !x->after) {
        exec_free(x);
        errno = ENOMEM;
        return NULL;
    }
    char at[40];
    util_iso_time(at, sizeof(at), x->queued_wall_us);
    emit(x,
         json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "start", "execution_id", x->id,
                   "kernel_id", x->kernel_id, "workspace_id", x->workspace_id, "queued_at", at),
         "start");
    return x;
}

static json_t *exec_model(const xexec_t *x)
{
    char at[40];
    util_iso_time(at, sizeof(at), x->queued_wall_us);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:O?}", "id", x->id, "kernel_id",
                     x->kernel_id, "workspace_id", x->workspace_id, "state",
                     state_names[x->state], "queued_at", at, "first_seq",
                     (json_int_t)x->first_seq, "next_seq", (json_int_t)x->next_seq, "end",
                     x->end);
}

/* ---- readers ---- */

static void xapi_reader_free(struct xreader **p)
{
    struct xreader *rd = *p;
    if (!rd)
        return;
    if (rd->x)
        list_remove(&rd->link);
    free(rd);
    *p = NULL;
}

static enum xreq_format request_format(struct lws *wsi)
{
    char accept[XREQ_ACCEPT_MAX];
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_ACCEPT);
    if (n <= 0 || n >= (int)sizeof(accept) ||
        lws_hdr_copy(wsi, accept, sizeof(accept), WSI_TOKEN_HTTP_ACCEPT) < 0)
        return XREQ_NDJSON;
    return xreq_accept(accept, strlen(accept));
}

static void attach(struct gw_req *r, xexec_t *x, int status, uint64_t since)
{
    struct xreader *rd = calloc(1, sizeof(*rd));
    if (!rd)
        return req_error(r, 500, "out of memory");
    rd->x = x;
    rd->r = r;
    rd->status = status;
    rd->cursor = since;
    rd->fmt = request_format(r->wsi);
    list_append(&x->readers, &rd->link);
    r->xr = rd;
    snprintf(r->location, sizeof(r->location), "/api/executions/%s", x->id);
    lws_callback_on_writable(r->wsi);
}

static int add_hdr(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                   unsigned char *end)
{
    return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
                                       (const unsigned char *)value, (int)strlen(value), p, end);
}

/* The head; length < 0: chunked. */
static int write_head(struct gw_req *r, const char *ctype, long long length)
{
    unsigned char hdr[LWS_PRE + 2048], *start = hdr + LWS_PRE, *p = start,
                                       *end = hdr + sizeof(hdr) - 1;
    int rc = lws_add_http_header_status(r->wsi, (unsigned)r->xr->status, &p, end);
    rc |= add_hdr(r->wsi, "content-type:", ctype, &p, end);
    rc |= add_hdr(r->wsi, "location:", r->location, &p, end);
    rc |= http_add_common_headers(r->g, r->wsi, &p, end);
    if (length >= 0) {
        rc |= lws_add_http_header_content_length(r->wsi, (lws_filepos_t)length, &p, end);
    } else {
        rc |= add_hdr(r->wsi, "transfer-encoding:", "chunked", &p, end);
        rc |= add_hdr(r->wsi, "x-accel-buffering:", "no", &p, end);
    }
    rc |= lws_finalize_http_header(r->wsi, &p, end);
    if (rc || lws_write(r->wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) < 0)
        return -1;
    r->xr->headers_sent = true;
    return 0;
}

/* Writes payload (with LWS_PRE bytes of room before data) as one chunk. */
static int write_chunk(struct lws *wsi, buf_t *b, bool last)
{
    char head[24];
    size_t pay = b->len - LWS_PRE - sizeof(head);
    int hn = snprintf(head, sizeof(head), "%zx\r\n", pay);
    unsigned char *start = (unsigned char *)b->data + LWS_PRE + sizeof(head) - (size_t)hn;
    memcpy(start, head, (size_t)hn);
    if (buf_append(b, last ? "\r\n0\r\n\r\n" : "\r\n", last ? 7 : 2) < 0)
        return -1;
    start = (unsigned char *)b->data + LWS_PRE + sizeof(head) - (size_t)hn; /* moved? */
    size_t len = (size_t)((unsigned char *)b->data + b->len - start);
    return lws_write(wsi, start, len, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0 ? -1 : 0;
}

static int write_document(struct gw_req *r, xexec_t *x)
{
    buf_t b;
    buf_init(&b, SIZE_MAX);
    json_t *m = exec_model(x);
    char *ms = m ? json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
                 : NULL;
    json_decref(m);
    static const char room[LWS_PRE];
    int rc = buf_append(&b, room, sizeof(room));
    rc |= buf_append(&b, "{\"execution\":", 13);
    rc |= ms ? buf_append(&b, ms, strlen(ms)) : -1;
    rc |= buf_append(&b, ",\"events\":[", 11);
    for (size_t i = 0; i < x->nev; i++) {
        if (i)
            rc |= buf_append(&b, ",", 1);
        rc |= buf_append(&b, x->ev[i]->json, x->ev[i]->len);
    }
    rc |= buf_append(&b, "]}", 2);
    free(ms);
    if (rc || write_head(r, "application/json", (long long)(b.len - LWS_PRE)) < 0 ||
        lws_write(r->wsi, (unsigned char *)b.data + LWS_PRE, b.len - LWS_PRE,
                  LWS_WRITE_HTTP_FINAL) < 0) {
        buf_fini(&b);
        return -1;
    }
    buf_fini(&b);
    return 1;
}

void xapi_req_fini(struct gw_req *r)
{
    xapi_reader_free(&r->xr);
}

int xapi_write(struct gw_req *r)
{
    struct xreader *rd = r->xr;
    if (!rd) /* not reading an execution (its answer is stored) */
        return 0;
    xexec_t *x = rd->x;
    if (!x) /* dropped from the store while read */
        return -1;
    if (rd->fmt == XREQ_JSON) {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
        return x->state == X_DONE ? write_document(r, x) : 0;
    }
    if (!rd->headers_sent && write_head(r, xreq_format_ctype(rd->fmt), -1) < 0)
        return -1;
    if (rd->cursor < x->first_seq) {
        log_info("xapi: execution=%s: a reader fell behind the events held; connection closed",
                 x->id);
        return -1;
    }
    while (!lws_send_pipe_choked(r->wsi)) {
        bool done = x->state == X_DONE;
        if (rd->cursor >= x->next_seq && !done)
            break;
        buf_t b;
        buf_init(&b, SIZE_MAX);
        static const char room[LWS_PRE + 24]; /* LWS_PRE, then the chunk's size line */
        int rc = buf_append(&b, room, sizeof(room));
        while (rc == 0 && rd->cursor < x->next_seq && b.len < XAPI_BATCH_BYTES) {
            const struct xevt *e = x->ev[rd->cursor - x->first_seq];
            rc = xevent_frame(rd->fmt, e->seq, e->type, e->json, e->len, &b);
            rd->cursor++;
        }
        bool last = done && rd->cursor >= x->next_seq;
        if (rc == 0 && b.len == sizeof(room)) { /* nothing but the last chunk */
            static unsigned char fin[LWS_PRE + 5];
            memcpy(fin + LWS_PRE, "0\r\n\r\n", 5);
            buf_fini(&b);
            return lws_write(r->wsi, fin + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) < 0 ? -1 : 1;
        }
        if (rc < 0 || write_chunk(r->wsi, &b, last) < 0) {
            buf_fini(&b);
            return -1;
        }
        buf_fini(&b);
        if (last)
            return 1;
    }
    if (rd->cursor < x->next_seq || x->state == X_DONE) {
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, XAPI_STALL_SECS);
        lws_callback_on_writable(r->wsi);
    } else {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
    }
    return 0;
}

/* ---- handlers ---- */

static void json_error_extra(struct gw_req *r, int status, const char *reason, const char *msg,
                             json_t *extra)
{
    json_t *e = json_pack("{s:s, s:s}", "reason", reason, "message", msg);
    if (e && extra)
        json_object_update(e, extra);
    json_decref(extra);
    req_reply(r, status, e);
}

/* The Idempotency-Key of the request into key ("" when none); false after answering 400. */
static bool idem_key(struct gw_req *r, char key[XAPI_KEY_MAX + 1])
{
    key[0] = '\0';
    int n = lws_hdr_custom_length(r->wsi, "idempotency-key:", 16);
    if (n <= 0)
        return true;
    if (n > XAPI_KEY_MAX ||
        lws_hdr_custom_copy(r->wsi, key, XAPI_KEY_MAX + 1, "idempotency-key:", 16) < 0 ||
        !util_printable(key, strlen(key))) {
        key[0] = '\0';
        req_error(r, 400, "Idempotency-Key must be 1 to %d printable ASCII characters",
                  XAPI_KEY_MAX);
        return false;
    }
    return true;
}

/* A POST with an Idempotency-Key seen before: true when answered (the same execution from
 * seq 0, or 422 when the body differs). */
static bool idem_replay(struct gw_req *r, const char *key, const unsigned char *hash)
{
    xexec_t *x = key[0] ? exec_by_key(r->g->xapi, key, r->caller.tenant) : NULL;
    if (!x)
        return false;
    if (memcmp(x->body_hash, hash, sizeof(x->body_hash)) != 0) {
        req_error(r, 422, "this Idempotency-Key was used with a different request body");
        return true;
    }
    if (x->first_seq > 0) { /* not run again, and its first events are gone */
        snprintf(r->location, sizeof(r->location), "/api/executions/%s", x->id);
        json_error_extra(r, 410, "Gone",
                         "this Idempotency-Key's execution ran; its first events are no longer "
                         "held (retention budget): GET its Location for the end",
                         json_pack("{s:I}", "first_seq", (json_int_t)x->first_seq));
        return true;
    }
    attach(r, x, 200, 0);
    return true;
}

/* The Idempotency-Key of a POST and its body's hash: false when the request is answered
 * already (a bad key, or a retry of a held execution). */
static bool idem_begin(struct gw_req *r, char key[XAPI_KEY_MAX + 1],
                       unsigned char hash[crypto_hash_sha256_BYTES])
{
    if (!idem_key(r, key))
        return false;
    crypto_hash_sha256(hash, (const unsigned char *)(r->body.data ? r->body.data : ""),
                       r->body.len);
    return !idem_replay(r, key, hash);
}

static bool parse_body(struct gw_req *r, bool oneshot, struct xreq *q)
{
    char err[256];
    if (xreq_parse(r->body.data ? r->body.data : "", r->body.len, oneshot,
                   (size_t)r->g->cfg.max_body_bytes, q, err, sizeof(err)) < 0) {
        req_error(r, 400, "%s", err);
        return false;
    }
    return true;
}

static void remember(xexec_t *x, const char *key, const unsigned char *hash, struct xreq *q)
{
    snprintf(x->key, sizeof(x->key), "%s", key);
    memcpy(x->body_hash, hash, sizeof(x->body_hash));
    x->req = *q;
    memset(q, 0, sizeof(*q));
}

void xapi_kernel_execute(struct gw_req *r)
{
    gw_t *g = r->g;
    char key[XAPI_KEY_MAX + 1];
    unsigned char hash[crypto_hash_sha256_BYTES];
    struct xreq q;
    kernel_t *k = gw_kernel(g, r->route.arg[0], r->caller.tenant);
    if (!k || kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD)
        return req_error(r, 404, "Kernel does not exist: %s", r->route.arg[0]);
    if (!idem_begin(r, key, hash))
        return;
    if (!parse_body(r, false, &q))
        return;
    struct xkern *xk = kernel_data(k, g->xapi_listener.slot);
    size_t waiting = xk ? xk->nqueued + (xk->running ? 1 : 0) : 0;
    if ((long long)waiting >= g->cfg.max_queued_executions) {
        xreq_fini(&q);
        return req_error_retry(r, 429, 1,
                               "kernel %s has %zu executions queued or running (the limit, "
                               "--max-queued-executions); retry later",
                               kernel_id(k), waiting);
    }
    xexec_t *x = exec_new(g->xapi, &r->caller, k);
    if (!x) {
        xreq_fini(&q);
        return req_error_retry(r, 503, 1, "too many executions held; retry later");
    }
    remember(x, key, hash, &q);
    attach(r, x, 201, 0);
    enqueue(x, k);
}

static void oneshot_ready(void *data, kernel_t *k, int status)
{
    xexec_t *x = data;
    char cause[FPATH_MAX + 200];
    x->wait = NULL;
    if (status < 0 || kernel_state(k) != KERNEL_RUNNING) {
        snprintf(cause, sizeof(cause), "the kernel failed to start%s%s",
                 kernel_last_cause(k)[0] ? ": " : "", kernel_last_cause(k));
        return finish(x, "kernel_died", cause, NULL);
    }
    for (size_t i = 0; i < x->req.nfiles; i++) {
        struct xreq_file *f = &x->req.files[i];
        int rc = files_write(kernel_workspace(k), f->path, f->data, f->len);
        if (rc < 0) {
            snprintf(cause, sizeof(cause), "cannot write %s to the workspace: %s", f->path,
                     strerror(-rc));
            return finish(x, "error", cause, NULL);
        }
        free(f->data);
        f->data = NULL;
    }
    enqueue(x, k);
}

void xapi_oneshot(struct gw_req *r)
{
    gw_t *g = r->g;
    char key[XAPI_KEY_MAX + 1];
    unsigned char hash[crypto_hash_sha256_BYTES];
    struct xreq q;
    struct kops_error err;
    kernel_t *k;
    if (!idem_begin(r, key, hash))
        return;
    if (!parse_body(r, true, &q))
        return;
    json_t *start = q.kernel_name[0] ? json_pack("{s:s}", "name", q.kernel_name) : json_object();
    int rc = kops_start(g, &r->caller, start, &k, &err);
    json_decref(start);
    if (rc < 0) {
        xreq_fini(&q);
        return req_error_retry(r, err.status, err.retry_after, "%s", err.message);
    }
    xexec_t *x = exec_new(g->xapi, &r->caller, k);
    if (!x) {
        xreq_fini(&q);
        kops_shutdown(g, k, &err);
        return req_error_retry(r, 503, 1, "too many executions held; retry later");
    }
    x->oneshot = true;
    x->keep = q.keep;
    remember(x, key, hash, &q);
    attach(r, x, 201, 0);
    if (kernel_wait(k, oneshot_ready, x, &x->wait) < 0)
        oneshot_ready(x, k, 0);
}

static void cancel(xexec_t *x)
{
    if (x->state == X_DONE)
        return;
    x->cancelled = true;
    if (x->state == X_QUEUED && x->xk) {
        list_remove(&x->qlink);
        list_init(&x->qlink);
        x->xk->nqueued--;
        x->xk = NULL;
        return finish(x, "cancelled", "", NULL);
    }
    if (x->state == X_QUEUED) /* one-shot: its kernel is still starting */
        return finish(x, "cancelled", "", NULL);
    x->interrupts = 0;
    interrupt_now(x);
}

void xapi_execution(struct gw_req *r)
{
    xexec_t *x = exec_find(r->g->xapi, r->route.arg[0], r->caller.tenant);
    if (!x)
        return req_error(r, 404, "no such execution: %s", r->route.arg[0]);
    if (r->method == HTTP_M_DELETE)
        cancel(x);
    if (r->route.id == ROUTE_EXECUTION)
        return req_reply(r, 200, exec_model(x));
    /* events: ?since=N, or Last-Event-ID (an EventSource reconnecting) from the next one */
    uint64_t since = 0;
    char buf[512];
    const char *s = lws_get_urlarg_by_name(r->wsi, "since=", buf, sizeof(buf));
    int n = s ? 0 : lws_hdr_custom_length(r->wsi, "last-event-id:", 14);
    if (s) {
        if (xreq_since(s, strlen(s), &since) < 0)
            return req_error(r, 400, "'since' must be a sequence number (0 or more)");
    } else if (n > 0) {
        if (n >= (int)sizeof(buf) ||
            lws_hdr_custom_copy(r->wsi, buf, sizeof(buf), "last-event-id:", 14) < 0 ||
            xreq_since(buf, strlen(buf), &since) < 0)
            return req_error(r, 400, "Last-Event-ID must be a sequence number");
        since++;
    }
    if (since < x->first_seq) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "events before seq %" PRIu64 " are no longer held (retention budget)",
                 x->first_seq);
        return json_error_extra(r, 410, "Gone", msg,
                                json_pack("{s:I}", "first_seq", (json_int_t)x->first_seq));
    }
    attach(r, x, 200, since);
}

/* ---- set-up ---- */

int xapi_listen(gw_t *g)
{
    struct xapi *xa = calloc(1, sizeof(*xa));
    if (!xa)
        return -ENOMEM;
    xa->g = g;
    list_init(&xa->execs);
    list_init(&xa->tenants);
    if (!(xa->sweep = g->loop.evl.timer_new(&g->loop.evl, on_sweep, xa))) {
        free(xa);
        return -ENOMEM;
    }
    g->loop.evl.timer_arm(&g->loop.evl, xa->sweep, XAPI_SWEEP_MS);
    g->xapi = xa;
    return kmgr_listen(g->km, &g->xapi_listener, &listener_ops, g);
}

void xapi_fini(gw_t *g)
{
    struct xapi *xa = g->xapi;
    if (!xa)
        return;
    while (!list_empty(&xa->execs))
        exec_free(list_first(&xa->execs, xexec_t, link));
    while (!list_empty(&xa->tenants)) {
        struct xtenant *t = list_first(&xa->tenants, struct xtenant, link);
        list_remove(&t->link);
        free(t);
    }
    evl_timer_destroy(&g->loop.evl, &xa->sweep);
    free(xa);
    g->xapi = NULL;
}
