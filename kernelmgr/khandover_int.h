/* kernelmgr internal (floor 7): a restart in place, the kernel manager's part (khandover.c).
 * It asks the manager through struct khandover_ops. */
#ifndef KGW_KERNELMGR_KHANDOVER_INT_H
#define KGW_KERNELMGR_KHANDOVER_INT_H

#include <jansson.h>

#include "kernelmgr/private.h"

/* What it asks of the manager (kmgr.c provides it): the owner ops of the kernels it rebuilds,
 * the workspaces' ops, a workspace forgotten (before its free), a kernel added to m->v. */
struct khandover_ops {
    const struct kernel_owner_ops *kernel_owner;
    const struct wspace_ops *ws;
    void (*ws_remove)(kmgr_t *m, wspace_t *w);
    void (*added)(kmgr_t *m, kernel_t *k);
};
/* kmgr_carriable, kmgr_hand_over (kmgr.h). */
bool khandover__carriable(const kernel_t *k);
json_t *khandover__export(kmgr_t *m, bool (*keep)(kernel_t *k, void *data), void *data,
                          const struct khandover_ops *ops);
/* In kmgr_new: the record's runtime directory and lock taken (0, or -EINVAL logged); then
 * (once the cgroups and uid slots are set up) its workspaces and kernels rebuilt. */
int khandover__dir(kmgr_t *m, const json_t *rec);
void khandover__resume(kmgr_t *m, const json_t *rec, const struct khandover_ops *ops);
/* kmgr_handover_undo: the record's kernels killed, its mounts undone, its lock closed; the
 * instance's directory name under runtime_dir (for the caller to remove), or NULL. */
const char *khandover__undo(const json_t *rec, const char *runtime_dir);

#endif
