/* kcall: a kernel's callback socket. Code in the kernel (kgw_tools.call_function) connects to
 * <runtime dir>/callback, sends one request frame and waits for the reply; the gateway hands
 * allowed requests to the manager's call handler (kmgr_on_call) and relays the answer given to kernel_call_reply().
 *
 * The kernel is untrusted. The gateway only ever accepts on this socket (it never connects,
 * so a kernel replacing the file with a symlink achieves nothing); peers must have the
 * kernel's uid; connections, bytes buffered, calls in progress, refused requests per
 * connection, time to send a frame and time to answer are all bounded; a connection that
 * breaks the protocol is closed. Connections are freed outside their own callbacks. */
#include "kernelmgr/kcall_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"
#include "protocol/kcallmsg.h"

#define KCALL_BACKLOG        16
#define KCALL_ACCEPT_BATCH   32
#define KCALL_READ_CHUNK     65536
#define KCALL_READ_BATCH     4     /* chunks per wake-up, for fairness */
#define KCALL_MAX_STRIKES    4     /* refused requests on one connection before it is closed */
#define KCALL_SETTLE_MS      1000  /* longest wait for iopub to catch up with a call */
#define KCALL_RETRY_MAX_MS   100   /* write retries back off up to this */
#define KCALL_RELISTEN_MS    1000  /* after accept() failed for want of descriptors */
#define KCALL_LOG_WINDOW_MS  10000 /* refusals logged per kernel: at most ... */
#define KCALL_LOG_PER_WINDOW 20    /* ... this many per window */

enum cstate {
    CS_IDLE,     /* waiting for a request */
    CS_SETTLING, /* a request waits for iopub to reach the execution the kernel names */
    CS_CALLING,  /* handed to the hook, waiting for kernel_call_reply() */
};

struct kcall_conn {
    kcall_t *kc;
    int fd;
    evl_io_t *io;
    evl_timer_t *timer; /* IDLE: a whole request within the timeout; SETTLING; CALLING */
    evl_timer_t *retry; /* a reply that did not fit in the socket */
    kcallmsg_dec_t dec;
    enum cstate st;
    uint64_t call_id;
    kcallmsg_req_t req; /* SETTLING; CALLING while the hook runs */
    char *out;
    size_t out_len, out_off;
    uint64_t retry_ms;
    int strikes;
    bool closing;
    struct kcall_conn *next;
};

struct kcall {
    kernel_t *k;
    evl_t *evl;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int lfd;
    evl_io_t *lio;
    evl_timer_t *relisten;
    uid_t peer_uid;
    struct kcall_conn *conns;
    size_t nconns; /* open ones */
    evl_timer_t *reap;
    uint64_t log_t0;
    unsigned log_n, log_dropped;
};

static const struct kmgr_opts *opts(const kcall_t *kc)
{
    return &kc->k->m->o;
}

static size_t max_conns(const kcall_t *kc)
{
    int n = 2 * opts(kc)->callback_max_calls;
    return (size_t)(n < 4 ? 4 : n);
}

/* Refusals are logged, but a kernel cannot flood the log with them. */
static bool log_ok(kcall_t *kc)
{
    uint64_t now = util_now_ms();
    if (now - kc->log_t0 >= KCALL_LOG_WINDOW_MS) {
        if (kc->log_dropped)
            log_info("kernel=%s: %u more callback messages not logged", kc->k->id,
                     kc->log_dropped);
        kc->log_t0 = now;
        kc->log_n = kc->log_dropped = 0;
    }
    if (kc->log_n < KCALL_LOG_PER_WINDOW) {
        kc->log_n++;
        return true;
    }
    kc->log_dropped++;
    return false;
}

/* ---- connections ---- */

static void free_conn(struct kcall_conn *c)
{
    evl_t *l = c->kc->evl;
    evl_io_destroy(l, &c->io);
    evl_timer_destroy(l, &c->timer);
    evl_timer_destroy(l, &c->retry);
    if (c->fd >= 0)
        close(c->fd);
    kcallmsg_dec_fini(&c->dec);
    kcallmsg_req_fini(&c->req);
    free(c->out);
    free(c);
}

