/* One kernel: its state machine (starting, running, restarting, terminating, dead), its
 * waiters, the messages of its manager sockets (the start's proofs), the end of its process,
 * restart, shutdown and interrupt. It reports to its owner through kernel_owner_ops
 * (private.h) and calls only files below it (private.h: floors): never the set-up, the
 * sessions, the manager, the warm pool or the fork server. */
#include "kernelmgr/kernel_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kcall_int.h"
#include "kernelmgr/kckpt_int.h"
#include "kernelmgr/kenv_int.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/klaunch_int.h"
#include "kernelmgr/kout_int.h"
#include "kernelmgr/kstderr_int.h"
#include "kernelmgr/kwatchdog_int.h"
#include "kernelmgr/kwire_int.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"

#define NUDGE_RETRY_MS 2000 /* resend kernel_info_request if a start seems stuck */
#define NUDGE_IOPUB_MS 20   /* resend when the reply came but no iopub message yet */

static void on_oversize(void *data, kzsock_t *z);
static void on_own_reply(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n);
static int open_watch_sockets(kernel_t *k);

static void emit(kernel_t *k, enum kernel_event ev, const char *detail)
{
    k->own->event(k, ev, detail);
}

const char *kernel_id(const kernel_t *k)
{
    return k->id;
}

void kernel_usage(kernel_t *k, struct kernel_usage *ret)
{
    struct sbx_cgroup_usage u = {.mem_bytes = -1, .cpu_ns = -1};
    if (k->cgroup)
        sbx_cgroup_usage(k->cgroup, &u);
    ret->mem_bytes = u.mem_bytes;
    ret->cpu_ns = u.cpu_ns;
    ret->mem_limit = k->lim.mem_bytes;
    ret->cpu_millis = k->lim.cpu_millis;
}

const char *kernel_last_cause(const kernel_t *k)
{
    return k->last_cause;
}

const char *kernel_spec_name(const kernel_t *k)
{
    return k->spec->name;
}

pid_t kernel_pid(const kernel_t *k)
{
    return k->pid;
}

enum kernel_state kernel_state(const kernel_t *k)
{
    return k->state;
}

void kernel_set_data(kernel_t *k, int slot, void *data)
{
    if (slot >= 0 && slot < KMGR_LISTENERS_MAX)
        k->data[slot] = data;
}

void *kernel_data(const kernel_t *k, int slot)
{
    return slot >= 0 && slot < KMGR_LISTENERS_MAX ? k->data[slot] : NULL;
}

void kernel_touch(kernel_t *k)
{
    k->last_activity_us = util_wall_us();
}

struct obudget_share *kernel_out_share(const kernel_t *k)
{
    return kout__share(k);
}

void kernel_connections(kernel_t *k, int delta)
{
    k->connections += delta;
    if (k->connections < 0)
        k->connections = 0;
}

const char *kernel_execution_state(const kernel_t *k)
{
    switch (k->state) {
    case KERNEL_STARTING:
        return "starting";
    case KERNEL_RESTARTING:
        return "restarting";
    case KERNEL_DEAD:
        return "dead";
    default:
        return k->exec_state;
    }
}

json_t *kernel_model(const kernel_t *k)
{
    char ts[40];
    const char *st = kernel_execution_state(k);
    util_iso_time(ts, sizeof(ts), k->last_activity_us);
    return json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:b}", "id", k->id, "name", k->spec->name,
                     "last_activity", ts, "execution_state", st, "connections", k->connections,
                     "workspace", k->ws->id, "paused", k->paused);
}

struct wspace *kernel_workspace(const kernel_t *k)
{
    return k->ws;
}

/* ---- waiters ---- */

int kernel_wait(kernel_t *k, kernel_done_cb cb, void *data, kwait_t **ret)
{
    if (k->state != KERNEL_STARTING && k->state != KERNEL_RESTARTING &&
        k->state != KERNEL_TERMINATING)
        return -EALREADY;
    kwait_t *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->cb = cb;
    w->data = data;
    w->k = k;
    list_prepend(&k->waiters, &w->link);
    *ret = w;
    return 0;
}

void kwait_cancel(kwait_t **pw)
{
    kwait_t *w = *pw;
    if (!w)
        return;
    list_remove(&w->link);
    free(w);
    *pw = NULL;
}

