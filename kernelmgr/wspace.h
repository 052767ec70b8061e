/* A workspace: a bounded directory that kernels see as /mnt/data. A kernel gets a new one by
 * default or shares one of the same tenant; the workspace outlives its last kernel by a grace
 * period so results can still be downloaded. Sandboxed, it is a size-limited tmpfs in the
 * gateway's private mount namespace (nosymfollow), owned by the uid its kernels write as. */
#ifndef KGW_KERNELMGR_WSPACE_H
#define KGW_KERNELMGR_WSPACE_H

#include <stdbool.h>
#include <sys/types.h>

#include "sandbox/cgroup.h"

typedef struct wspace wspace_t;

#define WSPACE_ID_MAX 40

const char *wspace_id(const wspace_t *w);
const char *wspace_tenant(const wspace_t *w);
/* The directory on the gateway's side. Open it with O_DIRECTORY|O_NOFOLLOW and resolve paths
 * below it with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV): the kernel controls everything inside. */
const char *wspace_path(const wspace_t *w);
/* Owner of the files in it (the uid and gid its kernels write as): files and directories the
 * gateway creates there must be given to them. */
uid_t wspace_uid(const wspace_t *w);
gid_t wspace_gid(const wspace_t *w);
/* Capacity in bytes (0: unbounded, unsandboxed development mode). */
long long wspace_size_limit(const wspace_t *w);
/* Runs fn(arg) in a child charged to a kernel of the workspace (sbx_cgroup_run_start: what
 * it writes there counts against that kernel's memory limit; with no running sandboxed
 * kernel, the gateway's), without blocking the loop: done(data, rc) runs from the loop when
 * it has ended (rc: fn's result, or -ENOMEM: over the kernel's memory limit, or -errno). A
 * child still running when the caller gives up is killed with wspace_charge_cancel (done
 * never runs). need: the bytes fn will write. NULL with errno (ENOMEM: over the limit). */
typedef struct wspace_charge wspace_charge_t;
/* A running sandboxed kernel of the workspace has a memory cgroup to charge. */
bool wspace_chargeable(const wspace_t *w);
typedef void (*wspace_charge_cb)(void *data, int rc);
wspace_charge_t *wspace_charge_start(wspace_t *w, long long need, int (*fn)(void *arg),
                                     void *arg, wspace_charge_cb done, void *data);
void wspace_charge_cancel(wspace_charge_t **pc);
/* Number of kernels using it. */
int wspace_kernels(const wspace_t *w);
/* Marks it used now: with no kernel, its grace period starts again. */
void wspace_touch(wspace_t *w);
/* A transfer in progress holds it: a held workspace is never removed. */
void wspace_hold(wspace_t *w);
void wspace_release(wspace_t *w);

#endif
