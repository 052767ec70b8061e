/* Rate limits kept by the gateway: failed authentications per client address (a fixed window:
 * past the limit, the address is refused until the window ends, correct key or not), a token
 * bucket per tenant for requests, websocket messages and RPC calls, and open connections per
 * client address, in all and still in their header phase. Tables are fixed size: when one is
 * full the stalest entry is reused (connection counts: a connection is accepted uncounted), so
 * memory does not grow with the number of addresses an attacker owns. IPv6 addresses count
 * per /64. */
#ifndef KGW_GATEWAY_RATELIMIT_H
#define KGW_GATEWAY_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct rl rl_t;

#define RL_ADDR_MAX 64
#define RL_XFF_MAX  4096 /* bytes of X-Forwarded-For considered */

struct rl_opts {
    int auth_fail_limit;    /* failures per address per window (0: no limit) */
    int auth_fail_window_s;
    double rate;            /* tokens per second per tenant (0: no limit) */
    double burst;           /* bucket size */
    int conns_per_addr;     /* open connections per address (0: no limit) */
    int hdr_conns_per_addr; /* of them, still sending their request headers (0: no limit) */
};

rl_t *rl_new(const struct rl_opts *o);
void rl_destroy(rl_t **rl);
/* The address key of a textual address: IPv4 as is (also when IPv4-mapped), IPv6 its /64. */
void rl_addr_key(const char *addr, char out[RL_ADDR_MAX]);
/* True when addr is over its failure limit; retry_after_s: seconds until the window ends. */
bool rl_auth_blocked(rl_t *rl, const char *addr, int *retry_after_s, int64_t now_ms);
/* Counts a failure; true when this one reached the limit. */
bool rl_auth_failed(rl_t *rl, const char *addr, int64_t now_ms);
/* Takes n tokens from the tenant's bucket; false (wait_ms: until they are there) when empty. */
bool rl_take(rl_t *rl, const char *tenant, double n, int64_t now_ms, int *wait_ms);
/* For work already done (a message received): takes n tokens even into debt; false (wait_ms:
 * until the debt is paid) when the bucket is below zero. */
bool rl_charge(rl_t *rl, const char *tenant, double n, int64_t now_ms, int *wait_ms);

/* The client behind trusted proxies: when peer is in the comma-separated trusted list (of
 * addresses and networks "ADDR/BITS", e.g. a cluster's pod network), the
 * rightmost address of X-Forwarded-For (xff, len bytes, not NUL-terminated) that is not itself
 * trusted goes to out (true). Malformed entries stop the walk. */
bool rl_forwarded_client(const char *peer, const char *xff, size_t len, const char *trusted,
                         char out[RL_ADDR_MAX]);
/* What rl_conn_open and rl_hdr_open return instead of a table index: addr is at its limit,
 * refuse the connection (RL_REFUSED: log it; RL_REFUSED_AGAIN: addr has been refused since it
 * was last below its limit, so a flood is logged once), or the table is crowded, accept it
 * uncounted (RL_UNCOUNTED). */
#define RL_REFUSED       (-1)
#define RL_UNCOUNTED     (-2)
#define RL_REFUSED_AGAIN (-3)

/* A connection from addr opens: its table index (pass it to rl_conn_close), or one of the
 * above. */
int rl_conn_open(rl_t *rl, const char *addr);
void rl_conn_close(rl_t *rl, int idx);
/* The same for connections still sending their request headers (the header phase), counted
 * against hdr_conns_per_addr: rl_hdr_open when one is accepted, rl_hdr_close when its headers
 * are complete or it closes. */
int rl_hdr_open(rl_t *rl, const char *addr);
void rl_hdr_close(rl_t *rl, int idx);

#endif
