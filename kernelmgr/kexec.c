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
#include "kernelmgr/kcall_int.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"
#include "protocol/jcap.h"
#include "sandbox/sbx.h"

#define EXEC_INTERRUPT_GRACE_MS 5000 /* after a wall-time interrupt, before restarting */
#define IDLE_AFTER_REPLY_MS     2000 /* an execution's idle after its reply and a quiet iopub */

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
 * waited for IDLE_AFTER_REPLY_MS, then made (kexec__on_idle_late). */
static void replied(kernel_t *k, const char *msg_id)
{
    snprintf(k->exec_replied, sizeof(k->exec_replied), "%s", msg_id);
    if (!strcmp(msg_id, k->exec_id))
        k->m->evl->timer_arm(k->m->evl, k->idle_timer, IDLE_AFTER_REPLY_MS);
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
    list_for_each_safe(p, tmp, &c->k->failing, link) /* kexec__fail_all is answering them */
    {
        if (p->c == c)
            pending_free(p);
    }
    if (c->k->failing_now && c->k->failing_now->c == c)
        c->k->failing_now->c = NULL;
}

/* ---- the end of an execution ---- */

/* An execution began running: its cgroup's CPU time and peak memory are measured from here. */
static void usage_begin(kernel_t *k)
{
    struct sbx_cgroup_usage u = {.cpu_ns = -1};
    struct sbx_cgroup_events ev = {0};
    if (k->cgroup) {
        sbx_cgroup_usage(k->cgroup, &u);
        sbx_cgroup_peak(k->cgroup, true);
        sbx_cgroup_events(k->cgroup, &ev);
    }
    k->exec_cpu0 = u.cpu_ns;
    k->exec_pids0 = ev.pids_max;
}

