/* kernelmgr internal (floor 1): what of a kernel's iopub output is held for its clients
 * (kout.c). */
#ifndef KGW_KERNELMGR_KOUT_INT_H
#define KGW_KERNELMGR_KOUT_INT_H

#include <stdbool.h>

#include "common/obudget.h"
#include "kernelmgr/private.h"

/* k's output state (k->out): its share of the budget and what of its output is being dropped
 * or coalesced. Made with the kernel's watch when there is a budget (0, or -ENOMEM), freed at
 * its teardown (buffers still charged to the share hold references to it); the share is NULL
 * without a budget. */
struct kout;
int kout__new(kernel_t *k);
void kout__free(kernel_t *k);
obudget_share_t *kout__share(const kernel_t *k);
/* Whether the iopub message m (h: its header) goes to k's clients, within k's share of the
 * output buffer budget (common/obudget.h); false: dropped or coalesced (counted, noticed). */
bool kout__admit(kernel_t *k, const jmsg_t *m, const jhdr_t *h);

#endif
