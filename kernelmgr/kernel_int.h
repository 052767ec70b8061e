/* kernelmgr internal (floor 4): the kernel's state machine, as its set-up and the manager
 * call it (kernel.c; the public part: kernel.h). It reports to its owner through struct
 * kernel_owner_ops (private.h). */
#ifndef KGW_KERNELMGR_KERNEL_INT_H
#define KGW_KERNELMGR_KERNEL_INT_H

#include "kernelmgr/private.h"

/* The kernel's timers and manager sockets, opened once it is set up (0 or -errno) and closed
 * at its teardown. */
int kernel__watch(kernel_t *k);
void kernel__unwatch(kernel_t *k);
/* Opens the gateway's own shell socket if it is closed (it is while the kernel is idle): before
 * kenv__send. 0 or -errno. */
int kernel__own_shell(kernel_t *k);
/* Starts k's process and watches it (a failure sets k dead); reaps it if it has exited
 * (SIGCHLD path). */
void kernel__launch(kernel_t *k);
void kernel__check_exit(kernel_t *k);
/* A fork (kfork.c): k (built, not launched) runs in this process, which is not the gateway's
 * child (pidfd: its, taken); its start is proven as any start's. */
void kernel__adopt(kernel_t *k, pid_t pid, int pidfd);
/* A restart in place (kinstance__resume): k (built, not launched) runs in this process, the
 * gateway's child, as it ran before the exec (pidfd: its, taken); "starting" until its
 * kernel_info_reply and an iopub message prove it answers, as any start. */
void kernel__resume(kernel_t *k, pid_t pid, int pidfd);
/* The fork could not be made: k is dead (why: for its clients and the start's waiter). */
void kernel__adopt_failed(kernel_t *k, const char *why);
/* The manager's sockets closed and opened again on the kernel's endpoints (ipc_dir changed).
 * 0 or -errno. */
int kernel__rewatch(kernel_t *k);
/* A fork's endpoints in its parent's runtime directory are removed (and ipc_dir forgotten). */
void kernel__drop_ipc_dir(kernel_t *k);

#endif
