/* Executions (gateway/xexec.h): the store, the kernels' queues and the life of an execution.
 * Finished executions are kept for --execution-retention seconds within
 * --execution-budget-bytes per tenant. */
#include "gateway/xexec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "gateway/ckpt.h"
#include "gateway/files.h"
#include "gateway/kops.h"
#include "gateway/wsnap.h"
#include "kernelmgr/kconn.h"
#include "protocol/xevent.h"

#define XEXEC_SWEEP_MS       1000   /* retention checks */
#define XEXEC_EXEC_BYTES     (sizeof(xexec_t) + 256) /* an execution's own memory, in budgets */
#define XEXEC_REINTERRUPT_MS 500 /* a cancelled or timed-out execution: interrupt again */
#define XEXEC_INTERRUPTS_MAX 20
#define XEXEC_RESTART_AFTER  10 /* interrupts a timed-out execution ignored: restart the kernel */

enum xstate { X_QUEUED, X_RUNNING, X_DONE };

static const char *const state_names[] = {"queued", "running", "done"};

struct xevt {
    uint64_t seq;
    const char *type; /* a static string */
    size_t len;
    size_t name_off, name_len, text_off, text_len; /* a stream's literals in json */
    size_t text_bytes; /* what its text literal stands for */
    char json[];
};

struct xtenant {
    struct list link;
    struct list execs; /* xexec_t.tlink, oldest first */
    size_t count;      /* executions held */
    size_t bytes;      /* events held by its executions */
    char name[KEYFILE_TENANT_MAX + 1];
};

struct xkern;

struct xexec {
    struct list link;  /* xexecs.execs, oldest first */
    struct list tlink; /* xtenant.execs, oldest first */
    struct list qlink; /* xkern.queue while queued */
    struct xexecs *xa;
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
    bool after_due; /* a one-shot's kernel is to be shut down (after, armed) */
    json_int_t exec_count; /* -1: unknown */
    wsnap_t *before;
    evl_timer_t *timer;  /* the request's timeout */
    evl_timer_t *settle; /* idle came: the end, unless exec_end comes first */
    evl_timer_t *after;  /* one-shot: delete the kernel after the end */
    kwait_t *wait;       /* one-shot: the kernel's start */
    files_put_t *put;    /* one-shot: its files being written (charged) */
    struct files_item *items;
    kernel_t *put_k;     /* the kernel, while put */
    char key[XEXEC_KEY_MAX + 1];
    unsigned char body_hash[crypto_hash_sha256_BYTES];
    struct list subs; /* struct xexec_sub.link */
    /* "checkpoint" / "rollback_on_error" (docs/execute.md): the checkpoint operation in
     * progress (taking it before the code is sent, or rolling back to it after), the
     * checkpoint's id once taken, and an end decided but held back by the rollback */
    ckpt_op_t *ckop;
    bool ckpting, rolling, rb_tried, rolled_back;
    char ckpt_id[CKPT_ID_MAX];
    char rb_error[300];
    const char *held_status; /* a static string */
    char held_cause[256];
    struct kernel_exec_end held_e;
    bool held_has_e;
};

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


