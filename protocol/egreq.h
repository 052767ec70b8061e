/* The head of a request to a kernel's egress proxy (kernelmgr/kegress.c): untrusted bytes from
 * code in a kernel. Two forms are served:
 *
 *   CONNECT host:port HTTP/1.1       a tunnel (TLS: https://, pip, requests)
 *   GET http://host[:port]/path HTTP/1.1   plain HTTP, forwarded in origin form
 *
 * egreq_parse looks at most EGREQ_HEAD_MAX bytes and at most EGREQ_MAX_HEADERS header lines;
 * lines end with CRLF (a bare LF is accepted too). For forwarding it writes the head to send
 * upstream: the request line in origin form, the client's headers without Proxy-*,
 * Connection and Keep-Alive ones, and "Connection: close" (one request per connection). */
#ifndef KGW_PROTOCOL_EGREQ_H
#define KGW_PROTOCOL_EGREQ_H

#include <stdbool.h>
#include <stddef.h>

#define EGREQ_HEAD_MAX    8192
#define EGREQ_MAX_HEADERS 100
#define EGREQ_HOST_MAX    253
#define EGREQ_OUT_MAX     (EGREQ_HEAD_MAX + 512) /* size of the rewritten head's buffer */

struct egreq {
    bool connect;                  /* CONNECT (else a forwarded request) */
    char host[EGREQ_HOST_MAX + 1]; /* as sent, IPv6 without brackets; not yet normalized */
    int port;
    size_t head_len;               /* bytes of the head in the input, final empty line included */
    size_t out_len;                /* forwarded: bytes of the rewritten head in out */
};

/* 1: a complete head (ret filled; out holds the rewritten head for a forwarded request);
 * 0: incomplete, more bytes needed; -EMSGSIZE: no head within EGREQ_HEAD_MAX bytes or too
 * many header lines; -EINVAL: malformed; -ENOTSUP: a form not served (origin-form requests,
 * https:// targets without CONNECT, userinfo). why (may be NULL) gets a short reason.
 * out: EGREQ_OUT_MAX bytes. */
int egreq_parse(const char *buf, size_t len, struct egreq *ret, char *out, const char **why);
/* A request head read inside TLS the proxy ends (kernelmgr/ktls.h): origin form
 * ("GET /path HTTP/1.1"), same limits and checks as egreq_parse. Writes the head to send
 * upstream into out (EGREQ_OUT_MAX bytes): the request line, the headers without Proxy-*,
 * Connection, Keep-Alive, TE and Upgrade ones, and "Connection: close" (one request per
 * connection: each request's head is read). 1 (*ret_head_len: bytes of the head in buf,
 * *ret_out_len), 0 (incomplete), or the errors of egreq_parse. */
/* A rewritten head (egreq_parse's or egreq_parse_origin's out, len bytes) that carries a
 * secret: 0 when its Host header lines (none, or exactly one) name host (IPv6 in brackets),
 * with port or, when port is def_port, without; -EPERM otherwise (another virtual host on the
 * same address must not receive a secret meant for host). */
int egreq_host_check(const char *head, size_t len, const char *host, int port, int def_port);
int egreq_parse_origin(const char *buf, size_t len, char *out, size_t *ret_out_len,
                       size_t *ret_head_len, const char **why);

#endif
