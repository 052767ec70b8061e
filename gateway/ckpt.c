/* Checkpoints and rollbacks of kernels: the gateway's record of each kernel's checkpoints
 * (kept under the kernel, as a listener's per-kernel data) and the operations the faces share
 * (the REST routes of ckptapi.c, the execute API, MCP). The kernel is asked through
 * kernelmgr/kckpt.h; a rollback's clients are told on iopub here (docs/checkpoints.md). */
#include "gateway/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/ident.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kckpt.h"
#include "kernelmgr/wspace.h"

/* A request waits behind the cell the kernel is running, at most this long, and never longer
 * than a REST answer may take (--http-timeout, less a second). */
#define CKPT_TIMEOUT_MAX_MS 60000

/* What a rollback does not bring back, for the notice and the docs. */
#define CKPT_LOST                                                                             \
    "threads started by code, open sockets and pipes, subprocesses, and file offsets shared " \
    "with other processes do not survive"

/* One checkpoint of a kernel. */
struct ckrec {
    struct list link; /* on kck.recs, oldest first */
    char id[CKPT_ID_MAX];
    int64_t created_us;
    long long exec_count, files_bytes;
    bool files;
    long pid; /* the checkpoint process, in the kernel's pid namespace */
    int rolling; /* rollbacks to it sent and not answered: it cannot be dropped meanwhile */
    /* its memory as last read (a walk of the kernel's processes and a smaps_rollup, on the
     * loop): read again once older than CKPT_MEM_MAX_AGE_MS */
    long long pss, priv;
    uint64_t mem_ms; /* when read (0: never) */
    bool mem;        /* the figures were found */
};

#define CKPT_MEM_MAX_AGE_MS 1000

/* A kernel's checkpoints (kernel_data of the listener's slot). */
struct kck {
    struct list recs;
    int n;      /* records */
    int taking; /* checkpoints being taken */
    bool keeper; /* the kernel's first process is a keeper (after a rollback): a death of the
                    live interpreter can be undone */
    struct ckpt_op *reviving; /* the revival after such a death, until the new process answers */
};

struct ckpt_op {
    gw_t *g;
    kernel_t *k;
    enum kerr_op kind; /* KERR_CHECKPOINT, KERR_ROLLBACK, KERR_REVIVE or KERR_DROP */
    kckpt_req_t *req;
    char id[CKPT_ID_MAX];
    bool files;
    char cause[200];
    struct gw_caller who;
    ckpt_done_cb done; /* NULL: cancelled (the operation still completes) */
    void *data;
};

static int timeout_ms(const gw_t *g)
{
    long long ms = (g->cfg.http_timeout - 1) * 1000;
    return ms < 1000 ? 1000 : ms > CKPT_TIMEOUT_MAX_MS ? CKPT_TIMEOUT_MAX_MS : (int)ms;
}

static void on_death(void *data, kernel_t *k, enum kernel_outcome o, const char *cause);

/* When a rollback request expires in the kernel (CLOCK_MONOTONIC ms, shared with the sandbox:
 * kgw makes no time namespace): a while before the gateway gives up on it, so that one the
 * kernel reaches late (behind a long cell, after its caller had a 504) is refused there
 * instead of replacing the state unannounced. */
static json_int_t expiry(const gw_t *g)
{
    int t = timeout_ms(g), margin = t / 4 < 5000 ? t / 4 : 5000;
    return (json_int_t)(util_now_ms() + (uint64_t)(t - margin));
}

static struct kck *kck_of(gw_t *g, kernel_t *k, bool make)
{
    struct kck *c = kernel_data(k, g->ckpt_listener.slot);
    if (c || !make)
        return c;
    if (!(c = calloc(1, sizeof(*c))))
        return NULL;
    if (kckpt_watch(k, on_death, g) < 0) {
        free(c);
        return NULL;
    }
    list_init(&c->recs);
    kernel_set_data(k, g->ckpt_listener.slot, c);
    return c;
}

static struct ckrec *rec_find(struct kck *c, const char *id)
{
    struct ckrec *rec;
    if (!c)
        return NULL;
    list_for_each(rec, &c->recs, link)
    {
        if (!strcmp(rec->id, id))
            return rec;
    }
    return NULL;
}

bool ckpt_exists(gw_t *g, kernel_t *k, const char *cp)
{
    return rec_find(kck_of(g, k, false), cp) != NULL;
}

