/* What clients send on HTTP connections passes protocol/reqscan before libwebsockets parses it,
 * so a request target lws cannot decode gets a 400 instead of a dropped connection.
 *
 * lws reads client sockets with recv(), or SSL_read() under TLS, through the dynamic linker:
 * kgw defines both, so lws's calls come here first. Only reads on the loop thread of the
 * connections registered at accept are scanned; every other call (ZeroMQ's I/O threads, the
 * loop's own sockets and pipes, MSG_PEEK) goes straight to the C or TLS library's function. */
#ifndef KGW_GATEWAY_REQGUARD_H
#define KGW_GATEWAY_REQGUARD_H

#include <stdbool.h>
#include <stddef.h>

/* Once, on the loop thread, before the first connection: a table of nfds connections (the
 * descriptor limit). 0 or -ENOMEM. */
int reqguard_init(size_t nfds);
void reqguard_fini(void);
/* An accepted client connection on fd: its bytes are scanned from the first. */
void reqguard_open(int fd);
/* The connection on fd is gone. */
void reqguard_close(int fd);
/* The answer to the request in flight on fd is written whole. */
void reqguard_answered(int fd);
/* True when a client pipelined: a request began on fd before the one in flight was answered.
 * That request and everything after it are dropped unread by lws; the answer in flight says
 * Connection: close and the connection ends after it, so the client retries the rest on a new
 * one (RFC 9112, 9.3.2). */
bool reqguard_pipelined(int fd);

#endif
