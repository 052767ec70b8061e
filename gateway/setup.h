/* The gateway's bootstrap, one step per function, in the order main() calls them: descriptor
 * limit, signals, listeners, then the kernel manager (sandbox helpers, private mount namespace). */
#ifndef KGW_GATEWAY_SETUP_H
#define KGW_GATEWAY_SETUP_H

#include <stddef.h>

#include "gateway/gw.h"

/* Descriptors: a client websocket of a kernel; the reserve a kernel start leaves for
 * connections, file transfers and logs; what the gateway holds with no kernel (measured: 52 with
 * the fork server and the metrics listener). */
#define SETUP_FD_PER_CLIENT 10
#define SETUP_FD_RESERVE    64
#define SETUP_FD_BASE       64

/* Raises RLIMIT_NOFILE for --max-connections and --max-kernels (logged when the hard limit is
 * lower), warns when --max-kernels does not fit the limit, and sets the kernel manager's
 * descriptor budget (g->cfg.km.fd_*); returns the descriptor limit in force. */
size_t setup_nofile(gw_t *g);
/* The gateway's scheduler slice (--sched-slice-us), before any thread or child exists: its
 * threads inherit it; its children (kernels, the fork server) set the default back. */
void setup_sched(gw_t *g);
/* Blocks SIGINT, SIGTERM, SIGCHLD, SIGHUP and SIGUSR2 for a signalfd, which it returns (non-blocking,
 * close-on-exec), and ignores SIGPIPE. -errno on failure. */
int setup_signals(void);
/* The lws context, the --ip/--port vhost (TLS with --certfile) serving protocols, and the
 * --metrics-port vhost (plain) serving metrics_protocols; starts g->loop on them. fd_limit:
 * setup_nofile's. 0, or -errno with the reason logged. */
int setup_listen(gw_t *g, const struct lws_protocols *protocols,
                 const struct lws_protocols *metrics_protocols, size_t fd_limit);
/* Closes the listening sockets (before the loop goes). */
void setup_unlisten(gw_t *g);
/* The kernel manager on g->loop with g->cfg.km: kgw_tools.py's directory; unless --no-sandbox,
 * the sandbox helpers in memfds (g->cfg.sb's fds; the caller closes them) and a private mount
 * namespace. 0, or -errno with the reason logged. */
int setup_kernels(gw_t *g);

#endif