static void on_reap(void *data)
{
    kcall_t *kc = data;
    for (struct kcall_conn **pp = &kc->conns; *pp;) {
        struct kcall_conn *c = *pp;
        if (c->closing) {
            *pp = c->next;
            free_conn(c);
        } else {
            pp = &c->next;
        }
    }
}

/* Closes now, frees on the next loop turn: the caller's stack may still use c. A call in
 * progress is gone (kernel_call_reply answers -ENOENT). */
static void conn_close(struct kcall_conn *c, const char *why)
{
    kcall_t *kc = c->kc;
    if (c->closing)
        return;
    log_debug("kernel=%s: callback connection closed: %s", kc->k->id, why);
    c->closing = true;
    c->st = CS_IDLE;
    c->call_id = 0;
    evl_io_destroy(kc->evl, &c->io);
    kc->evl->timer_disarm(kc->evl, c->timer);
    kc->evl->timer_disarm(kc->evl, c->retry);
    close(c->fd);
    c->fd = -1;
    kcallmsg_dec_fini(&c->dec);
    kcallmsg_req_fini(&c->req);
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    kc->nconns--;
    kc->evl->timer_arm(kc->evl, kc->reap, 0);
}

static void flush(struct kcall_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* the loop has no write readiness: retry with a backoff (the kernel is reading
             * its reply; if it is not, the idle timer ends the connection) */
            c->retry_ms = c->retry_ms ? c->retry_ms * 2 : 1;
            if (c->retry_ms > KCALL_RETRY_MAX_MS)
                c->retry_ms = KCALL_RETRY_MAX_MS;
            c->kc->evl->timer_arm(c->kc->evl, c->retry, c->retry_ms);
            return;
        }
        if (n < 0) {
            conn_close(c, strerror(errno));
            return;
        }
        c->out_off += (size_t)n;
    }
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    c->retry_ms = 0;
}

static void on_retry(void *data)
{
    flush(data);
}

/* Queues a whole frame (taken) and writes what fits. */
static void conn_send(struct kcall_conn *c, char *frame, size_t n)
{
    if (c->closing) {
        free(frame);
        return;
    }
    if (c->out_off < c->out_len) { /* not expected: a request is read only after a reply */
        char *o = realloc(c->out, c->out_len + n);
        if (!o) {
            free(frame);
            conn_close(c, "out of memory");
            return;
        }
        memcpy(o + c->out_len, frame, n);
        free(frame);
        c->out = o;
        c->out_len += n;
        return;
    }
    free(c->out);
    c->out = frame;
    c->out_len = n;
    c->out_off = 0;
    flush(c);
}

static void send_error(struct kcall_conn *c, const char *type, const char *msg)
{
    char *f;
    size_t n;
    if (kcallmsg_encode_error(type, msg, &f, &n) < 0) {
        conn_close(c, "out of memory");
        return;
    }
    conn_send(c, f, n);
}

static void arm_idle(struct kcall_conn *c)
{
    c->kc->evl->timer_arm(c->kc->evl, c->timer, (uint64_t)opts(c->kc)->callback_timeout_ms);
}

/* A request the gateway will not forward: the kernel raises err_type; too many on one
 * connection and it is closed. */