static void rec_remove(struct kck *c, struct ckrec *rec)
{
    list_remove(&rec->link);
    c->n--;
    free(rec);
}

static void kck_clear(struct kck *c)
{
    while (c && !list_empty(&c->recs))
        rec_remove(c, list_first(&c->recs, struct ckrec, link));
}

static json_t *rec_model(kernel_t *k, struct ckrec *rec)
{
    char ts[40];
    util_iso_time(ts, sizeof(ts), rec->created_us);
    uint64_t now = util_now_ms();
    if (!rec->mem_ms || now - rec->mem_ms >= CKPT_MEM_MAX_AGE_MS) {
        rec->mem = kckpt_mem(k, rec->pid, &rec->pss, &rec->priv) == 0;
        rec->mem_ms = now;
    }
    return json_pack("{s:s, s:s, s:s, s:I, s:b, s:I, s:o, s:o}", "id", rec->id, "kernel_id",
                     kernel_id(k), "created", ts, "execution_count", (json_int_t)rec->exec_count,
                     "files", rec->files, "files_bytes", (json_int_t)rec->files_bytes, "pss_bytes",
                     rec->mem ? json_integer(rec->pss) : json_null(), "private_bytes",
                     rec->mem ? json_integer(rec->priv) : json_null());
}

json_t *ckpt_list(gw_t *g, kernel_t *k)
{
    struct kck *c = kck_of(g, k, false);
    json_t *a = json_array();
    struct ckrec *rec;
    if (c)
        list_for_each(rec, &c->recs, link) json_array_append_new(a, rec_model(k, rec));
    return a;
}

json_t *ckpt_model(gw_t *g, kernel_t *k, const char *cp)
{
    struct ckrec *rec = rec_find(kck_of(g, k, false), cp);
    return rec ? rec_model(k, rec) : NULL;
}

/* ---- the kernel's events: checkpoints end with the kernel's process ---- */

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail)
{
    gw_t *g = user;
    struct kck *c = kck_of(g, k, false);
    if (!c || ev == KERNEL_EV_STARTED)
        return;
    if (c->n)
        log_info("kernel=%s: its %d checkpoint%s ended with its process", kernel_id(k), c->n,
                 c->n > 1 ? "s" : "");
    kck_clear(c);
    c->keeper = false; /* a new process, or none */
    if (ev == KERNEL_EV_GONE) {
        kernel_set_data(k, g->ckpt_listener.slot, NULL);
        free(c);
    }
}

static const struct kmgr_listener_ops listener_ops = {.event = on_event};

int ckpt_listen(gw_t *g)
{
    return kmgr_listen(g->km, &g->ckpt_listener, &listener_ops, g);
}

/* ---- operations ---- */

/* Each operation's audit event, and what its log lines say before the checkpoint's id. */
static const struct {
    const char *event, *log;
} names[] = {
    [KERR_CHECKPOINT] = {"checkpoint", "checkpoint"},
    [KERR_ROLLBACK] = {"rollback", "rollback to"},
    [KERR_REVIVE] = {"revive", "revival from"},
    [KERR_DROP] = {"checkpoint_drop", "drop of checkpoint"},
};

static void audit(ckpt_op_t *op, const char *result)
{
    if (!audit_enabled())
        return;
    audit_event(names[op->kind].event, "s:s, s:s, s:s, s:s, s:s, s:o", "tenant", op->who.tenant,
                "addr", op->who.addr, "kernel", kernel_id(op->k), "checkpoint", op->id, "result",
                result, "cause",
                op->cause[0] ? audit_str(op->cause, strlen(op->cause)) : json_null());
}

/* What the error table's messages name of k, its checkpoint cp (or NULL) and the kernel's
 * answer reply (or NULL). */
static struct kerr_context context(gw_t *g, kernel_t *k, const char *cp, json_t *reply)
{
    struct kck *c = kck_of(g, k, false);
    return (struct kerr_context){
        .kernel_id = kernel_id(k),
        .kernel_state = kernel_execution_state(k),
        .checkpoint = cp,
        .cause = kernel_last_cause(k),
        .ename = json_string_value(json_object_get(reply, "ename")),
        .evalue = json_string_value(json_object_get(reply, "evalue")),
        .timeout_s = timeout_ms(g) / 1000,
        .held = c ? c->n + c->taking : 0,
        .max_checkpoints = g->cfg.max_checkpoints,
    };
}

