/* Client connections by descriptor (see gw.h): their counts per address (ratelimit.c), the
 * header phase's fair share and its timeout.
 *
 * A connection's header phase runs from accept until its request headers are complete (a TLS
 * handshake included). libwebsockets holds a header table for it all that time: main.c sizes
 * the pool of tables from --max-connections (lws allocates a table when a connection takes one
 * and frees it when it is given back, so the pool costs nothing until used), and no address
 * may hold more than --max-header-connections-per-address of them. The address is the socket
 * peer's: at accept nothing else is known, so behind --trusted-proxies the proxy's connections
 * share its address (a proxy that forwards whole requests leaves the header phase at once).
 *
 * Connections in their header phase are kept in a list, oldest first. All have the same
 * allowance, so appending keeps the list in deadline order: one timer fires for the oldest,
 * a connection leaving the phase is unlinked in O(1), and nothing runs while no deadline is
 * due. A late connection is answered 408 (plain HTTP) and closed.
 *
 * lws keeps a timer of its own on a connection holding a header table (timeout_secs_ah_idle,
 * which main.c sets to --header-timeout); it closes without an answer. Ours is due a
 * millisecond earlier than that timer can be for the same connection (lws arms it when the
 * connection takes its table, after accept), so the 408 is sent first. On a kept-alive
 * connection lws re-arms its timer when the next request's first bytes take a table; no
 * callback says when that happens, so such a request is timed by lws alone (closed without an
 * answer) and is not counted in the header phase: the connection was admitted and has
 * completed a request before. */
#include "gateway/conns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/http.h"
#include "gateway/reqguard.h"

#define NONE -1

struct conn {
    struct lws *wsi;   /* once lws has made it (NULL before) */
    int addr;          /* rl_conn_open's index + 1; 0: not counted */
    int hdr;           /* rl_hdr_open's index + 1; 0: not counted */
    bool open;         /* accepted, not yet seen closed */
    bool in_hdr;       /* in its header phase: linked in the list */
    uint64_t deadline; /* monotonic ms: its headers are late after it */
    int prev, next;    /* the list, by descriptor */
    struct route *route; /* a websocket's, from its upgrade until it is established */
};

struct conns {
    gw_t *g;
    struct conn *c; /* by descriptor */
    size_t n;
    int head, tail; /* connections in their header phase, oldest first */
    evl_timer_t *timer;
    bool armed;
    char answer[2048]; /* the 408 */
    size_t answer_len;
};

static bool refused(int idx)
{
    return idx == RL_REFUSED || idx == RL_REFUSED_AGAIN;
}

/* The connection of a wsi we know (lws_get_opaque_user_data), or NULL. */
static struct conn *conn_of(conns_t *c, struct lws *wsi)
{
    struct conn *e = wsi ? lws_get_opaque_user_data(wsi) : NULL;
    uintptr_t p = (uintptr_t)e, base = (uintptr_t)c->c;
    if (!e || p < base || p >= base + c->n * sizeof(*e) || e->wsi != wsi)
        return NULL; /* not ours: an adopted descriptor (lwsloop.c), an h2 stream */
    return e;
}

static void arm(conns_t *c)
{
    uint64_t now = util_now_ms(), due = c->c[c->head].deadline;
    c->g->loop.evl.timer_arm(&c->g->loop.evl, c->timer, due > now ? due - now : 0);
    c->armed = true;
}

static void hdr_link(conns_t *c, struct conn *e)
{
    int fd = (int)(e - c->c);
    e->prev = c->tail;
    e->next = NONE;
    if (c->tail != NONE)
        c->c[c->tail].next = fd;
    else
        c->head = fd;
    c->tail = fd;
    e->in_hdr = true;
    if (!c->armed) /* else it is due no later than this one */
        arm(c);
}

/* The header phase ends: out of the list and its address's count. */
static void hdr_end(conns_t *c, struct conn *e)
{
    if (!e->in_hdr)
        return;
    if (e->prev != NONE)
        c->c[e->prev].next = e->next;
    else
        c->head = e->next;
    if (e->next != NONE)
        c->c[e->next].prev = e->prev;
    else
        c->tail = e->prev;
    e->in_hdr = false;
    if (e->hdr)
        rl_hdr_close(c->g->rl, e->hdr - 1);
    e->hdr = 0;
}

