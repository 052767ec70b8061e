/* kernelmgr internal (floor 7): a fork of a running kernel into a new kernel (kfork.c). */
#ifndef KGW_KERNELMGR_KFORK_INT_H
#define KGW_KERNELMGR_KFORK_INT_H

#include "kernelmgr/private.h"

/* owner: the kernel whose sandbox parent's process lives in (parent itself, or for a fork
 * (adopted) the kernel it was forked from, and so on: a kernel that is not adopted).
 * Builds a new kernel (same kernelspec, workspace, limits and egress policy as parent; a new
 * id, key and endpoints) and asks parent's process to fork into it (kgw_fork_request,
 * python/kgw_ckpt.py), as it is or from its checkpoint cp (NULL: as it is). The new kernel is
 * "starting" until the forked process answers as any start's does, or dead (why in its
 * last cause) if the fork fails. 0 and *ret, or -errno: -EBUSY parent not running, -ENOMEM,
 * -ENAMETOOLONG (its endpoints' paths), or a set-up error. */
int kfork__start(kmgr_t *m,
                 kernel_t *parent,
                 kernel_t *owner,
                 const char *cp,
                 const struct kernel_owner_ops *own,
                 kernel_t **ret);
/* k's process ended: the processes of its forks end too (sandboxed they have already, with
 * its pid namespace; unsandboxed nothing else would end them). */
void kfork__parent_ended(kmgr_t *m, kernel_t *k);
/* k is going: a fork it was the parent of fails; one it was the child of is abandoned. */
void kfork__forget(kmgr_t *m, kernel_t *k);

#endif
