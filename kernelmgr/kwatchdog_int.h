/* kernelmgr internal (floor 3): a kernel's heartbeats and deadlines (kwatchdog.c). */
#ifndef KGW_KERNELMGR_KWATCHDOG_INT_H
#define KGW_KERNELMGR_KWATCHDOG_INT_H

#include "kernelmgr/private.h"

/* The heartbeat socket's callback, and the heartbeat and deadline timers
 * (data: the kernel; armed by kernel.c). */
void kwatchdog__on_hb(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n);
void kwatchdog__on_hb_timer(void *data);
void kwatchdog__on_deadline(void *data);

#endif
