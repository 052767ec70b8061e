/* A kernel's egress proxy: an HTTP proxy on 127.0.0.1:KEGRESS_PORT inside the kernel's own
 * network namespace (the listening socket comes from sbx_listen_in), served from the gateway's
 * loop. CONNECT tunnels and absolute-URI plain-HTTP requests (protocol/egreq.h) go to the hosts
 * the kernel's policy (common/egpol.h) allows: the name is resolved here (a thread per lookup:
 * at most KEGRESS_KERNEL_LOOKUPS of a kernel's connections wait for one, until their connect
 * deadline; at most KEGRESS_TENANT_LOOKUPS threads run for one tenant, and
 * KEGRESS_MAX_LOOKUPS in the gateway, until getaddrinfo returns), addresses of the refused classes are
 * skipped unless the matching entry names them, and the connection goes to the very address
 * checked. Per kernel: connections at once, bytes relayed, idle time. Every connection is an
 * audit event "egress" (docs/audit.md). docs/security.md has the model. */
#ifndef KGW_KERNELMGR_KEGRESS_H
#define KGW_KERNELMGR_KEGRESS_H

#include <jansson.h>
#include <stdint.h>

#include "common/egpol.h"
#include "common/evl.h"
#include "kernelmgr/ksecret.h"
#include "kernelmgr/ktls.h"

#define KEGRESS_PORT        3128
#define KEGRESS_URL         "http://127.0.0.1:3128"
#define KEGRESS_MAX_LOOKUPS    256 /* lookup threads running, all tenants (more: 503) */
#define KEGRESS_TENANT_LOOKUPS 32  /* ... for one tenant's kernels (more: 429) */
#define KEGRESS_KERNEL_LOOKUPS 8   /* a kernel's connections waiting for a lookup (more: 429) */

struct kegress_limits {
    int max_conns;          /* open at once (more are answered 429) */
    long long max_bytes;    /* relayed both ways over the proxy's life (0: no cap) */
    int idle_ms;            /* a connection (or a request head) idle this long is closed */
    int connect_timeout_ms; /* name lookup and TCP connect together */
};

struct kegress_stats {
    uint64_t allowed, denied;       /* connections */
    uint64_t bytes_out, bytes_in;   /* to the hosts, from them */
};

typedef struct kegress kegress_t;

/* Serves listen_fd (taken: closed by kegress_destroy, or here on failure). pol, lim, stats
 * must outlive the proxy. NULL + errno. */
kegress_t *kegress_new(evl_t *l, int listen_fd, const egpol_t *pol,
                       const struct kegress_limits *lim, struct kegress_stats *stats,
                       const char *tenant, const char *kid);
/* The distinct "host:port" the proxy let connections through to since the last call (at most
 * KEGRESS_HOSTS_MAX, then "..."), as a new JSON array; forgets them. */
#define KEGRESS_HOSTS_MAX 16
json_t *kegress_hosts_take(kegress_t *e);
/* The kernel's secrets (kernelmgr/ksecret.h; NULL: none; must outlive the proxy): the
 * placeholders in a forwarded request's head are replaced by their values where the request
 * may carry them, and the request is refused (403, audited) where it may not. With tls
 * (kernelmgr/ktls.h; NULL: none), a CONNECT to a host one of them is for is read the same way
 * inside TLS the proxy ends; any other CONNECT stays a tunnel. */
void kegress_set_secrets(kegress_t *e, ksecret_t *ks, ktls_t *tls);
/* The receipt of what the proxy let through since the last take (this or
 * kegress_hosts_take), as a new JSON object {"hosts": [{"host": "h:p", "bytes_out",
 * "bytes_in"}...] (at most KEGRESS_HOSTS_MAX), "more_hosts": bool, "secrets": [the names of
 * the secrets put into requests]}; forgets them. */
json_t *kegress_receipt_take(kegress_t *e);
/* Closes every connection (each audited) and the listener. */
void kegress_destroy(kegress_t **e);

#endif
