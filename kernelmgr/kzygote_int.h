/* kernelmgr internal (floor 1): the fork server (kzygote.c). It tells its owner it is ready
 * through the callback given to kzygote__init. */
#ifndef KGW_KERNELMGR_KZYGOTE_INT_H
#define KGW_KERNELMGR_KZYGOTE_INT_H

#include "kernelmgr/private.h"

/* on_ready: each time it is ready (the owner's warm pool may start kernels through it). */
int kzygote__init(kmgr_t *m, void (*on_ready)(kmgr_t *m));
void kzygote__fini(kmgr_t *m);
/* Its socket, when it is ready and runs this kernelspec; else -1. */
int kzygote__fd(kmgr_t *m, const kspec_t *spec);
/* Before a start through it: a kernel whose cgroup never held a process takes the cgroup
 * the server already sits in (with the kernel's limits), so its proxy starts there and the
 * gateway need not move it (on cgroup v1 a move waits for an RCU grace period). */
bool kzygote__adopt(kmgr_t *m, kernel_t *k);
/* After that start (whatever its outcome): the cgroup is the server's no more. */
void kzygote__adopted(kmgr_t *m, kernel_t *k);
/* Before a start through it that could not adopt (a restart: the kernel's cgroup holds its
 * workspace's charges): gives the kernel's cgroup.procs to the server's uid and returns its
 * directories (O_PATH, the caller closes them), so the proxy moves itself in, and the gateway
 * does not wait for the move (cgroup v1; 0 elsewhere: the gateway moves it). Taken back by
 * kzygote__take_back once the kernel is ready or gone. */
int kzygote__lend(kmgr_t *m, kernel_t *k, int dirfds[SBX_CGROUP_MAX_DIRS]);
void kzygote__take_back(kmgr_t *m, kernel_t *k);
/* A start went through it, or (ok false) failed because of it: it is restarted. */
void kzygote__forked(kmgr_t *m, bool ok);
/* Reaps children that are neither kernels nor the fork server (we are a subreaper). */
void kzygote__reap_strays(kmgr_t *m);

#endif