/* An execution is over: listeners hear of it (duration_us 0: it never ran). */
static void announce_end(kernel_t *k, const char *msg_id, enum kernel_outcome o,
                         const char *cause, int64_t duration_us)
{
    struct kernel_exec_end e = {.msg_id = msg_id,
                                .outcome = o,
                                .cause = cause ? cause : "",
                                .duration_us = duration_us,
                                .cpu_ns = -1,
                                .peak_mem_bytes = -1,
                                .egress = !strcmp(msg_id, k->exec_receipt_id) ? k->exec_receipt
                                                                              : NULL};
    if (duration_us > 0 && k->cgroup) { /* it ran: what its cgroup spent meanwhile */
        struct sbx_cgroup_usage u;
        sbx_cgroup_usage(k->cgroup, &u);
        if (u.cpu_ns >= 0 && k->exec_cpu0 >= 0 && u.cpu_ns >= k->exec_cpu0)
            e.cpu_ns = u.cpu_ns - k->exec_cpu0;
        e.peak_mem_bytes = sbx_cgroup_peak(k->cgroup, false);
    }
    k->own->exec_end(k, &e);
    if (e.egress) {
        json_decref(k->exec_receipt);
        k->exec_receipt = NULL;
        k->exec_receipt_id[0] = '\0';
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
static void fail_one(kernel_t *k, struct kpending *p, enum kernel_outcome o, const char *cause)
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
        bool ran = !strcmp(p->msg_id, k->exec_id);
        announce_end(k, p->msg_id, o, cause, ran ? util_now_us() - k->exec_start_us : 0);
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
    /* An answer may close a session (its owner destroys it, and kexec__forget takes its
     * requests off this list): every request is moved here first, then answered in order. */
    bool running_pending = false;
    list_for_each(c, &k->conns, link)
    {
        struct kpending *p, *tmp;
        list_for_each_safe(p, tmp, &c->pending, link)
        {
            list_remove(&p->link);
            list_append(&k->failing, &p->link);
            running_pending |= !strcmp(p->msg_id, k->exec_id);
        }
        c->npending = 0;
    }
    size_t n = 0;
    while (!list_empty(&k->failing)) {
        struct kpending *p = list_first(&k->failing, struct kpending, link);
        list_remove(&p->link);
        k->failing_now = p;
        fail_one(k, p, o, cause);
        k->failing_now = NULL;
        free(p->header);
        free(p);
        n++;
    }
    /* an execution no session waits for (its reply came, its idle did not) still ends, and
     * its listeners hear how: its error, then its idle */
    if (k->exec_id[0] && !running_pending && strcmp(k->exec_id, k->env_id) != 0) {
        const char *ename = kernel_outcome_ename(o);
        char line[400];
        snprintf(line, sizeof(line), "%s: %s", ename, cause);
        if (k->exec_parent && ename)
            send_made(k, NULL, JCHAN_IOPUB, "error", k->exec_parent,
                      json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", cause,
                                "traceback", line));
        if (k->exec_parent)
            send_made(k, NULL, JCHAN_IOPUB, "status", k->exec_parent,
                      json_pack("{s:s}", "execution_state", "idle"));
        announce_end(k, k->exec_id, o, cause, util_now_us() - k->exec_start_us);
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
    if (k->exec_parent)
        k->own->notice(k, (jspan_t){k->exec_parent, strlen(k->exec_parent)}, text);
}

/* The audit event of an execution that ended (idle, or the kernel was restarted). */
static void exec_audit(kernel_t *k, const char *status)
{
    if (!k->exec_id[0])
        return;
    /* what its egress proxy let through meanwhile (null: no egress policy): for this event
     * and the execution's end (announce_end) */
    json_decref(k->exec_receipt);
    k->exec_receipt = !k->egpol   ? NULL
                      : k->egress ? kegress_receipt_take(k->egress)
                                  : json_pack("{s:[], s:b, s:[]}", "hosts", "more_hosts", 0,
                                              "secrets");
    snprintf(k->exec_receipt_id, sizeof(k->exec_receipt_id), "%s", k->exec_id);
    if (!audit_enabled())
        return;
    double ms = (double)(util_now_us() - k->exec_start_us) / 1000.0;
    json_t *hosts = json_null(), *h, *secrets = json_null();
    size_t i;
    if (k->exec_receipt) { /* egress_hosts: "host:port" strings, as before the receipt */
        hosts = json_array();
        json_array_foreach(json_object_get(k->exec_receipt, "hosts"), i, h)
            json_array_append(hosts, json_object_get(h, "host"));
        if (json_is_true(json_object_get(k->exec_receipt, "more_hosts")))
            json_array_append_new(hosts, json_string("..."));
        secrets = json_incref(json_object_get(k->exec_receipt, "secrets"));
    }
    audit_event("execution", "s:s, s:s, s:o, s:s, s:f, s:s, s:o, s:o, s:O", "tenant",
                k->ws->tenant,
                "kernel",
                k->id, "msg_id", audit_str(k->exec_id, strlen(k->exec_id)), "code_sha256",
                k->exec_sha, "duration_ms", ms, "status",
                status            ? status
                : k->exec_stage   ? "timeout" /* interrupted for its wall time */
                : k->exec_error   ? "error"
                                  : "ok",
                "egress_hosts", hosts ? hosts : json_null(), "egress_secrets",
                secrets ? secrets : json_null(), "egress",
                k->exec_receipt ? k->exec_receipt : json_null());
}

/* The execution in progress, if any, is over (how: its status in the statistics; the gateway's
 * own execution of a pooled kernel's environment is not counted). */
void kexec__finish(kernel_t *k, enum kmgr_exec how)
{
    if (k->exec_id[0] && strcmp(k->exec_id, k->env_id) != 0) {
        k->stats->executions[how]++;
        hist_observe(&k->stats->exec_seconds,
                     (double)(util_now_us() - k->exec_start_us) / 1e6);
    }
    k->m->evl->timer_disarm(k->m->evl, k->exec_timer);
    k->m->evl->timer_disarm(k->m->evl, k->idle_timer);
    if (k->exec_id[0])
        memcpy(k->exec_last, k->exec_id, sizeof(k->exec_last));
    k->exec_id[0] = '\0';
    free(k->exec_parent);
    k->exec_parent = NULL;
    k->exec_bytes = 0;
    k->exec_capped = false;
    k->exec_cap_stopped = false;
    k->exec_stage = 0;
    k->exec_error = false;
    k->exec_sha[0] = '\0';
}

/* Whether the execution in progress met its cgroup's pids limit. */
static bool forks_refused(kernel_t *k)
{
    struct sbx_cgroup_events ev;
    if (!k->cgroup)
        return false;
    sbx_cgroup_events(k->cgroup, &ev);
    return ev.pids_max > k->exec_pids0;
}

/* The execution in progress reached its idle: listeners hear how it went. */
static void exec_outcome(kernel_t *k)
{
    char cause[160] = "";
    enum kernel_outcome o = k->exec_error ? KERNEL_OUT_ERROR : KERNEL_OUT_OK;
    if (!strcmp(k->exec_id, k->env_id))
        return;
    if (k->exec_stage) {
        o = KERNEL_OUT_TIMEOUT;
        snprintf(cause, sizeof(cause), "the execution exceeded its wall-time limit of %d s and "
                 "was interrupted", k->exec_timeout_ms / 1000);
    } else if (k->exec_error && forks_refused(k)) {
        o = KERNEL_OUT_PIDS_LIMIT;
        snprintf(cause, sizeof(cause), "forks were refused at the kernel's process limit (%lld)",
                 k->lim.pids);
    } else if (k->exec_capped) {
        o = KERNEL_OUT_OUTPUT_LIMIT;
        snprintf(cause, sizeof(cause), "the execution's output exceeded its limit of %lld "
                 "bytes: the rest was discarded", k->output_cap);
    }
    announce_end(k, k->exec_id, o, cause, util_now_us() - k->exec_start_us);
}

static void exec_begin(kernel_t *k, const char *msg_id, jspan_t parent)
{
    kexec__finish(k, KMGR_EXEC_ABORTED); /* its idle never came */
    snprintf(k->exec_id, sizeof(k->exec_id), "%s", msg_id);
    k->exec_parent = strndup(parent.p, parent.n);
    k->exec_start_us = util_now_us();
    usage_begin(k);
    /* its egress receipt is what the proxy let through since the last one was taken (when the
     * execution before ended): the kernel's code may reach hosts before the gateway sees its
     * status busy, and nothing it did is lost */
    if (k->exec_timeout_ms > 0)
        k->m->evl->timer_arm(k->m->evl, k->exec_timer, (uint64_t)k->exec_timeout_ms);
    if (!strcmp(msg_id, k->exec_replied)) /* its reply came first (shell before iopub) */
        k->m->evl->timer_arm(k->m->evl, k->idle_timer, IDLE_AFTER_REPLY_MS);
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
    kexec__finish(k, k->exec_stage ? KMGR_EXEC_TIMEOUT : KMGR_EXEC_ABORTED);
}

/* Wall time per execution: interrupt first; a kernel that ignores SIGINT is restarted. */
void kexec__on_timer(void *data)
{
    kernel_t *k = data;
    if (!k->exec_id[0] || k->state != KERNEL_RUNNING)
        return;
    if (k->exec_stage == 0) {
        notice(k, "execution exceeded the wall-time limit of %d s: interrupting it",
               k->exec_timeout_ms / 1000);
        k->exec_ops->interrupt(k);
        k->exec_stage = 1;
        k->m->evl->timer_arm(k->m->evl, k->exec_timer, EXEC_INTERRUPT_GRACE_MS);
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
    if (k->nsent == k->capsent) {
        size_t cap = k->capsent ? 2 * k->capsent : 4;
        void *p =
            cap <= KERNEL_SENT_MAX ? realloc(k->sent_exec, cap * sizeof(k->sent_exec[0])) : NULL;
        if (!p) {
            log_debug("kernel=%s: %zu execute_requests in flight; not tracking more", k->id,
                      k->nsent);
            return;
        }
        k->sent_exec = p;
        k->capsent = cap;
    }
    snprintf(k->sent_exec[k->nsent++], sizeof(k->sent_exec[0]), "%s", msg_id);
}

void kexec__forget_sent(kernel_t *k)
{
    free(k->sent_exec);
    k->sent_exec = NULL;
    k->nsent = k->capsent = 0;
}

static void sent_forget(kernel_t *k, const char *msg_id)
{
    for (size_t i = 0; i < k->nsent; i++)
        if (!strcmp(k->sent_exec[i], msg_id)) {
            k->nsent--;
            if (i < k->nsent)
                memcpy(k->sent_exec[i], k->sent_exec[k->nsent], sizeof(k->sent_exec[0]));
            else if (!k->nsent)
                kexec__forget_sent(k); /* idle: the memory goes back */
            return;
        }
}

/* The execution in progress reached its idle: its audit event, outcome and statistics. */
static void exec_idle(kernel_t *k)
{
    exec_audit(k, NULL);
    exec_outcome(k);
    kexec__finish(k, k->exec_stage   ? KMGR_EXEC_TIMEOUT
                     : k->exec_error ? KMGR_EXEC_ERROR
                                     : KMGR_EXEC_OK);
}

void kexec__status(kernel_t *k, const jmsg_t *m)
{
    json_error_t err;
    k->iopub_us = util_now_us();
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
            if (!strcmp(st, "busy") && !strcmp(ph.msg_type, "execute_request"))
                exec_begin(k, ph.msg_id, m->part[JPART_PARENT]);
            else if (!strcmp(st, "idle") && !strcmp(ph.msg_id, k->exec_id)) {
                exec_idle(k);
                changed = true;
            } else {
                changed = false;
            }
            if (changed) /* callbacks waiting for iopub to reach their execution */
                kcall__exec_changed(k->calls);
        }
    }
    json_decref(c);
}