/* The transition in progress ended: its waiters are called on the loop's next turn, never
 * inside the call into the kernel manager that ended it (a face shutting a kernel down
 * must not find its own start's callback freeing what it still holds). A waiter added
 * meanwhile waits for the next completion. */
static void complete(kernel_t *k, int status)
{
    if (list_empty(&k->waiters))
        return;
    while (!list_empty(&k->waiters)) { /* oldest first */
        kwait_t *w = list_entry(k->waiters.prev, kwait_t, link);
        list_remove(&w->link);
        w->status = status;
        list_append(&k->fired, &w->link);
    }
    k->m->evl->timer_arm(k->m->evl, k->fire, 0);
}

static void fire_all(kernel_t *k)
{
    while (!list_empty(&k->fired)) {
        kwait_t *w = list_first(&k->fired, kwait_t, link);
        list_remove(&w->link);
        w->cb(w->data, k, w->status);
        free(w);
    }
}

static void on_fire(void *data)
{
    fire_all(data);
}

/* From the loop only, just before the kernel is freed: its waiters hear the end now, also
 * those their callbacks add (a face that waits again on a kernel shutting down): a waiter
 * left for kinstance__free would be dropped without a word, its owner holding a pointer to
 * it and a request never answered. */
static void complete_now(kernel_t *k, int status)
{
    do {
        complete(k, status);
        k->m->evl->timer_disarm(k->m->evl, k->fire);
        fire_all(k);
    } while (!list_empty(&k->waiters));
}

/* The gateway's shell socket, open while the gateway has requests of its own for the process
 * (the start's kernel_info_request, a pooled kernel's env code): an idle kernel holds none. No
 * fixed routing id: the kernel's ROUTER may not yet have seen the last one go. 0 or -errno
 * (logged). */
int kernel__own_shell(kernel_t *k)
{
    char ep[PATH_MAX + 16];
    int r;
    if (k->shell.s)
        return 0;
    kz_close(&k->shell); /* what a failed reconnection left */
    kwire__endpoint(k, KPORT_SHELL, ep, sizeof(ep));
    if ((r = kz_open(&k->shell, k->m->evl, k->m->zctx, ZMQ_DEALER, NULL, ep, on_own_reply, k,
                     k->m->o.max_kernel_msg, on_oversize)) < 0)
        log_warn("kernel=%s: cannot open its shell socket: %s", k->id, strerror(-r));
    return r;
}

/* The gateway's control socket, opened when first needed (a stop, an interrupt by message): an
 * idle kernel holds none. NULL (logged) if it cannot be opened. */
static kzsock_t *own_control(kernel_t *k)
{
    char ep[PATH_MAX + 16];
    int r;
    if (k->control.s)
        return &k->control;
    kz_close(&k->control); /* what a failed reconnection left */
    kwire__endpoint(k, KPORT_CONTROL, ep, sizeof(ep));
    if ((r = kz_open(&k->control, k->m->evl, k->m->zctx, ZMQ_DEALER, k->session, ep, on_own_reply,
                     k, k->m->o.max_kernel_msg, on_oversize)) < 0) {
        log_warn("kernel=%s: cannot open its control socket: %s", k->id, strerror(-r));
        return NULL;
    }
    return &k->control;
}

/* ---- messages from the kernel ---- */

/* Starting -> running: the start (or the hand-out of a pooled kernel) is complete. */
static void set_running(kernel_t *k)
{
    evl_t *l = k->m->evl;
    l->timer_disarm(l, k->nudge);
    l->timer_disarm(l, k->deadline);
    k->state = KERNEL_RUNNING;
    k->last_cause[0] = '\0'; /* a failed start before this one is history */
    k->own->fork_take_back(k); /* its proxy has moved in long ago */
    snprintf(k->exec_state, sizeof(k->exec_state), "idle");
    k->own->start_ok(k);
    emit(k, KERNEL_EV_STARTED, NULL);
    complete(k, 0);
    k->own->capacity(k); /* one start fewer in flight */
    kz_close(&k->shell); /* its requests are answered (may be its handler: kz_drain knows) */
}

/* A start is complete once the kernel has shown it reads its shell socket (it answered the
 * gateway's kernel_info_request, or published its "starting" status, which ipykernel does once
 * its handlers are in place) and an iopub message proves the gateway's subscription is live. */
