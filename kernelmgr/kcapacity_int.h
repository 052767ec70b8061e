/* kernelmgr internal (floor 1): capacity arithmetic (kcapacity.c); making room (the warm pool
 * gives way) is kmgr.c's. */
#ifndef KGW_KERNELMGR_KCAPACITY_INT_H
#define KGW_KERNELMGR_KCAPACITY_INT_H

#include "kernelmgr/private.h"

/* MemAvailable in bytes (-1: unknown); descriptors a new kernel costs; the
 * descriptors left for new kernels (LLONG_MAX: no limit). */
long long kcapacity__mem_available(void);
long long kcapacity__fd_per_kernel(const kmgr_t *m);
long long kcapacity__fd_left(const kmgr_t *m);

#endif
