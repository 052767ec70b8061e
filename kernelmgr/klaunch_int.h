/* kernelmgr internal (floor 2): a kernel's launch (klaunch.c). It asks the owner (the fork
 * server's part) through kernel_owner_ops and returns its outcome to kernel.c. */
#ifndef KGW_KERNELMGR_KLAUNCH_INT_H
#define KGW_KERNELMGR_KLAUNCH_INT_H

#include "kernelmgr/private.h"

/* The launch. Starts k's process; 0, or -errno and in msg why (k->last_cause too).
 * The caller watches it (kernel__launch). */
int klaunch__start(kernel_t *k, char *msg, size_t msgsz);
/* k's process environment (req_env: the request's, KERNEL_* taken), NULL-terminated. */
char **klaunch__env(const kernel_t *k, json_t *req_env);
void klaunch__free_strv(char **v);
/* Writes a connection file for k's process at path, a new file (not through a symlink), naming
 * its endpoints in the directory view as the process sees it; the kernel's uid owns it when
 * sandboxed. 0 or -errno. */
int klaunch__conn_file(const kernel_t *k, const char *path, const char *view);
/* The sandbox's set-up report is moot (closed); an exec'd start's pending part is dropped. */
void klaunch__setup_end(kernel_t *k);
void klaunch__abandon(kernel_t *k);
/* The process is ready: its egress proxy starts (if it has a policy). */
void klaunch__egress_start(kernel_t *k);
/* Reaps k's process if it has ended (0, *ret_status set) and releases what it held; -EAGAIN
 * if it runs. */
int klaunch__reap(kernel_t *k, int *ret_status);
/* Why it ended (asked: someone stopped it; counted in the statistics) and, in why, how. */
enum kmgr_death klaunch__death(kernel_t *k, int st, bool asked, char *why, size_t whysz);
/* What an unasked death means for requests in flight (cause: one line), or for a start. */
enum kernel_outcome klaunch__death_outcome(kernel_t *k, enum kmgr_death d, int st, char *cause,
                                           size_t sz);
enum kmgr_start_fail klaunch__start_fail(enum kmgr_death d);
/* The live interpreter of a kernel with checkpoints (not its first process, which lives on as
 * the keeper) ended with the wait status st (known false: not known): the outcome for the requests
 * in flight and, in cause, why (counted in the statistics as a death). */
enum kernel_outcome klaunch__live_death(kernel_t *k, int st, bool known, char *cause, size_t sz);

/* Signals the kernel's process group (its proxy when sandboxed); never pid <= 1. */
void klaunch__signal(kernel_t *k, int sig);

#endif