static bool start_proven(const kernel_t *k)
{
    return k->got_iopub && (k->got_reply || k->got_starting);
}

static void check_ready(kernel_t *k)
{
    if (k->state != KERNEL_STARTING && k->state != KERNEL_RESTARTING)
        return;
    k->m->evl->timer_disarm(k->m->evl, k->nudge);
    klaunch__setup_end(k);
    if (kenv__due(k) && k->state == KERNEL_STARTING) {
        kernel__own_shell(k);
        kenv__send(k); /* a pooled kernel handed out while it was starting */
        return;
    }
    klaunch__egress_start(k);
    log_info("kernel=%s: ready (pid %d, %s, %.0f ms)%s", k->id, (int)k->pid,
             k->adopted ? "a fork" : k->forked ? "forked" : "exec", (double)(util_now_us() - k->spawn_us) / 1000.0,
             k->pool ? " in the pool" : "");
    set_running(k);
    k->own->ready(k);
}

/* Answers to the kernel_info_request a start sends (on_nudge): the gateway's own. */
static bool nudge_parent(const kernel_t *k, const jmsg_t *m)
{
    jhdr_t ph;
    return memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, k->session,
                  strlen(k->session)) != NULL &&
           jhdr_parse(m->part[JPART_PARENT], &ph) == 0 &&
           !strcmp(ph.msg_type, "kernel_info_request");
}

static void on_iopub(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    kernel_t *k = data;
    jmsg_t m;
    jhdr_t h;
    if (kwire__parse(k, frames, n, &m, &h) < 0) {
        log_debug("kernel=%s: malformed iopub message dropped", k->id);
        return;
    }
    kernel_touch(k);
    bool proven = start_proven(k);
    k->got_iopub = true;
    if (k->probing && nudge_parent(k, &m)) { /* the gateway's own: proof, not a client's */
        if (!strcmp(h.msg_type, "status") &&
            memmem(m.part[JPART_CONTENT].p, m.part[JPART_CONTENT].n, "\"idle\"", 6))
            k->probing = false; /* its last message: no more parent headers to search */
        if (!proven && start_proven(k))
            check_ready(k);
        return;
    }
    if (kckpt__iopub(k, &m)) { /* the gateway's own checkpoint requests: no client's */
        if (!proven && start_proven(k))
            check_ready(k);
        return;
    }
    if (!strcmp(h.msg_type, "status"))
        kexec__status(k, &m, kenv__id(k));
    else
        kexec__track(k, &m, &h);
    if (!proven && start_proven(k))
        check_ready(k);
    if (kenv__parent(k, &m)) {
        if (!strcmp(h.msg_type, "status") &&
            memmem(m.part[JPART_CONTENT].p, m.part[JPART_CONTENT].n, "\"idle\"", 6) &&
            kenv__step(k, false, false, true))
            set_running(k);
        return;
    }
    char *cut = NULL;
    switch (kexec__over_cap(k, &m, &h, &cut)) {
    case KEXEC_CAP_DROP:
        return;
    case KEXEC_CAP_CUT: /* clients see the message up to the cap */
        m.part[JPART_CONTENT] = (jspan_t){cut, strlen(cut)};
        m.nbuf = 0;
        break;
    case KEXEC_CAP_PASS:
        break;
    }
    if (kout__admit(k, &m, &h))
        k->own->relay(k, &m, &h);
    free(cut);
}

/* The kernel answered the gateway's shutdown_request: its shutdown hooks have run and it has
 * nothing left to say to the gateway. What remains is its interpreter's exit, which waits up to a
 * second for ZeroMQ's linger (ipykernel's sockets): the gateway does not wait for that, it ends
 * the process (its whole sandbox) now. */
static void on_shutdown_reply(kernel_t *k, const jmsg_t *m)
{
    if (k->stop_stage != 1 || !k->stop_msg_id[0] ||
        !memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, k->stop_msg_id,
                strlen(k->stop_msg_id)))
        return;
    if (k->state != KERNEL_TERMINATING && k->state != KERNEL_RESTARTING)
        return;
    log_debug("kernel=%s: shutdown_reply after %.0f ms; ending the process", k->id,
              (double)(util_now_us() - k->stop_us) / 1000.0);
    k->stop_msg_id[0] = '\0';
    k->stop_end = "ended after its shutdown_reply";
    klaunch__signal(k, SIGKILL);
}

