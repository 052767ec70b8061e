/* A kernel's egress proxy (see kegress.h).
 *
 * The loop's evl watches readability only, so writes that would block keep their bytes in a
 * per-direction buffer (KEGRESS_BUF bytes), the reading side stops being watched, and a
 * KEGRESS_TICK_MS timer retries; a non-blocking connect is polled the same way. One
 * connection's state: HEAD (reading the request head) -> RESOLVE (a lookup thread) ->
 * CONNECT -> RELAY. Closed connections are freed by a zero-delay timer, never inside their own
 * callbacks. */
#include "kernelmgr/kegress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/ksecret.h"
#include "kernelmgr/ktls.h"
#include "protocol/egreq.h"
#include "protocol/egsub.h"

#define KEGRESS_BUF       16384
/* TLS handshakes the proxy makes for a kernel (a leaf certificate, two key exchanges), a token
 * bucket: a kernel that floods them is answered 429 before any TLS, so the loop's cost per
 * kernel stays bounded (docs/security.md, "Secrets") */
#define KEGRESS_TLS_RATE  20.0 /* per second */
#define KEGRESS_TLS_BURST 40.0
#define KEGRESS_TICK_MS   10
#define ACCEPTS_PER_TURN  16

static atomic_int lookups; /* lookup threads running, gateway-wide */

/* Lookup threads running per tenant: a tenant's share of KEGRESS_MAX_LOOKUPS. A slot's
 * tenant is set by the loop while its count is 0; threads only decrement. At most
 * KEGRESS_MAX_LOOKUPS tenants have threads running at once. */
static struct {
    char tenant[65];
    int n;
} tenant_lookups[KEGRESS_MAX_LOOKUPS];
static pthread_mutex_t tenant_lookups_mu = PTHREAD_MUTEX_INITIALIZER;

/* A running lookup counted for tenant: its slot, or -EAGAIN (the tenant's share) or -EBUSY
 * (the gateway's). */
static int lookup_slot_take(const char *tenant)
{
    int slot = -1, free_slot = -1, rc;
    pthread_mutex_lock(&tenant_lookups_mu);
    for (int i = 0; i < KEGRESS_MAX_LOOKUPS && slot < 0; i++) {
        if (tenant_lookups[i].n > 0 && !strcmp(tenant_lookups[i].tenant, tenant))
            slot = i;
        else if (tenant_lookups[i].n == 0 && free_slot < 0)
            free_slot = i;
    }
    if (slot >= 0 && tenant_lookups[slot].n >= KEGRESS_TENANT_LOOKUPS) {
        rc = -EAGAIN;
    } else if (atomic_load(&lookups) >= KEGRESS_MAX_LOOKUPS || (slot < 0 && free_slot < 0)) {
        rc = -EBUSY;
    } else {
        if (slot < 0) {
            slot = free_slot;
            snprintf(tenant_lookups[slot].tenant, sizeof(tenant_lookups[slot].tenant), "%s",
                     tenant);
        }
        tenant_lookups[slot].n++;
        atomic_fetch_add(&lookups, 1);
        rc = slot;
    }
    pthread_mutex_unlock(&tenant_lookups_mu);
    return rc;
}

static void lookup_slot_give(int slot)
{
    pthread_mutex_lock(&tenant_lookups_mu);
    tenant_lookups[slot].n--;
    atomic_fetch_sub(&lookups, 1);
    pthread_mutex_unlock(&tenant_lookups_mu);
}

/* One name lookup, shared by its thread and its connection: the last to let go frees it. */
struct lookup {
    atomic_int refs;
    int slot; /* in tenant_lookups */
    char host[EGPOL_HOST_MAX + 1];
    char port[8];
    int wfd;
    struct addrinfo *ai;
    int err;
};

static void lookup_unref(struct lookup *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    if (j->ai)
        freeaddrinfo(j->ai);
    if (j->wfd >= 0)
        close(j->wfd);
    free(j);
}

static void *lookup_thread(void *arg)
{
    struct lookup *j = arg;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    j->err = getaddrinfo(j->host, j->port, &hints, &j->ai);
    /* the connection reads the result after this (or has gone: no SIGPIPE) */
    ssize_t w = send(j->wfd, "x", 1, MSG_NOSIGNAL);
    (void)w;
    lookup_slot_give(j->slot);
    lookup_unref(j);
    return NULL;
}

/* C_TLS: a CONNECT to a host one of the kernel's secrets is for, read (kernelmgr/ktls.h):
 * T_ACCEPT (TLS with the kernel) -> T_HEAD (its request head) -> T_UPSTREAM (TLS with the
 * host, verified) -> T_RELAY (the rest of that one request and its answer, decrypted). */
enum cstate { C_HEAD, C_RESOLVE, C_CONNECT, C_RELAY, C_TLS, C_CLOSED };
enum tstate { T_ACCEPT, T_HEAD, T_UPSTREAM, T_RELAY };

struct pending {
    char *buf;
    size_t off, len;
};