static void refuse(struct kcall_conn *c, bool strike, const char *err_type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void refuse(struct kcall_conn *c, bool strike, const char *err_type, const char *fmt, ...)
{
    char msg[KCALLMSG_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_ok(c->kc))
        log_info("kernel=%s: callback refused: %s: %s", c->kc->k->id, err_type, msg);
    send_error(c, err_type, msg);
    if (strike && ++c->strikes >= KCALL_MAX_STRIKES)
        conn_close(c, "too many refused requests");
    else
        arm_idle(c);
}

static size_t in_progress(const kcall_t *kc)
{
    size_t n = 0;
    for (const struct kcall_conn *c = kc->conns; c; c = c->next)
        n += !c->closing && c->st != CS_IDLE;
    return n;
}

static size_t buffered(const kcall_t *kc)
{
    size_t n = 0;
    for (const struct kcall_conn *c = kc->conns; c; c = c->next)
        n += kcallmsg_dec_mem(&c->dec);
    return n;
}

/* The gateway has seen the execution the kernel says it is in, or that one has ended, or
 * the kernel named none. Only a matter of waiting: routing uses the gateway's own view. */
static bool settled(const struct kcall_conn *c)
{
    const kernel_t *k = c->kc->k;
    return !c->req.parent[0] || !strcmp(c->req.parent, kexec__running(k)) ||
           !strcmp(c->req.parent, kexec__last(k));
}

static void dispatch(struct kcall_conn *c)
{
    kcall_t *kc = c->kc;
    kernel_t *k = kc->k;
    const char *exec = kexec__running(k);
    c->st = CS_CALLING;
    c->call_id = ++k->m->next_call_id;
    kc->evl->timer_arm(kc->evl, c->timer, (uint64_t)opts(kc)->callback_timeout_ms);
    log_debug("kernel=%s: callback %s (call %llu, execution %s)", k->id, c->req.name,
              (unsigned long long)c->call_id, exec[0] ? exec : "none");
    /* may answer (and even close c) before it returns; c stays allocated until the reap */
    k->m->call_fn(k->m->call_user, k, c->call_id, c->req.name, c->req.args, c->req.kwargs,
                 exec);
    kcallmsg_req_fini(&c->req);
}

static void on_frame(struct kcall_conn *c)
{
    kcall_t *kc = c->kc;
    kernel_t *k = kc->k;
    const char *p;
    size_t n;
    kcallmsg_req_t req;
    kcallmsg_err_t err;

    kcallmsg_dec_payload(&c->dec, &p, &n);
    int r = kcallmsg_parse(p, n, (const char *const *)k->m->callbacks, &req, &err);
    if (r == -ENOMEM) {
        conn_close(c, "out of memory");
        return;
    }
    if (r < 0) {
        refuse(c, true, err.type, "%s", err.message);
        return;
    }
    if (in_progress(kc) >= (size_t)opts(kc)->callback_max_calls) {
        kcallmsg_req_fini(&req);
        refuse(c, false, "RuntimeError", "too many callbacks in progress (at most %d per kernel)",
               opts(kc)->callback_max_calls);
        return;
    }
    if (!k->m->call_fn) {
        kcallmsg_req_fini(&req);
        refuse(c, false, "RuntimeError", "no client is connected to receive callbacks");
        return;
    }
    c->req = req;
    c->st = CS_SETTLING;
    if (!settled(c)) /* iopub may lag behind this socket: see what has arrived */
        kz_drain_now(&k->iopub);
    if (c->closing || c->st != CS_SETTLING) /* dispatched (or closed) while draining */
        return;
    if (settled(c))
        dispatch(c);
    else
        kc->evl->timer_arm(kc->evl, c->timer, KCALL_SETTLE_MS);
}

static void on_input(struct kcall_conn *c, const char *buf, size_t n)
{
    kcall_t *kc = c->kc;
    size_t off = 0;
    while (off < n && !c->closing) {
        if (c->st != CS_IDLE || c->out_off < c->out_len) {
            if (log_ok(kc))
                log_info("kernel=%s: callback connection closed: data before the reply", kc->k->id);
            conn_close(c, "data before the reply");
            return;
        }
        size_t used = 0;
        int ev = kcallmsg_dec_feed(&c->dec, buf + off, n - off, &used);
        if (ev < 0) {
            conn_close(c, "out of memory");
            return;
        }
        off += used;
        size_t budget = (size_t)opts(kc)->callback_max_calls * (size_t)opts(kc)->callback_max_bytes;
        if (buffered(kc) > budget) {
            if (log_ok(kc))
                log_info("kernel=%s: callback connection closed: over %zu bytes buffered",
                         kc->k->id, budget);
            conn_close(c, "buffered bytes over budget");
            return;
        }
        if (ev == KCALLMSG_OVERSIZE)
            refuse(c, true, "ValueError",
                   "callback request of %zu bytes is over the gateway's limit of %lld bytes",
                   c->dec.len, opts(kc)->callback_max_bytes);
        else if (ev == KCALLMSG_FRAME)
            on_frame(c);
    }
}

static void on_readable(void *data)
{
    struct kcall_conn *c = data;
    char buf[KCALL_READ_CHUNK];
    for (int i = 0; i < KCALL_READ_BATCH && !c->closing; i++) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            conn_close(c, n == 0 ? "closed by the kernel" : strerror(errno));
            return;
        }
        on_input(c, buf, (size_t)n);
    }
}