void kexec__on_idle_late(void *data)
{
    kernel_t *k = data;
    if (!k->exec_id[0] || strcmp(k->exec_id, k->exec_replied) != 0 || !k->exec_parent ||
        k->state != KERNEL_RUNNING)
        return;
    /* iopub still bringing output (a backlog the loop drains in turns): its idle may be on
     * its way; only a quiet iopub lost it */
    uint64_t quiet_ms = (util_now_us() - k->iopub_us) / 1000;
    if (quiet_ms < IDLE_AFTER_REPLY_MS) {
        k->m->evl->timer_arm(k->m->evl, k->idle_timer, IDLE_AFTER_REPLY_MS - quiet_ms);
        return;
    }
    notice(k, "the kernel's idle status did not follow its reply within %d ms (a loaded host: "
              "its iopub queue may have dropped messages, output too); the execution is over",
           IDLE_AFTER_REPLY_MS);
    snprintf(k->exec_state, sizeof(k->exec_state), "idle");
    sent_forget(k, k->exec_id);
    send_made(k, NULL, JCHAN_IOPUB, "status", k->exec_parent,
              json_pack("{s:s}", "execution_state", "idle"));
    exec_idle(k);
    kcall__exec_changed(k->calls);
}

/* Whether the execution in progress failed (error), for the statistics and the audit log, and
 * its code (execute_input), for the audit log. */