struct econn {
    struct list link;
    kegress_t *e;
    enum cstate st;
    int cfd, ufd;
    evl_io_t *cio, *uio, *lio; /* client, upstream, lookup result */
    evl_timer_t *timer;
    struct lookup *lookup;
    int lfd;
    struct addrinfo *ai, *next; /* the checked addresses (owned), the next to try */
    bool resolving; /* counted in kegress.nresolving */
    char last_err[96];
    uint64_t last_us, deadline_us; /* activity; connect deadline */
    char head[EGREQ_HEAD_MAX];
    size_t hlen;
    struct egreq req;
    char *out;     /* the rewritten head of a forwarded request */
    size_t upcap;  /* bytes of up.buf (wiped when freed if it held secrets) */
    uint32_t used; /* the kernel's secrets (bits: ksecret indices) this request carries, or
                      tried to carry where it was refused */
    char sub_why[200];
    SSL *kssl, *ussl; /* C_TLS: with the kernel, with the host */
    enum tstate tst;
    const struct egpol_entry *entry;
    char host[EGPOL_HOST_MAX + 1];
    char addr[INET6_ADDRSTRLEN];
    struct pending up, down; /* to the host; to the kernel */
    bool c_eof, u_eof;
    uint64_t sent, received;
    bool allowed;
    uint64_t cout, cin; /* of sent, received: what is on its host's line */
    int hidx;           /* its entry in e->hosts (-1: none) ... */
    unsigned hgen;      /* ... while e->gen is this */
};

struct kegress {
    evl_t *l;
    int lfd;
    evl_io_t *lio;
    evl_timer_t *reaper;
    const egpol_t *pol;
    const struct kegress_limits *lim;
    struct kegress_stats *stats;
    char tenant[65];
    char kernel[40];
    struct list conns, dead;
    int nconns;
    int nresolving; /* connections waiting for a lookup (KEGRESS_KERNEL_LOOKUPS) */
    struct {
        char hp[EGPOL_HOST_MAX + 8];
        uint64_t out, in;
    } hosts[KEGRESS_HOSTS_MAX]; /* kegress_hosts_take / kegress_receipt_take */
    int nhosts;
    unsigned gen; /* bumped when they are taken */
    bool more_hosts;
    long long bytes;    /* relayed so far, both ways */
    ksecret_t *secrets; /* the kernel's (not owned; NULL: none) */
    ktls_t *tls;        /* the gateway's interception (not owned; NULL: HTTPS is tunneled) */
    double tls_tokens;  /* handshakes it may start now (KEGRESS_TLS_RATE) */
    uint64_t tls_us;    /* when they were counted */
    uint32_t used;      /* secrets injected since kegress_secrets_take */
};

static void conn_tick(void *data);
static void host_bytes(struct econn *c);
static void tls_start(struct econn *c);
static void tls_upstream(struct econn *c);
static void tls_refuse(struct econn *c, int status, const char *why);
static void tls_drive(struct econn *c);
static void on_client(void *data);
static void on_upstream(void *data);

/* The names of the secrets in mask, as a new JSON array. */
static json_t *secret_names(const kegress_t *e, uint32_t mask)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < ksecret_count(e->secrets); i++)
        if (mask & (1u << i))
            json_array_append_new(a, json_string(ksecret_name(e->secrets, i)));
    return a;
}

static void audit(struct econn *c, const char *result, const char *why)
{
    if (!audit_enabled())
        return;
    json_t *secrets = secret_names(c->e, c->used);
    audit_event("egress", "s:s, s:s, s:o, s:i, s:o, s:s, s:I, s:I, s:s, s:o, s:o", "tenant",
                c->e->tenant, "kernel", c->e->kernel, "host",
                c->host[0] ? audit_str(c->host, strlen(c->host)) : json_null(), "port", c->req.port,
                "address", c->addr[0] ? json_string(c->addr) : json_null(), "method",
                c->req.connect ? "CONNECT" : "forward", "bytes_out", (json_int_t)c->sent,
                "bytes_in", (json_int_t)c->received, "result", result, "reason",
                why ? json_string(why) : json_null(), "secrets", secrets ? secrets : json_null());
}

/* The connection waits for its lookup no more (its result came, its deadline passed, or it
 * closed): the kernel's slot is free again, whether or not the thread still runs. */
static void resolve_done(struct econn *c)
{
    if (c->resolving)
        c->e->nresolving--;
    c->resolving = false;
}

static void close_conn(struct econn *c, const char *why)
{
    kegress_t *e = c->e;
    if (c->st == C_CLOSED)
        return;
    resolve_done(c);
    if (c->allowed) {
        audit(c, "allowed", why);
        log_debug("kernel=%s: egress host=%s port=%d closed (%s): %llu bytes out, %llu in",
                  e->kernel, c->host, c->req.port, why ? why : "done", (unsigned long long)c->sent,
                  (unsigned long long)c->received);
    }
    c->st = C_CLOSED;
    SSL_free(c->kssl);
    SSL_free(c->ussl);
    c->kssl = c->ussl = NULL;
    ERR_clear_error();
    evl_io_destroy(e->l, &c->cio);
    evl_io_destroy(e->l, &c->uio);
    evl_io_destroy(e->l, &c->lio);
    e->l->timer_disarm(e->l, c->timer);
    /* the loop may still hold a duplicate of a watched descriptor for a moment: end the
     * connections now rather than at that close */
    if (c->cfd >= 0) {
        shutdown(c->cfd, SHUT_RDWR);
        close(c->cfd);
    }
    if (c->ufd >= 0) {
        shutdown(c->ufd, SHUT_RDWR);
        close(c->ufd);
    }
    if (c->lfd >= 0)
        close(c->lfd);
    c->cfd = c->ufd = c->lfd = -1;
    lookup_unref(c->lookup);
    c->lookup = NULL;
    if (c->ai)
        freeaddrinfo(c->ai);
    c->ai = c->next = NULL;
    e->nconns--;
    list_remove(&c->link);
    list_append(&e->dead, &c->link);
    e->l->timer_arm(e->l, e->reaper, 0);
}

static void conn_free(struct econn *c)
{
    evl_timer_destroy(c->e->l, &c->timer);
    if (c->used) { /* the head with the values, and the buffer that took it */
        sodium_memzero(c->out, c->req.out_len);
        if (c->up.buf)
            sodium_memzero(c->up.buf, c->upcap);
    }
    free(c->out);
    free(c->up.buf);
    free(c->down.buf);
    free(c);
}

