/* kckpt: the gateway's checkpoint requests to a kernel (kckpt.h; the kernel side:
 * python/kgw_ckpt.py; docs/checkpoints.md).
 *
 * A kernel that was asked for one gets a kckpt: its own DEALER on the kernel's shell endpoint,
 * under a Jupyter session of its own ("kgw-ckpt-<kernel id>") whose messages on iopub no client
 * sees, and a queue of requests sent one at a time. Before the first request a process gets,
 * a silent execution installs the handlers. A rollback has no reply on success (the process
 * that would send it is gone): the new process is probed with kernel_info_requests until one
 * is answered and an iopub message for one has come (the gateway's SUB socket reconnected),
 * as a start is proven (kernel.c: start_proven). One timer does the rest: deadlines, and the
 * next request once one ends (callbacks never run inside kckpt_send, and the next request is
 * sent on the next loop turn, outside the callback of the one before). */
#include "kernelmgr/kckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kckpt_int.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/klaunch_int.h"
#include "kernelmgr/kwire_int.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"
#include "sandbox/sbx.h"

#define KCKPT_QUEUE_MAX      64 /* requests queued per kernel */
#define KCKPT_PROBE_FIRST_MS 10 /* a rollback takes tens of ms: the first probe after this */
#define KCKPT_PROBE_FAST_MS  8  /* then one per this (a probe the old process took is lost) */
#define KCKPT_PROBES_FAST    12 /* ... for this many probes (some 100 ms) */
#define KCKPT_PROBE_MS       50 /* then one per this */
#define KCKPT_PROBE_IOPUB_MS 20 /* answered, but no iopub yet: again after this */
#define KCKPT_PROBES         16 /* probe ids remembered (the newest) */
#define KCKPT_INSTALL_CODE   "import kgw_ckpt; kgw_ckpt.install()"
#define KCKPT_LIVE_FILE      ".kgw-live" /* the live interpreter's pid, written by the kernel */
#define KCKPT_PID_MAX        4194304     /* the kernel's PID_MAX_LIMIT */
#define KCKPT_EXIT_TRIES     25          /* a death's wait status: asked for this many times ... */
#define KCKPT_EXIT_RETRY_MS  4 /* ... this far apart (it is there once the process is reaped) */
#define KCKPT_RESENDS_MAX    8 /* a request the kernel did not run is sent again this often */

/* The kernel's pidfd information (linux/pidfd.h from 6.15; Debian's headers may be older):
 * the first version of the structure, which has the exit status. */
struct kckpt_pidfd_info {
    uint64_t mask, cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code;
};
#define KCKPT_PIDFD_INFO_EXIT (1ULL << 3)
#define KCKPT_PIDFD_GET_INFO  _IOWR(0xFF, 11, struct kckpt_pidfd_info)

enum phase {
    PH_QUEUED,
    PH_INSTALL, /* the silent execution installing the handlers was sent */
    PH_SENT,    /* the request was sent */
    PH_PROBE,   /* a rollback was sent: the new process is being probed */
};

struct kckpt_req {
    struct kckpt *c;
    struct list link; /* on c->q */
    enum kckpt_op op;
    char *content; /* JSON text */
    char cid[72];  /* its checkpoint id (a late checkpoint is dropped by it) */
    uint64_t deadline_ms;
    kckpt_cb cb; /* NULL: no caller any more */
    void *data;
    enum phase ph;
    char msg_id[JMSG_MSG_ID_MAX]; /* the message in flight (the install, or the request) */
    bool got_reply, got_iopub;    /* probing */
    char old_session[64]; /* the kernel Session of the process rolled back ("": not known) */
    char probes[KCKPT_PROBES][JMSG_MSG_ID_MAX];
    unsigned nprobes;
    int resends; /* times the kernel did not run it (resend_unrun) */
};