/* An operation of k refused before it was sent: NULL, with err filled. */
static ckpt_op_t *refuse(
    gw_t *g, kernel_t *k, enum kerr_op kind, int code, const char *cp, struct kerr *err)
{
    struct kerr_context ctx = context(g, k, cp, NULL);
    kerr_make(kind, code, &ctx, err);
    return NULL;
}

/* op's end: its caller told (err NULL: done, with rec's record), op freed. */
static void op_end(ckpt_op_t *op, const struct kerr *err, struct ckrec *rec)
{
    json_t *model = op->done && !err && rec ? rec_model(op->k, rec) : NULL;
    if (op->done)
        op->done(op->data, err, model);
    json_decref(model);
    free(op);
}

/* op failed with code (reply: the kernel's answer, or NULL), or timed out and its kernel was
 * restarted for it (restarted: the table's message says so): logged, audited (unless it is a
 * checkpoint's, audited once taken) and ended. */
static void op_fail(ckpt_op_t *op, int code, json_t *reply, bool restarted)
{
    struct kerr err;
    struct kerr_context ctx = context(op->g, op->k, op->id, reply);
    ctx.restarted = restarted;
    kerr_make(op->kind, code, &ctx, &err);
    if (restarted)
        log_warn("kernel=%s: checkpoint %s: %s", kernel_id(op->k), op->id, err.message);
    else
        log_info("kernel=%s: %s %s: %s", kernel_id(op->k), names[op->kind].log, op->id,
                 err.message);
    if (!restarted || op->kind != KERR_CHECKPOINT)
        audit(op, "failed");
    op_end(op, &err, NULL);
}

/* The operation a kernel's answer is for (its request is over), and the kernel's checkpoints
 * and the record of the operation's (NULL: none). */
static ckpt_op_t *answered(void *data, struct kck **ret_c, struct ckrec **ret_rec)
{
    ckpt_op_t *op = data;
    op->req = NULL;
    *ret_c = kck_of(op->g, op->k, false);
    *ret_rec = rec_find(*ret_c, op->id);
    return op;
}

static ckpt_op_t *op_new(gw_t *g, kernel_t *k, const struct ckpt_asker *a, enum kerr_op kind)
{
    ckpt_op_t *op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    op->g = g;
    op->k = k;
    op->kind = kind;
    if (a) {
        op->done = a->done;
        op->data = a->data;
        if (a->who)
            op->who = *a->who;
        snprintf(op->cause, sizeof(op->cause), "%s", a->cause ? a->cause : "");
    }
    return op;
}

/* A rollback or revival that timed out with no cell to blame (busy_ok: whether one may be) means
 * the new process did not come, and a kernel in an unknown state is worth less than a fresh one:
 * the kernel is restarted, and op ends with 504 saying so. false when that is not the case (op
 * is still the caller's). */
static bool end_restarted(ckpt_op_t *op, int status, bool busy_ok)
{
    if (status != -ETIMEDOUT || (!busy_ok && kernel_executions(op->k) > 0) ||
        kernel_restart(op->k) != 0)
        return false;
    op_fail(op, status, NULL, true);
    return true;
}

/* The first checkpoint of a kernel process: the process is revived from it at once (a
 * rollback to it, without its files and without a notice: the state is the one it has), so
 * that its first process becomes the keeper, and the live interpreter a process whose death
 * the checkpoints outlive (docs/checkpoints.md, "A kernel that dies"). */
static void on_kept(void *data, kernel_t *k, int status, json_t *reply)
{
    struct kck *c;
    struct ckrec *rec;
    ckpt_op_t *op = answered(data, &c, &rec);
    if (status == 0 && c) {
        c->keeper = true;
        log_info("kernel=%s: its first process is now the keeper of its checkpoints", kernel_id(k));
        /* what the first process had received and not run yet went with it */
        kernel_fail_pending(k, KERNEL_OUT_RESTARTED,
                            "the kernel's process was replaced by one revived from its first "
                            "checkpoint before it ran this");
    } else if (end_restarted(op, status, false)) {
        return;
    } else if (status != -ECHILD) {
        log_warn("kernel=%s: its first process could not become the keeper of its checkpoints "
                 "(%s): a death of its interpreter will end them",
                 kernel_id(k), strerror(-status));
    }
    if (!rec) {
        struct kerr err;
        refuse(op->g, k, KERR_CHECKPOINT, -ECHILD, op->id, &err);
        return op_end(op, &err, NULL);
    }
    op_end(op, NULL, rec);
}

