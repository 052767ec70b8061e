#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "kernelmgr/private.h"
#include "sandbox/sbx.h"
#include "sandbox/spawn.h"

#define NUDGE_RETRY_MS 2000 /* resend kernel_info_request if a start seems stuck */
#define NUDGE_IOPUB_MS 20   /* resend when the reply came but no iopub message yet */
#define TERM_KILL_MS 1000 /* SIGTERM -> SIGKILL */
#define EXEC_INTERRUPT_GRACE_MS 5000 /* after a wall-time interrupt, before restarting */

static void start_process(kernel_t *k);
static void on_exit_io(void *data);
static void env_send(kernel_t *k);
static void setup_end(kernel_t *k);
static int restart(kernel_t *k);

static void emit(kernel_t *k, enum kernel_event ev, const char *detail)
{
    kmgr__emit(k->m, k, ev, detail);
}

void kernel__check_exit(kernel_t *k)
{
    if (k->pid > 0)
        on_exit_io(k);
}

const char *kernel_id(const kernel_t *k)
{
    return k->id;
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

void kernel_connections(kernel_t *k, int delta)
{
    k->connections += delta;
    if (k->connections < 0)
        k->connections = 0;
}

json_t *kernel_model(const kernel_t *k)
{
    char ts[40];
    const char *st = k->exec_state;
    util_iso_time(ts, sizeof(ts), k->last_activity_us);
    switch (k->state) {
    case KERNEL_STARTING:
        st = "starting";
        break;
    case KERNEL_RESTARTING:
        st = "restarting";
        break;
    case KERNEL_DEAD:
        st = "dead";
        break;
    default:
        break;
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:i, s:s}", "id", k->id, "name", k->spec->name,
                     "last_activity", ts, "execution_state", st, "connections", k->connections,
                     "workspace", k->ws->id);
}

struct wspace *kernel_workspace(const kernel_t *k)
{
    return k->ws;
}

void kernel__endpoint(const kernel_t *k, int port, char *out, size_t outsz)
{
    snprintf(out, outsz, "ipc://%s/k-%d", k->dir, port);
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

static void complete(kernel_t *k, int status)
{
    struct list todo; /* these; a waiter added meanwhile waits for the next completion */
    list_move(&todo, &k->waiters);
    while (!list_empty(&todo)) {
        kwait_t *w = list_first(&todo, kwait_t, link);
        list_remove(&w->link);
        w->cb(w->data, k, status);
        free(w);
    }
}

/* ---- messages from the kernel ---- */

int kernel__parse(kernel_t *k, zmq_msg_t *frames, size_t n, jmsg_t *m, jhdr_t *h)
{
    jspan_t spans[KZ_MAX_FRAMES];
    for (size_t i = 0; i < n; i++)
        spans[i] = (jspan_t){zmq_msg_data(&frames[i]), zmq_msg_size(&frames[i])};
    if (jmsg_parse_frames(spans, n, m) < 0)
        return -EBADMSG;
    if (!jsign_verify(k->sign, m->part, m->sig)) {
        log_warn("kernel=%s: message with a bad signature dropped", k->id);
        return -EBADMSG;
    }
    if (jhdr_parse(m->part[JPART_HEADER], h) < 0)
        return -EBADMSG;
    return 0;
}

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
        kmgr__emit_notice(k->m, k, (jspan_t){k->exec_parent, strlen(k->exec_parent)}, text);
}

/* The audit event of an execution that ended (idle, or the kernel was restarted). */
static void exec_audit(kernel_t *k, const char *status)
{
    if (!k->exec_id[0] || !audit_enabled())
        return;
    double ms = (double)(util_now_us() - k->exec_start_us) / 1000.0;
    /* the hosts its egress proxy let it reach meanwhile (null: no egress policy) */
    json_t *hosts = !k->egpol ? json_null() : k->egress ? kegress_hosts_take(k->egress)
                                                        : json_array();
    audit_event("execution", "s:s, s:s, s:o, s:s, s:f, s:s, s:o", "tenant", k->ws->tenant,
                "kernel",
                k->id, "msg_id", audit_str(k->exec_id, strlen(k->exec_id)), "code_sha256",
                k->exec_sha, "duration_ms", ms, "status",
                status            ? status
                : k->exec_stage   ? "timeout" /* interrupted for its wall time */
                : k->exec_error   ? "error"
                                  : "ok",
                "egress_hosts", hosts ? hosts : json_null());
}

/* The execution in progress, if any, is over (how: its status in the statistics; the gateway's
 * own execution of a pooled kernel's environment is not counted). */
static void exec_end(kernel_t *k, enum kmgr_exec how)
{
    if (k->exec_id[0] && strcmp(k->exec_id, k->env_id) != 0) {
        k->m->stats.executions[how]++;
        hist_observe(&k->m->stats.exec_seconds,
                     (double)(util_now_us() - k->exec_start_us) / 1e6);
    }
    k->m->evl->timer_disarm(k->m->evl, k->exec_timer);
    if (k->exec_id[0])
        memcpy(k->exec_last, k->exec_id, sizeof(k->exec_last));
    k->exec_id[0] = '\0';
    free(k->exec_parent);
    k->exec_parent = NULL;
    k->exec_bytes = 0;
    k->exec_capped = false;
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
    kexec__end(k, k->exec_id, o, cause, util_now_us() - k->exec_start_us);
}

static void exec_begin(kernel_t *k, const char *msg_id, jspan_t parent)
{
    exec_end(k, KMGR_EXEC_ABORTED); /* its idle never came */
    snprintf(k->exec_id, sizeof(k->exec_id), "%s", msg_id);
    k->exec_parent = strndup(parent.p, parent.n);
    k->exec_start_us = util_now_us();
    kexec__usage_begin(k);
    if (k->egress) /* what came before is not this execution's */
        json_decref(kegress_hosts_take(k->egress));
    if (k->exec_timeout_ms > 0)
        k->m->evl->timer_arm(k->m->evl, k->exec_timer, (uint64_t)k->exec_timeout_ms);
}

/* Wall time per execution: interrupt first; a kernel that ignores SIGINT is restarted. */
static void on_exec_timer(void *data)
{
    kernel_t *k = data;
    if (!k->exec_id[0] || k->state != KERNEL_RUNNING)
        return;
    if (k->exec_stage == 0) {
        notice(k, "execution exceeded the wall-time limit of %d s: interrupting it",
               k->exec_timeout_ms / 1000);
        kernel_interrupt(k);
        k->exec_stage = 1;
        k->m->evl->timer_arm(k->m->evl, k->exec_timer, EXEC_INTERRUPT_GRACE_MS);
        return;
    }
    notice(k, "the kernel ignored the interrupt: restarting it");
    exec_audit(k, "timeout");
    kernel__stop_why(k, KERNEL_OUT_TIMEOUT,
                     "the execution exceeded its wall-time limit of %d s and ignored the "
                     "interrupt: the kernel was restarted",
                     k->exec_timeout_ms / 1000);
    kernel_fail_pending(k, k->stop_outcome, k->stop_cause);
    if (restart(k) == 0) {
        k->m->stats.restarts[KMGR_RESTART_AUTO]++;
        emit(k, KERNEL_EV_RESTARTING, "execution wall-time limit");
    }
}