struct kckpt {
    kernel_t *k;
    kzsock_t z;
    char session[64];
    bool installed;        /* in the current process */
    char seen_session[64]; /* the kernel's Session in its answers (each process has its own) */
    struct list q;         /* struct kckpt_req.link, the first in flight */
    size_t nq;
    evl_timer_t *timer; /* deadlines, and the next request */
    evl_timer_t *probe;
    kckpt_death_cb dcb; /* kckpt_watch */
    void *ddata;
    int live_fd; /* a pidfd of the live interpreter when it is not the first process, or -1 */
    evl_io_t *live_io;
    evl_timer_t *live_retry; /* its wait status is not there yet */
    int live_tries;
};

static const char *const req_type[] = {"kgw_checkpoint_request", "kgw_rollback_request",
                                       "kgw_ckpt_drop_request", "kgw_fork_request", "revival"};
static const char *const reply_type[] = {"kgw_checkpoint_reply", "kgw_rollback_reply",
                                         "kgw_ckpt_drop_reply", "kgw_fork_reply", "-"};

static void on_msg(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n);
static void on_timer(void *data);
static void on_probe(void *data);
static void live_watch(struct kckpt *c);
static void live_unwatch(struct kckpt *c);
static void live_died(void *data);
static long find_desc(const kernel_t *k, long ns_pid);

const char *kckpt_files_dir(const kernel_t *k)
{
    return k->m->o.sandbox ? SBX_WORKSPACE_PATH : k->ws->path;
}

static evl_t *loop(const struct kckpt *c)
{
    return c->k->m->evl;
}

static struct kckpt_req *head(struct kckpt *c)
{
    return list_empty(&c->q) ? NULL : list_first(&c->q, struct kckpt_req, link);
}

/* Signs and sends a message of the kckpt's session; 0 or -errno. */
static int send_msg(struct kckpt *c,
                    const char *msg_type,
                    const char *content,
                    char ret_msg_id[JMSG_MSG_ID_MAX])
{
    char msg_id[40];
    int r = kwire__send_in(c->k, &c->z, c->session, true, msg_type, content, msg_id);
    if (r >= 0)
        snprintf(ret_msg_id, JMSG_MSG_ID_MAX, "%s", msg_id);
    return r < 0 ? r : 0;
}

/* A reply over --max-kernel-message-bytes reset the socket: as for a client's session. */
static void on_oversize(void *data, kzsock_t *z)
{
    struct kckpt *c = data;
    kexec__oversize(c->k, "shell");
}

static int open_sock(struct kckpt *c)
{
    char ep[PATH_MAX + 16];
    if (c->z.s)
        return 0;
    kz_close(&c->z); /* what a failed reconnection left */
    kwire__endpoint(c->k, KPORT_SHELL, ep, sizeof(ep));
    return kz_open(&c->z, loop(c), c->k->m->zctx, ZMQ_DEALER, NULL, ep, on_msg, c,
                   c->k->m->o.max_kernel_msg, on_oversize);
}

static void req_free(struct kckpt_req *q)
{
    list_remove(&q->link);
    q->c->nq--;
    free(q->content);
    free(q);
}

/* q ends: its caller hears how (if it still has one), and the next request goes on the next
 * loop turn. */
static void finish(struct kckpt_req *q, int status, json_t *reply)
{
    struct kckpt *c = q->c;
    kckpt_cb cb = q->cb;
    void *data = q->data;
    bool replaced = (q->op == KCKPT_ROLLBACK || q->op == KCKPT_REVIVE) && q->ph == PH_PROBE &&
                    status != -ECHILD;
    if (head(c) == q)
        loop(c)->timer_disarm(loop(c), c->probe);
    req_free(q);
    loop(c)->timer_arm(loop(c), c->timer, 0);
    if (replaced) /* the live interpreter is a new process now, or still the old one */
        live_watch(c);
    if (cb)
        cb(data, c->k, status, reply);
}

static struct kckpt_req *
req_new(struct kckpt *c, enum kckpt_op op, const char *content, int timeout_ms)
{
    struct kckpt_req *q = calloc(1, sizeof(*q));
    if (!q || !(q->content = strdup(content))) {
        free(q);
        return NULL;
    }
    q->c = c;
    q->op = op;
    q->deadline_ms = util_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1);
    list_init(&q->link);
    c->nq++;
    return q;
}