static void on_conn_timer(void *data)
{
    struct kcall_conn *c = data;
    kcall_t *kc = c->kc;
    switch (c->st) {
    case CS_IDLE:
        conn_close(c, kcallmsg_dec_idle(&c->dec) ? "idle" : "stalled in a request");
        break;
    case CS_SETTLING: /* iopub did not catch up: go by what the gateway knows */
        dispatch(c);
        break;
    case CS_CALLING: {
        char msg[128];
        snprintf(msg, sizeof(msg), "no reply from the client within %d ms",
                 opts(kc)->callback_timeout_ms);
        log_info("kernel=%s: callback call %llu timed out", kc->k->id,
                 (unsigned long long)c->call_id);
        c->st = CS_IDLE;
        c->call_id = 0;
        send_error(c, "TimeoutError", msg);
        if (!c->closing)
            arm_idle(c);
        break;
    }
    }
}

/* ---- the listening socket ---- */

static void on_accept(void *data);

static void on_relisten(void *data)
{
    kcall_t *kc = data;
    if (kc->lfd >= 0 && !kc->lio)
        kc->lio = kc->evl->io_add(kc->evl, kc->lfd, on_accept, kc);
}

static bool peer_ok(kcall_t *kc, int fd)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.uid == kc->peer_uid;
}

static void on_accept(void *data)
{
    kcall_t *kc = data;
    evl_t *l = kc->evl;
    for (int i = 0; i < KCALL_ACCEPT_BATCH; i++) {
        int fd = accept4(kc->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                return;
            /* EMFILE and the like: the socket stays readable; pause rather than spin */
            log_warn("kernel=%s: callback socket: accept: %s", kc->k->id, strerror(errno));
            evl_io_destroy(l, &kc->lio);
            l->timer_arm(l, kc->relisten, KCALL_RELISTEN_MS);
            return;
        }
        if (!peer_ok(kc, fd)) {
            log_warn("kernel=%s: callback connection from another uid refused", kc->k->id);
            close(fd);
            continue;
        }
        if (kc->nconns >= max_conns(kc)) {
            if (log_ok(kc))
                log_info("kernel=%s: callback connection refused: %zu open already", kc->k->id,
                         kc->nconns);
            close(fd);
            continue;
        }
        struct kcall_conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            return;
        }
        c->kc = kc;
        c->fd = fd;
        kcallmsg_dec_init(&c->dec, (size_t)opts(kc)->callback_max_bytes);
        if (!(c->timer = l->timer_new(l, on_conn_timer, c)) ||
            !(c->retry = l->timer_new(l, on_retry, c)) ||
            !(c->io = l->io_add(l, fd, on_readable, c))) {
            free_conn(c);
            return;
        }
        c->next = kc->conns;
        kc->conns = c;
        kc->nconns++;
        arm_idle(c);
    }
}

static void close_listener(kcall_t *kc)
{
    evl_io_destroy(kc->evl, &kc->lio);
    kc->evl->timer_disarm(kc->evl, kc->relisten);
    if (kc->lfd >= 0)
        close(kc->lfd);
    kc->lfd = -1;
}

void kcall__reset(kcall_t *kc)
{
    if (!kc)
        return;
    for (struct kcall_conn *c = kc->conns; c; c = c->next)
        conn_close(c, "the kernel process is gone");
}

