/* The execution watch's outcomes: the requests each client session sent that the kernel has
 * not answered yet, and, when the kernel process ends first, a terminal answer to each in the
 * kernel's name, so no client waits for a reply that cannot come (docs/protocol.md,
 * "Outcomes"); and the execution watch: which execution runs, its wall time, output cap,
 * audit event and statistics. */
#include "kernelmgr/kexec_int.h"

#include <errno.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"
#include "protocol/jcap.h"
#include "sandbox/sbx.h"

#define EXEC_INTERRUPT_GRACE_MS 5000 /* after a wall-time interrupt, before restarting */
#define IDLE_AFTER_REPLY_MS     2000 /* an execution's idle after its reply and a quiet iopub */

/* A kernel's requests in flight and execution watch (k->exec). */
struct kexec {
    /* the execution in progress (from iopub status busy/idle of an execute_request) */
    char id[JMSG_MSG_ID_MAX];
    char last[JMSG_MSG_ID_MAX]; /* the execution that ended last */
    char *parent;               /* its header, for notices */
    bool own;                   /* the gateway's own (kexec__status: own_id): not counted */
    long long bytes;
    bool capped;
    bool cap_stopped; /* interrupted for printing on past its output cap */
    int stage;        /* 0 running, 1 interrupted for exceeding its wall time */
    int64_t start_us;
    bool error;       /* an error message came */
    char sha[65];     /* sha256 of its code (hex), for the audit log */
    long long cpu0;   /* the cgroup's CPU time when it began (-1: unknown) */
    long long pids0;  /* ... and its forks refused at the pids limit */
    /* its egress receipt, for the execution receipt_id (exec_audit, then announce_end) */
    json_t *receipt;
    char receipt_id[JMSG_MSG_ID_MAX];
    /* execute_requests clients sent whose iopub status "idle" has not come yet (the drain
     * waits for them); beyond KERNEL_SENT_MAX only the one running is known. Allocated while
     * there are any (kexec__track_sent), grown as needed */
    char (*sent)[JMSG_MSG_ID_MAX];
    size_t nsent, capsent;
    evl_timer_t *timer; /* wall time (created by the first execution, as is idle_timer) */
    /* the last execute_reply seen, and the wait for its idle (on_idle_late) */
    char replied[JMSG_MSG_ID_MAX];
    evl_timer_t *idle_timer;
    uint64_t iopub_us;          /* when the last iopub message came */
    struct list failing;        /* kexec__fail_all: requests being answered */
    struct kpending *failing_now;
};

/* A request a client sent on shell or control that the kernel has not answered yet. */
struct kpending {
    kconn_t *c; /* the session that sent it */
    enum jchan chan;
    char msg_id[JMSG_MSG_ID_MAX];
    char msg_type[JMSG_MSG_TYPE_MAX];
    char *header; /* its header as sent: the parent of the answers made for it */
    struct list link;
};

static const struct {
    const char *status, *ename;
} outcomes[KERNEL_OUT_N] = {
    [KERNEL_OUT_OK] = {"ok", NULL},
    [KERNEL_OUT_ERROR] = {"error", NULL},
    [KERNEL_OUT_CANCELLED] = {"cancelled", "Cancelled"},
    [KERNEL_OUT_TIMEOUT] = {"timeout", "TimeLimit"},
    [KERNEL_OUT_OUTPUT_LIMIT] = {"output_limit", "OutputLimit"},
    [KERNEL_OUT_OUT_OF_MEMORY] = {"out_of_memory", "OutOfMemory"},
    [KERNEL_OUT_PIDS_LIMIT] = {"pids_limit", "PidsLimit"},
    [KERNEL_OUT_KILLED] = {"killed", "KernelKilled"},
    [KERNEL_OUT_KERNEL_DIED] = {"kernel_died", "KernelDied"},
    [KERNEL_OUT_RESTARTED] = {"kernel_restarted", "KernelRestarted"},
    [KERNEL_OUT_SHUTDOWN] = {"shutdown", "KernelShutdown"},
};

const char *kernel_outcome_status(enum kernel_outcome o)
{
    return (unsigned)o < KERNEL_OUT_N ? outcomes[o].status : "error";
}

const char *kernel_outcome_ename(enum kernel_outcome o)
{
    return (unsigned)o < KERNEL_OUT_N ? outcomes[o].ename : NULL;
}

/* ---- requests in flight, per client session ---- */