/* A checkpoint whose caller gave up was taken after all: it goes. */
static void drop_late(struct kckpt *c, const char *cid)
{
    char content[128];
    struct kckpt_req *head_q = head(c);
    snprintf(content, sizeof(content), "{\"id\": \"%s\"}", cid);
    struct kckpt_req *q = req_new(c, KCKPT_DROP, content, 10000);
    if (!q) {
        log_warn("kernel=%s: checkpoint %s taken after its request timed out stays until the "
                 "kernel ends (out of memory)",
                 c->k->id, cid);
        return;
    }
    snprintf(q->cid, sizeof(q->cid), "%s", cid);
    list_insert(head_q ? &head_q->link : &c->q, &q->link); /* right after the one ending */
    log_info("kernel=%s: checkpoint %s was taken after its request timed out: dropped", c->k->id,
             cid);
}

/* Sends the first request (with the install before it if this process needs it). */
static void start(struct kckpt *c, struct kckpt_req *q)
{
    int r = open_sock(c);
    if (r == 0 && q->op == KCKPT_REVIVE) { /* the keeper is at it: the new process is awaited */
        snprintf(q->msg_id, sizeof(q->msg_id), "-");
        snprintf(q->old_session, sizeof(q->old_session), "%s", c->seen_session);
        q->ph = PH_PROBE;
        q->nprobes = 0;
        q->got_reply = q->got_iopub = false;
        loop(c)->timer_arm(loop(c), c->probe, KCKPT_PROBE_FIRST_MS);
    } else if (r == 0 && !c->installed) {
        json_t *ex =
            json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", KCKPT_INSTALL_CODE, "silent", 1,
                      "store_history", 0, "user_expressions", "allow_stdin", 0, "stop_on_error", 0);
        char *s = ex ? json_dumps(ex, JSON_COMPACT) : NULL;
        json_decref(ex);
        r = s ? send_msg(c, "execute_request", s, q->msg_id) : -ENOMEM;
        free(s);
        if (r == 0)
            q->ph = PH_INSTALL;
    } else if (r == 0) {
        r = send_msg(c, req_type[q->op], q->content, q->msg_id);
        if (r == 0)
            q->ph = q->op == KCKPT_ROLLBACK ? PH_PROBE : PH_SENT;
        if (r == 0 && q->op == KCKPT_ROLLBACK) {
            live_unwatch(c); /* its end is the rollback's, not a death */
            snprintf(q->old_session, sizeof(q->old_session), "%s", c->seen_session);
            q->nprobes = 0;
            q->got_reply = q->got_iopub = false;
            loop(c)->timer_arm(loop(c), c->probe, KCKPT_PROBE_FIRST_MS);
        }
    }
    if (r < 0) {
        log_warn("kernel=%s: cannot send %s: %s", c->k->id, req_type[q->op], strerror(-r));
        finish(q, r, NULL);
    }
}

static void on_timer(void *data)
{
    struct kckpt *c = data;
    uint64_t now = util_now_ms(), next = 0;
    struct kckpt_req *q, *tmp;
    list_for_each_safe(q, tmp, &c->q, link)
    {
        if (now < q->deadline_ms)
            continue;
        if (q->ph == PH_SENT && q->op == KCKPT_CHECKPOINT && q->cb) {
            kckpt_cb cb = q->cb; /* stays first: its late reply drops what it took */
            q->cb = NULL;
            cb(q->data, c->k, -ETIMEDOUT, NULL);
            on_timer(c); /* the callback may have changed the queue */
            return;
        }
        if (q->ph == PH_SENT && q->op == KCKPT_CHECKPOINT)
            continue; /* waits for its reply, or the end of the process */
        log_info("kernel=%s: %s timed out", c->k->id, req_type[q->op]);
        finish(q, -ETIMEDOUT, NULL);
        on_timer(c);
        return;
    }
    /* requests whose caller cancelled them before they were sent */
    list_for_each_safe(q, tmp, &c->q, link)
    {
        if (!q->cb && q->ph == PH_QUEUED && q->op != KCKPT_DROP)
            req_free(q);
    }
    if ((q = head(c)) && q->ph == PH_QUEUED)
        start(c, q);
    list_for_each(q, &c->q, link)
    {
        if (q->cb && (!next || q->deadline_ms < next))
            next = q->deadline_ms;
    }
    if (next)
        loop(c)->timer_arm(loop(c), c->timer, next > now ? next - now : 0);
}

