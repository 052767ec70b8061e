/* `kgw selftest`: starts a real sandboxed kernel with the configuration this gateway would use
 * and checks, from inside it (and from the gateway's side for what the kernel cannot see:
 * namespaces, cgroup limits), what docs/security.md promises. docs/operations.md, "Self-test". */
#ifndef KGW_GATEWAY_SELFTEST_H
#define KGW_GATEWAY_SELFTEST_H

#include <stdbool.h>

#include "gateway/gw.h"

/* Starts the checks on g's loop (its kernel manager set up); g->stopping is set when they are
 * over. 0 or -errno. */
int selftest_start(gw_t *g);
/* Prints the table (or JSON) and frees; the exit status: 0 when every check passed, 1 if not. */
int selftest_finish(bool json);

#endif