static void pending_free(struct kpending *p)
{
    list_remove(&p->link);
    free(p->header);
    free(p);
}

/* k's state, allocated on first use (NULL: no memory, logged). */
static struct kexec *state(kernel_t *k)
{
    struct kexec *x = k->exec;
    if (x)
        return x;
    if (!(x = calloc(1, sizeof(*x)))) {
        log_warn("kernel=%s: no memory to track its requests and executions", k->id);
        return NULL;
    }
    x->cpu0 = -1;
    x->iopub_us = util_now_us();
    list_init(&x->failing);
    k->exec = x;
    return x;
}

void kexec__free(kernel_t *k)
{
    struct kexec *x = k->exec;
    if (!x)
        return;
    while (!list_empty(&x->failing))
        pending_free(list_first(&x->failing, struct kpending, link));
    evl_timer_destroy(k->m->evl, &x->timer);
    evl_timer_destroy(k->m->evl, &x->idle_timer);
    free(x->parent);
    free(x->sent);
    json_decref(x->receipt);
    free(x);
    k->exec = NULL;
}

const char *kexec__running(const kernel_t *k)
{
    return k->exec ? k->exec->id : "";
}

const char *kexec__last(const kernel_t *k)
{
    return k->exec ? k->exec->last : "";
}

/* A Jupyter request, which its reply names as parent; comm_open, comm_msg and comm_close
 * are answered by nothing. */
static bool is_request(const char *msg_type)
{
    size_t n = strlen(msg_type);
    return n > 8 && !strcmp(msg_type + n - 8, "_request");
}

void kexec__sent(kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    if ((chan != JCHAN_SHELL && chan != JCHAN_CONTROL) || !is_request(h->msg_type))
        return;
    if (!state(c->k)) /* not remembered: it gets no answer if the kernel dies */
        return;
    if (c->npending == KCONN_PENDING_MAX) { /* the oldest is forgotten: it gets no answer */
        log_debug("kernel=%s: %d requests in flight on one session; forgetting the oldest",
                  c->k->id, KCONN_PENDING_MAX);
        pending_free(list_first(&c->pending, struct kpending, link));
        c->npending--;
    }
    struct kpending *p = calloc(1, sizeof(*p));
    jspan_t hdr = m->part[JPART_HEADER];
    if (!p)
        return;
    p->c = c;
    p->chan = chan;
    memcpy(p->msg_id, h->msg_id, sizeof(p->msg_id));
    memcpy(p->msg_type, h->msg_type, sizeof(p->msg_type));
    /* the header as sent, so the client matches the answer; a huge one is cut to its ids */
    if (hdr.n <= KCONN_PENDING_HEADER_MAX) {
        p->header = strndup(hdr.p, hdr.n);
    } else {
        json_t *o = json_pack("{s:s, s:s, s:s}", "msg_id", h->msg_id, "msg_type", h->msg_type,
                              "session", c->session);
        p->header = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
    }
    if (!p->header) {
        free(p);
        return;
    }
    list_append(&c->pending, &p->link);
    c->npending++;
}

/* A reply, which names its request as parent; stdin's input_requests answer nothing. */
static bool is_reply(const char *msg_type)
{
    size_t n = strlen(msg_type);
    return n > 6 && !strcmp(msg_type + n - 6, "_reply");
}

/* An execution's reply came: its idle should follow on iopub at once. A kernel's PUB socket
 * drops what its queue cannot hold when the gateway's I/O thread falls behind (a loaded host),
 * and a lost idle would leave the execution, and the kernel's state, busy for good: the idle is
 * waited for IDLE_AFTER_REPLY_MS, then made (on_idle_late). */
static void replied(kernel_t *k, const char *msg_id)
{
    struct kexec *x = state(k);
    if (!x)
        return;
    snprintf(x->replied, sizeof(x->replied), "%s", msg_id);
    if (!strcmp(msg_id, x->id) && x->idle_timer)
        k->m->evl->timer_arm(k->m->evl, x->idle_timer, IDLE_AFTER_REPLY_MS);
}

bool kexec__answered(kconn_t *c, const jmsg_t *m, const jhdr_t *h)
{
    jhdr_t ph;
    struct kpending *p;
    /* client msg_ids are any strings: the parent header is parsed, not searched */
    if (!is_reply(h->msg_type) || jhdr_parse(m->part[JPART_PARENT], &ph) < 0)
        return false;
    if (!strcmp(h->msg_type, "execute_reply"))
        replied(c->k, ph.msg_id);
    list_for_each(p, &c->pending, link)
    {
        if (!strcmp(p->msg_id, ph.msg_id)) {
            pending_free(p);
            c->npending--;
            return true;
        }
    }
    return false;
}