static void on_own_reply(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    kernel_t *k = data;
    jmsg_t m;
    jhdr_t h;
    if (kwire__parse(k, frames, n, &m, &h) < 0)
        return;
    if (z == &k->control && !strcmp(h.msg_type, "shutdown_reply")) {
        on_shutdown_reply(k, &m);
        return;
    }
    if (!strcmp(h.msg_type, "execute_reply") && kenv__parent(k, &m)) {
        json_t *c = json_loadb(m.part[JPART_CONTENT].p, m.part[JPART_CONTENT].n, 0, NULL);
        const char *st = json_string_value(json_object_get(c, "status"));
        bool ok = st && !strcmp(st, "ok");
        json_decref(c);
        if (kenv__step(k, ok, !ok, false))
            set_running(k);
        return;
    }
    if (!strcmp(h.msg_type, "kernel_info_reply") && !k->got_reply) {
        bool proven = start_proven(k);
        k->got_reply = true;
        if (!proven && start_proven(k))
            check_ready(k);
        if (!k->got_iopub) /* the SUB socket had not joined yet: ask again */
            k->m->evl->timer_arm(k->m->evl, k->nudge, NUDGE_IOPUB_MS);
    }
}

/* ---- the process: its start, its end, a stop ---- */

/* The start's timer (data: the kernel): asks the kernel for kernel_info. */
static void nudge(void *data)
{
    kernel_t *k = data;
    /* ZeroMQ SUB sockets join late: the kernel counts as started only once an iopub message
     * proves the subscription is live, so no client misses the first messages of a request.
     * The request waits in the DEALER's queue until the kernel binds its socket. */
    if (kernel__own_shell(k) == 0)
        kwire__send_own(k, &k->shell, "kernel_info_request", "{}");
    k->probing = true;
    k->m->evl->timer_arm(k->m->evl, k->nudge, NUDGE_RETRY_MS);
}

/* fail: why, if a client's start was in progress. */
static void set_dead(kernel_t *k, const char *why, enum kmgr_start_fail fail)
{
    k->own->start_failed(k, fail);
    k->state = KERNEL_DEAD;
    evl_t *l = k->m->evl;
    l->timer_disarm(l, k->nudge);
    l->timer_disarm(l, k->deadline);
    log_warn("kernel=%s: dead: %s", k->id, why);
    emit(k, KERNEL_EV_DIED, why);
    k->own->capacity(k);
    complete(k, -ECHILD);
    /* a waiter may have shut it down meanwhile (a failed start's request does): its removal,
     * armed for the next turn, must not wait for the dead kernel's linger */
    if (k->state == KERNEL_DEAD && k->m->o.dead_linger_s > 0)
        l->timer_arm(l, k->linger, (uint64_t)k->m->o.dead_linger_s * 1000);
}