static void on_reap(void *data)
{
    kegress_t *e = data;
    while (!list_empty(&e->dead)) {
        struct econn *c = list_first(&e->dead, struct econn, link);
        list_remove(&c->link);
        conn_free(c);
    }
}

/* Answers the kernel with an error (best effort: a fresh socket's buffer takes it) and
 * closes. The reason goes into the status line, so urllib and requests show it. */
static void refuse(struct econn *c, int status, const char *why)
{
    if (c->kssl) { /* the kernel speaks TLS with the proxy: the answer goes inside */
        tls_refuse(c, status, why);
        return;
    }
    char msg[512];
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 %d kgw egress: %s\r\nContent-Type: text/plain\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\nkgw egress: %s\n",
                     status, why, strlen(why) + 13, why);
    if (c->cfd >= 0 && n > 0) {
        ssize_t w = send(c->cfd, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        shutdown(c->cfd, SHUT_WR);
    }
    c->e->stats->denied++;
    log_info("kernel=%s: egress denied: host=\"%.128s\" port=%d: %s", c->e->kernel,
             c->host[0] ? c->host : "-", c->req.port, why);
    audit(c, "denied", why);
    c->allowed = false;
    close_conn(c, why);
}

static void arm_tick(struct econn *c)
{
    c->e->l->timer_arm(c->e->l, c->timer, KEGRESS_TICK_MS);
}

static void arm_idle(struct econn *c)
{
    c->e->l->timer_arm(c->e->l, c->timer, (uint64_t)c->e->lim->idle_ms);
}

/* ---- relay ---- */