static int keep(ckpt_op_t *op, kernel_t *k)
{
    json_t *content =
        json_pack("{s:s, s:b, s:I}", "id", op->id, "files", 0, "expires", expiry(op->g));
    int r = content
                ? kckpt_send(k, KCKPT_ROLLBACK, content, timeout_ms(op->g), on_kept, op, &op->req)
                : -ENOMEM;
    json_decref(content);
    return r;
}

static void on_taken(void *data, kernel_t *k, int status, json_t *reply)
{
    struct kck *c;
    struct ckrec *rec;
    ckpt_op_t *op = answered(data, &c, &rec);
    if (c)
        c->taking--;
    rec = status == 0 && c ? calloc(1, sizeof(*rec)) : NULL;
    if (status == 0 && !rec)
        status = -ENOMEM;
    if (status < 0)
        return op_fail(op, status, reply, false);
    snprintf(rec->id, sizeof(rec->id), "%s", op->id);
    rec->created_us = util_wall_us();
    rec->exec_count = json_integer_value(json_object_get(reply, "execution_count"));
    rec->files_bytes = json_integer_value(json_object_get(reply, "files_bytes"));
    rec->files = json_is_true(json_object_get(reply, "files"));
    rec->pid = (long)json_integer_value(json_object_get(reply, "pid"));
    list_append(&c->recs, &rec->link);
    c->n++;
    log_info("kernel=%s: checkpoint %s taken (execution_count %lld, %lld file bytes)", kernel_id(k),
             rec->id, rec->exec_count, rec->files_bytes);
    audit(op, "ok");
    if (!op->done) { /* its caller went away: nobody would learn its id, nor drop it */
        struct kerr err;
        const struct ckpt_asker a = {.who = &op->who};
        log_info("kernel=%s: checkpoint %s: its caller went away; dropped", kernel_id(k),
                 rec->id);
        ckpt_drop(op->g, k, &a, rec->id, &err);
        return op_end(op, NULL, NULL);
    }
    /* not while other executions wait in the kernel's queue: the revival would run after
     * them and silently undo what they did (the next checkpoint makes the keeper then) */
    if (!c->keeper && kernel_executions(k) == 0 && keep(op, k) == 0)
        return; /* answered once the kernel's first process is its keeper */
    op_end(op, NULL, rec);
}

/* Sends op's request (content is consumed): op, or NULL with err saying why (op freed). */
static ckpt_op_t *op_send(
    ckpt_op_t *op, enum kckpt_op kop, json_t *content, kckpt_cb cb, struct kerr *err)
{
    int r = kckpt_send(op->k, kop, content, timeout_ms(op->g), cb, op, &op->req);
    json_decref(content);
    if (r < 0) {
        refuse(op->g, op->k, op->kind, r, op->id, err);
        free(op);
        return NULL;
    }
    return op;
}

ckpt_op_t *ckpt_take(
    gw_t *g, kernel_t *k, const struct ckpt_asker *a, bool files, struct kerr *err)
{
    struct kck *c = kck_of(g, k, true);
    if (!c)
        return refuse(g, k, KERR_CHECKPOINT, -ENOMEM, NULL, err);
    if (kernel_state(k) != KERNEL_RUNNING)
        return refuse(g, k, KERR_CHECKPOINT, -EBUSY, NULL, err);
    if (kernel_paused(k)) /* it would not answer before its resume */
        return refuse(g, k, KERR_CHECKPOINT, -EHOSTDOWN, NULL, err);
    if (c->n + c->taking >= g->cfg.max_checkpoints)
        return refuse(g, k, KERR_CHECKPOINT, -ENOSPC, NULL, err);
    ckpt_op_t *op = op_new(g, k, a, KERR_CHECKPOINT);
    json_t *content = op ? json_object() : NULL;
    if (!content) {
        free(op);
        return refuse(g, k, KERR_CHECKPOINT, -ENOMEM, NULL, err);
    }
    util_uuid(op->id);
    op->files = files;
    json_object_set_new(content, "id", json_string(op->id));
    json_object_set_new(content, "files_dir",
                        files ? json_string(kckpt_files_dir(k)) : json_null());
    if ((op = op_send(op, KCKPT_CHECKPOINT, content, on_taken, err)))
        c->taking++;
    return op;
}

