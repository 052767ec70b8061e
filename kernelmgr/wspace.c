/* Workspaces: the directories kernels see as /mnt/data, shared by kernels of one tenant and
 * kept for a grace period after the last of them is gone. */
#include "kernelmgr/wspace_int.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/shardid.h"
#include "common/util.h"
#include "kernelmgr/private.h"

const char *wspace_id(const wspace_t *w)
{
    return w->id;
}

const char *wspace_tenant(const wspace_t *w)
{
    return w->tenant;
}

const char *wspace_path(const wspace_t *w)
{
    return w->path;
}

uid_t wspace_uid(const wspace_t *w)
{
    return w->uid;
}

gid_t wspace_gid(const wspace_t *w)
{
    return w->gid;
}

long long wspace_size_limit(const wspace_t *w)
{
    return w->size;
}

int wspace_kernels(const wspace_t *w)
{
    return w->kernels;
}

struct wspace_charge {
    evl_t *l;
    evl_io_t *io;
    struct sbx_cgroup_charge c;
    wspace_charge_cb done;
    void *data;
};

static void on_charged(void *data)
{
    wspace_charge_t *wc = data;
    evl_io_destroy(wc->l, &wc->io); /* a watch goes before its fd (charge_end closes it) */
    int rc = sbx_cgroup_charge_end(&wc->c);
    wspace_charge_cb done = wc->done;
    void *d = wc->data;
    free(wc);
    done(d, rc);
}

bool wspace_chargeable(const wspace_t *w)
{
    const kmgr_t *m = w->m;
    for (size_t i = 0; i < m->n; i++) {
        const kernel_t *k = m->v[i];
        if (k->ws == w && k->cgroup && k->cgroup_used && k->state == KERNEL_RUNNING)
            return true;
    }
    return false;
}

wspace_charge_t *wspace_charge_start(wspace_t *w, long long need, int (*fn)(void *arg),
                                     void *arg, wspace_charge_cb done, void *data)
{
    const kmgr_t *m = w->m;
    sbx_cgroup_t *cg = NULL;
    for (size_t i = 0; i < m->n && !cg; i++) {
        kernel_t *k = m->v[i];
        if (k->ws == w && k->cgroup && k->cgroup_used && k->state == KERNEL_RUNNING)
            cg = k->cgroup;
    }
    wspace_charge_t *wc = calloc(1, sizeof(*wc));
    if (!wc) {
        errno = ENOMEM;
        return NULL;
    }
    int rc = sbx_cgroup_run_start(cg, need, fn, arg, &wc->c);
    if (rc < 0) {
        free(wc);
        errno = -rc;
        return NULL;
    }
    log_debug("workspace=%s: writing %lld bytes from a child in %s", w->id, need,
              cg ? "a kernel's memory cgroup" : "the gateway's cgroup");
    wc->l = m->evl;
    wc->done = done;
    wc->data = data;
    if (!(wc->io = wc->l->io_add(wc->l, wc->c.fd, on_charged, wc))) {
        sbx_cgroup_charge_abort(&wc->c);
        free(wc);
        errno = ENOMEM;
        return NULL;
    }
    return wc;
}

void wspace_charge_cancel(wspace_charge_t **pc)
{
    wspace_charge_t *wc = *pc;
    if (!wc)
        return;
    evl_io_destroy(wc->l, &wc->io);
    sbx_cgroup_charge_abort(&wc->c);
    free(wc);
    *pc = NULL;
}

static void arm_grace(wspace_t *w)
{
    evl_t *l = w->m->evl;
    if (w->kernels > 0 || w->holds > 0) {
        l->timer_disarm(l, w->grace);
        return;
    }
    l->timer_arm(l, w->grace, (uint64_t)w->m->o.workspace_grace_s * 1000);
}

void wspace_touch(wspace_t *w)
{
    w->last_used_us = util_now_us();
    arm_grace(w);
}

void wspace_hold(wspace_t *w)
{
    w->holds++;
    wspace_touch(w);
}

void wspace_release(wspace_t *w)
{
    if (w->holds > 0)
        w->holds--;
    wspace_touch(w);
}

static void on_grace(void *data)
{
    wspace_t *w = data;
    if (w->kernels > 0 || w->holds > 0)
        return;
    log_info("workspace=%s: removed (no kernel for %d s)", w->id, w->m->o.workspace_grace_s);
    w->ops->gone(w->m, w);
    wspace__free(w);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* A workspace's sandbox uid slot (its uid and its kernels' derive from it). */
long wspace__slot_take(kmgr_t *m)
{
    for (size_t i = 0; i < m->nslots; i++)
        if (!m->slots[i]) {
            m->slots[i] = 1;
            return (long)i;
        }
    return -1;
}

void wspace__slot_put(kmgr_t *m, long slot)
{
    if (slot >= 0 && (size_t)slot < m->nslots)
        m->slots[slot] = 0;
}