/* The connection is gone: nothing of it counts any more. Its wsi is not touched (it may be
 * freed already). */
static void settle(conns_t *c, struct conn *e)
{
    hdr_end(c, e);
    if (e->addr)
        rl_conn_close(c->g->rl, e->addr - 1);
    e->addr = 0;
    e->wsi = NULL;
    e->open = false;
    free(e->route);
    e->route = NULL;
    reqguard_close((int)(e - c->c));
}

static void peer_of(struct lws *wsi, char out[RL_ADDR_MAX])
{
    out[0] = '\0';
    lws_get_peer_simple(wsi, out, RL_ADDR_MAX);
    if (!strncmp(out, "::ffff:", 7))
        memmove(out, out + 7, strlen(out + 7) + 1);
}

/* The 408, where it can be sent: only plain HTTP (over TLS the bytes would have to go through
 * the session, which is lws's, and the handshake may not even be done). Nothing else has been
 * written to the connection (its first request's header phase), so the answer is whole; the
 * write side is shut so the client sees it end even if lws's close then resets it. */
static void answer_late(conns_t *c, struct lws *wsi)
{
    int fd = (int)lws_get_socket_fd(wsi);
    if (fd < 0 || !c->answer_len || c->g->cfg.certfile[0] || lws_partial_buffered(wsi))
        return;
    if (send(fd, c->answer, c->answer_len, MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
        shutdown(fd, SHUT_WR);
}

static void on_timer(void *data)
{
    conns_t *c = data;
    char first[RL_ADDR_MAX] = "", addr[RL_ADDR_MAX];
    int late = 0;
    c->armed = false;
    /* the time is read for each: a long round must also take those that became late during
     * it, or lws's timers (which run in time order with ours) would close them first */
    while (c->head != NONE && c->c[c->head].deadline <= util_now_ms()) {
        struct conn *e = &c->c[c->head];
        if (!e->wsi) { /* lws never made it (adopting it failed): no close will come */
            settle(c, e);
            continue;
        }
        hdr_end(c, e);
        peer_of(e->wsi, addr);
        if (!late++)
            memcpy(first, addr, sizeof(first));
        log_debug("connection from %s closed: no complete request headers within %lld s", addr,
                  c->g->cfg.header_timeout);
        answer_late(c, e->wsi);
        /* closed on lws's next round; WSI_DESTROY settles its address's count */
        lws_set_timeout(e->wsi, PENDING_TIMEOUT_HOLDING_AH, LWS_TO_KILL_ASYNC);
    }
    if (c->head != NONE)
        arm(c);
    if (late) {
        log_info("%d connection%s closed: no complete request headers within %lld s (the first "
                 "from %s)",
                 late, late > 1 ? "s" : "", c->g->cfg.header_timeout, first);
        gw_trim_soon(c->g); /* their header tables are freed */
    }
}

conns_t *conns_new(gw_t *g, size_t slots)
{
    char msg[128];
    conns_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->g = g;
    c->n = slots;
    c->head = c->tail = NONE;
    c->c = calloc(slots, sizeof(*c->c));
    c->timer = c->c ? g->loop.evl.timer_new(&g->loop.evl, on_timer, c) : NULL;
    if (!c->timer) {
        int err = errno ? errno : ENOMEM;
        conns_destroy(&c);
        errno = err;
        return NULL;
    }
    snprintf(msg, sizeof(msg), "the request headers were not complete within %lld s",
             g->cfg.header_timeout);
    c->answer_len = http_format_error(g, 408, msg, c->answer, sizeof(c->answer));
    return c;
}

void conns_destroy(conns_t **pc)
{
    conns_t *c = *pc;
    if (!c)
        return;
    evl_timer_destroy(&c->g->loop.evl, &c->timer);
    for (size_t i = 0; c->c && i < c->n; i++)
        free(c->c[i].route);
    free(c->c);
    free(c);
    *pc = NULL;
}

int conns_accept(conns_t *c, const struct lws_filter_network_conn_args *a)
{
    char addr[RL_ADDR_MAX] = "";
    int fd = (int)a->accept_fd;
    const struct sockaddr *sa = (const struct sockaddr *)&a->cli_addr;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof(addr));
    else if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(a6))
        inet_ntop(AF_INET, &a6->s6_addr[12], addr, sizeof(addr)); /* as it is logged elsewhere */
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, a6, addr, sizeof(addr));
    if (fd < 0 || (size_t)fd >= c->n)
        return 0; /* not below the descriptor limit lws was given: cannot happen */
    struct conn *e = &c->c[fd];
    if (e->open) /* a close we did not see: settle it first */
        settle(c, e);
    if (addr[0]) {
        int ci = rl_conn_open(c->g->rl, addr);
        if (refused(ci)) {
            c->g->stats.refused[GW_REFUSED_CONNECTION_CAP]++;
            if (ci == RL_REFUSED) {
                log_info("connection from %s refused: %d connections from that address are "
                         "open (further refusals are not logged until it has room again)",
                         addr, c->g->cfg.rl.conns_per_addr);
                audit_event("rate_limited", "s:s, s:s", "addr", addr, "limit", "connections");
            }
            return 1;
        }
        int hi = rl_hdr_open(c->g->rl, addr);
        if (refused(hi)) {
            c->g->stats.refused[GW_REFUSED_CONNECTION_CAP]++;
            if (ci >= 0)
                rl_conn_close(c->g->rl, ci);
            if (hi == RL_REFUSED) {
                log_info("connection from %s refused: %d connections from that address are "
                         "still sending their request headers (further refusals are not "
                         "logged until it has room again)",
                         addr, c->g->cfg.rl.hdr_conns_per_addr);
                audit_event("rate_limited", "s:s, s:s", "addr", addr, "limit",
                            "header_connections");
            }
            return 1;
        }
        e->addr = ci >= 0 ? ci + 1 : 0;
        e->hdr = hi >= 0 ? hi + 1 : 0;
    }
    e->open = true;
    e->wsi = NULL;
    reqguard_open(fd);
    /* a millisecond ahead of lws's own timer (see the top of this file) */
    e->deadline = util_now_ms() + (uint64_t)c->g->cfg.header_timeout * 1000 - 1;
    hdr_link(c, e);
    return 0;
}