void kexec__forget(kconn_t *c)
{
    struct kpending *p, *tmp;
    while (!list_empty(&c->pending))
        pending_free(list_first(&c->pending, struct kpending, link));
    c->npending = 0;
    struct kexec *x = c->k->exec;
    if (!x)
        return;
    list_for_each_safe(p, tmp, &x->failing, link) /* kexec__fail_all is answering them */
    {
        if (p->c == c)
            pending_free(p);
    }
    if (x->failing_now && x->failing_now->c == c)
        x->failing_now->c = NULL;
}

/* ---- the end of an execution ---- */

/* An execution began running: its cgroup's CPU time and peak memory are measured from here. */
static void usage_begin(kernel_t *k, struct kexec *x)
{
    struct sbx_cgroup_usage u = {.cpu_ns = -1};
    struct sbx_cgroup_events ev = {0};
    if (k->cgroup) {
        sbx_cgroup_usage(k->cgroup, &u);
        sbx_cgroup_peak(k->cgroup, true);
        sbx_cgroup_events(k->cgroup, &ev);
    }
    x->cpu0 = u.cpu_ns;
    x->pids0 = ev.pids_max;
}

/* An execution is over: listeners hear of it (duration_us 0: it never ran). */
static void announce_end(kernel_t *k, struct kexec *x, const char *msg_id, enum kernel_outcome o,
                         const char *cause, int64_t duration_us)
{
    struct kernel_exec_end e = {.msg_id = msg_id,
                                .outcome = o,
                                .cause = cause ? cause : "",
                                .duration_us = duration_us,
                                .cpu_ns = -1,
                                .peak_mem_bytes = -1,
                                .egress = !strcmp(msg_id, x->receipt_id) ? x->receipt : NULL};
    if (duration_us > 0 && k->cgroup) { /* it ran: what its cgroup spent meanwhile */
        struct sbx_cgroup_usage u;
        sbx_cgroup_usage(k->cgroup, &u);
        if (u.cpu_ns >= 0 && x->cpu0 >= 0 && u.cpu_ns >= x->cpu0)
            e.cpu_ns = u.cpu_ns - x->cpu0;
        e.peak_mem_bytes = sbx_cgroup_peak(k->cgroup, false);
    }
    k->own->exec_end(k, &e);
    if (e.egress) {
        json_decref(x->receipt);
        x->receipt = NULL;
        x->receipt_id[0] = '\0';
    }
}

/* A message in the kernel's name: iopub to every listener (to NULL), or a reply to one
 * session on chan. Takes content. */
static void send_made(kernel_t *k, kconn_t *to, enum jchan chan, const char *msg_type,
                      const char *parent, json_t *content)
{
    jhdr_t h;
    char *hdr = content ? jmsg_new_header(msg_type, k->session, h.msg_id) : NULL;
    char *body = hdr ? json_dumps(content, JSON_COMPACT) : NULL;
    json_decref(content);
    if (body) {
        jmsg_t m;
        jmsg_own(&m, &h, hdr, h.msg_id, msg_type, parent, body);
        if (to)
            to->ops->reply(to->user, to, chan, &m, &h);
        else
            k->own->iopub(k, &m, &h);
    }
    free(hdr);
    free(body);
}

/* "execute_request" -> "execute_reply" (only requests are remembered) */
static void reply_type(const char *req, char *out, size_t outsz)
{
    snprintf(out, outsz, "%.*s_reply", (int)(strlen(req) - 8), req);
}

/* Answers one request the kernel never will: for an execution, its error and idle on iopub
 * (before the reply, as a kernel sends them), then the reply. The session may be closed by a
 * listener meanwhile: kexec__forget clears p->c then. */
