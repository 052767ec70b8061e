/* The restart in place (SIGUSR2, docs/operations.md "Upgrade"): once the drain has closed
 * every websocket (1012) and ended every kernel (gateway/drain.c drain_restart) and main()
 * has undone the rest, kgw execs the path it was started from, keeping its pid and its
 * listening sockets (passed as LISTEN_FDS with LISTEN_PID, which setup.c takes as socket
 * activation's), so no connection is refused meanwhile: they wait in the sockets' backlog.
 * A generated API key is carried in a record (a memfd named by KGW_HANDOVER_FD) so that
 * clients keep theirs. Kernels do not survive it. */
#ifndef KGW_GATEWAY_HANDOVER_H
#define KGW_GATEWAY_HANDOVER_H

#include <stddef.h>

#include "gateway/gw.h"

#define HANDOVER_ENV        "KGW_HANDOVER_FD"
#define HANDOVER_RECORD_MAX 4096 /* bytes of a record read back */
#define HANDOVER_LISTEN_MAX 2    /* --port's socket and --metrics-port's */

/* Reads the path kgw runs from, once at start (before setup_kernels changes the mount
 * namespace): the path a restart execs, which after a package upgrade names the new binary
 * (unlike /proc/self/exe then). 0 or -errno. */
int handover_init(void);
/* 0 when a restart can exec (the path is an executable file), else -errno (logged). */
int handover_check(void);
/* The record of the kgw this one replaced, if $KGW_HANDOVER_FD names one (the variable is
 * unset, the memfd closed): its API key (generated there), copied into key (keysz bytes, ""
 * when it had none). 1 with a record, 0 without, -errno for a bad one. */
int handover_take(char *key, size_t keysz);
/* Copies of g's listening sockets (close-on-exec, above the descriptors they will take) into
 * held[HANDOVER_LISTEN_MAX] (-1 for none), before main() closes the originals: the sockets
 * stay open, connections wait in their backlog. */
void handover_hold(const gw_t *g, int held[HANDOVER_LISTEN_MAX]);
/* Execs kgw with argv, held as descriptors 3.. (LISTEN_FDS, LISTEN_PID) and a record of
 * api_key (NULL: none). Returns only on failure: -errno, the environment as it was. */
int handover_exec(int held[HANDOVER_LISTEN_MAX], const char *api_key, char **argv);

#endif
