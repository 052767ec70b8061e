/* kernelmgr internal (floor 1): what of a kernel's iopub output is held for its clients
 * (kout.c). */
#ifndef KGW_KERNELMGR_KOUT_INT_H
#define KGW_KERNELMGR_KOUT_INT_H

#include <stdbool.h>

#include "kernelmgr/private.h"

/* Whether the iopub message m (h: its header) goes to k's clients, within k's share of the
 * output buffer budget (common/obudget.h); false: dropped or coalesced (counted, noticed). */
bool kout__admit(kernel_t *k, const jmsg_t *m, const jhdr_t *h);

#endif