static void fail_one(kernel_t *k, struct kexec *x, struct kpending *p, enum kernel_outcome o,
                     const char *cause)
{
    const char *ename = kernel_outcome_ename(o);
    char rtype[JMSG_MSG_TYPE_MAX + 8], line[640];
    bool exec = !strcmp(p->msg_type, "execute_request");
    snprintf(line, sizeof(line), "%s: %s", ename, cause);
    if (exec) {
        send_made(k, NULL, JCHAN_IOPUB, "error", p->header,
                  json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", cause, "traceback",
                            line));
        send_made(k, NULL, JCHAN_IOPUB, "status", p->header,
                  json_pack("{s:s}", "execution_state", "idle"));
    }
    reply_type(p->msg_type, rtype, sizeof(rtype));
    json_t *content = json_pack("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", ename,
                                "evalue", cause, "traceback", line);
    if (exec && content) {
        json_object_set_new(content, "execution_count", json_null());
        json_object_set_new(content, "user_expressions", json_object());
        json_object_set_new(content, "payload", json_array());
    }
    if (p->c)
        send_made(k, p->c, p->chan, rtype, p->header, content);
    else
        json_decref(content);
    if (exec) {
        bool ran = !strcmp(p->msg_id, x->id);
        announce_end(k, x, p->msg_id, o, cause, ran ? util_now_us() - x->start_us : 0);
    }
}

void kexec__fail_all(kernel_t *k, enum kernel_outcome o, const char *cause)
{
    kconn_t *c;
    /* what the kernel did say before it ended goes first */
    kz_drain_now(&k->iopub);
    list_for_each(c, &k->conns, link)
    {
        kz_drain_now(&c->z[JCHAN_SHELL]);
        kz_drain_now(&c->z[JCHAN_CONTROL]);
    }
    /* requests in flight were remembered in k's state, and an execution needs it too: none,
     * nothing to answer (the drains above may have made it) */
    struct kexec *x = k->exec;
    if (!x)
        return;
    /* An answer may close a session (its owner destroys it, and kexec__forget takes its
     * requests off this list): every request is moved here first, then answered in order. */
    bool running_pending = false;
    list_for_each(c, &k->conns, link)
    {
        struct kpending *p, *tmp;
        list_for_each_safe(p, tmp, &c->pending, link)
        {
            list_remove(&p->link);
            list_append(&x->failing, &p->link);
            running_pending |= !strcmp(p->msg_id, x->id);
        }
        c->npending = 0;
    }
    size_t n = 0;
    while (!list_empty(&x->failing)) {
        struct kpending *p = list_first(&x->failing, struct kpending, link);
        list_remove(&p->link);
        x->failing_now = p;
        fail_one(k, x, p, o, cause);
        x->failing_now = NULL;
        free(p->header);
        free(p);
        n++;
    }
    /* an execution no session waits for (its reply came, its idle did not) still ends, and
     * its listeners hear how: its error, then its idle */
    if (x->id[0] && !running_pending && !x->own) {
        const char *ename = kernel_outcome_ename(o);
        char line[400];
        snprintf(line, sizeof(line), "%s: %s", ename, cause);
        if (x->parent && ename)
            send_made(k, NULL, JCHAN_IOPUB, "error", x->parent,
                      json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", cause,
                                "traceback", line));
        if (x->parent)
            send_made(k, NULL, JCHAN_IOPUB, "status", x->parent,
                      json_pack("{s:s}", "execution_state", "idle"));
        announce_end(k, x, x->id, o, cause, util_now_us() - x->start_us);
        n++;
    }
    if (n)
        log_info("kernel=%s: %zu request%s in flight answered: %s: %s", k->id, n,
                 n > 1 ? "s" : "", kernel_outcome_ename(o), cause);
}

/* ---- the execution watch (iopub status busy/idle of execute_requests) ---- */