static void on_exit_io(void *data)
{
    kernel_t *k = data;
    evl_t *l = k->m->evl;
    int st = 0;
    char why[300], cause[sizeof(k->stop_cause)];
    if (klaunch__reap(k, &st) < 0)
        return;
    k->paused = false; /* it ended frozen (killed): nothing is left to thaw */
    kz_close(&k->control); /* what they said to the process is moot; the next opens anew */
    kz_close(&k->shell);
    l->timer_disarm(l, k->nudge);
    l->timer_disarm(l, k->deadline);
    bool asked = k->state == KERNEL_TERMINATING ||
                 (k->state == KERNEL_RESTARTING && k->stop_stage > 0);
    enum kmgr_death death = klaunch__death(k, st, asked, why, sizeof(why));
    /* before any event: a client hears its request's end before "restarting" */
    enum kernel_outcome o = asked ? k->stop_outcome
                                  : klaunch__death_outcome(k, death, st, cause, sizeof(cause));
    if (!asked) { /* the operator's and the client's view of why */
        kstderr__log(k);
        snprintf(k->last_cause, sizeof(k->last_cause), "%s", cause);
    }
    kernel_fail_pending(k, o, asked ? k->stop_cause : cause);
    kexec__abort(k);
    kexec__forget_sent(k); /* what the process had been sent died with it */
    kcall__reset(k->calls); /* calls in progress are gone; a reply gets -ENOENT */
    kckpt__reset(k);        /* checkpoint requests too (-ECHILD) */
    if (k->own->lost(k, why)) /* its owner took it (a pooled kernel: freed) */
        return;
    switch (k->state) {
    case KERNEL_TERMINATING:
        log_info("kernel=%s: shut down (%s)", k->id, why);
        complete_now(k, 0);
        emit(k, KERNEL_EV_GONE, NULL);
        k->own->gone(k); /* frees k */
        return;
    case KERNEL_RESTARTING:
        if (k->stop_stage > 0) {
            log_info("kernel=%s: restarting (old process %s)", k->id, why);
            kernel__launch(k);
            return;
        }
        /* the new process died while starting */
        /* fall through */
    case KERNEL_STARTING:
    case KERNEL_RUNNING:
        /* a fork's process ended (with its parent's sandbox, or by itself): its state is gone
         * and a fresh kernel is not what its clients asked for; a client's restart makes one */
        if (k->m->o.autorestart && k->restarts < k->m->o.max_restarts &&
            k->state != KERNEL_STARTING && !k->adopted) {
            k->restarts++;
            k->stats->restarts[KMGR_RESTART_AUTO]++;
            log_warn("kernel=%s: %s; restarting (%d/%d)", k->id, why, k->restarts,
                     k->m->o.max_restarts);
            k->state = KERNEL_RESTARTING;
            emit(k, KERNEL_EV_RESTARTING, why);
            kernel__launch(k);
            return;
        }
        set_dead(k, why, klaunch__start_fail(death));
        return;
    default:
        return;
    }
}

/* A new process (launched, or a fork adopted): nothing proven, missed or asked of it yet. */
static void began(kernel_t *k)
{
    k->got_reply = k->got_iopub = k->got_starting = false;
    kwatchdog__reset(k);
    k->exit_status = 0;
    k->hb_killed = false;
    k->stop_stage = 0;
    k->stop_end = NULL;
}

/* Starts the kernel's process (klaunch.c) and watches it: its end, the start's proofs and
 * deadline. A failure sets the kernel dead. */
void kernel__launch(kernel_t *k)
{
    evl_t *l = k->m->evl;
    char why[400];
    int r;
    if (k->adopted || k->ipc_dir) { /* a fork restarted: a fresh kernel, on its own endpoints */
        k->adopted = false;
        kernel__drop_ipc_dir(k);
        if ((r = kernel__rewatch(k)) < 0) {
            snprintf(why, sizeof(why), "cannot open the kernel's sockets: %s", strerror(-r));
            set_dead(k, why, KMGR_FAIL_SPAWN);
            return;
        }
    }
    if (klaunch__start(k, why, sizeof(why)) < 0) {
        set_dead(k, why, KMGR_FAIL_SPAWN);
        return;
    }
    began(k);
    if (k->pidfd >= 0)
        k->pid_io = l->io_add(l, k->pidfd, on_exit_io, k);
    nudge(k);
    l->timer_arm(l, k->deadline, (uint64_t)k->m->o.start_timeout_ms);
}

const char *kernel_forked_from(const kernel_t *k)
{
    return k->fork_of;
}

bool kernel_fork_no_checkpoint(const kernel_t *k)
{
    return k->fork_unknown_cp;
}

bool kernel_fork_parent_gone(const kernel_t *k)
{
    return k->fork_parent_gone;
}

int kernel__rewatch(kernel_t *k)
{
    kz_close(&k->shell);
    kz_close(&k->control);
    kz_close(&k->iopub);
    kz_close(&k->hb);
    return open_watch_sockets(k);
}

void kernel__drop_ipc_dir(kernel_t *k)
{
    char p[PATH_MAX + 32];
    if (!k->ipc_dir)
        return;
    for (int port = KPORT_SHELL; port <= KPORT_HB; port++) {
        snprintf(p, sizeof(p), "%s/k-%d", k->ipc_dir, port);
        unlink(p);
    }
    snprintf(p, sizeof(p), "%s/connection.json", k->ipc_dir);
    unlink(p);
    rmdir(k->ipc_dir); /* fails if the fork made files of its own there: they go with its parent */
    free(k->ipc_dir);
    k->ipc_dir = NULL;
}