void conns_started(conns_t *c, struct lws *wsi)
{
    int fd = (int)lws_get_socket_fd(wsi);
    if (lws_get_network_wsi(wsi) != wsi || fd < 0 || (size_t)fd >= c->n)
        return;
    struct conn *e = &c->c[fd];
    if (!e->open || e->wsi)
        return;
    e->wsi = wsi;
    lws_set_opaque_user_data(wsi, e);
}

void conns_headers_done(conns_t *c, struct lws *wsi)
{
    struct conn *e = conn_of(c, lws_get_network_wsi(wsi));
    if (e)
        hdr_end(c, e);
}

void conns_closed(conns_t *c, struct lws *wsi)
{
    /* by the wsi: lws has already given up the descriptor when it says so */
    struct conn *e = conn_of(c, wsi);
    if (e)
        settle(c, e);
}

int conns_set_route(conns_t *c, struct lws *wsi, const struct route *rt)
{
    struct conn *e = c ? conn_of(c, lws_get_network_wsi(wsi)) : NULL;
    if (!e)
        return -ENOENT;
    if (!e->route && !(e->route = malloc(sizeof(*e->route))))
        return -ENOMEM;
    *e->route = *rt;
    return 0;
}

int conns_take_route(conns_t *c, struct lws *wsi, struct route *out)
{
    struct conn *e = c ? conn_of(c, lws_get_network_wsi(wsi)) : NULL;
    if (!e || !e->route)
        return -ENOENT;
    *out = *e->route;
    free(e->route);
    e->route = NULL;
    return 0;
}