static void on_probe(void *data)
{
    struct kckpt *c = data;
    struct kckpt_req *q = head(c);
    char id[JMSG_MSG_ID_MAX];
    if (!q || q->ph != PH_PROBE)
        return;
    if (open_sock(c) == 0 && send_msg(c, "kernel_info_request", "{}", id) == 0)
        memcpy(q->probes[q->nprobes++ % KCKPT_PROBES], id, sizeof(id));
    loop(c)->timer_arm(loop(c), c->probe,
                       q->nprobes < KCKPT_PROBES_FAST ? KCKPT_PROBE_FAST_MS : KCKPT_PROBE_MS);
}

static bool is_probe(const struct kckpt_req *q, const char *msg_id)
{
    unsigned n = q->nprobes < KCKPT_PROBES ? q->nprobes : KCKPT_PROBES;
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(q->probes[i], msg_id))
            return true;
    return false;
}

static void probe_step(struct kckpt *c, struct kckpt_req *q)
{
    if (q->got_reply && q->got_iopub) {
        c->installed = true; /* a revived process installs the handlers itself */
        finish(q, 0, NULL);
    } else if (q->got_reply) {
        loop(c)->timer_arm(loop(c), c->probe, KCKPT_PROBE_IOPUB_MS);
    }
}

/* The status of an error answer of the kernel side (content: a reply with "ename"), for
 * the refusals that kgw_ckpt.py names and the gateway tells apart (kckpt.h). */
static int remote_status(json_t *content)
{
    static const struct {
        const char *ename;
        int status;
    } named[] = {
        {"UnsupportedError", -ENOTSUP},    /* an internal of ipykernel it relies on is missing */
        {"GenerationLimitError", -EMLINK}, /* past kgw_ckpt.MAX_GENERATIONS */
    };
    const char *en = json_string_value(json_object_get(content, "ename"));
    for (size_t i = 0; en && i < sizeof(named) / sizeof(named[0]); i++)
        if (!strcmp(en, named[i].ename))
            return named[i].status;
    return -EREMOTEIO;
}

/* Requests the kernel answered without running them: ipykernel answers "aborted" every
 * execute_request (another version: every shell request) queued behind a cell that failed with
 * stop_on_error, any client's; and a client's interrupt (SIGINT) cuts the silent execution of
 * the install short with a KeyboardInterrupt (the handlers themselves ignore SIGINT: python/
 * kgw_ckpt.py). The gateway's own requests neither follow that cell nor are the interrupt's:
 * q is sent again, from the next loop turn, within its deadline and at most KCKPT_RESENDS_MAX
 * times. true when it is. */
static bool resend_unrun(struct kckpt *c, struct kckpt_req *q, json_t *content)
{
    const char *st = json_string_value(json_object_get(content, "status"));
    const char *en = json_string_value(json_object_get(content, "ename"));
    bool aborted = st && !strcmp(st, "aborted");
    bool interrupted = q->ph == PH_INSTALL && en && !strcmp(en, "KeyboardInterrupt");
    if ((!aborted && !interrupted) || q->resends >= KCKPT_RESENDS_MAX)
        return false;
    q->resends++;
    log_info("kernel=%s: %s %s: sent again", c->k->id,
             q->ph == PH_INSTALL ? "the install of the checkpoint handlers" : req_type[q->op],
             aborted ? "aborted by the kernel (a cell queued before it failed)"
                     : "cut short by an interrupt");
    loop(c)->timer_disarm(loop(c), c->probe);
    if (q->ph == PH_PROBE) /* a rollback the old process did not run: it is still the live one */
        live_watch(c);
    q->ph = PH_QUEUED;
    loop(c)->timer_arm(loop(c), c->timer, 0);
    return true;
}