struct xexecs {
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

static struct xtenant *tenant_get(struct xexecs *xa, const char *name)
{
    struct xtenant *t;
    list_for_each(t, &xa->tenants, link)
    {
        if (!strcmp(t->name, name))
            return t;
    }
    if (!(t = calloc(1, sizeof(*t))))
        return NULL;
    list_init(&t->execs);
    snprintf(t->name, sizeof(t->name), "%s", name);
    list_append(&xa->tenants, &t->link);
    return t;
}

static void wake(xexec_t *x)
{
    struct xexec_sub *s, *tmp;
    list_for_each_safe(s, tmp, &x->subs, link)
    {
        s->ops->wake(s);
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

static void on_after(void *data);

static void exec_free(xexec_t *x)
{
    struct xexec_sub *s, *tmp;
    list_for_each_safe(s, tmp, &x->subs, link)
    {
        list_remove(&s->link);
        s->x = NULL;
    }
    evl_t *evl = &x->xa->g->loop.evl;
    evl_timer_destroy(evl, &x->timer);
    evl_timer_destroy(evl, &x->settle);
    if (x->after_due) /* freed in the turn it ended (evicted): its kernel goes all the same */
        on_after(x);
    evl_timer_destroy(evl, &x->after);
    kwait_cancel(&x->wait);
    files_put_cancel(&x->put);
    ckpt_op_cancel(&x->ckop);
    json_decref(x->held_e.egress);
    free(x->items);
    drop_front(x, x->nev);
    free(x->ev);
    json_decref(x->end);
    xreq_fini(&x->req);
    wsnap_destroy(&x->before);
    list_remove(&x->link);
    list_remove(&x->tlink);
    x->xa->count--;
    x->tn->count--;
    x->tn->bytes -= XEXEC_EXEC_BYTES;
    free(x);
}

/* Over the tenant's budget: the events of finished executions nobody reads go first (oldest
 * first; the execution itself, with its end, is freed by the next sweep), then the oldest
 * events of x itself (readers behind them are cut; a replay answers 410). Nothing is unlinked
 * here: callers may be walking the list. */
static void enforce_budget(struct xexecs *xa, xexec_t *x)
{
    size_t budget = (size_t)xa->g->cfg.execution_budget_bytes;
    xexec_t *o;
    if (x->tn->bytes <= budget)
        return;
    list_for_each(o, &xa->execs, link)
    {
        if (x->tn->bytes <= budget)
            return;
        if (o != x && o->tn == x->tn && o->state == X_DONE && list_empty(&o->subs) &&
            o->nev > 0) {
            drop_front(o, o->nev);
            o->evicted = true;
        }
    }
    size_t n = 0, freed = 0;
    while (n + 1 < x->nev && x->tn->bytes - freed > budget)
        freed += x->ev[n++]->len;
    if (n > 0) {
        log_info("xexec: execution=%s: over the tenant's budget of %zu bytes; its first %zu "
                 "events dropped",
                 x->id, budget, n);
        drop_front(x, n);
    }
}

/* Appends e (its len bytes of JSON text hold seq x->next_seq; taken; NULL: it could not be
 * made, and is dropped). */
static void store(xexec_t *x, struct xevt *e)
{
    if (e && x->nev == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        struct xevt **v = realloc(x->ev, cap * sizeof(*v));
        if (v) {
            x->ev = v;
            x->cap = cap;
        } else {
            free(e);
            e = NULL;
        }
    }
    if (!e) {
        log_warn("xexec: execution=%s: out of memory: event dropped", x->id);
        return;
    }
    e->seq = x->next_seq++;
    x->ev[x->nev++] = e;
    x->tn->bytes += e->len;
    enforce_budget(x->xa, x);
    wake(x);
}

/* Appends a stream event of name and text, JSON string literals (checked ones: the kernel's
 * own, or jansson's), written as they are: a flood of output is not parsed and dumped again. */
static void emit_stream(xexec_t *x, jspan_t name, jspan_t text, size_t text_bytes)
{
    struct xevt *e = malloc(sizeof(*e) + name.n + text.n + XEVENT_STREAM_OVERHEAD);
    if (e) {
        e->type = "stream";
        e->len =
            xevent_stream_write(e->json, x->next_seq, name, text, &e->name_off, &e->text_off);
        e->name_len = name.n;
        e->text_len = text.n;
        e->text_bytes = text_bytes;
    }
    store(x, e);
}

/* Appends an event (ev: its fields but seq; taken). */
static void emit(xexec_t *x, json_t *ev, const char *type)
{
    if (!ev)
        return;
    if (!strcmp(type, "stream")) { /* one writer of stream events, whichever their source */
        json_t *t = json_object_get(ev, "text");
        char *name = json_dumps(json_object_get(ev, "name"), JSON_ENCODE_ANY);
        char *text = json_dumps(t, JSON_ENCODE_ANY);
        if (name && text)
            emit_stream(x, (jspan_t){name, strlen(name)}, (jspan_t){text, strlen(text)},
                        json_string_length(t));
        else
            store(x, NULL);
        free(name);
        free(text);
        json_decref(ev);
        return;
    }
    json_t *o = json_pack("{s:I}", "seq", (json_int_t)x->next_seq); /* seq first */
    if (o)
        json_object_update(o, ev);
    json_decref(ev);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
                : NULL;
    json_decref(o);
    size_t len = s ? strlen(s) : 0;
    struct xevt *e = s ? calloc(1, sizeof(*e) + len + 1) : NULL;
    if (e) {
        e->type = type;
        e->len = len;
        memcpy(e->json, s, len + 1);
    }
    free(s);
    store(x, e);
}

static struct xtenant *tenant_find(struct xexecs *xa, const char *name)
{
    struct xtenant *t;
    list_for_each(t, &xa->tenants, link)
    {
        if (!strcmp(t->name, name))
            return t;
    }
    return NULL;
}

static xexec_t *exec_find(struct xexecs *xa, const char *id, const char *tenant)
{
    struct xtenant *t = tenant_find(xa, tenant);
    xexec_t *x;
    if (!t)
        return NULL;
    list_for_each(x, &t->execs, tlink)
    {
        if (!strcmp(x->id, id))
            return x;
    }
    return NULL;
}

static xexec_t *exec_by_key(struct xexecs *xa, const char *key, const char *tenant)
{
    struct xtenant *t = tenant_find(xa, tenant);
    xexec_t *x;
    if (!t)
        return NULL;
    list_for_each(x, &t->execs, tlink)
    {
        if (x->key[0] && !strcmp(x->key, key))
            return x;
    }
    return NULL;
}

static void on_sweep(void *data)
{
    struct xexecs *xa = data;
    uint64_t now = util_now_ms(), keep = (uint64_t)xa->g->cfg.execution_retention * 1000;
    xexec_t *x, *tmp;
    list_for_each_safe(x, tmp, &xa->execs, link)
    {
        /* a keyed one is held for its whole retention, events or not: a retry of its POST
         * must find it (and not run the code again) */
        if (x->state == X_DONE && ((x->evicted && !x->key[0]) || x->done_ms + keep <= now) &&
            list_empty(&x->subs))
            exec_free(x);
    }
    xa->g->loop.evl.timer_arm(&xa->g->loop.evl, xa->sweep, XEXEC_SWEEP_MS);
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
    struct xkern *xk = kernel_data(k, g->xexec_listener.slot);
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
    kernel_set_data(k, g->xexec_listener.slot, xk);
    return xk;
}

static void xkern_free(gw_t *g, struct xkern *xk)
{
    kernel_set_data(xk->k, g->xexec_listener.slot, NULL);
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
    /* a new session id each time: the kernel's ROUTER may not yet have seen the last go, and
     * would refuse a second peer with its routing id */
    if (!xk->kc) {
        util_uuid(xk->session);
        if (!(xk->kc = kconn_new(xk->k, xk->session, &kconn_ops, xk)))
            return -errno;
    }
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

static void send_now(struct xkern *xk, xexec_t *x);

/* "checkpoint": taken; the code goes now. */
static void on_ckpt_taken(void *data, const struct kerr *err, json_t *rec)
{
    xexec_t *x = data;
    struct xkern *xk = x->xk;
    char cause[512];
    x->ckop = NULL;
    x->ckpting = false;
    if (xk && xk->running == x)
        xk->running = NULL;
    if (err) {
        snprintf(cause, sizeof(cause), "the code did not run: %s", err->message);
        return finish(x, "checkpoint_failed", cause, NULL);
    }
    snprintf(x->ckpt_id, sizeof(x->ckpt_id), "%s", json_string_value(json_object_get(rec, "id")));
    if (!xk || kernel_state(xk->k) != KERNEL_RUNNING)
        return finish(x, "kernel_died", "the kernel's process ended before the code ran", NULL);
    send_now(xk, x);
}

static void start_next(struct xkern *xk)
{
    xexec_t *x = list_first(&xk->queue, xexec_t, qlink);
    list_remove(&x->qlink);
    list_init(&x->qlink);
    xk->nqueued--;
    if ((x->req.checkpoint || x->req.rollback_on_error) && !x->ckpt_id[0]) {
        gw_t *g = x->xa->g;
        struct gw_caller who = {0};
        struct kerr err;
        const struct ckpt_asker a = {.who = &who, .done = on_ckpt_taken, .data = x};
        snprintf(who.tenant, sizeof(who.tenant), "%s", x->tn->name);
        xk->running = x; /* the queue waits for it */
        x->ckpting = true;
        if (!(x->ckop = ckpt_take(g, xk->k, &a, true, &err))) {
            char cause[512];
            x->ckpting = false;
            xk->running = NULL;
            snprintf(cause, sizeof(cause), "the code did not run: %s", err.message);
            finish(x, "checkpoint_failed", cause, NULL);
        }
        return;
    }
    send_now(xk, x);
}

static void send_now(struct xkern *xk, xexec_t *x)
{
    gw_t *g = x->xa->g;
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
    log_debug("xexec: execution=%s kernel=%s: sent", x->id, x->kernel_id); /* (bench) */
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
    /* nothing left to run: the session's sockets go (an idle kernel holds none of them; the
     * next execution opens a session of its own, send_execute). From the loop, never inside
     * the session's own callback. */
    if (!xk->running && list_empty(&xk->queue))
        kconn_destroy(&xk->kc);
}

static void on_iopub(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    gw_t *g = user;
    struct xkern *xk = kernel_data(k, g->xexec_listener.slot);
    xexec_t *x = xk ? xk->running : NULL;
    jhdr_t ph;
    if (!x || !memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, x->msg_id,
                      strlen(x->msg_id)) ||
        jhdr_parse(m->part[JPART_PARENT], &ph) < 0 || strcmp(ph.msg_id, x->msg_id) != 0)
        return;
    jspan_t name, text;
    size_t text_bytes;
    if (!strcmp(h->msg_type, "stream") &&
        xevent_stream_scan(m->part[JPART_CONTENT], &name, &text, &text_bytes) == 0)
        return emit_stream(x, name, text, text_bytes); /* the bulk of any flood: no JSON tree */
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
    struct xkern *xk = kernel_data(k, g->xexec_listener.slot);
    xexec_t *x = xk ? xk->running : NULL;
    if (!x || strcmp(e->msg_id, x->msg_id) != 0)
        return;
    log_debug("xexec: execution=%s kernel=%s: exec_end %s cpu_ns=%lld peak=%lld", x->id,
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

static void finish_end(xexec_t *x, const char *status, const char *cause,
                       const struct kernel_exec_end *e);

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    gw_t *g = user;
    struct xkern *xk = kernel_data(k, g->xexec_listener.slot);
    char cause[256];
    snprintf(cause, sizeof(cause), "%s%s%s", ev == KERNEL_EV_RESTART ? "the kernel was restarted"
                                             : ev == KERNEL_EV_GONE  ? "the kernel was shut down"
                                                                     : "the kernel died",
             detail && detail[0] ? ": " : "", detail ? detail : "");
    if (ev == KERNEL_EV_GONE) { /* (one-shot executions wait for their kernel without an xk) */
        xexec_t *x;
        list_for_each(x, &g->xexecs->execs, link)
        {
            if (strcmp(x->kernel_id, kernel_id(k)) != 0)
                continue;
            x->gone = true;
            if (x->rolling && xk && x->xk == xk) {
                /* its rollback ends with the kernel, and its answer would come after xk is
                 * freed: the held end now */
                ckpt_op_cancel(&x->ckop);
                x->rolling = false;
                snprintf(x->rb_error, sizeof(x->rb_error), "%s", cause);
                finish_end(x, x->held_status, x->held_cause, x->held_has_e ? &x->held_e : NULL);
            }
            if (x->wait || x->put) { /* its kernel never ran it: the wait goes with it */
                kwait_cancel(&x->wait);
                files_put_cancel(&x->put);
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
    struct xkern *xk = kernel_data(k, g->xexec_listener.slot);
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
 * XEXEC_REINTERRUPT_MS while the execution goes on. */
static void interrupt_now(xexec_t *x)
{
    gw_t *g = x->xa->g;
    struct kerr err;
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
    if (x->interrupts < XEXEC_INTERRUPTS_MAX)
        g->loop.evl.timer_arm(&g->loop.evl, x->timer, XEXEC_REINTERRUPT_MS);
}

static void on_timeout(void *data)
{
    xexec_t *x = data;
    if (x->state != X_RUNNING)
        return;
    if (!x->cancelled && !x->timed_out) {
        x->timed_out = true;
        log_info("xexec: execution=%s kernel=%s: over its timeout of %g s: interrupting it",
                 x->id, x->kernel_id, x->req.timeout);
    }
    gw_t *g = x->xa->g;
    kernel_t *k = kmgr_find(g->km, x->kernel_id);
    struct kerr err;
    if (k && x->timed_out && !x->cancelled && !x->restarted &&
        x->interrupts >= XEXEC_RESTART_AFTER) {
        /* as the gateway's own wall-time limit: a kernel that ignores SIGINT is restarted */
        log_info("xexec: execution=%s kernel=%s: the interrupts were ignored: restarting the "
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
    x->after_due = false;
    struct kerr err;
    kernel_t *k = x->gone ? NULL : kmgr_find(g->km, x->kernel_id);
    if (k && kernel_state(k) != KERNEL_TERMINATING)
        kops_shutdown(g, k, &err);
}

/* "rollback_on_error": the ends that roll back (the kernel process lives on), and those that
 * cannot (it ended, and its checkpoints with it: docs/checkpoints.md) */
static bool rollback_wanted(const char *status)
{
    return !strcmp(status, "error") || !strcmp(status, "timeout") ||
           !strcmp(status, "pids_limit");
}

static bool rollback_impossible(const char *status)
{
    return !strcmp(status, "out_of_memory") || !strcmp(status, "killed") ||
           !strcmp(status, "kernel_died");
}

static void on_rolled_back(void *data, const struct kerr *err, json_t *rec)
{
    xexec_t *x = data;
    x->ckop = NULL;
    x->rolling = false;
    x->rolled_back = !err;
    if (err)
        snprintf(x->rb_error, sizeof(x->rb_error), "%s", err->message);
    finish_end(x, x->held_status, x->held_cause, x->held_has_e ? &x->held_e : NULL);
}

/* The end held while the kernel is rolled back (or comes back from the checkpoint after its
 * death): finish_end runs with it then. */
static void hold(xexec_t *x, const char *status, const char *cause, const struct kernel_exec_end *e)
{
    evl_t *evl = &x->xa->g->loop.evl;
    x->rb_tried = true;
    x->held_status = status;
    snprintf(x->held_cause, sizeof(x->held_cause), "%s", cause ? cause : "");
    x->held_has_e = e != NULL;
    if (e) {
        x->held_e = *e;
        x->held_e.msg_id = x->msg_id;
        x->held_e.cause = x->held_cause;
        x->held_e.egress = e->egress ? json_deep_copy(e->egress) : NULL;
    }
    evl->timer_disarm(evl, x->timer);
    evl->timer_disarm(evl, x->settle);
}

/* The end: at once, or after the rollback "rollback_on_error" asks for (the execution keeps
 * its kernel's queue meanwhile: the next one runs on the rolled-back state). */
static void finish(xexec_t *x, const char *status, const char *cause,
                   const struct kernel_exec_end *e)
{
    if (x->state == X_DONE || x->rolling)
        return; /* (a rolling one ends when its rollback does) */
    ckpt_op_cancel(&x->ckop); /* a checkpoint being taken for it goes on without it */
    x->ckpting = false;
    if (!x->req.rollback_on_error || !x->ckpt_id[0] || x->rb_tried || x->cancelled)
        return finish_end(x, status, cause, e);
    const char *st = x->timed_out && (!strcmp(status, "error") || !strcmp(status, "ok"))
                         ? "timeout"
                         : status;
    gw_t *g = x->xa->g;
    kernel_t *k = kmgr_find(g->km, x->kernel_id);
    if (rollback_impossible(st)) {
        /* the live interpreter died: the kernel comes back from its newest checkpoint, this
         * execution's when nothing took one since (docs/checkpoints.md) */
        const struct ckpt_asker joiner = {.done = on_rolled_back, .data = x};
        if (!k || !(x->ckop = ckpt_revival_join(g, k, x->ckpt_id, &joiner))) {
            snprintf(x->rb_error, sizeof(x->rb_error),
                     "the kernel's process ended, and its checkpoints with it (or it came "
                     "back from a newer checkpoint than this execution's)");
            return finish_end(x, status, cause, e);
        }
        hold(x, status, cause, e);
        x->rolling = true;
        return;
    }
    if (x->restarted)
        snprintf(x->rb_error, sizeof(x->rb_error),
                 "the kernel was restarted (it ignored the interrupts), and its checkpoints "
                 "ended with its process");
    if (!rollback_wanted(st) || x->restarted)
        return finish_end(x, status, cause, e);
    struct gw_caller who = {0};
    struct kerr err;
    char why[300];
    const struct ckpt_asker a = {.who = &who, .cause = why, .done = on_rolled_back, .data = x};
    hold(x, status, cause, e);
    snprintf(who.tenant, sizeof(who.tenant), "%s", x->tn->name);
    snprintf(why, sizeof(why), "rollback_on_error: execution %s ended %s", x->id, st);
    if (!k || !(x->ckop = ckpt_rollback(g, k, &a, x->ckpt_id, &err))) {
        snprintf(x->rb_error, sizeof(x->rb_error), "%s", k ? err.message : "the kernel is gone");
        return finish_end(x, x->held_status, x->held_cause, x->held_has_e ? &x->held_e : NULL);
    }
    x->rolling = true;
}

static void finish_end(xexec_t *x, const char *status, const char *cause,
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
    files_put_cancel(&x->put);
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
    if (end) /* the hosts its egress proxy let it reach, bytes each way, secrets used */
        json_object_set_new(end, "egress",
                            e && e->egress ? json_deep_copy(e->egress) : json_null());
    if (end && (!x->oneshot || x->keep))
        json_object_set_new(end, "kernel_id", json_string(x->kernel_id));
    if (end && x->req.checkpoint)
        json_object_set_new(end, "checkpoint",
                            x->ckpt_id[0] ? json_string(x->ckpt_id) : json_null());
    if (end && x->req.rollback_on_error) {
        json_object_set_new(end, "rolled_back", json_boolean(x->rolled_back));
        if (!x->rolled_back && x->rb_error[0])
            json_object_set_new(end, "rollback_error", json_string(x->rb_error));
    }
    x->state = X_DONE;
    x->done_ms = util_now_ms();
    if (end) {
        x->end = json_incref(end);
        emit(x, end, "end");
    }
    if (audit_enabled())
        audit_event("execute_api", "s:s, s:s, s:s, s:s, s:f", "tenant", x->tn->name, "kernel",
                    x->kernel_id, "execution", x->id, "status", status, "duration_ms", dur);
    log_debug("xexec: execution=%s kernel=%s: %s", x->id, x->kernel_id, status);
    if (x->oneshot && !x->keep && !x->gone) {
        x->after_due = true;
        evl->timer_arm(evl, x->after, 0);
    }
    if (x->ckpt_id[0] && !x->req.checkpoint) { /* rollback_on_error's own: over */
        kernel_t *k = kmgr_find(g->km, x->kernel_id);
        struct gw_caller who = {0};
        struct kerr err;
        const struct ckpt_asker a = {.who = &who};
        snprintf(who.tenant, sizeof(who.tenant), "%s", x->tn->name);
        if (k)
            ckpt_drop(g, k, &a, x->ckpt_id, &err);
    }
    if (xk)
        pump_soon(xk);
}

void xexec_enqueue(xexec_t *x, kernel_t *k)
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

/* An execution that may go before its retention ends: finished, nobody reads it, and no
 * Idempotency-Key promises a retry of its POST will find it. */
static bool evictable(const xexec_t *x)
{
    return x->state == X_DONE && list_empty(&x->subs) && !x->key[0];
}

static xexec_t *oldest_evictable(struct xtenant *t)
{
    xexec_t *x;
    list_for_each(x, &t->execs, tlink)
    {
        if (evictable(x))
            return x;
    }
    return NULL;
}

/* Seconds until t's oldest held execution may go (its retention), at least 1. */
static int retry_secs(struct xexecs *xa, struct xtenant *t)
{
    uint64_t now = util_now_ms(), keep = (uint64_t)xa->g->cfg.execution_retention * 1000;
    xexec_t *x;
    list_for_each(x, &t->execs, tlink)
    {
        if (x->state == X_DONE) {
            uint64_t at = x->done_ms + keep;
            return at <= now + 1000 ? 1 : (int)((at - now + 999) / 1000);
        }
    }
    return 1;
}

/* Room for one more execution of tenant: at its share (--max-executions-per-tenant) its own
 * oldest evictable execution goes; when the table is full (--max-executions), the tenant
 * holding the most gives up its oldest evictable one. Another tenant's keyed execution is
 * never dropped before its retention ends. 0; -EAGAIN: the tenant is at its share with
 * nothing to drop (429); -EBUSY: the table is full (503); *ret_retry: seconds to wait. */
static int make_room(struct xexecs *xa, const char *tenant, int *ret_retry)
{
    struct xtenant *t = tenant_find(xa, tenant), *big = NULL, *o;
    xexec_t *x;
    if (t && (long long)t->count >= xa->g->cfg.max_executions_per_tenant) {
        if (!(x = oldest_evictable(t))) {
            *ret_retry = retry_secs(xa, t);
            return -EAGAIN;
        }
        exec_free(x);
    }
    if ((long long)xa->count < xa->g->cfg.max_executions)
        return 0;
    list_for_each(o, &xa->tenants, link)
    {
        if (o->count > 0 && (!big || o->count > big->count))
            big = o;
    }
    if (big && (x = oldest_evictable(big))) {
        exec_free(x);
        return 0;
    }
    if (big && big == t) { /* the one holding the most asks for more */
        *ret_retry = retry_secs(xa, t);
        return -EAGAIN;
    }
    *ret_retry = 1;
    return -EBUSY;
}

static xexec_t *exec_new(struct xexecs *xa, const struct gw_caller *who, kernel_t *k)
{
    int retry;
    if (make_room(xa, who->tenant, &retry) < 0) {
        errno = EAGAIN;
        return NULL;
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
    tn->bytes += XEXEC_EXEC_BYTES;
    x->exec_count = -1;
    list_init(&x->subs);
    list_init(&x->qlink);
    shardid_mint(x->id); /* a router finds its shard from it (docs/scale-out.md) */
    snprintf(x->kernel_id, sizeof(x->kernel_id), "%s", kernel_id(k));
    snprintf(x->workspace_id, sizeof(x->workspace_id), "%s", wspace_id(kernel_workspace(k)));
    x->queued_wall_us = util_wall_us();
    x->timer = evl->timer_new(evl, on_timeout, x);
    x->settle = evl->timer_new(evl, on_settle, x);
    x->after = evl->timer_new(evl, on_after, x);
    list_append(&xa->execs, &x->link);
    list_append(&tn->execs, &x->tlink);
    xa->count++;
    tn->count++;
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

json_t *xexec_model(const xexec_t *x)
{
    char at[40];
    util_iso_time(at, sizeof(at), x->queued_wall_us);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:O?}", "id", x->id, "kernel_id",
                     x->kernel_id, "workspace_id", x->workspace_id, "state",
                     state_names[x->state], "queued_at", at, "first_seq",
                     (json_int_t)x->first_seq, "next_seq", (json_int_t)x->next_seq, "end",
                     x->end);
}


/* Its files are in the workspace (rc 0), or files[failed] could not be written. */
static void written(xexec_t *x, kernel_t *k, int rc, size_t failed)
{
    char cause[FPATH_MAX + 200];
    free(x->items);
    x->items = NULL;
    if (rc < 0) {
        snprintf(cause, sizeof(cause), "cannot write %s to the workspace: %s",
                 x->req.files[failed].path, strerror(-rc));
        return finish(x, "error", cause, NULL);
    }
    for (size_t i = 0; i < x->req.nfiles; i++) {
        free(x->req.files[i].data);
        x->req.files[i].data = NULL;
    }
    xexec_enqueue(x, k);
}

static void oneshot_written(void *data, int rc, size_t failed)
{
    xexec_t *x = data;
    kernel_t *k = x->put_k;
    x->put = NULL;
    x->put_k = NULL;
    if (rc == 0 && kernel_state(k) == KERNEL_DEAD) { /* it died while its files were written */
        char cause[FPATH_MAX + 200];
        snprintf(cause, sizeof(cause), "the kernel died%s%s", kernel_last_cause(k)[0] ? ": " : "",
                 kernel_last_cause(k));
        return finish(x, "kernel_died", cause, NULL);
    }
    written(x, k, rc, failed);
}

static void oneshot_ready(void *data, kernel_t *k, int status)
{
    xexec_t *x = data;
    char cause[FPATH_MAX + 200];
    x->wait = NULL;
    int rc = kops_waited(x->xa->g, k, status);
    if (rc == -ECANCELED || rc == -ESHUTDOWN) /* DELETE of its kernel, a drain */
        return finish(x, "shutdown", "the kernel was shut down while it started", NULL);
    if (rc < 0 || kernel_state(k) != KERNEL_RUNNING) {
        snprintf(cause, sizeof(cause), "the kernel failed to start%s%s",
                 kernel_last_cause(k)[0] ? ": " : "", kernel_last_cause(k));
        return finish(x, "kernel_died", cause, NULL);
    }
    if (x->req.nfiles == 0)
        return xexec_enqueue(x, k);
    if (!(x->items = calloc(x->req.nfiles, sizeof(*x->items))))
        return finish(x, "error", "out of memory", NULL);
    for (size_t i = 0; i < x->req.nfiles; i++) {
        const struct xreq_file *f = &x->req.files[i];
        x->items[i] = (struct files_item){.path = f->path, .data = f->data, .len = f->len};
    }
    /* charged to the kernel at once, by a child the loop watches: no wait here */
    size_t failed = 0;
    rc = files_put(kernel_workspace(k), x->items, x->req.nfiles, oneshot_written, x, &x->put,
                   &failed);
    if (rc == 0) {
        x->put_k = k;
        return;
    }
    written(x, k, rc < 0 ? rc : 0, failed);
}

void xexec_cancel(xexec_t *x)
{
    if (x->state == X_DONE)
        return;
    x->cancelled = true;
    if (x->ckpting) /* its checkpoint is being taken: the code never goes */
        return finish(x, "cancelled", "", NULL);
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


/* ---- the faces' interface ---- */

int xexec_admit(gw_t *g, const char *tenant, int *ret_retry_after)
{
    int retry = 1, rc = make_room(g->xexecs, tenant, &retry);
    if (rc < 0)
        *ret_retry_after = retry;
    return rc;
}

xexec_t *xexec_new(gw_t *g, const struct gw_caller *who, kernel_t *k)
{
    return exec_new(g->xexecs, who, k);
}

void xexec_set_request(xexec_t *x, struct xreq *q)
{
    xreq_fini(&x->req);
    x->req = *q;
    memset(q, 0, sizeof(*q));
}

void xexec_set_key(xexec_t *x, const char *key, const unsigned char hash[crypto_hash_sha256_BYTES])
{
    snprintf(x->key, sizeof(x->key), "%s", key);
    memcpy(x->body_hash, hash, sizeof(x->body_hash));
}

void xexec_oneshot(xexec_t *x, kernel_t *k, bool keep)
{
    x->oneshot = true;
    x->keep = keep;
    if (kernel_wait(k, oneshot_ready, x, &x->wait) < 0)
        oneshot_ready(x, k, 0);
}

xexec_t *xexec_find(gw_t *g, const char *id, const char *tenant)
{
    return exec_find(g->xexecs, id, tenant);
}

xexec_t *xexec_by_key(gw_t *g, const char *key, const char *tenant)
{
    return key[0] ? exec_by_key(g->xexecs, key, tenant) : NULL;
}

bool xexec_same_body(const xexec_t *x, const unsigned char hash[crypto_hash_sha256_BYTES])
{
    return memcmp(x->body_hash, hash, sizeof(x->body_hash)) == 0;
}

bool xexec_same_route(const xexec_t *x, const char *kernel_id)
{
    return kernel_id ? !x->oneshot && !strcmp(x->kernel_id, kernel_id) : x->oneshot;
}

size_t xexec_waiting(gw_t *g, kernel_t *k)
{
    struct xkern *xk = kernel_data(k, g->xexec_listener.slot);
    return xk ? xk->nqueued + (xk->running ? 1 : 0) : 0;
}

const char *xexec_id(const xexec_t *x)
{
    return x->id;
}

bool xexec_done(const xexec_t *x)
{
    return x->state == X_DONE;
}

uint64_t xexec_first_seq(const xexec_t *x)
{
    return x->first_seq;
}

uint64_t xexec_next_seq(const xexec_t *x)
{
    return x->next_seq;
}

void xexec_event(const xexec_t *x, uint64_t seq, struct xexec_event *ret)
{
    const struct xevt *e = x->ev[seq - x->first_seq];
    *ret = (struct xexec_event){.type = e->type, .json = e->json, .len = e->len};
    if (e->name_len) {
        ret->name = (jspan_t){e->json + e->name_off, e->name_len};
        ret->text = (jspan_t){e->json + e->text_off, e->text_len};
        ret->text_len = e->text_bytes;
    }
}

void xexec_subscribe(xexec_t *x, struct xexec_sub *s, uint64_t since,
                     const struct xexec_sub_ops *ops)
{
    s->x = x;
    s->cursor = since;
    s->ops = ops;
    list_append(&x->subs, &s->link);
}

void xexec_unsubscribe(struct xexec_sub *s)
{
    if (s->x)
        list_remove(&s->link);
    s->x = NULL;
}

/* ---- set-up ---- */

int xexec_listen(gw_t *g)
{
    struct xexecs *xa = calloc(1, sizeof(*xa));
    if (!xa)
        return -ENOMEM;
    xa->g = g;
    list_init(&xa->execs);
    list_init(&xa->tenants);
    if (!(xa->sweep = g->loop.evl.timer_new(&g->loop.evl, on_sweep, xa))) {
        free(xa);
        return -ENOMEM;
    }
    g->loop.evl.timer_arm(&g->loop.evl, xa->sweep, XEXEC_SWEEP_MS);
    g->xexecs = xa;
    return kmgr_listen(g->km, &g->xexec_listener, &listener_ops, g);
}

void xexec_fini(gw_t *g)
{
    struct xexecs *xa = g->xexecs;
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
    g->xexecs = NULL;
}