void kexec__track(kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    jhdr_t ph;
    k->iopub_us = util_now_us();
    bool error = !strcmp(h->msg_type, "error");
    if (!k->exec_id[0] || (!error && (!audit_enabled() || strcmp(h->msg_type, "execute_input"))) ||
        jhdr_parse(m->part[JPART_PARENT], &ph) < 0 || strcmp(ph.msg_id, k->exec_id) != 0)
        return;
    if (error) {
        k->exec_error = true;
        return;
    }
    json_t *c = json_loadb(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, 0, NULL);
    const char *code = json_string_value(json_object_get(c, "code"));
    if (code) {
        unsigned char d[crypto_hash_sha256_BYTES];
        crypto_hash_sha256(d, (const unsigned char *)code, json_string_length(json_object_get(c, "code")));
        sodium_bin2hex(k->exec_sha, sizeof(k->exec_sha), d, sizeof(d));
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
    if (k->output_cap <= 0 || !k->exec_id[0] || !jcap_is_output(h->msg_type))
        return KEXEC_CAP_PASS;
    if (!memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, k->exec_id,
                strlen(k->exec_id)))
        return KEXEC_CAP_PASS;
    long long n = (long long)m->part[JPART_CONTENT].n;
    for (size_t i = 0; i < m->nbuf; i++)
        n += (long long)m->buf[i].n;
    long long before = k->exec_bytes;
    k->exec_bytes += n;
    if (k->exec_bytes <= k->output_cap)
        return KEXEC_CAP_PASS;
    if (k->exec_capped) {
        /* it prints on past the cap: what it prints is thrown away, and the gateway would
         * only spend its CPU receiving it. Interrupted then, not at the crossing message,
         * which may be its last (a late SIGINT would hit the next execution). A kernel that
         * ignores the interrupt still meets its wall-time limit. */
        if (!k->exec_cap_stopped) {
            k->exec_cap_stopped = true;
            k->exec_ops->interrupt(k);
        }
        return KEXEC_CAP_DROP;
    }
    k->exec_capped = true;
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
    size_t n = k->nsent;
    if (k->exec_id[0]) {
        bool known = false;
        for (size_t i = 0; i < k->nsent && !known; i++)
            known = !strcmp(k->sent_exec[i], k->exec_id);
        n += !known;
    }
    return n;
}
