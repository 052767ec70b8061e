/* TLS interception for kernels' egress proxies (kernelmgr/kegress.c), only for hosts one of
 * the kernel's secrets is for (docs/security.md, "Secrets"): the proxy ends the kernel's TLS
 * with a certificate for the host it asked for, signed by the gateway's egress CA (an
 * operator's file, or made at start: its key stays in the gateway's memory), and opens its
 * own TLS to the host, verified against the system's CAs (or a file of them), TLS 1.2 or
 * later, host name or IP address checked. Leaf certificates share one key and are cached
 * (KTLS_CACHE_MAX hosts, the oldest goes first). Sockets are non-blocking: callers drive
 * SSL_accept / SSL_connect / SSL_read / SSL_write from readiness. */
#ifndef KGW_KERNELMGR_KTLS_H
#define KGW_KERNELMGR_KTLS_H

#include <openssl/ssl.h>
#include <stddef.h>

#define KTLS_CACHE_MAX 256
#define KTLS_LEAF_DAYS 7

typedef struct ktls ktls_t;

/* ca_file: PEM with the CA's certificate and private key (refused when group or others may
 * read it), or NULL/"" to make a CA now; upstream_cas: PEM file of CAs to verify hosts with,
 * or NULL/"" for the system's. NULL + errno with a reason in err. */
ktls_t *ktls_new(const char *ca_file, const char *upstream_cas, char *err, size_t errsz);
void ktls_destroy(ktls_t **t);
/* The CA certificate (PEM), for kernels to trust. */
const char *ktls_ca_pem(const ktls_t *t);
/* A server-side SSL on fd presenting a certificate for host (a DNS name or an IP literal,
 * normalized), or NULL. */
SSL *ktls_accept_new(ktls_t *t, const char *host, int fd);
/* A client-side SSL on fd to host (SNI for names), verifying its certificate, or NULL. */
SSL *ktls_connect_new(ktls_t *t, const char *host, int fd);

#endif