static void notice(kernel_t *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void notice(kernel_t *k, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    log_info("kernel=%s: %s", k->id, text);
    if (k->exec && k->exec->parent)
        k->own->notice(k, (jspan_t){k->exec->parent, strlen(k->exec->parent)}, text);
}

/* The audit event of an execution that ended (idle, or the kernel was restarted). */
static void exec_audit(kernel_t *k, const char *status)
{
    struct kexec *x = k->exec;
    if (!x || !x->id[0])
        return;
    /* what its egress proxy let through meanwhile (null: no egress policy): for this event
     * and the execution's end (announce_end) */
    json_decref(x->receipt);
    x->receipt = !k->egpol   ? NULL
                 : k->egress ? kegress_receipt_take(k->egress)
                             : json_pack("{s:[], s:b, s:[]}", "hosts", "more_hosts", 0, "secrets");
    snprintf(x->receipt_id, sizeof(x->receipt_id), "%s", x->id);
    if (!audit_enabled())
        return;
    double ms = (double)(util_now_us() - x->start_us) / 1000.0;
    json_t *hosts = json_null(), *h, *secrets = json_null();
    size_t i;
    if (x->receipt) { /* egress_hosts: "host:port" strings, as before the receipt */
        hosts = json_array();
        json_array_foreach(json_object_get(x->receipt, "hosts"), i, h)
            json_array_append(hosts, json_object_get(h, "host"));
        if (json_is_true(json_object_get(x->receipt, "more_hosts")))
            json_array_append_new(hosts, json_string("..."));
        secrets = json_incref(json_object_get(x->receipt, "secrets"));
    }
    audit_event("execution", "s:s, s:s, s:o, s:s, s:f, s:s, s:o, s:o, s:O", "tenant",
                k->ws->tenant,
                "kernel",
                k->id, "msg_id", audit_str(x->id, strlen(x->id)), "code_sha256",
                x->sha, "duration_ms", ms, "status",
                status      ? status
                : x->stage  ? "timeout" /* interrupted for its wall time */
                : x->error  ? "error"
                            : "ok",
                "egress_hosts", hosts ? hosts : json_null(), "egress_secrets",
                secrets ? secrets : json_null(), "egress",
                x->receipt ? x->receipt : json_null());
}

/* The execution in progress, if any, is over (how: its status in the statistics; the gateway's
 * own execution of a pooled kernel's environment is not counted). */
static void finish(kernel_t *k, enum kmgr_exec how)
{
    struct kexec *x = k->exec;
    if (!x)
        return;
    if (x->id[0] && !x->own) {
        k->stats->executions[how]++;
        hist_observe(&k->stats->exec_seconds, (double)(util_now_us() - x->start_us) / 1e6);
    }
    if (x->timer)
        k->m->evl->timer_disarm(k->m->evl, x->timer);
    if (x->idle_timer)
        k->m->evl->timer_disarm(k->m->evl, x->idle_timer);
    if (x->id[0])
        memcpy(x->last, x->id, sizeof(x->last));
    x->id[0] = '\0';
    free(x->parent);
    x->parent = NULL;
    x->own = false;
    x->bytes = 0;
    x->capped = false;
    x->cap_stopped = false;
    x->stage = 0;
    x->error = false;
    x->sha[0] = '\0';
}

void kexec__abort(kernel_t *k)
{
    finish(k, k->exec && k->exec->stage ? KMGR_EXEC_TIMEOUT : KMGR_EXEC_ABORTED);
}

/* Whether the execution in progress met its cgroup's pids limit. */
static bool forks_refused(kernel_t *k, const struct kexec *x)
{
    struct sbx_cgroup_events ev;
    if (!k->cgroup)
        return false;
    sbx_cgroup_events(k->cgroup, &ev);
    return ev.pids_max > x->pids0;
}

/* The execution in progress reached its idle: listeners hear how it went. */
static void exec_outcome(kernel_t *k, struct kexec *x)
{
    char cause[160] = "";
    enum kernel_outcome o = x->error ? KERNEL_OUT_ERROR : KERNEL_OUT_OK;
    if (x->own)
        return;
    if (x->stage) {
        o = KERNEL_OUT_TIMEOUT;
        snprintf(cause, sizeof(cause), "the execution exceeded its wall-time limit of %d s and "
                 "was interrupted", k->exec_timeout_ms / 1000);
    } else if (x->error && forks_refused(k, x)) {
        o = KERNEL_OUT_PIDS_LIMIT;
        snprintf(cause, sizeof(cause), "forks were refused at the kernel's process limit (%lld)",
                 k->lim.pids);
    } else if (x->capped) {
        o = KERNEL_OUT_OUTPUT_LIMIT;
        snprintf(cause, sizeof(cause), "the execution's output exceeded its limit of %lld "
                 "bytes: the rest was discarded", k->output_cap);
    }
    announce_end(k, x, x->id, o, cause, util_now_us() - x->start_us);
}

static void on_timer(void *data);
static void on_idle_late(void *data);

static void exec_begin(kernel_t *k, struct kexec *x, const char *msg_id, jspan_t parent, bool own)
{
    evl_t *l = k->m->evl;
    finish(k, KMGR_EXEC_ABORTED); /* its idle never came */
    snprintf(x->id, sizeof(x->id), "%s", msg_id);
    x->parent = strndup(parent.p, parent.n);
    x->own = own;
    x->start_us = util_now_us();
    usage_begin(k, x);
    /* its egress receipt is what the proxy let through since the last one was taken (when the
     * execution before ended): the kernel's code may reach hosts before the gateway sees its
     * status busy, and nothing it did is lost */
    if ((!x->timer && !(x->timer = l->timer_new(l, on_timer, k))) ||
        (!x->idle_timer && !(x->idle_timer = l->timer_new(l, on_idle_late, k))))
        log_warn("kernel=%s: no timers for its executions (%s): no wall-time limit, no wait for a "
                 "lost idle",
                 k->id, strerror(errno));
    if (k->exec_timeout_ms > 0 && x->timer)
        l->timer_arm(l, x->timer, (uint64_t)k->exec_timeout_ms);
    if (!strcmp(msg_id, x->replied) && x->idle_timer) /* its reply came first (shell, iopub) */
        l->timer_arm(l, x->idle_timer, IDLE_AFTER_REPLY_MS);
}

void kexec__stop_why(kernel_t *k, enum kernel_outcome o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    k->stop_outcome = o;
    vsnprintf(k->stop_cause, sizeof(k->stop_cause), fmt, ap);
    va_end(ap);
}

void kernel_fail_pending(kernel_t *k, enum kernel_outcome o, const char *cause)
{
    if (k->pool)
        return;
    kexec__fail_all(k, o, cause);
    /* the execution running is over for its clients: a late idle of it is not tracked */
    kexec__abort(k);
}

void kexec__pause(kernel_t *k, bool on)
{
    struct kexec *x = k->exec;
    evl_t *l = k->m->evl;
    if (!x || !x->id[0])
        return;
    if (on) {
        if (x->timer)
            l->timer_disarm(l, x->timer);
        if (x->idle_timer)
            l->timer_disarm(l, x->idle_timer);
        return;
    }
    x->start_us += util_now_us() - k->paused_us; /* the pause is not its time */
    int64_t ran_ms = (int64_t)(util_now_us() - x->start_us) / 1000;
    if (k->exec_timeout_ms > 0 && x->timer)
        l->timer_arm(l, x->timer,
                     x->stage ? EXEC_INTERRUPT_GRACE_MS
                              : (uint64_t)(ran_ms < k->exec_timeout_ms ? k->exec_timeout_ms - ran_ms
                                                                       : 1));
    if (!strcmp(x->id, x->replied) && x->idle_timer)
        l->timer_arm(l, x->idle_timer, IDLE_AFTER_REPLY_MS);
}

/* Wall time per execution: interrupt first; a kernel that ignores SIGINT is restarted. */
static void on_timer(void *data)
{
    kernel_t *k = data;
    struct kexec *x = k->exec;
    if (!x->id[0] || k->state != KERNEL_RUNNING || k->paused)
        return;
    if (x->stage == 0) {
        notice(k, "execution exceeded the wall-time limit of %d s: interrupting it",
               k->exec_timeout_ms / 1000);
        k->exec_ops->interrupt(k);
        x->stage = 1;
        k->m->evl->timer_arm(k->m->evl, x->timer, EXEC_INTERRUPT_GRACE_MS);
        return;
    }
    notice(k, "the kernel ignored the interrupt: restarting it");
    exec_audit(k, "timeout");
    kexec__stop_why(k, KERNEL_OUT_TIMEOUT,
                     "the execution exceeded its wall-time limit of %d s and ignored the "
                     "interrupt: the kernel was restarted",
                     k->exec_timeout_ms / 1000);
    kernel_fail_pending(k, k->stop_outcome, k->stop_cause);
    if (k->exec_ops->restart(k) == 0) {
        k->stats->restarts[KMGR_RESTART_AUTO]++;
        k->own->event(k, KERNEL_EV_RESTARTING, "execution wall-time limit");
    }
}

/* A kernel message over the limit: libzmq refused it from its header (the gateway holds none
 * of it) and dropped the connection, and whatever the kernel sent on that socket until it was
 * connected again is lost, its idle or reply perhaps. Rather than wait for messages that may
 * never come, the requests in flight are answered now and the kernel restarts, as for the
 * wall time (docs/protocol.md, "Outcomes"). */
void kexec__oversize(kernel_t *k, const char *chan)
{
    if (k->state != KERNEL_RUNNING) { /* starting, restarting or stopping: that goes on */
        log_warn("kernel=%s: a message on %s over %lld bytes refused", k->id, chan,
                 k->m->o.max_kernel_msg);
        return;
    }
    notice(k, "a message from the kernel on %s exceeded the limit of %lld bytes per message: "
              "restarting the kernel",
           chan, k->m->o.max_kernel_msg);
    exec_audit(k, "output_limit");
    kexec__stop_why(k, KERNEL_OUT_OUTPUT_LIMIT,
                     "a message from the kernel on %s exceeded the gateway's limit of %lld "
                     "bytes per message (--max-kernel-message-bytes): the kernel was restarted",
                     chan, k->m->o.max_kernel_msg);
    kernel_fail_pending(k, k->stop_outcome, k->stop_cause);
    if (k->exec_ops->restart(k) == 0) {
        k->stats->restarts[KMGR_RESTART_AUTO]++;
        k->own->event(k, KERNEL_EV_RESTARTING, "kernel message size limit");
    }
}

void kexec__track_sent(kernel_t *k, const char *msg_id)
{
    struct kexec *x = state(k);
    if (!x)
        return;
    if (x->nsent == x->capsent) {
        size_t cap = x->capsent ? 2 * x->capsent : 4;
        void *p = cap <= KERNEL_SENT_MAX ? realloc(x->sent, cap * sizeof(x->sent[0])) : NULL;
        if (!p) {
            log_debug("kernel=%s: %zu execute_requests in flight; not tracking more", k->id,
                      x->nsent);
            return;
        }
        x->sent = p;
        x->capsent = cap;
    }
    snprintf(x->sent[x->nsent++], sizeof(x->sent[0]), "%s", msg_id);
}

void kexec__forget_sent(kernel_t *k)
{
    struct kexec *x = k->exec;
    if (!x)
        return;
    free(x->sent);
    x->sent = NULL;
    x->nsent = x->capsent = 0;
}

static void sent_forget(kernel_t *k, const char *msg_id)
{
    struct kexec *x = k->exec;
    for (size_t i = 0; x && i < x->nsent; i++)
        if (!strcmp(x->sent[i], msg_id)) {
            x->nsent--;
            if (i < x->nsent)
                memcpy(x->sent[i], x->sent[x->nsent], sizeof(x->sent[0]));
            else if (!x->nsent)
                kexec__forget_sent(k); /* idle: the memory goes back */
            return;
        }
}

/* The execution in progress reached its idle: its audit event, outcome and statistics. */
static void exec_idle(kernel_t *k, struct kexec *x)
{
    exec_audit(k, NULL);
    exec_outcome(k, x);
    finish(k, x->stage ? KMGR_EXEC_TIMEOUT : x->error ? KMGR_EXEC_ERROR : KMGR_EXEC_OK);
}

void kexec__status(kernel_t *k, const jmsg_t *m, const char *own_id)
{
    json_error_t err;
    struct kexec *x = k->exec;
    if (x)
        x->iopub_us = util_now_us();
    json_t *c = json_loadb(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, 0, &err);
    const char *st = json_string_value(json_object_get(c, "execution_state"));
    if (st && (!strcmp(st, "busy") || !strcmp(st, "idle") || !strcmp(st, "starting")))
        snprintf(k->exec_state, sizeof(k->exec_state), "%s", st);
    if (st && !strcmp(st, "starting"))
        k->got_starting = true;
    if (st && (!strcmp(st, "busy") || !strcmp(st, "idle"))) {
        jhdr_t ph;
        if (jhdr_parse(m->part[JPART_PARENT], &ph) == 0) {
            bool changed = true;
            if (!strcmp(st, "idle"))
                sent_forget(k, ph.msg_id); /* its output and reply have been sent */
            if (!strcmp(st, "busy") && !strcmp(ph.msg_type, "execute_request")) {
                if ((changed = (x = state(k)) != NULL))
                    exec_begin(k, x, ph.msg_id, m->part[JPART_PARENT],
                               own_id[0] && !strcmp(ph.msg_id, own_id));
            } else if (!strcmp(st, "idle") && x && !strcmp(ph.msg_id, x->id)) {
                exec_idle(k, x);
                changed = true;
            } else {
                changed = false;
            }
            if (changed) /* callbacks waiting for iopub to reach their execution */
                k->exec_ops->changed(k);
        }
    }
    json_decref(c);
}

/* The wait for an execution's idle after its reply (data: the kernel). */
static void on_idle_late(void *data)
{
    kernel_t *k = data;
    struct kexec *x = k->exec;
    if (!x->id[0] || strcmp(x->id, x->replied) != 0 || !x->parent || k->state != KERNEL_RUNNING)
        return;
    /* iopub still bringing output (a backlog the loop drains in turns): its idle may be on
     * its way; only a quiet iopub lost it */
    uint64_t quiet_ms = (util_now_us() - x->iopub_us) / 1000;
    if (quiet_ms < IDLE_AFTER_REPLY_MS) {
        k->m->evl->timer_arm(k->m->evl, x->idle_timer, IDLE_AFTER_REPLY_MS - quiet_ms);
        return;
    }
    notice(k, "the kernel's idle status did not follow its reply within %d ms (a loaded host: "
              "its iopub queue may have dropped messages, output too); the execution is over",
           IDLE_AFTER_REPLY_MS);
    snprintf(k->exec_state, sizeof(k->exec_state), "idle");
    sent_forget(k, x->id);
    send_made(k, NULL, JCHAN_IOPUB, "status", x->parent,
              json_pack("{s:s}", "execution_state", "idle"));
    exec_idle(k, x);
    k->exec_ops->changed(k);
}

/* Whether the execution in progress failed (error), for the statistics and the audit log, and
 * its code (execute_input), for the audit log. */
void kexec__track(kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    jhdr_t ph;
    struct kexec *x = k->exec;
    if (!x)
        return; /* no execution runs */
    x->iopub_us = util_now_us();
    bool error = !strcmp(h->msg_type, "error");
    if (!x->id[0] || (!error && (!audit_enabled() || strcmp(h->msg_type, "execute_input"))) ||
        jhdr_parse(m->part[JPART_PARENT], &ph) < 0 || strcmp(ph.msg_id, x->id) != 0)
        return;
    if (error) {
        x->error = true;
        return;
    }
    json_t *c = json_loadb(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, 0, NULL);
    const char *code = json_string_value(json_object_get(c, "code"));
    if (code) {
        unsigned char d[crypto_hash_sha256_BYTES];
        crypto_hash_sha256(d, (const unsigned char *)code, json_string_length(json_object_get(c, "code")));
        sodium_bin2hex(x->sha, sizeof(x->sha), d, sizeof(d));
    }
    json_decref(c);
}

/* Output per execution: the message that crosses the cap is cut to it (a stream's text up to
 * the cap and a notice, a rich output replaced by a notice), later output messages of that
 * execution are dropped, once with a notice, and an execution that prints on is interrupted.
 * The gateway's memory stays bounded whatever the kernel prints. */
enum kexec_cap kexec__over_cap(kernel_t *k, const jmsg_t *m, const jhdr_t *h,
                               char **ret_content)
{
    struct kexec *x = k->exec;
    if (k->output_cap <= 0 || !x || !x->id[0] || !jcap_is_output(h->msg_type))
        return KEXEC_CAP_PASS;
    if (!memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, x->id, strlen(x->id)))
        return KEXEC_CAP_PASS;
    long long n = (long long)m->part[JPART_CONTENT].n;
    for (size_t i = 0; i < m->nbuf; i++)
        n += (long long)m->buf[i].n;
    long long before = x->bytes;
    x->bytes += n;
    if (x->bytes <= k->output_cap)
        return KEXEC_CAP_PASS;
    if (x->capped) {
        /* it prints on past the cap: what it prints is thrown away, and the gateway would
         * only spend its CPU receiving it. Interrupted then, not at the crossing message,
         * which may be its last (a late SIGINT would hit the next execution). A kernel that
         * ignores the interrupt still meets its wall-time limit. */
        if (!x->cap_stopped) {
            x->cap_stopped = true;
            k->exec_ops->interrupt(k);
        }
        return KEXEC_CAP_DROP;
    }
    x->capped = true;
    notice(k, "output limit of %lld bytes for this execution reached: further output is "
              "discarded and the execution is interrupted",
           k->output_cap);
    size_t room = before < k->output_cap ? (size_t)(k->output_cap - before) : 0;
    int r = jcap_cut(h->msg_type, m->part[JPART_CONTENT], room, k->output_cap, ret_content);
    if (r < 0) {
        log_debug("kernel=%s: %s message over the output cap dropped: %s", k->id, h->msg_type,
                  strerror(-r));
        return KEXEC_CAP_DROP;
    }
    return KEXEC_CAP_CUT;
}

size_t kernel_executions(const kernel_t *k)
{
    const struct kexec *x = k->exec;
    if (!x)
        return 0;
    size_t n = x->nsent;
    if (x->id[0]) {
        bool known = false;
        for (size_t i = 0; i < x->nsent && !known; i++)
            known = !strcmp(x->sent[i], x->id);
        n += !known;
    }
    return n;
}