/* The kernel's answer to q (parsed content): ok, or how it failed. */
static void answered(struct kckpt *c, struct kckpt_req *q, json_t *content)
{
    const char *st = json_string_value(json_object_get(content, "status"));
    bool ok = st && !strcmp(st, "ok");
    if (!json_is_object(content)) {
        finish(q, -EPROTO, NULL);
        return;
    }
    if (resend_unrun(c, q, content))
        return;
    if (ok && q->op == KCKPT_CHECKPOINT && !q->cb) {
        const char *cid = json_string_value(json_object_get(content, "id"));
        drop_late(c, cid ? cid : q->cid);
    }
    if (!ok)
        log_info("kernel=%s: %s failed: %.64s: %.200s", c->k->id, req_type[q->op],
                 json_string_value(json_object_get(content, "ename")) ?: "?",
                 json_string_value(json_object_get(content, "evalue")) ?: "");
    finish(q, ok ? 0 : remote_status(content), content);
}

/* The "session" of a message's header: the kernel process's Jupyter Session (ipykernel makes
 * a new one in every process, a revived one too). "" when missing. */
static void header_session(const jmsg_t *m, char out[64])
{
    json_t *hj = json_loadb(m->part[JPART_HEADER].p, m->part[JPART_HEADER].n, 0, NULL);
    snprintf(out, 64, "%s", json_string_value(json_object_get(hj, "session")) ?: "");
    json_decref(hj);
}

/* An answer to a probe proves the rollback only if the new process sent it: the old one
 * (whose Session the answers before the rollback named) may still answer what reached it. */
static bool from_new_process(const struct kckpt_req *q, const jmsg_t *m)
{
    char sess[64];
    header_session(m, sess);
    return !q->old_session[0] || strcmp(sess, q->old_session) != 0;
}

static void on_msg(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    struct kckpt *c = data;
    struct kckpt_req *q = head(c);
    jmsg_t m;
    jhdr_t h, ph;
    if (kwire__parse(c->k, frames, n, &m, &h) < 0 || !q ||
        jhdr_parse(m.part[JPART_PARENT], &ph) < 0)
        return;
    kwire__count(c->k, KMGR_TO_CLIENT, &m);
    if (q->ph != PH_PROBE)
        header_session(&m, c->seen_session);
    json_t *content = json_loadb(m.part[JPART_CONTENT].p, m.part[JPART_CONTENT].n, 0, NULL);
    if (q->ph == PH_INSTALL && !strcmp(ph.msg_id, q->msg_id) &&
        !strcmp(h.msg_type, "execute_reply")) {
        const char *st = json_string_value(json_object_get(content, "status"));
        if (st && !strcmp(st, "ok")) {
            c->installed = true;
            start(c, q);
        } else if (!resend_unrun(c, q, content)) {
            log_warn("kernel=%s: cannot install the checkpoint handlers: %.64s: %.200s", c->k->id,
                     json_string_value(json_object_get(content, "ename")) ?: "?",
                     json_string_value(json_object_get(content, "evalue")) ?: "");
            finish(q, json_is_object(content) ? remote_status(content) : -EPROTO, content);
        }
    } else if ((q->ph == PH_SENT || q->ph == PH_PROBE) && !strcmp(ph.msg_id, q->msg_id) &&
               !strcmp(h.msg_type, reply_type[q->op])) {
        answered(c, q, content); /* a rollback's reply is an error */
    } else if (q->ph == PH_PROBE && !strcmp(h.msg_type, "kernel_info_reply") &&
               is_probe(q, ph.msg_id)) {
        if (from_new_process(q, &m)) {
            q->got_reply = true;
            header_session(&m, c->seen_session);
            probe_step(c, q);
        } else {
            log_debug("kernel=%s: a probe answered by the process rolled back: ignored", c->k->id);
        }
    }
    json_decref(content);
}