void kernel__exec_sent(kernel_t *k, const char *msg_id)
{
    if (k->nsent == KERNEL_SENT_MAX) {
        log_debug("kernel=%s: %d execute_requests in flight; not tracking more", k->id,
                  KERNEL_SENT_MAX);
        return;
    }
    snprintf(k->sent_exec[k->nsent++], sizeof(k->sent_exec[0]), "%s", msg_id);
}

static void sent_forget(kernel_t *k, const char *msg_id)
{
    for (size_t i = 0; i < k->nsent; i++)
        if (!strcmp(k->sent_exec[i], msg_id)) {
            k->nsent--;
            if (i < k->nsent)
                memcpy(k->sent_exec[i], k->sent_exec[k->nsent], sizeof(k->sent_exec[0]));
            return;
        }
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

static void update_exec_state(kernel_t *k, const jmsg_t *m)
{
    json_error_t err;
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
                exec_audit(k, NULL);
                exec_outcome(k);
                exec_end(k, k->exec_stage   ? KMGR_EXEC_TIMEOUT
                            : k->exec_error ? KMGR_EXEC_ERROR
                                            : KMGR_EXEC_OK);
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

/* Whether the execution in progress failed (error), for the statistics and the audit log, and
 * its code (execute_input), for the audit log. */
static void track_exec(kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    jhdr_t ph;
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

/* Output per execution: beyond the cap, output messages of that execution are dropped, once
 * with a notice. The gateway's memory stays bounded whatever the kernel prints. */
static bool over_output_cap(kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    if (k->output_cap <= 0 || !k->exec_id[0])
        return false;
    if (strcmp(h->msg_type, "stream") && strcmp(h->msg_type, "display_data") &&
        strcmp(h->msg_type, "update_display_data") && strcmp(h->msg_type, "execute_result"))
        return false;
    if (!memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, k->exec_id,
                strlen(k->exec_id)))
        return false;
    long long n = (long long)m->part[JPART_CONTENT].n;
    for (size_t i = 0; i < m->nbuf; i++)
        n += (long long)m->buf[i].n;
    k->exec_bytes += n;
    if (k->exec_bytes <= k->output_cap)
        return false;
    if (!k->exec_capped) {
        k->exec_capped = true;
        notice(k, "output limit of %lld bytes for this execution reached: further output is "
                  "discarded",
               k->output_cap);
    }
    return true;
}

/* A client's start is over: ready, counted by how it started and how long it took... */
static void start_ok(kernel_t *k)
{
    if (!k->req_us)
        return;
    enum kmgr_start_path p = k->req_pool ? KMGR_START_POOL
                             : k->forked ? KMGR_START_FORK
                                         : KMGR_START_EXEC;
    k->m->stats.starts[p]++;
    hist_observe(&k->m->stats.start_seconds[p], (double)(util_now_us() - k->req_us) / 1e6);
    k->req_us = 0;
}

/* ... or failed, counted by why. */
static void start_failed(kernel_t *k, enum kmgr_start_fail why)
{
    if (!k->req_us)
        return;
    k->m->stats.start_failures[why]++;
    k->req_us = 0;
}

void kernel__start_begin(kernel_t *k, uint64_t since_us, bool pooled)
{
    k->req_us = since_us ? since_us : 1;
    k->req_pool = pooled;
    if (k->state == KERNEL_RUNNING)
        start_ok(k);
}

void kernel__count_msg(kernel_t *k, enum kmgr_dir dir, const jmsg_t *m)
{
    size_t n = 0;
    for (size_t i = 0; i <= JPART_CONTENT; i++) /* header, parent, metadata, content */
        n += m->part[i].n;
    for (size_t i = 0; i < m->nbuf; i++)
        n += m->buf[i].n;
    k->m->stats.messages[dir]++;
    k->m->stats.message_bytes[dir] += n;
}

/* Starting -> running: the start (or the hand-out of a pooled kernel) is complete. */
static void set_running(kernel_t *k)
{
    evl_t *l = k->m->evl;
    if (k->m->o.hb_interval_ms > 0)
        l->timer_arm(l, k->hb_timer, (uint64_t)k->m->o.hb_interval_ms);
    l->timer_disarm(l, k->nudge);
    l->timer_disarm(l, k->deadline);
    k->state = KERNEL_RUNNING;
    kzygote__take_back(k->m, k); /* its proxy has moved in long ago */
    snprintf(k->exec_state, sizeof(k->exec_state), "idle");
    start_ok(k);
    emit(k, KERNEL_EV_STARTED, NULL);
    complete(k, 0);
    kpool__kick(k->m); /* one start fewer in flight */
}

/* A start is complete once the kernel has shown it reads its shell socket (it answered the
 * gateway's kernel_info_request, or published its "starting" status, which ipykernel does once
 * its handlers are in place) and an iopub message proves the gateway's subscription is live. */
static bool start_proven(const kernel_t *k)
{
    return k->got_iopub && (k->got_reply || k->got_starting);
}

/* The kernel's egress proxy, listening inside its network namespace: from the moment its
 * process is ready, before any client code runs in it. Without it the kernel has no network,
 * as without a policy. */
static void egress_start(kernel_t *k)
{
    int fd, r;
    if (!k->egpol || k->egress)
        return;
    if ((r = sbx_listen_in(k->pid, k->pidfd, KEGRESS_PORT, &fd)) < 0) {
        log_warn("kernel=%s: no egress proxy: cannot listen in its network namespace: %s", k->id,
                 strerror(-r));
        return;
    }
    k->egress = kegress_new(k->m->evl, fd, k->egpol, &k->m->o.egress, &k->m->stats.egress,
                            k->ws->tenant, k->id);
    if (!k->egress)
        log_warn("kernel=%s: no egress proxy: %s", k->id, strerror(errno));
}

static void check_ready(kernel_t *k)
{
    if (k->state != KERNEL_STARTING && k->state != KERNEL_RESTARTING)
        return;
    k->m->evl->timer_disarm(k->m->evl, k->nudge);
    setup_end(k);
    if (k->env_code && k->state == KERNEL_STARTING) {
        env_send(k); /* a pooled kernel handed out while it was starting */
        return;
    }
    egress_start(k);
    log_info("kernel=%s: ready (pid %d, %s, %.0f ms)%s", k->id, (int)k->pid,
             k->forked ? "forked" : "exec", (double)(util_now_us() - k->spawn_us) / 1000.0,
             k->pool ? " in the pool" : "");
    set_running(k);
    if (k->pool)
        kpool__ready(k->m, k);
}

/* ---- the request's environment, for a kernel taken from the warm pool ----
 *
 * A pooled kernel was started before its request existed, so the request's KERNEL_*
 * variables are set in its os.environ by one execution that leaves no trace a client can see:
 * silent (no execute_input, no result, execution_count unchanged), store_history false (not
 * in In/Out or the history database), names bound only inside an expression, and the kernel
 * is handed out only after that execution's status "idle", so no client ever receives one of
 * its messages. The variables reach os.environ and so every subprocess; the kernel process's
 * initial environment (/proc/self/environ) does not have them. If the execution fails, the
 * kernel is restarted cold with the variables in its environment. */

static char *env_code_new(json_t *req_env)
{
    static const char pre[] = "__import__('os').environ.update(__import__('json').loads("
                              "bytes.fromhex('";
    static const char post[] = "')))";
    const char *key;
    json_t *v, *vars = json_object();
    char *code = NULL;
    errno = ENOMEM;
    if (!vars)
        return NULL;
    json_object_foreach(req_env, key, v) if (json_is_string(v) && !strncmp(key, "KERNEL_", 7))
        json_object_set_new(vars, key, json_string(json_string_value(v)));
    if (json_object_size(vars) == 0) {
        json_decref(vars);
        errno = 0;
        return NULL;
    }
    char *js = json_dumps(vars, JSON_COMPACT);
    json_decref(vars);
    errno = ENOMEM;
    if (!js)
        return NULL;
    size_t n = strlen(js);
    code = malloc(sizeof(pre) + 2 * n + sizeof(post));
    if (code) {
        char *o = stpcpy(code, pre);
        for (size_t i = 0; i < n; i++)
            o += sprintf(o, "%02x", (unsigned char)js[i]);
        strcpy(o, post);
    }
    free(js);
    return code;
}

/* Never hand out a kernel without its environment: start it again, cold, with the variables
 * in its process environment (k->envp has them). */
static void env_fail(kernel_t *k, const char *why)
{
    log_warn("kernel=%s: cannot apply the request's environment (%s); restarting it cold",
             k->id, why);
    free(k->env_code);
    k->env_code = NULL;
    k->req_pool = false; /* the client's start goes the cold way now */
    k->state = KERNEL_RESTARTING;
    k->stop_stage = 1; /* on exit: start again */
    kernel__signal(k, SIGKILL);
}

static void env_send(kernel_t *k)
{
    json_t *c = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", k->env_code, "silent", 1,
                          "store_history", 0, "user_expressions", "allow_stdin", 0,
                          "stop_on_error", 0);
    char *content = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    k->env_replied = k->env_idle = false;
    int r = content ? kernel__send_own_id(k, &k->shell, "execute_request", content, k->env_id)
                    : -ENOMEM;
    free(content);
    if (r < 0) {
        env_fail(k, strerror(-r));
        return;
    }
    k->m->evl->timer_arm(k->m->evl, k->deadline, (uint64_t)k->m->o.start_timeout_ms);
}

static void env_step(kernel_t *k, bool replied_ok, bool replied_err, bool idle)
{
    if (!k->env_code || k->state != KERNEL_STARTING)
        return;
    if (replied_err) {
        env_fail(k, "the execution failed");
        return;
    }
    k->env_replied |= replied_ok;
    k->env_idle |= idle;
    if (!k->env_replied || !k->env_idle)
        return;
    free(k->env_code);
    k->env_code = NULL;
    log_info("kernel=%s: ready (pid %d, from the pool, environment applied)", k->id,
             (int)k->pid);
    set_running(k);
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

/* Messages of that execution are the gateway's own: no client sees them. */
static bool env_parent(const kernel_t *k, const jmsg_t *m)
{
    return k->env_id[0] &&
           memmem(m->part[JPART_PARENT].p, m->part[JPART_PARENT].n, k->env_id,
                  strlen(k->env_id)) != NULL;
}

static void on_iopub(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    kernel_t *k = data;
    jmsg_t m;
    jhdr_t h;
    if (kernel__parse(k, frames, n, &m, &h) < 0) {
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
    if (!strcmp(h.msg_type, "status"))
        update_exec_state(k, &m);
    else
        track_exec(k, &m, &h);
    if (!proven && start_proven(k))
        check_ready(k);
    if (env_parent(k, &m)) {
        if (!strcmp(h.msg_type, "status") &&
            memmem(m.part[JPART_CONTENT].p, m.part[JPART_CONTENT].n, "\"idle\"", 6))
            env_step(k, false, false, true);
        return;
    }
    if (over_output_cap(k, &m, &h))
        return;
    if (!k->pool) {
        kernel__count_msg(k, KMGR_TO_CLIENT, &m);
        kmgr__emit_iopub(k->m, k, &m, &h);
    }
}

static void on_own_reply(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    kernel_t *k = data;
    jmsg_t m;
    jhdr_t h;
    if (kernel__parse(k, frames, n, &m, &h) < 0)
        return;
    if (!strcmp(h.msg_type, "execute_reply") && env_parent(k, &m)) {
        json_t *c = json_loadb(m.part[JPART_CONTENT].p, m.part[JPART_CONTENT].n, 0, NULL);
        const char *st = json_string_value(json_object_get(c, "status"));
        bool ok = st && !strcmp(st, "ok");
        json_decref(c);
        env_step(k, ok, !ok, false);
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

static void on_hb(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    kernel_t *k = data;
    k->hb_outstanding = false;
    k->hb_missed = 0;
}

int kernel__send_own(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content)
{
    char msg_id[40];
    return kernel__send_own_id(k, z, msg_type, content, msg_id);
}

int kernel__send_own_id(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content,
                        char ret_msg_id[40])
{
    char msg_id[40];
    char *hdr = jmsg_new_header(msg_type, k->session, msg_id);
    if (!hdr)
        return -ENOMEM;
    jmsg_t m = {.nbuf = 0};
    m.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
    m.part[JPART_PARENT] = (jspan_t){"{}", 2};
    m.part[JPART_METADATA] = (jspan_t){"{}", 2};
    m.part[JPART_CONTENT] = (jspan_t){content, strlen(content)};
    int r = kz_send_jmsg(z, k->sign, &m);
    free(hdr);
    if (r >= 0)
        memcpy(ret_msg_id, msg_id, sizeof(msg_id));
    return r;
}

/* ---- timers ---- */

static void on_nudge(void *data)
{
    kernel_t *k = data;
    /* ZeroMQ SUB sockets join late: the kernel counts as started only once an iopub message
     * proves the subscription is live, so no client misses the first messages of a request.
     * The request waits in the DEALER's queue until the kernel binds its socket. */
    kernel__send_own(k, &k->shell, "kernel_info_request", "{}");
    k->probing = true;
    k->m->evl->timer_arm(k->m->evl, k->nudge, NUDGE_RETRY_MS);
}

void kernel__signal(kernel_t *k, int sig)
{
    /* pid 1 would make kill(-1) signal every process we may signal: never */
    if (k->pid <= 1)
        return;
    if (kill(-k->pid, sig) < 0 && errno == ESRCH)
        kill(k->pid, sig);
}

static void on_deadline(void *data)
{
    kernel_t *k = data;
    switch (k->stop_stage) {
    case 0: /* started but never answered */
        if (k->state == KERNEL_STARTING || k->state == KERNEL_RESTARTING) {
            log_warn("kernel=%s: no kernel_info_reply within %d ms; killing it", k->id,
                     k->m->o.start_timeout_ms);
            k->exit_status = -ETIMEDOUT;
            kernel__signal(k, SIGKILL);
        }
        break;
    case 1: /* shutdown_request was ignored */
        log_debug("kernel=%s: still running after shutdown_request; SIGTERM", k->id);
        kernel__signal(k, SIGTERM);
        k->stop_stage = 2;
        k->m->evl->timer_arm(k->m->evl, k->deadline, TERM_KILL_MS);
        break;
    default:
        log_debug("kernel=%s: still running after SIGTERM; SIGKILL", k->id);
        kernel__signal(k, SIGKILL);
        break;
    }
}

static void on_hb_timer(void *data)
{
    kernel_t *k = data;
    if (k->state != KERNEL_RUNNING)
        return;
    if (k->hb_outstanding && ++k->hb_missed >= k->m->o.hb_misses) {
        log_warn("kernel=%s: %d heartbeats missed; treating it as hung", k->id, k->hb_missed);
        k->exit_status = -ETIMEDOUT;
        k->hb_killed = true;
        kernel__signal(k, SIGKILL);
        return;
    }
    jspan_t ping = {"ping", 4};
    kz_send(&k->hb, &ping, 1);
    k->hb_outstanding = true;
    k->m->evl->timer_arm(k->m->evl, k->hb_timer, (uint64_t)k->m->o.hb_interval_ms);
}

/* ---- process ---- */

static char **build_env(const kernel_t *k, json_t *req_env)
{
    const kspec_t *spec = k->spec;
    bool sandboxed = k->m->o.sandbox != NULL;
    json_t *env = json_object();
    const char *home = sandboxed ? SBX_HOME : getenv("HOME");
    const char *pypath = !k->m->pydir[0] ? NULL : sandboxed ? SBX_PYTHON_PATH : k->m->pydir;
    const char *key;
    json_t *v;
    if (!env)
        return NULL;
    json_object_set_new(env, "PATH",
                        json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
    json_object_set_new(env, "LANG", json_string("C.UTF-8"));
    if (home)
        json_object_set_new(env, "HOME", json_string(home));
    /* kgw_tools; sandboxed kernels find the callback socket at its default path */
    if (pypath)
        json_object_set_new(env, "PYTHONPATH", json_string(pypath));
    if (!sandboxed) {
        char cb[PATH_MAX + 16];
        snprintf(cb, sizeof(cb), "%s/%s", k->dir, KCALL_SOCKET_NAME);
        json_object_set_new(env, "KGW_CALLBACK_SOCKET", json_string(cb));
    }
    json_object_foreach(json_object_get(spec->spec, "env"), key, v) if (json_is_string(v))
    {
        if (pypath && !strcmp(key, "PYTHONPATH")) { /* the spec's entries after ours */
            char *both = NULL;
            if (asprintf(&both, "%s:%s", pypath, json_string_value(v)) >= 0)
                json_object_set_new(env, key, json_string(both));
            free(both);
            continue;
        }
        json_object_set(env, key, v);
    }
    json_object_foreach(req_env, key, v) if (json_is_string(v) && !strncmp(key, "KERNEL_", 7))
        json_object_set(env, key, v);
    if (k->egpol) { /* the kernel's egress proxy (kegress.c); nothing bypasses it */
        static const char *const proxy[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                                            "https_proxy"};
        for (size_t j = 0; j < sizeof(proxy) / sizeof(proxy[0]); j++)
            json_object_set_new(env, proxy[j], json_string(KEGRESS_URL));
        json_object_set_new(env, "NO_PROXY", json_string(""));
        json_object_set_new(env, "no_proxy", json_string(""));
    }
    size_t n = json_object_size(env), i = 0;
    char **envp = calloc(n + 1, sizeof(char *));
    json_object_foreach(env, key, v)
    {
        if (!envp || asprintf(&envp[i], "%s=%s", key, json_string_value(v)) < 0) {
            for (size_t j = 0; envp && j < i; j++)
                free(envp[j]);
            free(envp);
            json_decref(env);
            return NULL;
        }
        i++;
    }
    json_decref(env);
    return envp;
}

static int write_conn_file(kernel_t *k)
{
    char ip[PATH_MAX + 8];
    snprintf(ip, sizeof(ip), "%s/k", k->m->o.sandbox ? SBX_RUNTIME_PATH : k->dir);
    json_t *c = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s}", "shell_port",
                          KPORT_SHELL, "iopub_port", KPORT_IOPUB, "stdin_port", KPORT_STDIN,
                          "control_port", KPORT_CONTROL, "hb_port", KPORT_HB, "ip", ip, "key",
                          k->key, "transport", "ipc", "signature_scheme", "hmac-sha256",
                          "kernel_name", k->spec->name);
    if (!c)
        return -ENOMEM;
    char *s = json_dumps(c, JSON_INDENT(1));
    json_decref(c);
    if (!s)
        return -ENOMEM;
    int fd = open(k->conn_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int r = 0;
    if (fd < 0)
        r = -errno;
    else {
        size_t len = strlen(s);
        if (write(fd, s, len) != (ssize_t)len)
            r = -EIO;
        close(fd);
    }
    free(s);
    return r;
}

static char **build_argv(const kernel_t *k)
{
    json_t *a = json_object_get(k->spec->spec, "argv");
    size_t n = json_array_size(a);
    char **argv = calloc(n + 1, sizeof(char *));
    if (!argv)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!strcmp(s, "{connection_file}"))
            argv[i] = strdup(k->m->o.sandbox ? SBX_RUNTIME_PATH "/connection.json" : k->conn_file);
        else if (!strcmp(s, "{resource_dir}"))
            argv[i] = strdup(k->spec->dir);
        else
            argv[i] = strdup(s);
        if (!argv[i]) {
            for (size_t j = 0; j < i; j++)
                free(argv[j]);
            free(argv);
            return NULL;
        }
    }
    return argv;
}

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* fail: why, if a client's start was in progress. */
static void set_dead(kernel_t *k, const char *why, enum kmgr_start_fail fail)
{
    start_failed(k, fail);
    k->state = KERNEL_DEAD;
    evl_t *l = k->m->evl;
    l->timer_disarm(l, k->nudge);
    l->timer_disarm(l, k->deadline);
    l->timer_disarm(l, k->hb_timer);
    log_warn("kernel=%s: dead: %s", k->id, why);
    emit(k, KERNEL_EV_DIED, why);
    kpool__kick(k->m);
    complete(k, -ECHILD);
    if (k->m->o.dead_linger_s > 0)
        l->timer_arm(l, k->linger, (uint64_t)k->m->o.dead_linger_s * 1000);
}

struct exec_args {
    char **argv, **envp;
};

static void exec_kernel(void *data)
{
    struct exec_args *a = data;
    execve(a->argv[0], a->argv, a->envp);
}

/* The sandbox's set-up (namespaces, mounts, exec) runs while the loop goes on; its report is
 * read when the process exits (a failed step makes it exit), and is moot once the kernel
 * answers. */
static void setup_end(kernel_t *k)
{
    if (k->setup_fd >= 0)
        close(k->setup_fd);
    k->setup_fd = -1;
}

/* An exec'd kernel's proxy has its user namespace (it moved itself into its cgroup before):
 * the rest of the gateway's half of the set-up, without the loop ever waiting for it. */
static void on_let_go(void *data)
{
    kernel_t *k = data;
    char why[256];
    int r = sbx_start_continue(&k->pending, why, sizeof(why));
    if (r == -EAGAIN)
        return;
    evl_io_destroy(k->m->evl, &k->pending_io);
    if (r < 0 && why[0]) { /* the proxy was killed: this is why (on_exit_io says it) */
        snprintf(k->setup_why, sizeof(k->setup_why), "%s", why);
        setup_end(k);
    }
}

static void abandon_start(kernel_t *k)
{
    evl_io_destroy(k->m->evl, &k->pending_io);
    sbx_pending_free(&k->pending);
}

static int spawn_sandboxed(kernel_t *k, char **argv, char *why, size_t whysz)
{
    const struct kmgr_sandbox *sb = k->m->o.sandbox;
    struct exec_args a = {argv, k->envp};
    sbx_profile_t p = {
        .runtime_dir = k->dir,
        .root_dir = k->root_dir,
        .workspace_dir = k->ws->path,
        .python_dir = k->m->pydir[0] ? k->m->pydir : NULL,
        .uid = k->ws->uid,
        .root_uid = k->ws->uid - 1,
        .lim = &k->lim,
        .cgroup = k->cgroup,
        .init_fd = sb->init_fd,
        .envp = k->envp,
        .stderr_fd = -1, /* never the gateway's log: a kernel could read it back or forge lines */
    };
    if (argv[0][0] != '/') {
        snprintf(why, whysz, "kernelspec argv[0] must be an absolute path in the sandbox");
        return -EINVAL;
    }
    k->setup_why[0] = '\0';
    k->forked = false;
    int zfd = kzygote__fd(k->m, k->spec);
    if (zfd >= 0) {
        /* forkable specs are `python -m ipykernel_launcher -f {connection_file}` (kzygote.c) */
        char *payload[] = {"-f", SBX_RUNTIME_PATH "/connection.json", NULL};
        bool adopted = kzygote__adopt(k->m, k);
        int dirfds[SBX_CGROUP_MAX_DIRS];
        p.cgroup = k->cgroup;
        p.ncgroup_dirfds = adopted ? 0 : kzygote__lend(k->m, k, dirfds);
        p.cgroup_dirfds = dirfds;
        struct sbx_start_opts o = {.profile = &p, .server = zfd, .payload = payload,
                                   .timeout_ms = 2000};
        int r = sbx_start_forked(&o, &k->pid, &k->pidfd, &k->setup_fd, why, whysz);
        for (int i = 0; i < p.ncgroup_dirfds; i++)
            close(dirfds[i]);
        if (r < 0)
            kzygote__take_back(k->m, k);
        if (adopted)
            kzygote__adopted(k->m, k);
        /* the server's own trouble (no answer, gone, its proxy not re-parented): restart it */
        kzygote__forked(k->m, !(r == -ETIMEDOUT || r == -EPIPE || r == -ECONNRESET ||
                                r == -ENOTCONN || r == -ESRCH || r == -EIO));
        if (r == 0) {
            k->forked = true;
            return 0;
        }
        log_warn("kernel=%s: the fork server failed (%s); starting it with exec", k->id,
                 why[0] ? why : strerror(-r));
        why[0] = '\0';
    }
    struct sbx_start_opts o = {.profile = &p, .fn = exec_kernel, .arg = &a};
    int r = sbx_start_begin(&o, &k->pid, &k->pidfd, &k->setup_fd, &k->pending, why, whysz);
    if (r == 0 && !(k->pending_io = k->m->evl->io_add(k->m->evl, sbx_pending_fd(k->pending),
                                                        on_let_go, k))) {
        r = -errno;
        abandon_start(k);
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
        if (k->pidfd >= 0)
            close(k->pidfd);
        k->pidfd = -1;
        setup_end(k);
    }
    return r;
}

static void start_process(kernel_t *k)
{
    evl_t *l = k->m->evl;
    char why[256] = "";
    char **argv = build_argv(k);
    int r;
    /* a fresh callback socket for every process: the last one may have replaced the file */
    uid_t owner = k->m->o.sandbox ? k->ws->uid : (uid_t)-1;
    if ((r = kcall__listen(k->calls, owner)) < 0)
        log_warn("kernel=%s: no callbacks: cannot listen on %s/%s: %s", k->id, k->dir,
                 KCALL_SOCKET_NAME, strerror(-r));
    k->spawn_us = util_now_us();
    if (!argv) {
        r = -ENOMEM;
    } else if (k->m->o.sandbox) {
        r = spawn_sandboxed(k, argv, why, sizeof(why));
    } else {
        struct sbx_spawn_opts so = {.argv = argv,
                                    .envp = k->envp,
                                    .cwd = k->m->o.kernel_cwd ? k->m->o.kernel_cwd : k->ws->path,
                                    .stdout_fd = -1,
                                    .stderr_fd = 2};
        r = sbx_spawn(&so, &k->pid, &k->pidfd);
    }
    free_strv(argv);
    if (r < 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "could not start the kernel process: %s",
                 why[0] ? why : strerror(-r));
        k->pid = 0;
        set_dead(k, msg, KMGR_FAIL_SPAWN);
        return;
    }
    if (k->pidfd >= 0)
        k->pid_io = l->io_add(l, k->pidfd, on_exit_io, k);
    if (k->m->o.sandbox)
        k->cgroup_used = true;
    k->got_reply = k->got_iopub = k->got_starting = false;
    k->hb_outstanding = false;
    k->hb_missed = 0;
    k->exit_status = 0;
    k->hb_killed = false;
    k->stop_stage = 0;
    log_debug("kernel=%s: spawned pid %d", k->id, (int)k->pid);
    on_nudge(k);
    l->timer_arm(l, k->deadline, (uint64_t)k->m->o.start_timeout_ms);
}

static void describe_exit(int st, char *out, size_t outsz)
{
    if (WIFEXITED(st))
        snprintf(out, outsz, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(out, outsz, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(out, outsz, "ended (status 0x%x)", st);
}

/* Why a process ended that nobody asked to end (setup_failed: its sandbox's set-up report
 * says a step failed). Also notes the cgroup's counters, so a later death is not put down to
 * an earlier OOM kill. */
static enum kmgr_death death_cause(kernel_t *k, int st, bool setup_failed)
{
    bool oom = false, pids = false;
    if (k->cgroup) {
        struct sbx_cgroup_events ev;
        sbx_cgroup_events(k->cgroup, &ev);
        oom = ev.oom_kills > k->oom_seen;
        pids = ev.pids_max > k->pids_seen;
        k->oom_seen = ev.oom_kills;
        k->pids_seen = ev.pids_max;
    }
    if (setup_failed)
        return KMGR_DEATH_SANDBOX;
    if (k->exit_status == -ETIMEDOUT)
        return k->hb_killed ? KMGR_DEATH_HEARTBEAT : KMGR_DEATH_TIMEOUT;
    if (oom)
        return KMGR_DEATH_OOM;
    if (pids)
        return KMGR_DEATH_PIDS;
    /* a sandboxed kernel's proxy exits with 128 + the signal that ended the kernel (sbx.c) */
    if (WIFSIGNALED(st) ||
        (k->m->o.sandbox && WIFEXITED(st) && WEXITSTATUS(st) > 128 && WEXITSTATUS(st) <= 128 + 64))
        return KMGR_DEATH_SIGNAL;
    return KMGR_DEATH_EXIT;
}

static enum kmgr_start_fail start_fail_of(enum kmgr_death d)
{
    switch (d) {
    case KMGR_DEATH_SANDBOX:
        return KMGR_FAIL_SANDBOX;
    case KMGR_DEATH_TIMEOUT:
        return KMGR_FAIL_TIMEOUT;
    default:
        return KMGR_FAIL_DIED;
    }
}

/* "512 MiB", "1.5 GiB", "1000 bytes" */
static void fmt_bytes(long long n, char *out, size_t outsz)
{
    if (n >= (1LL << 30) && n % (1LL << 20) == 0 && n % (1LL << 30) != 0)
        snprintf(out, outsz, "%lld MiB", n >> 20);
    else if (n >= (1LL << 30))
        snprintf(out, outsz, "%.3g GiB", (double)n / (double)(1LL << 30));
    else if (n >= (1LL << 20))
        snprintf(out, outsz, "%.3g MiB", (double)n / (double)(1LL << 20));
    else
        snprintf(out, outsz, "%lld bytes", n);
}

/* What a death nobody asked for means for the requests in flight, in one line. */
static enum kernel_outcome death_outcome(kernel_t *k, enum kmgr_death d, int st, char *cause,
                                         size_t sz)
{
    char lim[32];
    int sig = WIFSIGNALED(st) ? WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) - 128 : 0;
    switch (d) {
    case KMGR_DEATH_OOM:
        fmt_bytes(k->lim.mem_bytes, lim, sizeof(lim));
        snprintf(cause, sz, "the kernel was killed: out of memory (limit %s)", lim);
        return KERNEL_OUT_OUT_OF_MEMORY;
    case KMGR_DEATH_PIDS:
        snprintf(cause, sz, "the kernel ended after reaching its process limit (%lld)",
                 k->lim.pids);
        return KERNEL_OUT_PIDS_LIMIT;
    case KMGR_DEATH_SIGNAL:
        snprintf(cause, sz, "the kernel was killed by signal %d (%s)", sig,
                 sig > 0 && sig < 65 ? sigabbrev_np(sig) ? sigabbrev_np(sig) : "?" : "?");
        return KERNEL_OUT_KILLED;
    case KMGR_DEATH_HEARTBEAT:
        snprintf(cause, sz, "the kernel stopped answering (%d heartbeats missed) and was killed",
                 k->m->o.hb_misses);
        return KERNEL_OUT_KERNEL_DIED;
    case KMGR_DEATH_EXIT:
        if (WIFEXITED(st)) {
            snprintf(cause, sz, "the kernel exited with status %d", WEXITSTATUS(st));
            return KERNEL_OUT_KERNEL_DIED;
        }
        break;
    default:
        break;
    }
    snprintf(cause, sz, "the kernel died");
    return KERNEL_OUT_KERNEL_DIED;
}

void kernel__stop_why(kernel_t *k, enum kernel_outcome o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    k->stop_outcome = o;
    vsnprintf(k->stop_cause, sizeof(k->stop_cause), fmt, ap);
    va_end(ap);
}

static void on_exit_io(void *data)
{
    kernel_t *k = data;
    evl_t *l = k->m->evl;
    int st = 0;
    char why[300];

    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)k->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
        return;
    /* children the kernel left in its process group go with it: signalled while the exited
     * leader is not yet reaped, so its pid (and group) cannot have been reused */
    kernel__signal(k, SIGKILL);
    if (waitpid(k->pid, &st, 0) < 0)
        st = 0;
    evl_io_destroy(l, &k->pid_io);
    abandon_start(k);
    kzygote__take_back(k->m, k);
    kegress_destroy(&k->egress); /* a new process gets a new namespace, and a new proxy */
    if (k->pidfd >= 0)
        close(k->pidfd);
    k->pidfd = -1;
    k->pid = 0;
    if (k->setup_fd >= 0) { /* it died during the set-up: the report is there by now */
        if (sbx_setup_result(k->setup_fd, k->setup_why, sizeof(k->setup_why)) >= 0)
            k->setup_why[0] = '\0';
        setup_end(k);
    }
    l->timer_disarm(l, k->hb_timer);
    l->timer_disarm(l, k->nudge);
    l->timer_disarm(l, k->deadline);
    bool setup_failed = k->setup_why[0] != '\0';
    bool asked = k->state == KERNEL_TERMINATING ||
                 (k->state == KERNEL_RESTARTING && k->stop_stage > 0);
    enum kmgr_death death = death_cause(k, st, setup_failed);
    k->m->stats.sandbox_setup_failures += setup_failed;
    if (!asked)
        k->m->stats.deaths[death]++;
    describe_exit(st, why, sizeof(why));
    if (k->setup_why[0]) {
        snprintf(why, sizeof(why), "could not start the kernel process: %s", k->setup_why);
        k->setup_why[0] = '\0';
    }
    if (k->exit_status == -ETIMEDOUT)
        snprintf(why + strlen(why), sizeof(why) - strlen(why), " (unresponsive)");
    if (k->cgroup) {
        char cause[96];
        sbx_cgroup_explain(k->cgroup, cause, sizeof(cause));
        if (cause[0])
            snprintf(why + strlen(why), sizeof(why) - strlen(why), ": %s", cause);
    }
    /* before any event: a client hears its request's end before "restarting" */
    if (!k->pool) {
        char cause[sizeof(k->stop_cause)];
        enum kernel_outcome o = asked ? k->stop_outcome : death_outcome(k, death, st, cause,
                                                                          sizeof(cause));
        kernel_fail_pending(k, o, asked ? k->stop_cause : cause);
    }
    exec_end(k, k->exec_stage ? KMGR_EXEC_TIMEOUT : KMGR_EXEC_ABORTED);
    k->nsent = 0; /* what the process had been sent died with it */
    kcall__reset(k->calls); /* calls in progress are gone; a reply gets -ENOENT */
    if (k->pool) {
        log_warn("kernel=%s: pooled kernel ended: %s", k->id, why);
        kpool__lost(k->m, k, k->state != KERNEL_RUNNING); /* frees k */
        return;
    }

    switch (k->state) {
    case KERNEL_TERMINATING:
        log_info("kernel=%s: shut down (%s)", k->id, why);
        complete(k, 0);
        emit(k, KERNEL_EV_GONE, NULL);
        kmgr__remove(k->m, k);
        kernel__free(k);
        return;
    case KERNEL_RESTARTING:
        if (k->stop_stage > 0) {
            log_info("kernel=%s: restarting (old process %s)", k->id, why);
            start_process(k);
            return;
        }
        /* the new process died while starting */
        /* fall through */
    case KERNEL_STARTING:
    case KERNEL_RUNNING:
        if (k->m->o.autorestart && k->restarts < k->m->o.max_restarts &&
            k->state != KERNEL_STARTING) {
            k->restarts++;
            k->m->stats.restarts[KMGR_RESTART_AUTO]++;
            log_warn("kernel=%s: %s; restarting (%d/%d)", k->id, why, k->restarts,
                     k->m->o.max_restarts);
            k->state = KERNEL_RESTARTING;
            emit(k, KERNEL_EV_RESTARTING, why);
            start_process(k);
            return;
        }
        set_dead(k, why, start_fail_of(death));
        return;
    default:
        return;
    }
}

static void stop_process(kernel_t *k, bool restart)
{
    if (k->pid <= 0)
        return;
    kernel__send_own(k, &k->control, "shutdown_request",
                     restart ? "{\"restart\":true}" : "{\"restart\":false}");
    k->stop_stage = 1;
    k->m->evl->timer_disarm(k->m->evl, k->hb_timer);
    k->m->evl->timer_arm(k->m->evl, k->deadline, (uint64_t)k->m->o.shutdown_grace_ms);
}

static int restart(kernel_t *k)
{
    if (k->state == KERNEL_TERMINATING || k->state == KERNEL_RESTARTING)
        return -EBUSY;
    k->req_us = 0; /* a client's start in progress is neither ready nor failed: superseded */
    k->restarts = 0;
    if (k->state == KERNEL_DEAD || k->pid <= 0) {
        k->m->evl->timer_disarm(k->m->evl, k->linger);
        k->state = KERNEL_RESTARTING;
        start_process(k);
        return 0;
    }
    k->state = KERNEL_RESTARTING;
    stop_process(k, true);
    return 0;
}

int kernel_restart(kernel_t *k)
{
    if (k->state == KERNEL_TERMINATING || k->state == KERNEL_RESTARTING)
        return -EBUSY;
    kernel__stop_why(k, KERNEL_OUT_RESTARTED, "the kernel was restarted by a client");
    kernel_fail_pending(k, k->stop_outcome, k->stop_cause);
    int r = restart(k);
    if (r == 0) {
        k->m->stats.restarts[KMGR_RESTART_REQUESTED]++;
        emit(k, KERNEL_EV_RESTART, NULL);
    }
    return r;
}

int kernel_shutdown(kernel_t *k, const char *cause)
{
    if (k->state == KERNEL_TERMINATING)
        return -EALREADY;
    k->req_us = 0; /* a client's start in progress: cancelled, neither ready nor failed */
    k->state = KERNEL_TERMINATING;
    kernel__stop_why(k, KERNEL_OUT_SHUTDOWN, "%s", cause ? cause : "the kernel was shut down");
    /* requests in flight are answered now, not when the process has ended (its grace) */
    kernel_fail_pending(k, k->stop_outcome, k->stop_cause);
    if (k->pid <= 0) {
        /* nothing to wait for: finish on the next turn, outside the caller's stack */
        k->m->evl->timer_arm(k->m->evl, k->linger, 0);
        return 0;
    }
    complete(k, -ECANCELED); /* a pending start or restart will not finish */
    stop_process(k, false);
    return 0;
}

void kernel_fail_pending(kernel_t *k, enum kernel_outcome o, const char *cause)
{
    if (k->pool)
        return;
    kexec__fail_all(k, o, cause);
    /* the execution running is over for its clients: a late idle of it is not tracked */
    exec_end(k, k->exec_stage ? KMGR_EXEC_TIMEOUT : KMGR_EXEC_ABORTED);
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
    if (k->spec->interrupt_message)
        return kernel__send_own(k, &k->control, "interrupt_request", "{}");
    kernel__signal(k, SIGINT);
    return 0;
}

static void on_linger(void *data)
{
    kernel_t *k = data;
    if (k->state == KERNEL_DEAD)
        log_info("kernel=%s: removing dead kernel", k->id);
    k->state = KERNEL_TERMINATING;
    complete(k, 0);
    emit(k, KERNEL_EV_GONE, NULL);
    kmgr__remove(k->m, k);
    kernel__free(k);
}

static void apply_limits(kernel_t *k, const struct kmgr_limits *lim)
{
    if (!lim)
        return;
#define OVERRIDE(dst, v)                                                                           \
    if ((v) > 0)                                                                                   \
        (dst) = (v)
    OVERRIDE(k->lim.mem_bytes, lim->mem_bytes);
    OVERRIDE(k->lim.cpu_millis, lim->cpu_millis);
    OVERRIDE(k->lim.pids, lim->pids);
    OVERRIDE(k->lim.workspace_bytes, lim->workspace_bytes);
    OVERRIDE(k->exec_timeout_ms, (int)lim->exec_timeout_ms);
    OVERRIDE(k->output_cap, lim->output_cap);
#undef OVERRIDE
}

int kernel__adopt(kernel_t *k, json_t *env, const struct kmgr_limits *lim)
{
    char **envp = build_env(k, env);
    if (!envp)
        return -ENOMEM;
    errno = 0;
    char *code = env_code_new(env);
    if (!code && errno) {
        free_strv(envp);
        return -ENOMEM;
    }
    free_strv(k->envp);
    k->envp = envp; /* for restarts */
    apply_limits(k, lim); /* the sandbox's are equal to the pooled kernel's (kmgr_start) */
    k->pool = NULL;
    k->ws->pooled = false;
    kernel_touch(k);
    k->env_code = code;
    if (code && k->state == KERNEL_RUNNING) {
        k->state = KERNEL_STARTING;
        snprintf(k->exec_state, sizeof(k->exec_state), "starting");
        k->m->evl->timer_disarm(k->m->evl, k->hb_timer);
        env_send(k);
    }
    return 0;
}

kernel_t *kernel__new(kmgr_t *m, const kspec_t *spec, json_t *env,
                      const struct kmgr_limits *lim, wspace_t *ws, struct kpool *pool,
                      const egpol_t *egress)
{
    char ep[PATH_MAX + 16];
    evl_t *l = m->evl;
    int r;
    kernel_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    list_init(&k->conns);
    list_init(&k->failing);
    k->exec_cpu0 = -1;
    list_init(&k->waiters);
    k->m = m;
    k->spec = spec;
    k->pidfd = -1;
    k->setup_fd = -1;
    k->ws = ws;
    wspace__attach(ws);
    k->exec_timeout_ms = m->o.exec_timeout_ms;
    k->output_cap = m->o.output_cap;
    k->pool = pool;
    if (m->o.sandbox)
        k->lim = m->o.sandbox->lim;
    apply_limits(k, lim);
    k->iopub.fd = k->shell.fd = k->control.fd = k->hb.fd = -1;
    shardid_mint(k->id);
    util_uuid(k->session);
    util_random_hex(k->key, 32);
    kernel_touch(k);
    snprintf(k->exec_state, sizeof(k->exec_state), "starting");
    /* unix socket paths are limited to 108 bytes: <dir>/k-N and <dir>/callback */
    if ((size_t)snprintf(k->dir, sizeof(k->dir), "%s/%s", m->rundir, k->id) +
            sizeof("/" KCALL_SOCKET_NAME) > 108) {
        errno = ENAMETOOLONG;
        goto fail;
    }
    snprintf(k->conn_file, sizeof(k->conn_file), "%s/connection.json", k->dir);
    if (mkdir(k->dir, 0700) < 0)
        goto fail;
    if (m->o.sandbox) {
        uid_t uid = ws->uid;
        uid_t ruid = uid - 1;
        /* the kernel (uid inside 1000) creates its sockets here; the sandbox's set-up
         * (inside root) mounts the new root on root_dir */
        snprintf(k->root_dir, sizeof(k->root_dir), "%s.root", k->dir);
        /* a tmpfs of its own, so the kernel's mountinfo shows "/" as the bind source rather
         * than a host path (the gateway runs in a private mount namespace: see main.c) */
        char opts[128];
        snprintf(opts, sizeof(opts), "size=1m,nr_inodes=64,mode=0700,uid=%u,gid=%u",
                 (unsigned)uid, (unsigned)uid);
        /* nosymfollow: the kernel can replace its socket files with symlinks; the gateway's
         * reconnects must never follow them to a host socket */
        if (mount("tmpfs", k->dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | KGW_MS_NOSYMFOLLOW,
                  opts) < 0)
            goto fail;
        k->dir_mounted = true;
        if (mkdir(k->root_dir, 0700) < 0 || chown(k->root_dir, ruid, ruid) < 0)
            goto fail;
        k->cgroup = sbx_cgroup_new(m->cgroups, k->id, k->lim.mem_bytes, k->lim.pids,
                                   k->lim.cpu_millis);
        if (!k->cgroup)
            goto fail;
    }
    if (!(k->sign = jsign_new(k->key, strlen(k->key))))
        goto fail;
    if (egress && egress->n && m->o.sandbox) { /* unsandboxed kernels have the host's network */
        if (!(k->egpol = malloc(sizeof(*k->egpol))))
            goto fail;
        *k->egpol = *egress;
    }
    if (!(k->envp = build_env(k, env)))
        goto fail;
    if ((r = write_conn_file(k)) < 0) {
        errno = -r;
        goto fail;
    }
    if (m->o.sandbox) {
        uid_t uid = ws->uid;
        if (chown(k->conn_file, uid, uid) < 0)
            goto fail;
    }
    if (!(k->nudge = l->timer_new(l, on_nudge, k)) ||
        !(k->deadline = l->timer_new(l, on_deadline, k)) ||
        !(k->hb_timer = l->timer_new(l, on_hb_timer, k)) ||
        !(k->linger = l->timer_new(l, on_linger, k)) ||
        !(k->exec_timer = l->timer_new(l, on_exec_timer, k)))
        goto fail;
    if (!(k->calls = kcall__new(k)))
        goto fail;
    kernel__endpoint(k, KPORT_IOPUB, ep, sizeof(ep));
    if ((r = kz_open(&k->iopub, l, m->zctx, ZMQ_SUB, NULL, ep, on_iopub, k)) < 0)
        goto zfail;
    kernel__endpoint(k, KPORT_SHELL, ep, sizeof(ep));
    if ((r = kz_open(&k->shell, l, m->zctx, ZMQ_DEALER, k->session, ep, on_own_reply, k)) < 0)
        goto zfail;
    kernel__endpoint(k, KPORT_CONTROL, ep, sizeof(ep));
    if ((r = kz_open(&k->control, l, m->zctx, ZMQ_DEALER, k->session, ep, on_own_reply, k)) < 0)
        goto zfail;
    kernel__endpoint(k, KPORT_HB, ep, sizeof(ep));
    if ((r = kz_open(&k->hb, l, m->zctx, ZMQ_DEALER, NULL, ep, on_hb, k)) < 0)
        goto zfail;
    k->state = KERNEL_STARTING;
    start_process(k);
    if (k->state == KERNEL_DEAD) {
        errno = ECHILD;
        goto fail;
    }
    return k;
zfail:
    errno = -r;
fail:
    r = errno;
    kernel__free(k);
    errno = r;
    return NULL;
}

void kernel__free(kernel_t *k)
{
    if (!k)
        return;
    evl_t *l = k->m->evl;
    while (!list_empty(&k->waiters)) {
        kwait_t *w = list_first(&k->waiters, kwait_t, link);
        kwait_cancel(&w);
    }
    while (!list_empty(&k->conns)) {
        kconn_t *c = list_first(&k->conns, kconn_t, link);
        kconn_destroy(&c);
    }
    if (k->pid > 1) {
        kernel__signal(k, SIGKILL);
        kill(k->pid, SIGKILL);
        waitpid(k->pid, NULL, 0);
    }
    evl_io_destroy(l, &k->pid_io);
    abandon_start(k);
    kzygote__take_back(k->m, k);
    kegress_destroy(&k->egress);
    free(k->egpol);
    if (k->pidfd >= 0)
        close(k->pidfd);
    setup_end(k);
    kz_close(&k->iopub);
    kz_close(&k->shell);
    kz_close(&k->control);
    kz_close(&k->hb);
    evl_timer_destroy(l, &k->nudge);
    evl_timer_destroy(l, &k->deadline);
    evl_timer_destroy(l, &k->hb_timer);
    evl_timer_destroy(l, &k->linger);
    evl_timer_destroy(l, &k->exec_timer);
    kcall__destroy(&k->calls);
    free(k->exec_parent);
    free(k->env_code);
    jsign_destroy(&k->sign);
    free_strv(k->envp);
    if (k->dir[0]) {
        char p[PATH_MAX + 16];
        for (int port = KPORT_SHELL; port <= KPORT_HB; port++) {
            snprintf(p, sizeof(p), "%s/k-%d", k->dir, port);
            unlink(p);
        }
        unlink(k->conn_file);
        if (k->dir_mounted)
            umount2(k->dir, MNT_DETACH);
        rmdir(k->dir);
    }
    if (k->root_dir[0])
        rmdir(k->root_dir);
    if (k->cgroup) { /* what it used stays in the CPU time of all kernels (kmgr_usage) */
        struct sbx_cgroup_usage u;
        sbx_cgroup_usage(k->cgroup, &u);
        if (u.cpu_ns > 0)
            k->m->stats.cpu_ns_gone += (uint64_t)u.cpu_ns;
    }
    sbx_cgroup_destroy(&k->cgroup);
    if (k->ws)
        wspace__detach(k->ws);
    free(k);
}
