/* kernelmgr internal (floor 3): a pooled kernel's request environment (kenv.c). */
#ifndef KGW_KERNELMGR_KENV_INT_H
#define KGW_KERNELMGR_KENV_INT_H

#include "kernelmgr/private.h"

/* A pooled kernel's request environment: the code that applies the request's KERNEL_*
 * variables (NULL: none, errno 0; or NULL + errno), the silent execution that runs it, its
 * answers (replied ok or with an error, or its iopub idle came; true: it is applied, the
 * kernel is ready to run; a failure restarts the kernel cold), and whether m is one of its
 * messages (no client sees those). */
char *kenv__code_new(json_t *req_env);
void kenv__send(kernel_t *k);
bool kenv__step(kernel_t *k, bool replied_ok, bool replied_err, bool idle);
bool kenv__parent(const kernel_t *k, const jmsg_t *m);

#endif
