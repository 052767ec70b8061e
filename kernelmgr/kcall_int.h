/* kernelmgr internal (floor 1): a kernel's callback socket (kcall.c). */
#ifndef KGW_KERNELMGR_KCALL_INT_H
#define KGW_KERNELMGR_KCALL_INT_H

#include "kernelmgr/private.h"

/* A kernel's callback socket, <dir>/callback (SBX_RUNTIME_PATH/callback inside),
 * and the calls in progress on it. Frames: protocol/kcallmsg.h. */
#define KCALL_SOCKET_NAME "callback"
typedef struct kcall kcall_t;
kcall_t *kcall__new(kernel_t *k);
void kcall__destroy(kcall_t **kc);
/* (Re)creates the listening socket before a kernel process starts; drops every connection.
 * owner: uid (and gid) of the socket file and of the peers accepted (-1: the gateway's). */
int kcall__listen(kcall_t *kc, uid_t owner);
/* Drops every connection and call in progress (the kernel process is gone). */
void kcall__reset(kcall_t *kc);
/* The gateway's view of the execution in progress changed (iopub busy/idle). */
void kcall__exec_changed(kcall_t *kc);
int kcall__reply(kcall_t *kc, uint64_t call_id, json_t *value, const char *err_type,
                 const char *err_message);

#endif