/* The rollback's clients: a status sequence a Jupyter front end takes as a restart it asked
 * for ("starting", as after POST .../restart, then "idle": no reconnection), and between them
 * a notice on stderr naming the checkpoint and what did not survive, with the same facts as
 * metadata ("kgw_rollback") for programs. */
static void tell_clients(ckpt_op_t *op, const struct ckrec *rec)
{
    char text[700];
    snprintf(text, sizeof(text),
             "\n[kgw] The kernel was rolled back to checkpoint %s (execution_count %lld%s)%s%s.\n"
             "Its variables, modules and In/Out numbering are the checkpoint's; %s.\n",
             rec->id, rec->exec_count, rec->files ? ", with its workspace files" : "",
             op->cause[0] ? ": " : "", op->cause, CKPT_LOST);
    json_t *meta = json_pack("{s:{s:s, s:I, s:b, s:s}}", "kgw_rollback", "checkpoint", rec->id,
                             "execution_count", (json_int_t)rec->exec_count, "files", rec->files,
                             "cause", op->cause[0] ? op->cause : "requested");
    json_t *st = json_pack("{s:s}", "execution_state", "starting");
    json_t *stream = json_pack("{s:s, s:s}", "name", "stderr", "text", text);
    json_t *idle = json_pack("{s:s}", "execution_state", "idle");
    if (st && stream && idle && meta) {
        kckpt_announce(op->k, "status", st, meta);
        kckpt_announce(op->k, "stream", stream, meta);
        kckpt_announce(op->k, "status", idle, meta);
    }
    json_decref(meta);
    json_decref(st);
    json_decref(stream);
    json_decref(idle);
}

static void on_rolled(void *data, kernel_t *k, int status, json_t *reply)
{
    struct kck *c;
    struct ckrec *rec;
    ckpt_op_t *op = answered(data, &c, &rec);
    char msg[200];
    if (rec)
        rec->rolling--;
    if (status == 0 && !rec) /* cannot be: its records end with the process, -ECHILD first */
        status = -ENOENT;
    if (end_restarted(op, status, false))
        return;
    if (status < 0)
        return op_fail(op, status, reply, false);
    c->keeper = true; /* the first process exec'd the keeper (or already was it) */
    log_info("kernel=%s: rolled back to checkpoint %s%s%s", kernel_id(k), rec->id,
             op->cause[0] ? ": " : "", op->cause);
    audit(op, "ok");
    /* requests the old process had queued behind the rollback went with it */
    snprintf(msg, sizeof(msg), "the kernel was rolled back to checkpoint %s before it ran this",
             rec->id);
    kernel_fail_pending(k, KERNEL_OUT_RESTARTED, msg);
    tell_clients(op, rec);
    op_end(op, NULL, rec);
}

ckpt_op_t *ckpt_rollback(
    gw_t *g, kernel_t *k, const struct ckpt_asker *a, const char *cp, struct kerr *err)
{
    struct ckrec *rec = rec_find(kck_of(g, k, false), cp);
    if (!rec)
        return refuse(g, k, KERR_ROLLBACK, -ENOENT, cp, err);
    if (kernel_state(k) != KERNEL_RUNNING)
        return refuse(g, k, KERR_ROLLBACK, -EBUSY, cp, err);
    if (kernel_paused(k))
        return refuse(g, k, KERR_ROLLBACK, -EHOSTDOWN, cp, err);
    ckpt_op_t *op = op_new(g, k, a, KERR_ROLLBACK);
    json_t *content = op ? json_pack("{s:s, s:b, s:I}", "id", rec->id, "files", rec->files,
                                     "expires", expiry(g))
                         : NULL;
    if (!content) {
        free(op);
        return refuse(g, k, KERR_ROLLBACK, -ENOMEM, cp, err);
    }
    snprintf(op->id, sizeof(op->id), "%s", rec->id);
    if ((op = op_send(op, KCKPT_ROLLBACK, content, on_rolled, err)))
        rec->rolling++;
    return op;
}

/* ---- a death of the live interpreter: the kernel comes back from its newest checkpoint ---- */