void kernel__adopt(kernel_t *k, pid_t pid, int pidfd)
{
    evl_t *l = k->m->evl;
    k->adopted = true;
    k->pid = pid;
    k->pidfd = pidfd;
    k->spawn_us = util_now_us();
    began(k);
    if (!(k->pid_io = l->io_add(l, k->pidfd, on_exit_io, k)))
        log_warn("kernel=%s: cannot watch its process: %s", k->id, strerror(errno));
    nudge(k);
    l->timer_arm(l, k->deadline, (uint64_t)k->m->o.start_timeout_ms);
}

void kernel__resume(kernel_t *k, pid_t pid, int pidfd)
{
    evl_t *l = k->m->evl;
    k->pid = pid;
    k->pidfd = pidfd;
    k->spawn_us = util_now_us();
    began(k);
    if (!(k->pid_io = l->io_add(l, k->pidfd, on_exit_io, k)))
        log_warn("kernel=%s: cannot watch its process: %s", k->id, strerror(errno));
    nudge(k);
    l->timer_arm(l, k->deadline, (uint64_t)k->m->o.start_timeout_ms);
}

void kernel__adopt_failed(kernel_t *k, const char *why)
{
    snprintf(k->last_cause, sizeof(k->last_cause), "%s", why);
    set_dead(k, why, KMGR_FAIL_SPAWN);
}

void kernel__check_exit(kernel_t *k)
{
    if (k->pid > 0)
        on_exit_io(k);
}

static void stop_process(kernel_t *k, bool restart)
{
    if (k->pid <= 0)
        return;
    if (k->stop_stage > 0) /* being stopped already (a restart's stop, now a shutdown) */
        return;
    if (!start_proven(k)) {
        /* still starting: it has run no client code and may not read its control socket for
         * seconds yet (a cold start under load takes longer than the grace), so a
         * shutdown_request would only wait for its start, or be lost with a process that
         * never got that far. Nothing to flush: end it now. */
        log_debug("kernel=%s: stopped while starting; ending the process", k->id);
        k->stop_msg_id[0] = '\0';
        k->stop_stage = 1;
        k->stop_end = "ended while starting";
        k->stop_us = util_now_us();
        k->m->evl->timer_disarm(k->m->evl, k->nudge);
        k->m->evl->timer_arm(k->m->evl, k->deadline, (uint64_t)k->m->o.shutdown_grace_ms);
        klaunch__signal(k, SIGKILL);
        return;
    }
    kzsock_t *control = own_control(k);
    if (!control || kwire__send_own_id(k, control, "shutdown_request",
                                       restart ? "{\"restart\":true}" : "{\"restart\":false}",
                                       k->stop_msg_id) < 0)
        k->stop_msg_id[0] = '\0';
    k->stop_stage = 1;
    k->stop_end = NULL;
    k->stop_us = util_now_us();
    k->m->evl->timer_arm(k->m->evl, k->deadline, (uint64_t)k->m->o.shutdown_grace_ms);
}

/* Restarts the process (no event, no statistics). 0 or -EBUSY. */
static int restart_process(kernel_t *k)
{
    if (k->state == KERNEL_TERMINATING || k->state == KERNEL_RESTARTING)
        return -EBUSY;
    k->req_us = 0; /* a client's start in progress is neither ready nor failed: superseded */
    k->restarts = 0;
    if (k->state == KERNEL_DEAD || k->pid <= 0) {
        k->m->evl->timer_disarm(k->m->evl, k->linger);
        k->state = KERNEL_RESTARTING;
        kernel__launch(k);
        return 0;
    }
    k->state = KERNEL_RESTARTING;
    stop_process(k, true);
    return 0;
}

/* ---- pause and resume ---- */

bool kernel_paused(const kernel_t *k)
{
    return k->paused;
}

/* Freezes (on) or thaws its processes: its cgroup's, or (none: unsandboxed) its process
 * group's. 0 or -errno. */
static int freeze(kernel_t *k, bool on)
{
    if (k->cgroup && k->cgroup_used)
        return sbx_cgroup_freeze(k->cgroup, on);
    klaunch__signal(k, on ? SIGSTOP : SIGCONT);
    return 0;
}

