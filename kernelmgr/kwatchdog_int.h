/* kernelmgr internal (floor 3): a kernel's heartbeats and deadlines (kwatchdog.c). */
#ifndef KGW_KERNELMGR_KWATCHDOG_INT_H
#define KGW_KERNELMGR_KWATCHDOG_INT_H

#include "kernelmgr/private.h"

/* k's heartbeat state (k->wd, kwatchdog.c): made with the kernel's watch (0 or -ENOMEM), freed
 * at its teardown; reset for a new process (no ping outstanding, none missed). */
struct kwatchdog;
int kwatchdog__new(kernel_t *k);
void kwatchdog__free(kernel_t *k);
void kwatchdog__reset(kernel_t *k);

/* The heartbeat socket's callback, and the deadline timer (data: the kernel; armed by
 * kernel.c). */
void kwatchdog__on_hb(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n);
/* One heartbeat of a running kernel (the manager's sweep, every --hb-interval-ms): the miss
 * of the last one counted (a kernel missing --hb-misses in a row is killed), a ping sent.
 * True when the heartbeat socket was opened anew for it (memory was freed). */
bool kwatchdog__beat(kernel_t *k);
void kwatchdog__on_deadline(void *data);

#endif
