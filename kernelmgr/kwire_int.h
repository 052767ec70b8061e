/* kernelmgr internal (floor 1): a kernel's wire (kwire.c). */
#ifndef KGW_KERNELMGR_KWIRE_INT_H
#define KGW_KERNELMGR_KWIRE_INT_H

#include "kernelmgr/private.h"

/* The endpoint of the kernel's socket on port (KPORT_*); verifies and splits frames
 * from the kernel (0 or -EBADMSG, logged by the caller); counts a message relayed between
 * clients and k (kmgr_stats.messages); sends a gateway-made message on one of the kernel's
 * manager sockets (0 or -errno; ret_msg_id: its msg_id). */
void kwire__endpoint(const kernel_t *k, int port, char *out, size_t outsz);
int kwire__parse(kernel_t *k, zmq_msg_t *frames, size_t n, jmsg_t *m, jhdr_t *h);
/* A message's bytes: header, parent header, metadata, content, buffers. */
size_t kwire__bytes(const jmsg_t *m);
void kwire__count(kernel_t *k, enum kmgr_dir dir, const jmsg_t *m);
int kwire__send_own(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content);
int kwire__send_own_id(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content,
                       char ret_msg_id[40]);
/* As kwire__send_own_id, in the session given (kckpt.c: a session of its own); counted in the
 * kernel's message metrics when count. */
int kwire__send_in(kernel_t *k, kzsock_t *z, const char *session, bool count, const char *msg_type,
                   const char *content, char ret_msg_id[40]);

#endif
