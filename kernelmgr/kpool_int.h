/* kernelmgr internal (floor 7): the warm pool (kpool.c). It asks the manager through struct
 * kpool_ops. */
#ifndef KGW_KERNELMGR_KPOOL_INT_H
#define KGW_KERNELMGR_KPOOL_INT_H

#include "kernelmgr/private.h"

/* What the warm pool asks of the manager (kmgr.c provides it): the owner ops of
 * the kernels it starts, and workspaces (new_workspace: for_pool true, it never shrinks the
 * pool to make room; ws_idle: the least recently used workspace no kernel uses and no
 * transfer holds, kept for downloads only, or NULL; ws_remove: forgets one, before its free). */
struct kpool_ops {
    const struct kernel_owner_ops *kernel_owner;
    int (*new_workspace)(kmgr_t *m, const char *tenant, long long size, bool for_pool,
                         wspace_t **ret);
    wspace_t *(*ws_idle)(kmgr_t *m);
    void (*ws_remove)(kmgr_t *m, wspace_t *w);
};
int kpool__init(kmgr_t *m, const struct kpool_ops *ops);
void kpool__fini(kmgr_t *m);
/* A pooled kernel for a request (shared_ws: it shares a workspace; lim: its limits, NULL: the
 * gateway's), taken out of the pool (NULL: none fits). */
kernel_t *kpool__take(kmgr_t *m, const kspec_t *spec, bool shared_ws,
                      const struct kmgr_limits *lim);
/* Kills and frees a pooled kernel (in the pool or just taken out) with its workspace. */
void kpool__drop(kmgr_t *m, kernel_t *k);
/* Kills and frees one pooled kernel (with its workspace) to make room; false if none. */
bool kpool__shrink(kmgr_t *m);
/* A pooled kernel is ready, or ended (failed: it never became ready). */
void kpool__ready(kmgr_t *m, kernel_t *k);
void kpool__lost(kmgr_t *m, kernel_t *k, bool failed);
/* Capacity was freed or demand changed: look at the pool again soon. */
void kpool__kick(kmgr_t *m);
void kpool__remove(kmgr_t *m, kernel_t *k);

#endif