static void on_revived(void *data, kernel_t *k, int status, json_t *reply)
{
    struct kck *c;
    struct ckrec *rec;
    ckpt_op_t *op = answered(data, &c, &rec);
    if (c && c->reviving == op)
        c->reviving = NULL;
    if (status == 0 && !rec)
        status = -ENOENT;
    if (end_restarted(op, status, true))
        return;
    if (status < 0)
        return op_fail(op, status, reply, false);
    log_warn("kernel=%s: came back from checkpoint %s after its process died", kernel_id(k),
             rec->id);
    audit(op, "ok");
    tell_clients(op, rec);
    op_end(op, NULL, rec);
}

static void on_death(void *data, kernel_t *k, enum kernel_outcome o, const char *cause)
{
    gw_t *g = data;
    struct kck *c = kck_of(g, k, false);
    struct ckrec *rec =
        c && !list_empty(&c->recs) ? list_entry(c->recs.prev, struct ckrec, link) : NULL;
    ckpt_op_t *op = rec ? op_new(g, k, NULL, KERR_REVIVE) : NULL;
    json_t *content = op ? json_pack("{s:s}", "id", rec->id) : NULL;
    if (op) {
        snprintf(op->id, sizeof(op->id), "%s", rec->id);
        snprintf(op->cause, sizeof(op->cause), "its process died: %s", cause);
        /* no caller: the audit event names the kernel's own tenant */
        const struct wspace *w = kernel_workspace(k);
        snprintf(op->who.tenant, sizeof(op->who.tenant), "%s", w ? wspace_tenant(w) : "");
    }
    if (content &&
        kckpt_send(k, KCKPT_REVIVE, content, timeout_ms(g), on_revived, op, &op->req) == 0) {
        c->reviving = op; /* before the requests fail: an execution may join it */
    } else {
        /* no checkpoint left: the keeper ends, and the kernel with it (then restarted) */
        free(op);
    }
    json_decref(content);
    kernel_fail_pending(k, o, cause);
}

ckpt_op_t *ckpt_revival_join(gw_t *g, kernel_t *k, const char *cp, const struct ckpt_asker *a)
{
    struct kck *c = kck_of(g, k, false);
    if (!c || !c->reviving || strcmp(c->reviving->id, cp) != 0 || c->reviving->done)
        return NULL;
    c->reviving->done = a->done;
    c->reviving->data = a->data;
    return c->reviving;
}

static void on_dropped(void *data, kernel_t *k, int status, json_t *reply)
{
    ckpt_op_t *op = data;
    op->req = NULL;
    /* the record is gone already: a checkpoint whose process is gone is dropped too */
    if (status < 0 && status != -EREMOTEIO) {
        struct kerr err;
        struct kerr_context ctx = context(op->g, k, op->id, reply);
        kerr_make(KERR_DROP, status, &ctx, &err);
        log_info("kernel=%s: drop of checkpoint %s: %s", kernel_id(k), op->id, err.message);
    }
    audit(op, status == 0 ? "ok" : "gone");
    op_end(op, NULL, NULL);
}

ckpt_op_t *ckpt_drop(
    gw_t *g, kernel_t *k, const struct ckpt_asker *a, const char *cp, struct kerr *err)
{
    struct kck *c = kck_of(g, k, false);
    struct ckrec *rec = rec_find(c, cp);
    if (!rec)
        return refuse(g, k, KERR_DROP, -ENOENT, cp, err);
    if (rec->rolling) /* the rollback would find no record: its clients never told */
        return refuse(g, k, KERR_DROP, -EINPROGRESS, cp, err);
    ckpt_op_t *op = op_new(g, k, a, KERR_DROP);
    json_t *content = op ? json_pack("{s:s}", "id", rec->id) : NULL;
    if (!content) {
        free(op);
        return refuse(g, k, KERR_DROP, -ENOMEM, cp, err);
    }
    snprintf(op->id, sizeof(op->id), "%s", rec->id);
    if ((op = op_send(op, KCKPT_DROP, content, on_dropped, err)))
        rec_remove(c, rec); /* no rollback to it from now on */
    return op;
}

void ckpt_op_cancel(ckpt_op_t **pop)
{
    if (*pop) {
        (*pop)->done = NULL;
        (*pop)->data = NULL;
    }
    *pop = NULL;
}
