/* One client session on a kernel: shell, control and stdin DEALER sockets whose ZeroMQ
 * identity is the client's session id, so the kernel's replies (and stdin input_requests,
 * which ipykernel routes by the shell identity) reach this session only. */
#ifndef KGW_KERNELMGR_KCONN_H
#define KGW_KERNELMGR_KCONN_H

#include "kernelmgr/kernel.h"
#include "protocol/jmsg.h"

typedef struct kconn kconn_t;

struct kconn_ops {
    /* A reply for this session (signature verified). */
    void (*reply)(void *user, kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h);
};

/* NULL + errno. */
kconn_t *kconn_new(kernel_t *k, const char *session_id, const struct kconn_ops *ops, void *user);
void kconn_destroy(kconn_t **c);
/* Signs and sends a client message on shell, control or stdin; h is its header as the caller
 * parsed it. Requests are remembered until answered (an execute_request until its idle), so
 * each gets an answer even when the kernel process ends first. -EAGAIN when the kernel's
 * queue is full, -EINVAL for iopub, -EPERM for a message type only the gateway may send
 * (KCONN_RESERVED_PREFIX: the kernel side of checkpoints, docs/checkpoints.md). */
#define KCONN_RESERVED_PREFIX "kgw_"
int kconn_send(kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h);
kernel_t *kconn_kernel(const kconn_t *c);
const char *kconn_session(const kconn_t *c);

#endif