/* Writes what p holds to fd. 1: all written; 0: some left; -errno. */
static int flush(int fd, struct pending *p)
{
    while (p->off < p->len) {
        ssize_t w = send(fd, p->buf + p->off, p->len - p->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : (errno == EINTR ? 0 : -errno);
        p->off += (size_t)w;
    }
    p->off = p->len = 0;
    return 1;
}

static bool watch(struct econn *c, evl_io_t **io, int fd, evl_io_cb cb)
{
    if (*io)
        return true;
    if (!(*io = c->e->l->io_add(c->e->l, fd, cb, c))) {
        close_conn(c, "out of memory");
        return false;
    }
    return true;
}

/* After progress: the watches and timer a relaying connection needs, or its end. */
static void relay_settle(struct econn *c)
{
    int r;
    if (c->up.len && (r = flush(c->ufd, &c->up)) < 0) {
        close_conn(c, "write to the host failed");
        return;
    }
    if (c->down.len && (r = flush(c->cfd, &c->down)) < 0) {
        close_conn(c, "write to the kernel failed");
        return;
    }
    if (c->u_eof && !c->down.len) {
        close_conn(c, NULL);
        return;
    } /* the host is done and the kernel has it all */
    if (c->c_eof && !c->up.len) {
        /* the kernel is done: HTTP clients and TLS do not half-close, and a connection the
         * kernel left must not hold one of its connections (the cap) until the host ends it */
        close_conn(c, NULL);
        return;
    }
    /* read a side only when what it sends can be taken */
    if (!c->c_eof && !c->up.len) {
        if (!watch(c, &c->cio, c->cfd, on_client))
            return;
    } else {
        evl_io_destroy(c->e->l, &c->cio);
    }
    if (!c->u_eof && !c->down.len) {
        if (!watch(c, &c->uio, c->ufd, on_upstream))
            return;
    } else {
        evl_io_destroy(c->e->l, &c->uio);
    }
    if (c->up.len || c->down.len)
        arm_tick(c);
    else
        arm_idle(c);
}

/* Moves what fd has to p's buffer and on; false when the connection ended. */
static bool pump(struct econn *c,
                 int from,
                 int to,
                 struct pending *p,
                 bool *eof,
                 uint64_t *count,
                 uint64_t *stat)
{
    kegress_t *e = c->e;
    if (!p->buf && !(p->buf = malloc(KEGRESS_BUF))) {
        close_conn(c, "out of memory");
        return false;
    }
    size_t room = KEGRESS_BUF;
    if (e->lim->max_bytes > 0) {
        long long left = e->lim->max_bytes - e->bytes;
        if (left <= 0) {
            close_conn(c, "byte cap reached");
            return false;
        }
        if ((long long)room > left)
            room = (size_t)left;
    }
    ssize_t n = recv(from, p->buf, room, MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return true;
        close_conn(c, "read failed");
        return false;
    }
    if (n == 0) {
        *eof = true;
        return true;
    }
    c->last_us = util_now_us();
    *count += (uint64_t)n;
    *stat += (uint64_t)n;
    e->bytes += n;
    host_bytes(c);
    p->off = 0;
    p->len = (size_t)n;
    (void)to;
    return true;
}

static void on_client(void *data)
{
    struct econn *c = data;
    if (c->st != C_RELAY)
        return;
    if (pump(c, c->cfd, c->ufd, &c->up, &c->c_eof, &c->sent, &c->e->stats->bytes_out))
        relay_settle(c);
}

static void on_upstream(void *data)
{
    struct econn *c = data;
    if (c->st != C_RELAY)
        return;
    if (pump(c, c->ufd, c->cfd, &c->down, &c->u_eof, &c->received, &c->e->stats->bytes_in))
        relay_settle(c);
}

static bool put_pending(struct econn *c, struct pending *p, const char *s, size_t n)
{
    if (!n)
        return true;
    /* room for the head (with any secrets' values) and what followed it */
    size_t cap = KEGRESS_BUF + EGREQ_HEAD_MAX + c->req.out_len;
    if (!p->buf && !(p->buf = malloc(cap))) {
        close_conn(c, "out of memory");
        return false;
    }
    if (p == &c->up && !c->upcap)
        c->upcap = cap;
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    return true;
}

/* The connection's host among those reached since they were last taken; -1 when that list
 * is full. */
static int note_host(struct econn *c)
{
    kegress_t *e = c->e;
    char hp[EGPOL_HOST_MAX + 8];
    if (c->hgen == e->gen && c->hidx >= 0)
        return c->hidx;
    snprintf(hp, sizeof(hp), "%s:%d", c->host, c->req.port);
    c->hgen = e->gen;
    for (int i = 0; i < e->nhosts; i++)
        if (!strcmp(e->hosts[i].hp, hp))
            return c->hidx = i;
    if (e->nhosts == KEGRESS_HOSTS_MAX) {
        e->more_hosts = true;
        return c->hidx = -1;
    }
    memcpy(e->hosts[e->nhosts].hp, hp, sizeof(hp));
    e->hosts[e->nhosts].out = e->hosts[e->nhosts].in = 0;
    return c->hidx = e->nhosts++;
}

/* An allowed connection's bytes (c->sent, c->received) since they were last counted, on its
 * host's line (a new one when the lines were taken meanwhile). */
static void host_bytes(struct econn *c)
{
    int i = note_host(c);
    if (i >= 0) {
        c->e->hosts[i].out += c->sent - c->cout;
        c->e->hosts[i].in += c->received - c->cin;
    }
    c->cout = c->sent;
    c->cin = c->received;
}

static void hosts_forget(kegress_t *e)
{
    e->nhosts = 0;
    e->more_hosts = false;
    e->gen++;
}

json_t *kegress_receipt_take(kegress_t *e)
{
    json_t *hosts = json_array();
    for (int i = 0; hosts && i < e->nhosts; i++)
        json_array_append_new(hosts, json_pack("{s:s, s:I, s:I}", "host", e->hosts[i].hp,
                                               "bytes_out", (json_int_t)e->hosts[i].out, "bytes_in",
                                               (json_int_t)e->hosts[i].in));
    json_t *r = json_pack("{s:o, s:b, s:o}", "hosts", hosts ? hosts : json_array(), "more_hosts",
                          e->more_hosts, "secrets", secret_names(e, e->used));
    hosts_forget(e);
    e->used = 0;
    return r;
}

void kegress_set_secrets(kegress_t *e, ksecret_t *ks, ktls_t *tls)
{
    e->secrets = ks;
    e->tls = tls;
    e->tls_tokens = KEGRESS_TLS_BURST;
    e->tls_us = util_now_us();
    e->used = 0;
}

json_t *kegress_hosts_take(kegress_t *e)
{
    json_t *a = json_array();
    for (int i = 0; a && i < e->nhosts; i++)
        json_array_append_new(a, json_string(e->hosts[i].hp));
    if (a && e->more_hosts)
        json_array_append_new(a, json_string("..."));
    hosts_forget(e);
    e->used = 0;
    return a;
}

/* Connected: answer CONNECT, or send the forwarded head, and relay. */
static void relay_start(struct econn *c)
{
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    const char *rest = c->head + c->req.head_len;
    size_t nrest = c->hlen - c->req.head_len;
    if (c->kssl) { /* TLS read for its secrets: the request is in hand, TLS with the host */
        tls_upstream(c);
        return;
    }
    c->st = C_RELAY;
    c->allowed = true;
    c->e->stats->allowed++;
    c->e->used |= c->used;
    note_host(c);
    log_debug("kernel=%s: egress host=%s port=%d address=%s", c->e->kernel, c->host, c->req.port,
              c->addr);
    if (c->req.connect) {
        if (!put_pending(c, &c->down, ok, sizeof(ok) - 1))
            return;
    } else if (!put_pending(c, &c->up, c->out, c->req.out_len)) {
        return;
    }
    if (!put_pending(c, &c->up, rest, nrest))
        return;
    size_t n = nrest + (c->req.connect ? 0 : c->req.out_len); /* what the host is sent */
    c->sent += n;
    host_bytes(c);
    c->e->stats->bytes_out += n;
    c->e->bytes += (long long)n;
    relay_settle(c);
}

/* ---- connect ---- */

static void connect_next(struct econn *c);

static void connect_failed(struct econn *c, int err)
{
    snprintf(c->last_err, sizeof(c->last_err), "cannot connect to %s: %s", c->addr, strerror(err));
    close(c->ufd);
    c->ufd = -1;
    connect_next(c);
}

static void connect_check(struct econn *c)
{
    struct pollfd pfd = {.fd = c->ufd, .events = POLLOUT};
    if (poll(&pfd, 1, 0) <= 0) {
        if (util_now_us() >= c->deadline_us) {
            refuse(c, 504, "connection to the host timed out");
            return;
        }
        arm_tick(c);
        return;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err) {
        connect_failed(c, err);
        return;
    }
    relay_start(c);
}

/* Tries the next address the entry allows; the addresses are the ones checked, never looked
 * up again. */
static void connect_next(struct econn *c)
{
    const char *refused = NULL;
    struct addrinfo *a;
    for (a = c->next; a; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
            continue;
        const char *r = egpol_addr_refusal(a->ai_addr);
        if (r && !c->entry->private_ok) {
            if (!refused)
                refused = r;
            continue;
        }
        break;
    }
    if (!a) {
        char why[160];
        if (c->last_err[0])
            snprintf(why, sizeof(why), "%s", c->last_err);
        else if (refused)
            snprintf(why, sizeof(why),
                     "the host resolves to a %s address, which the policy "
                     "does not name",
                     refused);
        else
            snprintf(why, sizeof(why), "the host has no address");
        refuse(c, c->last_err[0] ? 502 : 403, why);
        return;
    }
    c->next = a->ai_next;
    const void *bin = a->ai_family == AF_INET
                          ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                          : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
    inet_ntop(a->ai_family, bin, c->addr, sizeof(c->addr));
    c->ufd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->ufd < 0) {
        refuse(c, 502, "cannot make a socket");
        return;
    }
    if (connect(c->ufd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
        connect_failed(c, errno);
        return;
    }
    c->st = C_CONNECT;
    connect_check(c);
}

static void connect_to(struct econn *c, struct addrinfo *ai)
{
    c->ai = c->next = ai;
    connect_next(c);
}

static void on_lookup(void *data)
{
    struct econn *c = data;
    char x;
    if (c->st != C_RESOLVE)
        return;
    if (read(c->lfd, &x, 1) != 1)
        return; /* spurious */
    resolve_done(c);
    evl_io_destroy(c->e->l, &c->lio);
    close(c->lfd);
    c->lfd = -1;
    struct lookup *j = c->lookup;
    if (j->err) {
        char why[160];
        snprintf(why, sizeof(why), "cannot resolve the host: %s", gai_strerror(j->err));
        refuse(c, 502, why);
        return;
    }
    struct addrinfo *ai = j->ai;
    j->ai = NULL; /* the connection's now */
    connect_to(c, ai);
}

static void resolve(struct econn *c)
{
    int p[2];
    c->deadline_us = util_now_us() + (uint64_t)c->e->lim->connect_timeout_ms * 1000;
    unsigned char bin[16];
    if (inet_pton(AF_INET, c->host, bin) == 1 || inet_pton(AF_INET6, c->host, bin) == 1) {
        struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                                 .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai = NULL;
        char port[8];
        snprintf(port, sizeof(port), "%d", c->req.port);
        if (getaddrinfo(c->host, port, &hints, &ai) != 0) {
            refuse(c, 400, "invalid address");
            return;
        }
        connect_to(c, ai);
        return;
    }
    if (c->e->nresolving >= KEGRESS_KERNEL_LOOKUPS) {
        refuse(c, 429, "too many name lookups in progress for this kernel");
        return;
    }
    int slot = lookup_slot_take(c->e->tenant);
    if (slot < 0) {
        refuse(c, slot == -EAGAIN ? 429 : 503,
               slot == -EAGAIN ? "too many name lookups in progress for this tenant"
                               : "too many name lookups in progress");
        return;
    }
    struct lookup *j = calloc(1, sizeof(*j));
    if (!j || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, p) < 0) {
        lookup_slot_give(slot);
        free(j);
        refuse(c, 503, "out of resources");
        return;
    }
    j->slot = slot;
    atomic_init(&j->refs, 2);
    snprintf(j->host, sizeof(j->host), "%s", c->host);
    snprintf(j->port, sizeof(j->port), "%d", c->req.port);
    j->wfd = p[1];
    c->lfd = p[0];
    c->lookup = j;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int r = pthread_create(&t, &attr, lookup_thread, j);
    pthread_attr_destroy(&attr);
    if (r != 0) {
        lookup_slot_give(slot);
        atomic_fetch_sub(&j->refs, 1); /* the thread's */
        refuse(c, 503, "cannot start a name lookup");
        return;
    }
    c->st = C_RESOLVE;
    c->resolving = true;
    c->e->nresolving++;
    if (!(c->lio = c->e->l->io_add(c->e->l, c->lfd, on_lookup, c))) {
        close_conn(c, "out of memory");
        return;
    }
    c->e->l->timer_arm(c->e->l, c->timer, (uint64_t)c->e->lim->connect_timeout_ms);
}

