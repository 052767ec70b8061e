/* kernelmgr internal (floor 3): the gateway's checkpoint requests to a kernel (kckpt.c; the
 * public part: kckpt.h). It asks nothing of the kernel above it; kernel.c hands it its iopub
 * messages and the end of its process. */
#ifndef KGW_KERNELMGR_KCKPT_INT_H
#define KGW_KERNELMGR_KCKPT_INT_H

#include "kernelmgr/private.h"

/* An iopub message of k: true when it belongs to the gateway's own checkpoint requests (no
 * client sees it, and the execution watch does not count it). */
bool kckpt__iopub(kernel_t *k, const jmsg_t *m);
/* Whether one of the gateway's checkpoint requests (its install, a checkpoint, a rollback, a
 * revival, a fork) is in the kernel now. */
bool kckpt__in_flight(const kernel_t *k);
/* k's process ended: every request ends with -ECHILD, and the next process needs the handlers
 * installed again. */
void kckpt__reset(kernel_t *k);
/* k is being freed (after kckpt__reset's effects): the same, and the memory goes. */
void kckpt__destroy(kernel_t *k);

#endif