/* Whether forks of k live in its sandbox (their endpoints are under its runtime directory). */
static bool has_forks(const kernel_t *k)
{
    size_t len = k->dir ? strlen(k->dir) : 0;
    for (size_t i = 0; len && i < k->m->n; i++)
        if (k->m->v[i]->ipc_dir && !strncmp(k->m->v[i]->ipc_dir, k->dir, len) &&
            k->m->v[i]->ipc_dir[len] == '/')
            return true;
    return false;
}

int kernel_pause(kernel_t *k)
{
    int r;
    if (k->paused)
        return -EALREADY;
    if (k->state != KERNEL_RUNNING || k->stop_stage > 0 || k->pid <= 0)
        return -EBUSY;
    if (k->adopted || k->ipc_dir || has_forks(k))
        return -ENOTSUP;
    uint64_t t0 = util_now_us();
    if ((r = freeze(k, true)) < 0) {
        log_warn("kernel=%s: cannot pause: %s", k->id, strerror(-r));
        freeze(k, false); /* what a partial freeze stopped */
        return r;
    }
    k->paused = true;
    k->paused_us = t0;
    kwatchdog__reset(k); /* a ping in flight is not a miss */
    kexec__pause(k, true);
    log_info("kernel=%s: paused (%.1f ms)", k->id, (double)(util_now_us() - t0) / 1000.0);
    return 0;
}

/* Thaws k if paused. why: for its stop (a shutdown or restart: its process must read its
 * shutdown_request), which goes on whatever the thaw says; NULL: a client's resume, which a
 * failed thaw leaves paused. 0 or -errno. */
static int thaw(kernel_t *k, const char *why)
{
    if (!k->paused)
        return 0;
    int r = freeze(k, false);
    if (r < 0) {
        log_warn("kernel=%s: cannot resume it%s%s: %s", k->id, why ? " for its " : "",
                 why ? why : "", strerror(-r));
        if (!why)
            return r;
    }
    k->paused = false;
    kwatchdog__reset(k);
    kexec__pause(k, false);
    log_info("kernel=%s: resumed%s%s after %.1f s paused", k->id, why ? " for its " : "",
             why ? why : "", (double)(util_now_us() - k->paused_us) / 1e6);
    return 0;
}

int kernel_resume(kernel_t *k)
{
    if (!k->paused)
        return k->state == KERNEL_RUNNING ? -EALREADY : -EBUSY;
    int r = thaw(k, NULL);
    if (r == 0)
        kernel_touch(k); /* its idle time counts from now */
    return r;
}

int kernel_restart(kernel_t *k)
{
    if (k->state == KERNEL_TERMINATING || k->state == KERNEL_RESTARTING)
        return -EBUSY;
    thaw(k, "restart");
    kexec__stop_why(k, KERNEL_OUT_RESTARTED, "the kernel was restarted by a client");
    kernel_fail_pending(k, k->stop_outcome, k->stop_cause);
    int r = restart_process(k);
    if (r == 0) {
        k->stats->restarts[KMGR_RESTART_REQUESTED]++;
        emit(k, KERNEL_EV_RESTART, NULL);
    }
    return r;
}

int kernel_shutdown(kernel_t *k, const char *cause)
{
    if (k->state == KERNEL_TERMINATING)
        return -EALREADY;
    thaw(k, "shutdown"); /* it answers its shutdown_request, or ends at its signal */
    k->req_us = 0; /* a client's start in progress: cancelled, neither ready nor failed */
    k->state = KERNEL_TERMINATING;
    kexec__stop_why(k, KERNEL_OUT_SHUTDOWN, "%s", cause ? cause : "the kernel was shut down");
    /* requests in flight are answered now, not when the process has ended (its grace) */
    kernel_fail_pending(k, k->stop_outcome, k->stop_cause);
    complete(k, -ECANCELED); /* a pending start or restart will not finish */
    if (k->pid <= 0) {
        /* nothing to wait for: finish on the next turn, outside the caller's stack */
        k->m->evl->timer_arm(k->m->evl, k->linger, 0);
        return 0;
    }
    stop_process(k, false);
    return 0;
}

int kernel_call_reply(kernel_t *k, uint64_t call_id, json_t *value, const char *err_type,
                      const char *err_message)
{
    return kcall__reply(k->calls, call_id, value, err_type, err_message);
}

