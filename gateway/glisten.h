/* A listening TCP socket the gateway accepts on itself, on its loop, handing each connection
 * to a libwebsockets vhost made without a listener of its own (CONTEXT_PORT_NO_LISTEN_SERVER).
 * lws 4.1 cannot listen on a socket it did not make, and kgw's sockets may come from elsewhere:
 * systemd's socket activation (a kgw.socket unit: connections wait in the backlog while kgw
 * restarts) or the kgw that replaced itself by exec (docs/operations.md "Upgrades and
 * restarts"). */
#ifndef KGW_GATEWAY_GLISTEN_H
#define KGW_GATEWAY_GLISTEN_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "common/evl.h"

#define GLISTEN_BACKLOG    SOMAXCONN /* listen(2)'s backlog for the sockets kgw makes (as lws's) */
#define GLISTEN_ACCEPT_MAX 64  /* connections taken per loop turn: a burst cannot hold the loop */

typedef struct glisten glisten_t;

/* Called for each accepted connection before lws has it (lws's FILTER_NETWORK_CONNECTION):
 * 0 keeps it, anything else closes it. */
typedef int glisten_filter_fn(void *data, const struct lws_filter_network_conn_args *a);

/* The listening socket for ip:port (ip: an address, a host name resolved once here, or "":
 * every address). One of `inherited` (n descriptors, e.g. sd_listen_fds's) bound to that
 * address and port is taken (its slot set to -1); otherwise a new one is made (SO_REUSEADDR,
 * close-on-exec, non-blocking). Returns the descriptor or -errno. */
int glisten_socket(const char *ip, long long port, int *inherited, int n);

/* Accepts on fd (taken: closed by glisten_destroy, or here on failure) for vh; tls: the vhost
 * ends TLS on what it adopts. NULL + errno. */
glisten_t *glisten_new(evl_t *l, int fd, struct lws_vhost *vh, bool tls, glisten_filter_fn *filter,
                       void *data);
/* Stops accepting and closes the socket; NULL is fine. */
void glisten_destroy(glisten_t **p);
/* The listening descriptor (to hand over across an exec). */
int glisten_fd(const glisten_t *gl);

#endif
