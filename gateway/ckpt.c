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

enum op_kind { OP_TAKE, OP_ROLLBACK, OP_DROP, OP_REVIVE };

struct ckpt_op {
    gw_t *g;
    kernel_t *k;
    enum op_kind kind;
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

static void audit(ckpt_op_t *op, const char *event, const char *result)
{
    if (!audit_enabled())
        return;
    audit_event(event, "s:s, s:s, s:s, s:s, s:s, s:o", "tenant", op->who.tenant, "addr",
                op->who.addr, "kernel", kernel_id(op->k), "checkpoint", op->id, "result", result,
                "cause", op->cause[0] ? audit_str(op->cause, strlen(op->cause)) : json_null());
}

/* A kernel's failed answer as an HTTP status and a message. */
static int failure(const gw_t *g,
                   kernel_t *k,
                   int status,
                   json_t *reply,
                   const char *what,
                   char *msg,
                   size_t msgsz)
{
    const char *ename = json_string_value(json_object_get(reply, "ename"));
    const char *evalue = json_string_value(json_object_get(reply, "evalue"));
    switch (status) {
    case -EREMOTEIO:
        if (ename && (!strcmp(ename, "ForkError") || !strcmp(ename, "MemoryError") ||
                      (evalue && (strstr(evalue, "fork") || strstr(evalue, "emory"))))) {
            snprintf(msg, msgsz,
                     "cannot %s: the kernel is at its memory or process limit (%.64s: %.200s); "
                     "nothing was changed",
                     what, ename, evalue ? evalue : "");
            return 507;
        }
        snprintf(msg, msgsz, "cannot %s: %.64s: %.200s", what, ename ? ename : "error",
                 evalue ? evalue : "");
        return 409;
    case -ENOTSUP: /* its ipykernel lacks what checkpoints rely on: not offered there */
        snprintf(msg, msgsz, "cannot %s: %.340s", what,
                 evalue ? evalue : "this kernel does not support checkpoints");
        return 501;
    case -EMLINK: /* at kgw_ckpt.MAX_GENERATIONS: a restart of the kernel starts again */
        snprintf(msg, msgsz, "cannot %s: %.340s", what,
                 evalue ? evalue : "the kernel is at its generation limit; restart it");
        return 409;
    case -ETIMEDOUT:
        snprintf(msg, msgsz,
                 "cannot %s: the kernel did not answer within %d s (a cell may still be running)",
                 what, timeout_ms(g) / 1000);
        return 504;
    case -ECHILD:
        snprintf(msg, msgsz, "cannot %s: the kernel's process ended meanwhile%s%.300s", what,
                 kernel_last_cause(k)[0] ? ": " : "", kernel_last_cause(k));
        return 409;
    case -EBUSY:
        snprintf(msg, msgsz, "cannot %s: the kernel is not running (it is %s)", what,
                 kernel_execution_state(k));
        return 409;
    case -EAGAIN:
        snprintf(msg, msgsz, "cannot %s: too many checkpoint requests queued for this kernel",
                 what);
        return 429;
    default:
        snprintf(msg, msgsz, "cannot %s: %s", what, strerror(-status));
        return 500;
    }
}

static void op_end(ckpt_op_t *op, int status, int http, const char *msg, json_t *rec)
{
    if (op->done)
        op->done(op->data, status, http, msg, rec);
    free(op);
}

static ckpt_op_t *op_new(gw_t *g,
                         kernel_t *k,
                         const struct gw_caller *who,
                         enum op_kind kind,
                         ckpt_done_cb done,
                         void *data)
{
    ckpt_op_t *op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    op->g = g;
    op->k = k;
    op->kind = kind;
    op->done = done;
    op->data = data;
    if (who)
        op->who = *who;
    return op;
}

/* A rollback or revival that timed out with no cell to blame (busy_ok: whether one may be) means
 * the new process did not come, and a kernel in an unknown state is worth less than a fresh one:
 * the kernel is restarted, and op ends with 504 saying so (audited as event, when not NULL).
 * false when that is not the case (op is still the caller's). from: what it did not come back
 * from. */
static bool end_restarted(ckpt_op_t *op,
                          kernel_t *k,
                          int status,
                          bool busy_ok,
                          const char *prefix,
                          const char *from,
                          const char *event)
{
    char msg[400];
    if (status != -ETIMEDOUT || (!busy_ok && kernel_executions(k) > 0) || kernel_restart(k) != 0)
        return false;
    snprintf(msg, sizeof(msg),
             "%sthe kernel did not come back from %s within %d s and was restarted (its "
             "variables and checkpoints are lost)",
             prefix, from, timeout_ms(op->g) / 1000);
    log_warn("kernel=%s: checkpoint %s: %s", kernel_id(k), op->id, msg);
    if (event)
        audit(op, event, "failed");
    op_end(op, status, 504, msg, NULL);
    return true;
}

/* The first checkpoint of a kernel process: the process is revived from it at once (a
 * rollback to it, without its files and without a notice: the state is the one it has), so
 * that its first process becomes the keeper, and the live interpreter a process whose death
 * the checkpoints outlive (docs/checkpoints.md, "A kernel that dies"). */
static void on_kept(void *data, kernel_t *k, int status, json_t *reply)
{
    ckpt_op_t *op = data;
    struct kck *c = kck_of(op->g, k, false);
    struct ckrec *rec = rec_find(c, op->id);
    char msg[400];
    op->req = NULL;
    if (status == 0 && c) {
        c->keeper = true;
        log_info("kernel=%s: its first process is now the keeper of its checkpoints", kernel_id(k));
        /* what the first process had received and not run yet went with it */
        kernel_fail_pending(k, KERNEL_OUT_RESTARTED,
                            "the kernel's process was replaced by one revived from its first "
                            "checkpoint before it ran this");
    } else if (end_restarted(op, k, status, false, "", "the revival its first checkpoint makes",
                             NULL)) {
        return;
    } else if (status != -ECHILD) {
        log_warn("kernel=%s: its first process could not become the keeper of its checkpoints "
                 "(%s): a death of its interpreter will end them",
                 kernel_id(k), strerror(-status));
    }
    if (!rec) {
        failure(op->g, k, -ECHILD, NULL, "take a checkpoint", msg, sizeof(msg));
        return op_end(op, -ECHILD, 409, msg, NULL);
    }
    json_t *model = rec_model(k, rec);
    op_end(op, 0, 201, "", model);
    json_decref(model);
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
    ckpt_op_t *op = data;
    struct kck *c = kck_of(op->g, k, false);
    char msg[400];
    op->req = NULL;
    if (c)
        c->taking--;
    struct ckrec *rec = status == 0 && c ? calloc(1, sizeof(*rec)) : NULL;
    if (status == 0 && !rec)
        status = -ENOMEM;
    if (status < 0) {
        int http = failure(op->g, k, status, reply, "take a checkpoint", msg, sizeof(msg));
        log_info("kernel=%s: checkpoint %s: %s", kernel_id(k), op->id, msg);
        audit(op, "checkpoint", "failed");
        return op_end(op, status, http, msg, NULL);
    }
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
    audit(op, "checkpoint", "ok");
    if (!op->done) { /* its caller went away: nobody would learn its id, nor drop it */
        int http;
        log_info("kernel=%s: checkpoint %s: its caller went away; dropped", kernel_id(k),
                 rec->id);
        ckpt_drop(op->g, k, &op->who, rec->id, NULL, NULL, NULL, &http, msg, sizeof(msg));
        return op_end(op, 0, 201, "", NULL);
    }
    /* not while other executions wait in the kernel's queue: the revival would run after
     * them and silently undo what they did (the next checkpoint makes the keeper then) */
    if (!c->keeper && kernel_executions(k) == 0 && keep(op, k) == 0)
        return; /* answered once the kernel's first process is its keeper */
    json_t *model = rec_model(k, rec);
    op_end(op, 0, 201, "", model);
    json_decref(model);
}

/* Sends op's request (content is consumed) for a REST or execute-API caller: 0 with *ret set,
 * or -errno with *http and msg saying why (op freed). what: "take a checkpoint", ... */
static int op_send(ckpt_op_t *op,
                   enum kckpt_op kop,
                   json_t *content,
                   kckpt_cb cb,
                   const char *what,
                   ckpt_op_t **ret,
                   int *http,
                   char *msg,
                   size_t msgsz)
{
    int r = kckpt_send(op->k, kop, content, timeout_ms(op->g), cb, op, &op->req);
    json_decref(content);
    if (r < 0) {
        *http = failure(op->g, op->k, r, NULL, what, msg, msgsz);
        free(op);
        return r;
    }
    if (ret)
        *ret = op;
    return 0;
}

int ckpt_take(gw_t *g,
              kernel_t *k,
              const struct gw_caller *who,
              bool files,
              ckpt_done_cb done,
              void *data,
              ckpt_op_t **ret,
              int *http,
              char *msg,
              size_t msgsz)
{
    struct kck *c = kck_of(g, k, true);
    if (!c) {
        *http = failure(g, k, -ENOMEM, NULL, "take a checkpoint", msg, msgsz);
        return -ENOMEM;
    }
    if (kernel_state(k) != KERNEL_RUNNING) {
        *http = failure(g, k, -EBUSY, NULL, "take a checkpoint", msg, msgsz);
        return -EBUSY;
    }
    if (c->n + c->taking >= g->cfg.max_checkpoints) {
        snprintf(msg, msgsz,
                 "checkpoint limit reached: the kernel holds %d (--max-checkpoints=%lld); "
                 "DELETE one first",
                 c->n + c->taking, g->cfg.max_checkpoints);
        *http = 409;
        return -ENOSPC;
    }
    ckpt_op_t *op = op_new(g, k, who, OP_TAKE, done, data);
    json_t *content = op ? json_object() : NULL;
    if (!content) {
        free(op);
        *http = failure(g, k, -ENOMEM, NULL, "take a checkpoint", msg, msgsz);
        return -ENOMEM;
    }
    util_uuid(op->id);
    op->files = files;
    json_object_set_new(content, "id", json_string(op->id));
    json_object_set_new(content, "files_dir",
                        files ? json_string(kckpt_files_dir(k)) : json_null());
    int r = op_send(op, KCKPT_CHECKPOINT, content, on_taken, "take a checkpoint", ret, http, msg,
                    msgsz);
    if (r == 0)
        c->taking++;
    return r;
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
    ckpt_op_t *op = data;
    struct kck *c = kck_of(op->g, k, false);
    struct ckrec *rec = rec_find(c, op->id);
    char msg[400];
    op->req = NULL;
    if (rec)
        rec->rolling--;
    if (status == 0 && !rec) /* cannot be: its records end with the process, -ECHILD first */
        status = -ENOENT;
    if (end_restarted(op, k, status, false, "cannot roll back: ", "the rollback", "rollback"))
        return;
    if (status < 0) {
        int http = failure(op->g, k, status, reply, "roll back", msg, sizeof(msg));
        log_info("kernel=%s: rollback to %s: %s", kernel_id(k), op->id, msg);
        audit(op, "rollback", "failed");
        return op_end(op, status, http, msg, NULL);
    }
    c->keeper = true; /* the first process exec'd the keeper (or already was it) */
    log_info("kernel=%s: rolled back to checkpoint %s%s%s", kernel_id(k), rec->id,
             op->cause[0] ? ": " : "", op->cause);
    audit(op, "rollback", "ok");
    /* requests the old process had queued behind the rollback went with it */
    snprintf(msg, sizeof(msg), "the kernel was rolled back to checkpoint %s before it ran this",
             rec->id);
    kernel_fail_pending(k, KERNEL_OUT_RESTARTED, msg);
    tell_clients(op, rec);
    json_t *model = rec_model(k, rec);
    op_end(op, 0, 200, "", model);
    json_decref(model);
}

int ckpt_rollback(gw_t *g,
                  kernel_t *k,
                  const struct gw_caller *who,
                  const char *cp,
                  const char *cause,
                  ckpt_done_cb done,
                  void *data,
                  ckpt_op_t **ret,
                  int *http,
                  char *msg,
                  size_t msgsz)
{
    struct ckrec *rec = rec_find(kck_of(g, k, false), cp);
    if (!rec) {
        snprintf(msg, msgsz, "no checkpoint %.64s on kernel %s", cp, kernel_id(k));
        *http = 404;
        return -ENOENT;
    }
    if (kernel_state(k) != KERNEL_RUNNING) {
        *http = failure(g, k, -EBUSY, NULL, "roll back", msg, msgsz);
        return -EBUSY;
    }
    ckpt_op_t *op = op_new(g, k, who, OP_ROLLBACK, done, data);
    json_t *content = op ? json_pack("{s:s, s:b, s:I}", "id", rec->id, "files", rec->files,
                                     "expires", expiry(g))
                         : NULL;
    if (!content) {
        free(op);
        *http = failure(g, k, -ENOMEM, NULL, "roll back", msg, msgsz);
        return -ENOMEM;
    }
    snprintf(op->id, sizeof(op->id), "%s", rec->id);
    snprintf(op->cause, sizeof(op->cause), "%s", cause ? cause : "");
    int r = op_send(op, KCKPT_ROLLBACK, content, on_rolled, "roll back", ret, http, msg, msgsz);
    if (r == 0)
        rec->rolling++;
    return r;
}

/* ---- a death of the live interpreter: the kernel comes back from its newest checkpoint ---- */

static void on_revived(void *data, kernel_t *k, int status, json_t *reply)
{
    ckpt_op_t *op = data;
    struct kck *c = kck_of(op->g, k, false);
    struct ckrec *rec = rec_find(c, op->id);
    char msg[400];
    op->req = NULL;
    if (c && c->reviving == op)
        c->reviving = NULL;
    if (status == 0 && !rec)
        status = -ENOENT;
    char from[CKPT_ID_MAX + 20];
    snprintf(from, sizeof(from), "its checkpoint %s", op->id);
    if (end_restarted(op, k, status, true, "", from, "revive"))
        return;
    if (status < 0) {
        int http = failure(op->g, k, status, reply, "revive the kernel", msg, sizeof(msg));
        log_info("kernel=%s: revival from %s: %s", kernel_id(k), op->id, msg);
        audit(op, "revive", "failed");
        return op_end(op, status, http, msg, NULL);
    }
    log_warn("kernel=%s: came back from checkpoint %s after its process died", kernel_id(k),
             rec->id);
    audit(op, "revive", "ok");
    tell_clients(op, rec);
    json_t *model = rec_model(k, rec);
    op_end(op, 0, 200, "", model);
    json_decref(model);
}

static void on_death(void *data, kernel_t *k, enum kernel_outcome o, const char *cause)
{
    gw_t *g = data;
    struct kck *c = kck_of(g, k, false);
    struct ckrec *rec =
        c && !list_empty(&c->recs) ? list_entry(c->recs.prev, struct ckrec, link) : NULL;
    ckpt_op_t *op = rec ? op_new(g, k, NULL, OP_REVIVE, NULL, NULL) : NULL;
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

int ckpt_revival_join(
    gw_t *g, kernel_t *k, const char *cp, ckpt_done_cb done, void *data, ckpt_op_t **ret)
{
    struct kck *c = kck_of(g, k, false);
    if (!c || !c->reviving || strcmp(c->reviving->id, cp) != 0 || c->reviving->done)
        return -ENOENT;
    c->reviving->done = done;
    c->reviving->data = data;
    *ret = c->reviving;
    return 0;
}

static void on_dropped(void *data, kernel_t *k, int status, json_t *reply)
{
    ckpt_op_t *op = data;
    char msg[400] = "";
    op->req = NULL;
    /* the record is gone already: a checkpoint whose process is gone is dropped too */
    if (status < 0 && status != -EREMOTEIO)
        log_info("kernel=%s: drop of checkpoint %s: %s", kernel_id(k), op->id,
                 (failure(op->g, k, status, reply, "drop", msg, sizeof(msg)), msg));
    audit(op, "checkpoint_drop", status == 0 ? "ok" : "gone");
    op_end(op, 0, 204, "", NULL);
}

int ckpt_drop(gw_t *g,
              kernel_t *k,
              const struct gw_caller *who,
              const char *cp,
              ckpt_done_cb done,
              void *data,
              ckpt_op_t **ret,
              int *http,
              char *msg,
              size_t msgsz)
{
    struct kck *c = kck_of(g, k, false);
    struct ckrec *rec = rec_find(c, cp);
    if (!rec) {
        snprintf(msg, msgsz, "no checkpoint %.64s on kernel %s", cp, kernel_id(k));
        *http = 404;
        return -ENOENT;
    }
    if (rec->rolling) { /* the rollback would find no record: its clients never told */
        snprintf(msg, msgsz, "checkpoint %s: a rollback to it is in progress; drop it after",
                 rec->id);
        *http = 409;
        return -EBUSY;
    }
    ckpt_op_t *op = op_new(g, k, who, OP_DROP, done, data);
    json_t *content = op ? json_pack("{s:s}", "id", rec->id) : NULL;
    if (!content) {
        free(op);
        *http = failure(g, k, -ENOMEM, NULL, "drop", msg, msgsz);
        return -ENOMEM;
    }
    snprintf(op->id, sizeof(op->id), "%s", rec->id);
    int r = op_send(op, KCKPT_DROP, content, on_dropped, "drop", ret, http, msg, msgsz);
    if (r == 0)
        rec_remove(c, rec); /* no rollback to it from now on */
    return r;
}

void ckpt_op_cancel(ckpt_op_t **pop)
{
    if (*pop) {
        (*pop)->done = NULL;
        (*pop)->data = NULL;
    }
    *pop = NULL;
}
