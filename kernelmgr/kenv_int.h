/* kernelmgr internal (floor 3): a pooled kernel's request environment (kenv.c). */
#ifndef KGW_KERNELMGR_KENV_INT_H
#define KGW_KERNELMGR_KENV_INT_H

#include "kernelmgr/private.h"

/* A pooled kernel's request environment (k->env): the code that applies the request's KERNEL_*
 * variables (NULL: none, errno 0; or NULL + errno), freed with the kernel; whether it is still
 * to be applied, and the msg_id of the silent execution that applies it ("": none sent); that
 * execution, its answers (replied ok or with an error, or its iopub idle came; true: it is
 * applied, the kernel is ready to run; a failure restarts the kernel cold), and whether m is one
 * of its messages (no client sees those). */
struct kenv;
struct kenv *kenv__new(json_t *req_env);
void kenv__free(kernel_t *k);
bool kenv__due(const kernel_t *k);
const char *kenv__id(const kernel_t *k);
void kenv__send(kernel_t *k);
bool kenv__step(kernel_t *k, bool replied_ok, bool replied_err, bool idle);
bool kenv__parent(const kernel_t *k, const jmsg_t *m);

#endif