/* ---- the request head ---- */

/* One TLS handshake from the kernel's bucket; false when it is empty. */
static bool tls_token(kegress_t *e)
{
    uint64_t now = util_now_us();
    e->tls_tokens += (double)(now - e->tls_us) / 1e6 * KEGRESS_TLS_RATE;
    if (e->tls_tokens > KEGRESS_TLS_BURST)
        e->tls_tokens = KEGRESS_TLS_BURST;
    e->tls_us = now;
    if (e->tls_tokens < 1.0)
        return false;
    e->tls_tokens -= 1.0;
    return true;
}

static int
resolve_secret(void *ctx, const char *ph, const char **val, size_t *vlen, const char **why)
{
    struct econn *c = ctx;
    int idx = -1;
    int r = c->e->secrets ? ksecret_resolve(c->e->secrets, ph, c->host, c->req.port, val, vlen,
                                            &idx, c->sub_why, sizeof(c->sub_why))
                          : (snprintf(c->sub_why, sizeof(c->sub_why),
                                      "a secret placeholder that is not this kernel's"),
                             -EPERM);
    if (idx >= 0)
        c->used |= 1u << idx;
    *why = c->sub_why;
    return r;
}

/* The request line of a head after substitution still has its two spaces (the target had
 * none: egreq checked it). */
static bool request_line_ok(const char *h, size_t n)
{
    const char *eol = memchr(h, '\n', n);
    size_t ll = eol ? (size_t)(eol - h) : n;
    int spaces = 0;
    for (size_t i = 0; i < ll; i++)
        spaces += h[i] == ' ';
    return spaces == 2;
}

/* A request head's placeholders (c->out), each replaced by its secret's value where the
 * request may carry it (kernelmgr/ksecret.h). 0, or the HTTP status to refuse it with (why). */