int kcall__listen(kcall_t *kc, uid_t owner)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int r;
    kcall__reset(kc);
    close_listener(kc);
    kc->peer_uid = owner == (uid_t)-1 ? geteuid() : owner;
    memcpy(sa.sun_path, kc->path, sizeof(sa.sun_path));
    /* no kernel process runs now: nothing else writes in its directory */
    if (unlink(kc->path) < 0 && errno != ENOENT)
        return -errno;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        (owner != (uid_t)-1 && lchown(kc->path, owner, owner) < 0) ||
        chmod(kc->path, 0600) < 0 || listen(fd, KCALL_BACKLOG) < 0) {
        r = -errno;
        close(fd);
        unlink(kc->path);
        return r;
    }
    kc->lfd = fd;
    if (!(kc->lio = kc->evl->io_add(kc->evl, fd, on_accept, kc))) {
        r = errno ? -errno : -ENOMEM;
        close_listener(kc);
        unlink(kc->path);
        return r;
    }
    return 0;
}

kcall_t *kcall__new(kernel_t *k)
{
    kcall_t *kc = calloc(1, sizeof(*kc));
    if (!kc)
        return NULL;
    kc->k = k;
    kc->evl = k->m->evl;
    kc->lfd = -1;
    if ((size_t)snprintf(kc->path, sizeof(kc->path), "%s/%s", k->dir, KCALL_SOCKET_NAME) >=
        sizeof(kc->path)) {
        free(kc);
        errno = ENAMETOOLONG;
        return NULL;
    }
    if (!(kc->reap = kc->evl->timer_new(kc->evl, on_reap, kc)) ||
        !(kc->relisten = kc->evl->timer_new(kc->evl, on_relisten, kc))) {
        kcall__destroy(&kc);
        errno = ENOMEM;
        return NULL;
    }
    return kc;
}

void kcall__destroy(kcall_t **pkc)
{
    kcall_t *kc = *pkc;
    if (!kc)
        return;
    kcall__reset(kc);
    on_reap(kc);
    if (kc->lfd >= 0)
        unlink(kc->path);
    close_listener(kc);
    evl_timer_destroy(kc->evl, &kc->reap);
    evl_timer_destroy(kc->evl, &kc->relisten);
    free(kc);
    *pkc = NULL;
}

void kcall__exec_changed(kcall_t *kc)
{
    if (!kc)
        return;
    for (struct kcall_conn *c = kc->conns; c; c = c->next)
        if (!c->closing && c->st == CS_SETTLING && settled(c))
            dispatch(c);
}

int kcall__reply(kcall_t *kc, uint64_t call_id, json_t *value, const char *err_type,
                 const char *err_message)
{
    struct kcall_conn *c = NULL;
    for (struct kcall_conn *i = kc ? kc->conns : NULL; i && call_id; i = i->next)
        if (!i->closing && i->st == CS_CALLING && i->call_id == call_id)
            c = i;
    if (!c) {
        json_decref(value);
        return -ENOENT;
    }
    char *f;
    size_t n;
    int r, rc = 0;
    if (err_type) {
        json_decref(value);
        r = kcallmsg_encode_error(err_type, err_message, &f, &n);
    } else {
        r = kcallmsg_encode_value(value, (size_t)opts(kc)->callback_max_bytes, &f, &n);
        if (r == -EMSGSIZE) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "the client's reply is over the gateway's callback limit of %lld bytes",
                     opts(kc)->callback_max_bytes);
            log_info("kernel=%s: callback call %llu: %s", kc->k->id, (unsigned long long)call_id,
                     msg);
            rc = -EMSGSIZE;
            r = kcallmsg_encode_error("RuntimeError", msg, &f, &n);
        }
    }
    c->st = CS_IDLE;
    c->call_id = 0;
    if (r < 0) {
        conn_close(c, "out of memory");
        return r;
    }
    arm_idle(c);
    conn_send(c, f, n);
    return rc;
}