bool kckpt__in_flight(const kernel_t *k)
{
    const struct kckpt *c = k->ckpt;
    const struct kckpt_req *q =
        c && !list_empty(&c->q) ? list_first(&c->q, struct kckpt_req, link) : NULL;
    return q && q->ph != PH_QUEUED;
}

bool kckpt__iopub(kernel_t *k, const jmsg_t *m)
{
    struct kckpt *c = k->ckpt;
    jhdr_t ph;
    if (!c ||
        !memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, c->session, strlen(c->session)))
        return false;
    struct kckpt_req *q = head(c);
    if (q && q->ph == PH_PROBE && !q->got_iopub && jhdr_parse(m->part[JPART_PARENT], &ph) == 0 &&
        is_probe(q, ph.msg_id) && from_new_process(q, m)) {
        q->got_iopub = true;
        probe_step(c, q);
    }
    return true;
}

static struct kckpt *kckpt_new(kernel_t *k)
{
    struct kckpt *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->k = k;
    c->live_fd = -1;
    list_init(&c->q);
    snprintf(c->session, sizeof(c->session), "kgw-ckpt-%s", k->id);
    if (!(c->timer = k->m->evl->timer_new(k->m->evl, on_timer, c)) ||
        !(c->probe = k->m->evl->timer_new(k->m->evl, on_probe, c)) ||
        !(c->live_retry = k->m->evl->timer_new(k->m->evl, live_died, c))) {
        evl_timer_destroy(k->m->evl, &c->timer);
        evl_timer_destroy(k->m->evl, &c->probe);
        free(c);
        return NULL;
    }
    return c;
}

int kckpt_send(kernel_t *k,
               enum kckpt_op op,
               json_t *content,
               int timeout_ms,
               kckpt_cb cb,
               void *data,
               kckpt_req_t **ret)
{
    if (k->state != KERNEL_RUNNING)
        return -EBUSY;
    if ((unsigned)op > KCKPT_REVIVE || !json_is_object(content))
        return -EINVAL;
    if (!k->ckpt && !(k->ckpt = kckpt_new(k)))
        return -ENOMEM;
    struct kckpt *c = k->ckpt;
    if (c->nq >= KCKPT_QUEUE_MAX)
        return -EAGAIN;
    char *s = json_dumps(content, JSON_COMPACT);
    struct kckpt_req *q = s ? req_new(c, op, s, timeout_ms) : NULL;
    free(s);
    if (!q)
        return -ENOMEM;
    const char *cid = json_string_value(json_object_get(content, "id"));
    snprintf(q->cid, sizeof(q->cid), "%s", cid ? cid : "");
    q->cb = cb;
    q->data = data;
    if (op == KCKPT_REVIVE && (!head(c) || head(c)->ph == PH_QUEUED))
        list_insert(&c->q, &q->link); /* first: every request waiting is for the new process */
    else
        list_append(&c->q, &q->link);
    loop(c)->timer_arm(loop(c), c->timer, 0);
    if (ret)
        *ret = q;
    return 0;
}

void kckpt_cancel(kckpt_req_t **pq)
{
    kckpt_req_t *q = *pq;
    if (!q)
        return;
    q->cb = NULL;
    q->data = NULL;
    *pq = NULL;
    loop(q->c)->timer_arm(loop(q->c), q->c->timer, 0);
}

void kckpt__reset(kernel_t *k)
{
    struct kckpt *c = k->ckpt;
    if (!c)
        return;
    c->installed = false;
    c->seen_session[0] = '\0';
    live_unwatch(c);
    kz_close(&c->z); /* what it holds for the old process goes */
    loop(c)->timer_disarm(loop(c), c->probe);
    loop(c)->timer_disarm(loop(c), c->timer);
    struct list todo;
    list_move(&todo, &c->q);
    while (!list_empty(&todo)) {
        struct kckpt_req *q = list_first(&todo, struct kckpt_req, link);
        kckpt_cb cb = q->cb;
        void *data = q->data;
        req_free(q);
        if (cb)
            cb(data, k, -ECHILD, NULL);
    }
}