static int put_secrets(struct econn *c, const char **ret_why)
{
    const char *why = NULL;
    char *sub = NULL;
    size_t sublen = 0;
    /* a secret goes to its host only: not to another virtual host at the same address */
    if (memmem(c->out, c->req.out_len, EGSUB_PREFIX, EGSUB_PREFIX_LEN) &&
        egreq_host_check(c->out, c->req.out_len, c->host, c->req.port,
                         c->req.connect ? 443 : 80) < 0) {
        *ret_why = "a request carrying a secret placeholder must name its host in its Host header";
        return 403;
    }
    /* plain HTTP to the HTTPS port: the kernel chose to send in clear what goes over TLS */
    if (!c->kssl && c->req.port == 443 &&
        memmem(c->out, c->req.out_len, EGSUB_PREFIX, EGSUB_PREFIX_LEN)) {
        *ret_why = "a secret placeholder is not sent in plain HTTP to port 443: use https://";
        return 403;
    }
    int r = egsub_apply(c->out, c->req.out_len, resolve_secret, c, &sub, &sublen, &why);
    if (r < 0) {
        *ret_why = r == -ENOMEM ? "out of memory" : why;
        return r == -EPERM ? 403 : r == -EMSGSIZE ? 431 : 503;
    }
    if (sub && !request_line_ok(sub, sublen)) {
        /* a value with a space in the request target would split the request line */
        sodium_memzero(sub, sublen);
        free(sub);
        *ret_why = "a secret whose value has a space cannot go in the request target";
        return 400;
    }
    if (sub) {
        free(c->out);
        c->out = sub;
        c->req.out_len = sublen;
        log_debug("kernel=%s: egress host=%s port=%d: %d secret(s) put in", c->e->kernel, c->host,
                  c->req.port, r);
    }
    return 0;
}

static void on_head(struct econn *c)
{
    const char *why = NULL;
    int r = egreq_parse(c->head, c->hlen, &c->req, c->out, &why);
    if (r == 0)
        return;
    if (r < 0) {
        refuse(c, r == -EMSGSIZE ? 431 : r == -ENOTSUP ? 501 : 400, why);
        return;
    }
    evl_io_destroy(c->e->l, &c->cio); /* until relaying */
    snprintf(c->host, sizeof(c->host), "%s", c->req.host);
    if (!egpol_host_normalize(c->host)) {
        refuse(c, 400, "invalid host name");
        return;
    }
    c->entry = egpol_match(c->e->pol, c->host, c->req.port);
    if (!c->entry) {
        refuse(c, 403, "host and port are not in the kernel's egress policy");
        return;
    }
    if (c->req.connect && c->e->tls && ksecret_wants(c->e->secrets, c->host, c->req.port)) {
        /* read for its secrets: TLS with the kernel first, the host once the request is in */
        if (!tls_token(c->e))
            refuse(c, 429,
                   "too many TLS connections to secrets' hosts from this kernel; retry "
                   "later");
        else
            tls_start(c);
        return;
    }
    const char *why_s = NULL;
    int status = c->req.connect ? 0 : put_secrets(c, &why_s);
    if (status) {
        refuse(c, status, why_s);
        return;
    }
    resolve(c);
}

static void on_client_head(void *data)
{
    struct econn *c = data;
    if (c->st != C_HEAD)
        return;
    ssize_t n = recv(c->cfd, c->head + c->hlen, sizeof(c->head) - c->hlen, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        refuse(c, 400, "the request ended early");
        return;
    }
    c->hlen += (size_t)n;
    c->last_us = util_now_us();
    on_head(c);
}

/* ---- TLS interception (kernelmgr/ktls.h) ---- */

/* Answers inside the kernel's TLS (best effort), audits the refusal and closes. */
static void tls_refuse(struct econn *c, int status, const char *why)
{
    char msg[512];
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 %d kgw egress: %s\r\nContent-Type: text/plain\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\nkgw egress: %s\n",
                     status, why, strlen(why) + 13, why);
    if (c->kssl && c->tst != T_ACCEPT && n > 0) {
        int w = SSL_write(c->kssl, msg, (size_t)n < sizeof(msg) ? n : (int)sizeof(msg) - 1);
        if (w > 0)
            SSL_shutdown(c->kssl);
    }
    c->e->stats->denied++;
    log_info("kernel=%s: egress denied: host=\"%.128s\" port=%d: %s", c->e->kernel, c->host,
             c->req.port, why);
    audit(c, "denied", why);
    c->allowed = false;
    close_conn(c, why);
}

/* What an SSL call's result means: 1 progress, 0 wait (*rd: for readability), -1 ended
 * (cleanly or not). */
static int tls_result(SSL *s, int r, bool *rd)
{
    if (r > 0)
        return 1;
    switch (SSL_get_error(s, r)) {
    case SSL_ERROR_WANT_READ:
        *rd = true;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        return 0;
    default:
        ERR_clear_error();
        return -1;
    }
}

/* Reads the kernel's request head inside TLS; 1 progress, 0 wait, -1 the connection was
 * closed, 2 the request went on to the host's lookup and connect (the connection is not in
 * C_TLS for now). */
static int tls_head(struct econn *c, bool *krd)
{
    int n = SSL_read(c->kssl, c->head + c->hlen, (int)(sizeof(c->head) - c->hlen));
    int t = tls_result(c->kssl, n, krd);
    if (t < 0) {
        close_conn(c, "the kernel ended TLS before a request");
        return -1;
    }
    if (t == 0)
        return 0;
    c->hlen += (size_t)n;
    c->last_us = util_now_us();
    const char *why = NULL;
    size_t out_len = 0, head_len = 0;
    int r = egreq_parse_origin(c->head, c->hlen, c->out, &out_len, &head_len, &why);
    if (r == 0)
        return 1; /* more to read */
    if (r < 0) {
        tls_refuse(c, r == -EMSGSIZE ? 431 : r == -ENOTSUP ? 501 : 400, why);
        return -1;
    }
    c->req.out_len = out_len;
    c->req.head_len = head_len;
    int status = put_secrets(c, &why);
    if (status) {
        tls_refuse(c, status, why);
        return -1;
    }
    /* the host now: name lookup and connect as for any request (refusals come inside TLS),
     * then tls_upstream */
    evl_io_destroy(c->e->l, &c->cio);
    c->tst = T_UPSTREAM;
    resolve(c);
    return 2;
}