wspace_t *wspace__new(kmgr_t *m, const char *tenant, long long size, long slot,
                      const struct wspace_ops *ops)
{
    int err;
    wspace_t *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->m = m;
    w->ops = ops;
    w->slot = slot;
    w->size = size;
    shardid_mint(w->id);
    snprintf(w->tenant, sizeof(w->tenant), "%s", tenant ? tenant : "");
    char *path;
    if (asprintf(&path, "%s/ws-%s", m->rundir, w->id) < 0) {
        errno = ENOMEM;
        goto fail;
    }
    w->path = path;
    if (!(w->grace = m->evl->timer_new(m->evl, on_grace, w)))
        goto fail;
    if (m->o.sandbox) {
        char opts[128];
        w->uid = m->o.sandbox->uid_base + 2 * (unsigned)slot + 1;
        w->gid = w->uid;
        snprintf(opts, sizeof(opts), "size=%lld,mode=0755,uid=%u,gid=%u", size, (unsigned)w->uid,
                 (unsigned)w->gid);
        if (mkdir(w->path, 0700) < 0)
            goto fail;
        w->made = true;
        /* nosymfollow: the gateway serves files from here, and the kernel plants what it
         * likes; the file endpoints also resolve with RESOLVE_NO_SYMLINKS */
        if (mount("tmpfs", w->path, "tmpfs", MS_NOSUID | MS_NODEV | KGW_MS_NOSYMFOLLOW, opts) < 0)
            goto fail;
        w->mounted = true;
    } else {
        /* development mode: a plain directory, the unsandboxed kernel's working directory */
        w->uid = geteuid();
        w->gid = getegid();
        w->size = 0;
        if (mkdir(w->path, 0700) < 0)
            goto fail;
        w->made = true;
    }
    w->last_used_us = util_now_us();
    log_info("workspace=%s: created", w->id);
    return w;
fail:
    err = errno;
    wspace__free(w);
    errno = err;
    return NULL;
}

json_t *wspace__export(const wspace_t *w)
{
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:b}", "id", w->id, "tenant",
                     w->tenant, "path", w->path, "uid", (json_int_t)w->uid, "gid",
                     (json_int_t)w->gid, "slot", (json_int_t)w->slot, "size", (json_int_t)w->size,
                     "made", w->made, "mounted", w->mounted);
}

wspace_t *wspace__resume(kmgr_t *m, const json_t *rec, const struct wspace_ops *ops)
{
    const char *id = NULL, *tenant = NULL, *path = NULL;
    json_int_t uid = -1, gid = -1, slot = -1, size = 0;
    int made = 0, mounted = 0;
    size_t rl = strlen(m->rundir);
    if (json_unpack((json_t *)rec, "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:b}", "id", &id,
                    "tenant", &tenant, "path", &path, "uid", &uid, "gid", &gid, "slot", &slot,
                    "size", &size, "made", &made, "mounted", &mounted) < 0 ||
        strlen(id) >= WSPACE_ID_MAX || strlen(tenant) > KMGR_TENANT_MAX ||
        strncmp(path, m->rundir, rl) != 0 || path[rl] != '/' || strstr(path + rl, "/..") ||
        slot < -1 ||
        (m->o.sandbox && (!m->slots || slot < 0 || (size_t)slot >= m->nslots || m->slots[slot]))) {
        errno = EINVAL;
        return NULL;
    }
    wspace_t *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->m = m;
    w->ops = ops;
    w->slot = -1;
    snprintf(w->id, sizeof(w->id), "%s", id);
    snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
    w->uid = (uid_t)uid;
    w->gid = (gid_t)gid;
    w->size = size;
    w->made = made;
    w->mounted = mounted;
    if (!(w->path = strdup(path)) || !(w->grace = m->evl->timer_new(m->evl, on_grace, w))) {
        int err = errno ? errno : ENOMEM;
        wspace__let_go(w);
        errno = err;
        return NULL;
    }
    if (slot >= 0 && m->slots) {
        m->slots[slot] = 1;
        w->slot = (long)slot;
    }
    w->last_used_us = util_now_us();
    arm_grace(w);
    return w;
}

void wspace__let_go(wspace_t *w)
{
    if (!w)
        return;
    evl_timer_destroy(w->m->evl, &w->grace);
    free(w->path);
    free(w);
}

void wspace__attach(wspace_t *w)
{
    w->kernels++;
    wspace_touch(w);
}

void wspace__detach(wspace_t *w)
{
    if (w->kernels > 0)
        w->kernels--;
    wspace_touch(w);
    if (w->kernels == 0 && w->m->o.workspace_grace_s == 0 && w->holds == 0) {
        w->ops->gone(w->m, w);
        wspace__free(w);
    }
}

void wspace__free(wspace_t *w)
{
    if (!w)
        return;
    evl_timer_destroy(w->m->evl, &w->grace);
    if (w->mounted)
        umount2(w->path, MNT_DETACH);
    else if (w->made)
        nftw(w->path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (w->made)
        rmdir(w->path);
    if (w->slot >= 0)
        wspace__slot_put(w->m, w->slot);
    free(w->path);
    free(w);
}