void kckpt__destroy(kernel_t *k)
{
    struct kckpt *c = k->ckpt;
    if (!c)
        return;
    kckpt__reset(k);
    while (!list_empty(&c->q)) { /* queued by a callback of the reset */
        struct kckpt_req *q = list_first(&c->q, struct kckpt_req, link);
        req_free(q);
    }
    evl_timer_destroy(loop(c), &c->timer);
    evl_timer_destroy(loop(c), &c->probe);
    evl_timer_destroy(loop(c), &c->live_retry);
    kz_close(&c->z);
    free(c);
    k->ckpt = NULL;
}

int kckpt_announce(kernel_t *k, const char *msg_type, json_t *content, json_t *metadata)
{
    jhdr_t h;
    jmsg_t m;
    char *hdr = jmsg_new_header(msg_type, k->session, h.msg_id);
    char *body = hdr ? json_dumps(content, JSON_COMPACT) : NULL;
    char *meta = body && metadata ? json_dumps(metadata, JSON_COMPACT) : NULL;
    int r = -ENOMEM;
    if (body && (meta || !metadata)) {
        jmsg_own(&m, &h, hdr, h.msg_id, msg_type, NULL, body);
        if (meta)
            m.part[JPART_METADATA] = (jspan_t){meta, strlen(meta)};
        k->own->iopub(k, &m, &h);
        r = 0;
    }
    free(hdr);
    free(body);
    free(meta);
    return r;
}

/* The last pid of /proc/<pid>/status's NSpid line (its pid in its own namespace), or -1. */
static long ns_pid_of(long pid)
{
    char path[64], line[256];
    long last = -1;
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "NSpid:", 6)) {
            char *p = line + 6, *end;
            for (long v; (v = strtol(p, &end, 10)), end != p; p = end)
                last = v;
            break;
        }
    fclose(f);
    return last;
}

static int mem_of(long pid, long long *ret_pss, long long *ret_private)
{
    char path[64], line[256];
    long long pss = -1, clean = 0, dirty = 0, v;
    snprintf(path, sizeof(path), "/proc/%ld/smaps_rollup", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "Pss: %lld kB", &v) == 1)
            pss = v;
        else if (sscanf(line, "Private_Clean: %lld kB", &v) == 1)
            clean = v;
        else if (sscanf(line, "Private_Dirty: %lld kB", &v) == 1)
            dirty = v;
    }
    fclose(f);
    if (pss < 0)
        return -EIO;
    *ret_pss = pss * 1024;
    *ret_private = (clean + dirty) * 1024;
    return 0;
}

#define KCKPT_TREE_MAX 256 /* processes looked at below the kernel's */

/* The kernel's descendant whose pid in the kernel's namespace is ns_pid: its pid here, or
 * -ESRCH. */
static long find_desc(const kernel_t *k, long ns_pid)
{
    long todo[KCKPT_TREE_MAX];
    size_t n = 0, i = 0;
    if (k->pid <= 0 || ns_pid <= 0)
        return -ESRCH;
    todo[n++] = k->pid;
    while (i < n) {
        long pid = todo[i++];
        char path[96], buf[4096];
        if (i > 1 && ns_pid_of(pid) == ns_pid)
            return pid;
        /* its children: every thread's list (a child belongs to the thread that forked it) */
        snprintf(path, sizeof(path), "/proc/%ld/task/%ld/children", pid, pid);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *p = buf, *end;
        for (long ch; (ch = strtol(p, &end, 10)), end != p && n < KCKPT_TREE_MAX; p = end)
            todo[n++] = ch;
    }
    return -ESRCH;
}

int kckpt_mem(const kernel_t *k, long ns_pid, long long *ret_pss, long long *ret_private)
{
    long pid = find_desc(k, ns_pid);
    return pid < 0 ? (int)pid : mem_of(pid, ret_pss, ret_private);
}

/* ---- the live interpreter's death (docs/checkpoints.md, "A kernel that dies") ---- */

/* The pid <runtime dir>/.kgw-live names (the kernel writes it at each rollback), 0 when it
 * says the live interpreter ended as asked, -errno when there is none (the first process is
 * the live one). */
