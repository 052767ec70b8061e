/* Rate limits (see ratelimit.h). */
#include <arpa/inet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/ratelimit.h"

#define RL_SLOTS  16384 /* per table, a power of two */
#define RL_PROBES 8

struct rl_ent {
    char key[RL_ADDR_MAX];
    int64_t t;    /* window start (failures) or last refill (buckets), ms; 0: free */
    double v;     /* failures, or tokens */
};

struct rl {
    struct rl_opts o;
    struct rl_ent fail[RL_SLOTS];
    struct rl_ent bucket[RL_SLOTS];
    struct rl_ent conns[RL_SLOTS]; /* v: open connections; t: CONN_* while in use */
    struct rl_ent hdrs[RL_SLOTS];  /* v: connections in their header phase; t: alike */
};

#define CONN_USED     1 /* t of a connection count in use */
#define CONN_REFUSING 2 /* in use, and a refusal was reported since it was below its limit */

rl_t *rl_new(const struct rl_opts *o)
{
    rl_t *rl = calloc(1, sizeof(*rl));
    if (rl)
        rl->o = *o;
    return rl;
}

void rl_destroy(rl_t **rl)
{
    free(*rl);
    *rl = NULL;
}

void rl_addr_key(const char *addr, char out[RL_ADDR_MAX])
{
    unsigned char a[16];
    char buf[INET6_ADDRSTRLEN];
    if (inet_pton(AF_INET6, addr, a) == 1) {
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a, v4mapped, 12)) {
            inet_ntop(AF_INET, a + 12, buf, sizeof(buf));
        } else {
            memset(a + 8, 0, 8);
            inet_ntop(AF_INET6, a, buf, sizeof(buf));
            snprintf(out, RL_ADDR_MAX, "%s/64", buf);
            return;
        }
        snprintf(out, RL_ADDR_MAX, "%s", buf);
        return;
    }
    snprintf(out, RL_ADDR_MAX, "%s", addr);
}

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The entry for key, or a free or the stalest one among its probes (reset, t = 0). */
static struct rl_ent *lookup(struct rl_ent *tab, const char *key)
{
    uint32_t h = hash(key);
    struct rl_ent *oldest = NULL;
    for (int i = 0; i < RL_PROBES; i++) {
        struct rl_ent *e = &tab[(h + (uint32_t)i) & (RL_SLOTS - 1)];
        if (e->t != 0 && !strcmp(e->key, key))
            return e;
        if (!oldest || e->t < oldest->t)
            oldest = e;
    }
    memset(oldest, 0, sizeof(*oldest));
    snprintf(oldest->key, sizeof(oldest->key), "%s", key);
    return oldest;
}

static struct rl_ent *fail_entry(rl_t *rl, const char *addr, int64_t now)
{
    char key[RL_ADDR_MAX];
    rl_addr_key(addr, key);
    struct rl_ent *e = lookup(rl->fail, key);
    if (e->t == 0 || now - e->t >= (int64_t)rl->o.auth_fail_window_s * 1000) {
        e->t = now ? now : 1;
        e->v = 0;
    }
    return e;
}

bool rl_auth_blocked(rl_t *rl, const char *addr, int *retry_after_s, int64_t now)
{
    if (rl->o.auth_fail_limit <= 0)
        return false;
    struct rl_ent *e = fail_entry(rl, addr, now);
    if (e->v < rl->o.auth_fail_limit)
        return false;
    int64_t left = e->t + (int64_t)rl->o.auth_fail_window_s * 1000 - now;
    *retry_after_s = (int)((left + 999) / 1000);
    if (*retry_after_s < 1)
        *retry_after_s = 1;
    return true;
}

bool rl_auth_failed(rl_t *rl, const char *addr, int64_t now)
{
    if (rl->o.auth_fail_limit <= 0)
        return false;
    struct rl_ent *e = fail_entry(rl, addr, now);
    e->v++;
    return e->v == rl->o.auth_fail_limit;
}

static struct rl_ent *refill(rl_t *rl, const char *tenant, int64_t now)
{
    struct rl_ent *e = lookup(rl->bucket, tenant);
    if (e->t == 0) {
        e->v = rl->o.burst;
    } else {
        e->v = fmin(rl->o.burst, e->v + (double)(now - e->t) * rl->o.rate / 1000.0);
    }
    e->t = now ? now : 1;
    return e;
}

bool rl_take(rl_t *rl, const char *tenant, double n, int64_t now, int *wait_ms)
{
    if (rl->o.rate <= 0)
        return true;
    struct rl_ent *e = refill(rl, tenant, now);
    if (e->v >= n) {
        e->v -= n;
        return true;
    }
    *wait_ms = (int)ceil((n - e->v) * 1000.0 / rl->o.rate);
    return false;
}

bool rl_charge(rl_t *rl, const char *tenant, double n, int64_t now, int *wait_ms)
{
    if (rl->o.rate <= 0)
        return true;
    struct rl_ent *e = refill(rl, tenant, now);
    e->v = fmax(e->v - n, -rl->o.burst); /* debt, bounded */
    if (e->v >= 0)
        return true;
    *wait_ms = (int)ceil(-e->v * 1000.0 / rl->o.rate);
    return false;
}