/* Connected to the host for an intercepted request: TLS with it, verified. */
static void tls_upstream(struct econn *c)
{
    if (!(c->ussl = ktls_connect_new(c->e->tls, c->host, c->ufd))) {
        tls_refuse(c, 502, "cannot start TLS with the host");
        return;
    }
    c->st = C_TLS;
    c->tst = T_UPSTREAM;
    c->last_us = util_now_us();
    tls_drive(c);
}

/* The host's TLS is up: its request goes on, decrypted both ways from now. */
static bool tls_relay_begin(struct econn *c)
{
    c->tst = T_RELAY;
    c->allowed = true;
    c->e->stats->allowed++;
    c->e->used |= c->used;
    note_host(c);
    size_t nrest = c->hlen - c->req.head_len;
    if (!put_pending(c, &c->up, c->out, c->req.out_len) ||
        !put_pending(c, &c->up, c->head + c->req.head_len, nrest))
        return false;
    size_t n = c->req.out_len + nrest;
    c->sent += n;
    host_bytes(c);
    c->e->stats->bytes_out += n;
    c->e->bytes += (long long)n;
    return true;
}

/* One direction of the relay inside TLS: writes p to `to`, or reads `from` into p. 1
 * progress, 0 nothing to do or wait, -1 the connection was closed. */
static int tls_pump(struct econn *c,
                    SSL *from,
                    SSL *to,
                    struct pending *p,
                    bool *eof,
                    uint64_t *count,
                    uint64_t *stat,
                    bool *from_rd,
                    bool *to_rd)
{
    kegress_t *e = c->e;
    if (p->len) {
        int w = SSL_write(to, p->buf + p->off, (int)(p->len - p->off));
        int t = tls_result(to, w, to_rd);
        if (t < 0) {
            close_conn(c, "TLS write failed");
            return -1;
        }
        if (t == 0)
            return 0;
        p->off += (size_t)w;
        if (p->off == p->len)
            p->off = p->len = 0;
        return 1;
    }
    if (*eof)
        return 0;
    if (!p->buf && !(p->buf = malloc(KEGRESS_BUF))) {
        close_conn(c, "out of memory");
        return -1;
    }
    size_t room = KEGRESS_BUF;
    if (e->lim->max_bytes > 0) {
        long long left = e->lim->max_bytes - e->bytes;
        if (left <= 0) {
            close_conn(c, "byte cap reached");
            return -1;
        }
        if ((long long)room > left)
            room = (size_t)left;
    }
    int n = SSL_read(from, p->buf, (int)room);
    int t = tls_result(from, n, from_rd);
    if (t < 0) {
        *eof = true;
        return 1;
    }
    if (t == 0)
        return 0;
    c->last_us = util_now_us();
    *count += (uint64_t)n;
    *stat += (uint64_t)n;
    e->bytes += n;
    host_bytes(c);
    p->off = 0;
    p->len = (size_t)n;
    return 1;
}

static void on_tls_io(void *data);

/* Makes every step it can, then waits for what the last steps need. */
static void tls_drive(struct econn *c)
{
    bool krd = false, urd = false;
    for (int progress = 1; progress;) {
        progress = 0;
        krd = urd = false;
        int t;
        switch (c->tst) {
        case T_ACCEPT:
            t = tls_result(c->kssl, SSL_accept(c->kssl), &krd);
            if (t < 0) {
                close_conn(c, "TLS handshake with the kernel failed (does it trust kgw's CA?)");
                return;
            }
            if (t > 0) {
                c->tst = T_HEAD;
                c->hlen = 0;
                progress = 1;
            }
            break;
        case T_HEAD:
            if ((t = tls_head(c, &krd)) < 0 || t == 2)
                return;
            progress = t;
            break;
        case T_UPSTREAM:
            t = tls_result(c->ussl, SSL_connect(c->ussl), &urd);
            if (t < 0) {
                long v = SSL_get_verify_result(c->ussl);
                char why[200];
                if (v != X509_V_OK)
                    snprintf(why, sizeof(why), "the host's certificate failed verification: %s",
                             X509_verify_cert_error_string(v));
                else
                    snprintf(why, sizeof(why), "TLS handshake with the host failed");
                tls_refuse(c, 502, why);
                return;
            }
            if (t > 0) {
                if (!tls_relay_begin(c))
                    return;
                progress = 1;
            }
            break;
        case T_RELAY:
            t = tls_pump(c, c->kssl, c->ussl, &c->up, &c->c_eof, &c->sent, &c->e->stats->bytes_out,
                         &krd, &urd);
            if (t < 0)
                return;
            progress |= t;
            t = tls_pump(c, c->ussl, c->kssl, &c->down, &c->u_eof, &c->received,
                         &c->e->stats->bytes_in, &urd, &krd);
            if (t < 0)
                return;
            progress |= t;
            if ((c->u_eof && !c->down.len) || (c->c_eof && !c->up.len)) {
                if (c->u_eof)
                    SSL_shutdown(c->kssl); /* best effort: the answer is complete */
                close_conn(c, NULL);
                return;
            }
            break;
        }
    }
    /* watch a side only when a TLS call waits for it to be readable */
    if (krd) {
        if (!watch(c, &c->cio, c->cfd, on_tls_io))
            return;
    } else {
        evl_io_destroy(c->e->l, &c->cio);
    }
    if (urd) {
        if (!watch(c, &c->uio, c->ufd, on_tls_io))
            return;
    } else {
        evl_io_destroy(c->e->l, &c->uio);
    }
    if (c->up.len || c->down.len || (!krd && !urd))
        arm_tick(c); /* a write waits */
    else
        arm_idle(c);
}