static long live_read(const kernel_t *k)
{
    char path[PATH_MAX], buf[32];
    struct stat sb;
    size_t n = 0;
    snprintf(path, sizeof(path), "%s/%s", k->ipc_dir ? k->ipc_dir : k->dir, KCKPT_LIVE_FILE);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    /* to its end (the kernel replaces it whole): one read() need not return all of it; more
     * than the buffer holds is not a pid */
    while (n < sizeof(buf)) {
        ssize_t got = read(fd, buf + n, sizeof(buf) - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int r = -errno;
            close(fd);
            return r;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (n == 0 || n == sizeof(buf))
        return -EINVAL;
    return kckpt_live_parse(buf, n);
}

long kckpt_live_parse(const char *buf, size_t n)
{
    long pid = 0;
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n == 0 || n > 7)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return -EINVAL;
        pid = pid * 10 + (buf[i] - '0');
    }
    return pid > KCKPT_PID_MAX ? -EINVAL : pid;
}

static void live_unwatch(struct kckpt *c)
{
    evl_io_destroy(loop(c), &c->live_io);
    loop(c)->timer_disarm(loop(c), c->live_retry);
    if (c->live_fd >= 0)
        close(c->live_fd);
    c->live_fd = -1;
}

static void on_live_exit(void *data)
{
    struct kckpt *c = data;
    evl_io_destroy(loop(c), &c->live_io);
    c->live_tries = 0;
    live_died(c);
}

static void live_watch(struct kckpt *c)
{
    live_unwatch(c);
    long nspid = live_read(c->k);
    if (nspid <= 0 || !c->dcb)
        return;
    long pid = find_desc(c->k, nspid);
    int fd = pid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
    if (fd < 0) {
        log_warn("kernel=%s: its live process (%ld in its sandbox) is not one of its own: its "
                 "death will end the kernel",
                 c->k->id, nspid);
        return;
    }
    c->live_fd = fd;
    if (!(c->live_io = loop(c)->io_add(loop(c), fd, on_live_exit, c)))
        live_unwatch(c);
}

static void live_died(void *data)
{
    struct kckpt *c = data;
    kernel_t *k = c->k;
    struct kckpt_pidfd_info info = {.mask = KCKPT_PIDFD_INFO_EXIT};
    int r = ioctl(c->live_fd, KCKPT_PIDFD_GET_INFO, &info);
    bool known = r == 0 && (info.mask & KCKPT_PIDFD_INFO_EXIT);
    bool unsupported = r < 0 && (errno == ENOTTY || errno == EINVAL); /* before Linux 6.15 */
    if (!known && !unsupported && ++c->live_tries < KCKPT_EXIT_TRIES) {
        loop(c)->timer_arm(loop(c), c->live_retry, KCKPT_EXIT_RETRY_MS); /* not reaped yet */
        return;
    }
    live_unwatch(c);
    if (k->state != KERNEL_RUNNING || live_read(k) == 0)
        return; /* ended as asked (a shutdown, a restart): the keeper ends, and the kernel */
    struct kckpt_req *q = head(c);
    if (q && (q->ph == PH_SENT || q->ph == PH_INSTALL))
        finish(q, -ECHILD, NULL); /* the process it was sent to is gone */
    char cause[sizeof(k->last_cause)];
    enum kernel_outcome o =
        klaunch__live_death(k, known ? info.exit_code : 0, known, cause, sizeof(cause));
    snprintf(k->last_cause, sizeof(k->last_cause), "%s", cause);
    log_warn("kernel=%s: its live process died (%s): its keeper revives it from its newest "
             "checkpoint",
             k->id, cause);
    if (c->dcb)
        c->dcb(c->ddata, k, o, cause);
}

int kckpt_watch(kernel_t *k, kckpt_death_cb cb, void *data)
{
    if (!k->ckpt && !(k->ckpt = kckpt_new(k)))
        return -ENOMEM;
    k->ckpt->dcb = cb;
    k->ckpt->ddata = data;
    return 0;
}
