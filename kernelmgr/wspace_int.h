/* kernelmgr internal (floor 1): a workspace's life (wspace.c; the public part: wspace.h). It
 * asks its owner through struct wspace_ops. */
#ifndef KGW_KERNELMGR_WSPACE_INT_H
#define KGW_KERNELMGR_WSPACE_INT_H

#include "kernelmgr/private.h"

/* What a workspace asks of its owner (kmgr.c provides it). */
struct wspace_ops {
    /* w is unused past its grace: the owner forgets it (w frees itself next) */
    void (*gone)(kmgr_t *m, wspace_t *w);
};

/* A new workspace (slot: its sandbox uid slot, owned from now on). NULL + errno. */
wspace_t *wspace__new(kmgr_t *m, const char *tenant, long long size, long slot,
                      const struct wspace_ops *ops);
/* Sandbox uid slots (m->slots): -1 when all are taken. */
long wspace__slot_take(kmgr_t *m);
void wspace__slot_put(kmgr_t *m, long slot);
void wspace__free(wspace_t *w);
/* A restart in place (gateway/handover.h): w as a record; the workspace rebuilt from one in the
 * next image, its uid slot taken again, its files and mount as they are (NULL + errno: EINVAL
 * for a record that does not fit this gateway); w freed with its files and mount left as
 * they are. */
json_t *wspace__export(const wspace_t *w);
wspace_t *wspace__resume(kmgr_t *m, const json_t *rec, const struct wspace_ops *ops);
void wspace__let_go(wspace_t *w);
/* A kernel starts or stops using it; the last detach starts the grace period. */
void wspace__attach(wspace_t *w);
void wspace__detach(wspace_t *w);

#endif