static void on_tls_io(void *data)
{
    struct econn *c = data;
    if (c->st == C_TLS)
        tls_drive(c);
}

/* A CONNECT to a host of the kernel's secrets: TLS with the kernel, as that host. */
static void tls_start(struct econn *c)
{
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (c->hlen != c->req.head_len) { /* TLS bytes before the answer: not a client's way */
        refuse(c, 400, "bytes after CONNECT before its answer");
        return;
    }
    if (!(c->kssl = ktls_accept_new(c->e->tls, c->host, c->cfd))) {
        refuse(c, 503, "cannot make a certificate for the host");
        return;
    }
    if (send(c->cfd, ok, sizeof(ok) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ok) - 1) {
        close_conn(c, "write to the kernel failed");
        return;
    }
    log_debug("kernel=%s: egress host=%s port=%d: TLS read for its secrets", c->e->kernel, c->host,
              c->req.port);
    c->st = C_TLS;
    c->tst = T_ACCEPT;
    c->last_us = util_now_us();
    tls_drive(c);
}

static void conn_tick(void *data)
{
    struct econn *c = data;
    uint64_t now = util_now_us();
    switch (c->st) {
    case C_HEAD:
        if (now - c->last_us >= (uint64_t)c->e->lim->idle_ms * 1000) {
            refuse(c, 408, "no complete request in time");
            return;
        }
        arm_idle(c);
        return;
    case C_RESOLVE: /* the timer was armed for the deadline */
        if (now >= c->deadline_us) {
            refuse(c, 504, "name lookup timed out");
            return;
        }
        c->e->l->timer_arm(c->e->l, c->timer, (c->deadline_us - now) / 1000 + 1);
        return;
    case C_CONNECT:
        connect_check(c);
        return;
    case C_RELAY:
        if (!c->up.len && !c->down.len && now - c->last_us >= (uint64_t)c->e->lim->idle_ms * 1000) {
            close_conn(c, "idle");
            return;
        }
        if ((c->up.len || c->down.len) && now - c->last_us >= (uint64_t)c->e->lim->idle_ms * 1000) {
            close_conn(c, "idle (a peer stopped reading)");
            return;
        }
        relay_settle(c);
        return;
    case C_TLS:
        if (now - c->last_us >= (uint64_t)c->e->lim->idle_ms * 1000) {
            close_conn(c, c->tst == T_RELAY ? "idle" : "TLS: no progress in time");
            return;
        }
        tls_drive(c);
        return;
    case C_CLOSED:
        return;
    }
}

/* ---- the listener ---- */

static void on_accept(void *data)
{
    kegress_t *e = data;
    for (int i = 0; i < ACCEPTS_PER_TURN; i++) {
        int fd = accept4(e->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct econn *c = calloc(1, sizeof(*c));
        if (!c || !(c->out = malloc(EGREQ_OUT_MAX)) ||
            !(c->timer = e->l->timer_new(e->l, conn_tick, c))) {
            if (c)
                free(c->out);
            free(c);
            close(fd);
            continue;
        }
        c->e = e;
        c->hidx = -1;
        c->cfd = fd;
        c->ufd = c->lfd = -1;
        c->last_us = util_now_us();
        list_append(&e->conns, &c->link);
        e->nconns++;
        if (e->nconns > e->lim->max_conns) {
            refuse(c, 429, "too many connections from this kernel");
            continue;
        }
        if (e->lim->max_bytes > 0 && e->bytes >= e->lim->max_bytes) {
            refuse(c, 429, "this kernel's egress byte cap is reached");
            continue;
        }
        if (!(c->cio = e->l->io_add(e->l, fd, on_client_head, c))) {
            close_conn(c, "out of memory");
            continue;
        }
        arm_idle(c);
    }
}

kegress_t *kegress_new(evl_t *l,
                       int listen_fd,
                       const egpol_t *pol,
                       const struct kegress_limits *lim,
                       struct kegress_stats *stats,
                       const char *tenant,
                       const char *kid)
{
    kegress_t *e = calloc(1, sizeof(*e));
    if (!e) {
        close(listen_fd);
        return NULL;
    }
    e->l = l;
    e->lfd = listen_fd;
    e->pol = pol;
    e->lim = lim;
    e->stats = stats;
    snprintf(e->tenant, sizeof(e->tenant), "%s", tenant ? tenant : "");
    snprintf(e->kernel, sizeof(e->kernel), "%s", kid);
    list_init(&e->conns);
    list_init(&e->dead);
    int fl = fcntl(listen_fd, F_GETFL);
    if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) < 0 || /* accepts never wait */
        !(e->reaper = l->timer_new(l, on_reap, e)) ||
        !(e->lio = l->io_add(l, listen_fd, on_accept, e))) {
        int err = errno;
        kegress_destroy(&e);
        errno = err;
        return NULL;
    }
    return e;
}

void kegress_destroy(kegress_t **pe)
{
    kegress_t *e = *pe;
    if (!e)
        return;
    while (!list_empty(&e->conns))
        close_conn(list_first(&e->conns, struct econn, link), "the kernel process ended");
    on_reap(e);
    evl_io_destroy(e->l, &e->lio);
    evl_timer_destroy(e->l, &e->reaper);
    if (e->lfd >= 0)
        close(e->lfd);
    free(e);
    *pe = NULL;
}
