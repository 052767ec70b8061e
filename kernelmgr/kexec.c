/* The execution watch's outcomes: the requests each client session sent that the kernel has
 * not answered yet, and, when the kernel process ends first, a terminal answer to each in the
 * kernel's name, so no client waits for a reply that cannot come (docs/protocol.md,
 * "Outcomes"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/private.h"

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

void kexec__answered(kconn_t *c, const jmsg_t *m, const jhdr_t *h)
{
    jhdr_t ph;
    struct kpending *p;
    /* replies name their request as parent; stdin's input_requests answer nothing */
    if (c->npending == 0 || strstr(h->msg_type, "_reply") == NULL ||
        jhdr_parse(m->part[JPART_PARENT], &ph) < 0)
        return;
    list_for_each(p, &c->pending, link)
    {
        if (!strcmp(p->msg_id, ph.msg_id)) {
            pending_free(p);
            c->npending--;
            return;
        }
    }
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

void kexec__usage_begin(kernel_t *k)
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

void kexec__end(kernel_t *k, const char *msg_id, enum kernel_outcome o, const char *cause,
                int64_t duration_us)
{
    struct kernel_exec_end e = {.msg_id = msg_id,
                                .outcome = o,
                                .cause = cause ? cause : "",
                                .duration_us = duration_us,
                                .cpu_ns = -1,
                                .peak_mem_bytes = -1};
    if (duration_us > 0 && k->cgroup) { /* it ran: what its cgroup spent meanwhile */
        struct sbx_cgroup_usage u;
        sbx_cgroup_usage(k->cgroup, &u);
        if (u.cpu_ns >= 0 && k->exec_cpu0 >= 0 && u.cpu_ns >= k->exec_cpu0)
            e.cpu_ns = u.cpu_ns - k->exec_cpu0;
        e.peak_mem_bytes = sbx_cgroup_peak(k->cgroup, false);
    }
    kmgr__emit_exec_end(k->m, k, &e);
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
        snprintf(h.msg_type, sizeof(h.msg_type), "%s", msg_type);
        jmsg_t m = {.nbuf = 0};
        m.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
        m.part[JPART_PARENT] = (jspan_t){parent, strlen(parent)};
        m.part[JPART_METADATA] = (jspan_t){"{}", 2};
        m.part[JPART_CONTENT] = (jspan_t){body, strlen(body)};
        if (to)
            to->ops->reply(to->user, to, chan, &m, &h);
        else
            kmgr__emit_iopub(k->m, k, &m, &h);
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
    char rtype[JMSG_MSG_TYPE_MAX + 8], line[400];
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
        kexec__end(k, p->msg_id, o, cause, ran ? util_now_us() - k->exec_start_us : 0);
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
    /* an execution no session waits for (its reply came, its idle did not) still ends */
    if (k->exec_id[0] && !running_pending && strcmp(k->exec_id, k->env_id) != 0) {
        if (k->exec_parent)
            send_made(k, NULL, JCHAN_IOPUB, "status", k->exec_parent,
                      json_pack("{s:s}", "execution_state", "idle"));
        kexec__end(k, k->exec_id, o, cause, util_now_us() - k->exec_start_us);
        n++;
    }
    if (n)
        log_info("kernel=%s: %zu request%s in flight answered: %s: %s", k->id, n,
                 n > 1 ? "s" : "", kernel_outcome_ename(o), cause);
}
