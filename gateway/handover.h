/* The restart in place (SIGUSR2, docs/operations.md "Upgrade"): once the drain has closed
 * every websocket (1012) and ended the kernels that cannot go over (gateway/drain.c
 * drain_restart), main() writes a record of what goes over (a memfd named by
 * KGW_HANDOVER_FD: a generated API key, the kernel manager's instance and kernels,
 * kmgr_hand_over, and their /api/sessions), undoes the rest, and kgw execs the path it was
 * started from, keeping its pid, its kernels' processes (its children still) and its
 * listening sockets (passed as LISTEN_FDS with LISTEN_PID, which setup.c takes as socket
 * activation's), so no connection is refused meanwhile: they wait in the sockets' backlog.
 * The new image reads the record back (handover_take) and takes the kernels over. */
#ifndef KGW_GATEWAY_HANDOVER_H
#define KGW_GATEWAY_HANDOVER_H

#include <jansson.h>
#include <stddef.h>

#include "gateway/gw.h"

#define HANDOVER_ENV        "KGW_HANDOVER_FD"
#define HANDOVER_RECORD_MAX (64 << 20) /* bytes of a record read back */
#define HANDOVER_LISTEN_MAX 2    /* --port's socket and --metrics-port's */
#define HANDOVER_FD_SCAN_MAX 4096 /* without close_range: descriptors handover_take marks
                                     close-on-exec */

/* Reads the path kgw runs from, once at start (before setup_kernels changes the mount
 * namespace): the path a restart execs, which after a package upgrade names the new binary
 * (unlike /proc/self/exe then). 0 or -errno. */
int handover_init(void);
/* 0 when a restart can exec (the path is an executable file), else -errno (logged). */
int handover_check(void);
/* The record of the kgw this one replaced, if $KGW_HANDOVER_FD names one (the variable is
 * unset, the memfd closed): *ret (an object, the caller's). 1 with a record, 0 without,
 * -errno for a bad one. */
int handover_take(json_t **ret);
/* Copies of g's listening sockets (close-on-exec, above the descriptors they will take) into
 * held[HANDOVER_LISTEN_MAX] (-1 for none), before main() closes the originals: the sockets
 * stay open, connections wait in their backlog. */
void handover_hold(const gw_t *g, int held[HANDOVER_LISTEN_MAX]);
/* Execs kgw with argv, held as descriptors 3.. (LISTEN_FDS, LISTEN_PID) and rec (the
 * record's descriptors sit at or above KINSTANCE_FD_MIN, above held's). Returns only on
 * failure: -errno, the environment as it was. */
int handover_exec(int held[HANDOVER_LISTEN_MAX], const json_t *rec, char **argv);

#endif