/* A connection count: counts one more for addr in tab unless it is at limit (see rl_conn_open). */
static int count_open(struct rl_ent *tab, int limit, const char *addr)
{
    char key[RL_ADDR_MAX];
    rl_addr_key(addr, key);
    uint32_t h = hash(key);
    struct rl_ent *free_e = NULL;
    for (int i = 0; i < RL_PROBES; i++) {
        struct rl_ent *e = &tab[(h + (uint32_t)i) & (RL_SLOTS - 1)];
        if (e->t != 0 && !strcmp(e->key, key)) {
            if (limit > 0 && e->v >= limit) {
                if (e->t == CONN_REFUSING)
                    return RL_REFUSED_AGAIN;
                e->t = CONN_REFUSING;
                return RL_REFUSED;
            }
            e->v++;
            return (int)(e - tab);
        }
        if (e->t == 0 && !free_e)
            free_e = e;
    }
    if (!free_e)
        return RL_UNCOUNTED; /* no room to count it: not refused, not counted */
    snprintf(free_e->key, sizeof(free_e->key), "%s", key);
    free_e->t = CONN_USED;
    free_e->v = 1;
    return (int)(free_e - tab);
}

static void count_close(struct rl_ent *tab, int limit, int idx)
{
    if (idx < 0 || idx >= RL_SLOTS)
        return;
    struct rl_ent *e = &tab[idx];
    if (e->t == 0)
        return;
    if (--e->v <= 0)
        memset(e, 0, sizeof(*e));
    else if (e->v < limit)
        e->t = CONN_USED; /* room again: the next refusal is reported */
}

int rl_conn_open(rl_t *rl, const char *addr)
{
    return count_open(rl->conns, rl->o.conns_per_addr, addr);
}

void rl_conn_close(rl_t *rl, int idx)
{
    count_close(rl->conns, rl->o.conns_per_addr, idx);
}

int rl_hdr_open(rl_t *rl, const char *addr)
{
    return count_open(rl->hdrs, rl->o.hdr_conns_per_addr, addr);
}

void rl_hdr_close(rl_t *rl, int idx)
{
    count_close(rl->hdrs, rl->o.hdr_conns_per_addr, idx);
}

/* addr (n bytes, an address) lies in the network "net/bits" (len bytes, from the trusted
 * list): both parse as addresses of one family and agree in the first bits bits */
static bool in_net(const char *net, size_t len, const char *addr, size_t n)
{
    char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
    const char *slash = memchr(net, '/', len);
    size_t nl = (size_t)(slash - net), bl = len - nl - 1;
    if (nl == 0 || nl >= sizeof(a) || n == 0 || n >= sizeof(b) || bl == 0 || bl > 3)
        return false;
    int bits = 0;
    for (size_t i = 0; i < bl; i++) {
        if (slash[1 + i] < '0' || slash[1 + i] > '9')
            return false;
        bits = bits * 10 + (slash[1 + i] - '0');
    }
    memcpy(a, net, nl);
    a[nl] = '\0';
    memcpy(b, addr, n);
    b[n] = '\0';
    unsigned char x[16], y[16];
    int fam = strchr(a, ':') ? AF_INET6 : AF_INET, max = fam == AF_INET6 ? 128 : 32;
    if (bits > max || inet_pton(fam, a, x) != 1 || inet_pton(fam, b, y) != 1)
        return false;
    for (int i = 0; i < bits; i++)
        if ((x[i / 8] ^ y[i / 8]) & (0x80 >> (i % 8)))
            return false;
    return true;
}

/* addr (n bytes) is an entry of the comma-separated list, or in one of its "net/bits" */
static bool in_list(const char *list, const char *addr, size_t n)
{
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len > 0 && *p == ' ')
            p++, len--;
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len == n && !strncmp(p, addr, n))
            return true;
        if (memchr(p, '/', len) && in_net(p, len, addr, n))
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

bool rl_forwarded_client(const char *peer, const char *xff, size_t len, const char *trusted,
                         char out[RL_ADDR_MAX])
{
    if (!in_list(trusted, peer, strlen(peer)))
        return false;
    /* from the right: each hop appended the address it got the request from; the first one
     * that is not a trusted proxy is the client */
    bool found = false;
    size_t end = len > RL_XFF_MAX ? 0 : len;
    while (end > 0) {
        size_t start = end;
        while (start > 0 && xff[start - 1] != ',')
            start--;
        size_t a = start, b = end;
        while (a < b && (xff[a] == ' ' || xff[a] == '\t'))
            a++;
        while (b > a && (xff[b - 1] == ' ' || xff[b - 1] == '\t'))
            b--;
        size_t n = b - a, ok = 0;
        while (ok < n && strchr("0123456789abcdefABCDEF.:", xff[a + ok]) && xff[a + ok])
            ok++;
        if (n == 0 || n >= RL_ADDR_MAX || ok < n)
            break; /* malformed: keep the last good one */
        memcpy(out, xff + a, n);
        out[n] = '\0';
        found = true;
        if (!in_list(trusted, out, n))
            break;
        end = start > 0 ? start - 1 : 0;
    }
    return found;
}