int kernel_interrupt(kernel_t *k)
{
    if (k->state != KERNEL_RUNNING)
        return -EAGAIN;
    if (k->paused) /* the signal would wait for its resume */
        return -EHOSTDOWN;
    if (kernel_executions(k) == 0 && kckpt__in_flight(k)) {
        /* no client's execution runs: the interrupt would only cut the gateway's own checkpoint
         * request short (its install's silent execution, or ipykernel's handling around it),
         * which would then go unanswered */
        log_info("kernel=%s: interrupt not sent: no execution runs, only the gateway's "
                 "checkpoint request",
                 k->id);
        return 0;
    }
    if (k->spec->interrupt_message) {
        kzsock_t *control = own_control(k);
        return control ? kwire__send_own(k, control, "interrupt_request", "{}") : -ENOTCONN;
    }
    klaunch__signal(k, SIGINT);
    return 0;
}

static void on_linger(void *data)
{
    kernel_t *k = data;
    if (k->state == KERNEL_DEAD)
        log_info("kernel=%s: removing dead kernel", k->id);
    k->state = KERNEL_TERMINATING;
    complete_now(k, 0);
    emit(k, KERNEL_EV_GONE, NULL);
    k->own->gone(k); /* frees k */
}

static void exec_changed(kernel_t *k)
{
    kcall__exec_changed(k->calls);
}

/* What the execution watch (kexec.c) asks of the kernel, and tells it. */
static const struct kexec_ops exec_ops = {
    .interrupt = kernel_interrupt,
    .restart = restart_process,
    .changed = exec_changed,
};

/* A message over --max-kernel-message-bytes reset one of the gateway's own sockets. */
static void on_oversize(void *data, kzsock_t *z)
{
    kernel_t *k = data;
    kexec__oversize(k, z == &k->iopub   ? "iopub"
                       : z == &k->shell ? "shell"
                       : z == &k->hb    ? "heartbeat"
                                        : "control");
}

/* The kernel's timers and its manager sockets (SUB on iopub, DEALER on the heartbeat; shell's
 * and control's are opened when needed); closed by kernel__unwatch. 0 or -errno. */
int kernel__watch(kernel_t *k)
{
    evl_t *l = k->m->evl;
    int r;
    k->exec_ops = &exec_ops;
    if ((r = kout__new(k)) < 0 || (r = kwatchdog__new(k)) < 0)
        return r;
    if (!(k->nudge = l->timer_new(l, nudge, k)) ||
        !(k->deadline = l->timer_new(l, kwatchdog__on_deadline, k)) ||
        !(k->linger = l->timer_new(l, on_linger, k)) ||
        !(k->fire = l->timer_new(l, on_fire, k)))
        return errno ? -errno : -ENOMEM;
    return open_watch_sockets(k);
}

/* The manager's SUB on iopub and DEALER on the heartbeat. 0 or -errno. */
static int open_watch_sockets(kernel_t *k)
{
    char ep[PATH_MAX + 16];
    evl_t *l = k->m->evl;
    void *zctx = k->m->zctx;
    int r;
    long long max = k->m->o.max_kernel_msg;
    kwire__endpoint(k, KPORT_IOPUB, ep, sizeof(ep));
    if ((r = kz_open(&k->iopub, l, zctx, ZMQ_SUB, NULL, ep, on_iopub, k, max, on_oversize)) < 0)
        return r;
    /* the control socket: opened when needed (own_control) */
    kwire__endpoint(k, KPORT_HB, ep, sizeof(ep));
    return kz_open(&k->hb, l, zctx, ZMQ_DEALER, NULL, ep, kwatchdog__on_hb, k, max,
                   on_oversize);
}

void kernel__unwatch(kernel_t *k)
{
    evl_t *l = k->m->evl;
    kz_close(&k->iopub);
    kz_close(&k->shell);
    kz_close(&k->control);
    kz_close(&k->hb);
    evl_timer_destroy(l, &k->nudge);
    evl_timer_destroy(l, &k->deadline);
    evl_timer_destroy(l, &k->linger);
    evl_timer_destroy(l, &k->fire);
    kout__free(k); /* buffers still charged to its share hold references */
    kwatchdog__free(k);
}
