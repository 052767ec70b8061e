/* kernelmgr internal (floor 6): a kernel's set-up and teardown (kinstance.c). */
#ifndef KGW_KERNELMGR_KINSTANCE_INT_H
#define KGW_KERNELMGR_KINSTANCE_INT_H

#include "kernelmgr/private.h"

/* A kernel's set-up and teardown.
 * egress: the kernel's egress policy (NULL or empty: none; copied); secrets: the names of its
 * tenant's secrets it gets (nsecrets; only with an egress policy). own: its owner. */
kernel_t *kinstance__new(kmgr_t *m, const kspec_t *spec, json_t *env,
                      const struct kmgr_limits *lim, wspace_t *ws, struct kpool *pool,
                      const egpol_t *egress, const char *const *secrets, size_t nsecrets,
                      const struct kernel_owner_ops *own);
/* Hands a pooled kernel to a request: per-kernel limits that apply after start, and the
 * request's KERNEL_* variables (a silent execution; the kernel is "starting" until it is
 * done). 0 or -errno. */
int kinstance__adopt(kernel_t *k, json_t *env, const struct kmgr_limits *lim);
void kinstance__free(kernel_t *k);
/* A restart in place (gateway/handover.h). export: a record of running k, its stderr pipe and
 * command socket copied to descriptors at or above KINSTANCE_FD_MIN left open across the exec
 * (0, or -errno). let_go: k freed, its process, runtime directory, cgroup and workspace left as
 * they are for the next image. resume: in the next image, k from its record (its workspace:
 * ws, rebuilt by wspace__resume), "starting" until it answers (kernel__resume); NULL + errno
 * (why set) when it cannot be: what is left of it, its process included, is removed. */
#define KINSTANCE_FD_MIN KMGR_HANDOVER_FD_MIN
int kinstance__export(kernel_t *k, json_t **ret);
void kinstance__let_go(kernel_t *k);
kernel_t *kinstance__resume(kmgr_t *m, const json_t *rec, wspace_t *ws,
                            const struct kernel_owner_ops *own, char *why, size_t whysz);
/* kinstance__new without its launch: the kernel is set up ("starting"), with no process (a
 * fork's, kfork.c, is adopted). NULL + errno. */
kernel_t *kinstance__build(kmgr_t *m, const kspec_t *spec, json_t *env,
                        const struct kmgr_limits *lim, wspace_t *ws, struct kpool *pool,
                        const egpol_t *egress, const char *const *secrets, size_t nsecrets,
                        const struct kernel_owner_ops *own);

#endif
