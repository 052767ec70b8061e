/* A restart in place (gateway/handover.h, docs/operations.md "Upgrade"): the kernel manager's
 * part of the record an image hands to the next one across its exec, and its reading there.
 * What goes over: the instance's runtime directory (and the lock on it, an open descriptor),
 * its workspaces (their tmpfs mounts stay in the gateway's mount namespace) and each running
 * kernel that can go on as it is (khandover__carriable), with what kinstance__build and its
 * launch set (kinstance__export): its process stays the gateway's child (its proxy's
 * PR_SET_PDEATHSIG is the main thread's, which the exec keeps), its runtime tmpfs, cgroup,
 * stderr pipe and command socket are kept. The next image rebuilds them (kinstance__resume),
 * "starting" until each answers; one that cannot be is killed and its leftovers removed. */
#include "kernelmgr/khandover_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/kinstance_int.h"
#include "kernelmgr/private.h"
#include "kernelmgr/wspace_int.h"

static wspace_t *ws_find(const kmgr_t *m, const char *id)
{
    for (size_t i = 0; id && i < m->nws; i++)
        if (!strcmp(m->ws[i]->id, id))
            return m->ws[i];
    return NULL;
}

bool khandover__carriable(const kernel_t *k)
{
    return k->state == KERNEL_RUNNING && !k->pool && !k->adopted && !k->ipc_dir && !k->ckpt &&
           !k->secrets && !k->paused && !k->cgroup_lent && !k->env && !k->pending &&
           k->pid > 1 && k->ws && !k->ws->pooled;
}

json_t *khandover__export(kmgr_t *m, bool (*keep)(kernel_t *k, void *data), void *data,
                          const struct khandover_ops *ops)
{
    json_t *ks = json_array(), *wss = json_array(), *k1;
    bool *carry = calloc(m->n + 1, sizeof(*carry));
    int lockfd = fcntl(m->lockfd, F_DUPFD, KINSTANCE_FD_MIN), r;
    if (!ks || !wss || !carry || lockfd < 0)
        goto fail;
    for (size_t i = 0; i < m->n; i++) {
        kernel_t *k = m->v[i];
        if (!khandover__carriable(k) || (keep && !keep(k, data)))
            continue;
        if ((r = kinstance__export(k, &k1)) < 0) {
            log_warn("kernel=%s: restart: cannot carry it over: %s", k->id, strerror(-r));
            continue;
        }
        json_array_append_new(ks, k1);
        carry[i] = true;
    }
    /* a workspace goes over when no kernel that does not uses it */
    for (size_t w = 0; w < m->nws; w++) {
        bool ok = !m->ws[w]->pooled;
        for (size_t i = 0; ok && i < m->n; i++)
            ok = carry[i] || m->v[i]->ws != m->ws[w];
        if (ok)
            json_array_append_new(wss, wspace__export(m->ws[w]));
    }
    json_t *rec = json_pack("{s:s, s:i, s:o, s:o}", "rundir", m->rundir, "lock_fd", lockfd,
                            "workspaces", wss, "kernels", ks);
    if (!rec)
        goto fail;
    /* from here on, what the record names is the next image's */
    for (size_t i = m->n; i-- > 0;) {
        if (!carry[i])
            continue;
        kernel_t *k = m->v[i];
        memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
        m->n--;
        kexec__fail_all(k, KERNEL_OUT_SHUTDOWN, "the gateway is restarting");
        k->own->event(k, KERNEL_EV_GONE, "restart in place: it goes on in the new image");
        kinstance__let_go(k);
    }
    json_t *w;
    size_t wi;
    json_array_foreach(wss, wi, w)
    {
        wspace_t *ws = ws_find(m, json_string_value(json_object_get(w, "id")));
        ops->ws_remove(m, ws);
        wspace__let_go(ws);
    }
    m->handed_over = true;
    free(carry);
    return rec;
fail:
    json_array_foreach(ks, wi, k1)
    {
        int fds[2] = {(int)json_integer_value(json_object_get(k1, "err_fd")),
                      (int)json_integer_value(json_object_get(k1, "cmd_fd"))};
        for (int j = 0; j < 2; j++)
            if (fds[j] >= KINSTANCE_FD_MIN)
                close(fds[j]);
    }
    if (lockfd >= 0)
        close(lockfd);
    json_decref(ks);
    json_decref(wss);
    free(carry);
    errno = ENOMEM;
    return NULL;
}

/* The record's runtime directory and lock, taken. 0 or -EINVAL (logged). */
int khandover__dir(kmgr_t *m, const json_t *rec)
{
    const char *dir = json_string_value(json_object_get(rec, "rundir"));
    json_int_t fd = json_integer_value(json_object_get(rec, "lock_fd"));
    size_t bl = strlen(m->o.runtime_dir);
    if (!dir || strncmp(dir, m->o.runtime_dir, bl) != 0 || strncmp(dir + bl, "/gw-", 4) != 0 ||
        strchr(dir + bl + 1, '/') || strlen(dir) >= sizeof(m->rundir) || fd < KINSTANCE_FD_MIN ||
        fd > INT_MAX || fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0) {
        log_error("restart: the record's runtime directory is not under %s", m->o.runtime_dir);
        return -EINVAL;
    }
    snprintf(m->rundir, sizeof(m->rundir), "%s", dir);
    m->lockfd = (int)fd;
    return 0;
}

/* The carried descriptors close-on-exec at once: no process started from here gets them. */
static void handover_cloexec(const json_t *rec)
{
    json_t *k;
    size_t i;
    json_array_foreach(json_object_get(rec, "kernels"), i, k)
    {
        json_int_t fds[2] = {json_integer_value(json_object_get(k, "err_fd")),
                             json_integer_value(json_object_get(k, "cmd_fd"))};
        for (int j = 0; j < 2; j++)
            if (fds[j] >= KINSTANCE_FD_MIN && fds[j] <= INT_MAX)
                fcntl((int)fds[j], F_SETFD, FD_CLOEXEC);
    }
}

/* Ends what a record names without a kernel made of it: its process group, descriptors. */
static void handover_kill(const json_t *k)
{
    json_int_t pid = json_integer_value(json_object_get(k, "pid"));
    json_int_t fds[2] = {json_integer_value(json_object_get(k, "err_fd")),
                         json_integer_value(json_object_get(k, "cmd_fd"))};
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (pid > 1 && pid <= INT_MAX &&
        waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0) { /* our child */
        kill(-(pid_t)pid, SIGKILL);
        kill((pid_t)pid, SIGKILL);
        waitpid((pid_t)pid, NULL, 0);
    }
    for (int j = 0; j < 2; j++)
        if (fds[j] >= KINSTANCE_FD_MIN && fds[j] <= INT_MAX)
            close((int)fds[j]);
}

/* The record's workspaces and kernels, rebuilt; those that cannot be are removed. */
void khandover__resume(kmgr_t *m, const json_t *rec, const struct khandover_ops *ops)
{
    json_t *v;
    size_t i, nk = 0;
    char why[300];
    handover_cloexec(rec);
    json_array_foreach(json_object_get(rec, "workspaces"), i, v)
    {
        wspace_t *w = util_grow((void **)&m->ws, &m->capws, m->nws, sizeof(*m->ws)) < 0
                          ? NULL
                          : wspace__resume(m, v, ops->ws);
        if (w)
            m->ws[m->nws++] = w;
        else
            log_warn("restart: a workspace cannot be carried over: %s", strerror(errno));
    }
    json_array_foreach(json_object_get(rec, "kernels"), i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        wspace_t *w = ws_find(m, json_string_value(json_object_get(v, "workspace")));
        kernel_t *k = NULL;
        if (!w || util_grow((void **)&m->v, &m->cap, m->n, sizeof(*m->v)) < 0) {
            snprintf(why, sizeof(why), "%s", w ? "out of memory" : "its workspace is gone");
            handover_kill(v);
        } else {
            k = kinstance__resume(m, v, w, ops->kernel_owner, why, sizeof(why));
        }
        if (!k) {
            log_warn("kernel=%.40s: restart: not carried over (ended): %s", id ? id : "?", why);
            continue;
        }
        m->v[m->n++] = k;
        ops->added(m, k);
        nk++;
        log_info("kernel=%s: restart: carried over (pid %d, workspace=%s)", k->id, (int)k->pid,
                 w->id);
    }
    log_info("restart: %zu kernel%s and %zu workspace%s carried over", nk, nk == 1 ? "" : "s",
             m->nws, m->nws == 1 ? "" : "s");
}

const char *khandover__undo(const json_t *rec, const char *runtime_dir)
{
    json_t *v;
    size_t i;
    const char *dir = json_string_value(json_object_get(rec, "rundir"));
    json_array_foreach(json_object_get(rec, "kernels"), i, v)
    {
        handover_kill(v);
        const char *id = json_string_value(json_object_get(v, "id"));
        char p[PATH_MAX];
        if (dir && id && !strchr(id, '/')) {
            snprintf(p, sizeof(p), "%s/%s", dir, id);
            umount2(p, MNT_DETACH);
        }
    }
    json_array_foreach(json_object_get(rec, "workspaces"), i, v)
    {
        const char *p = json_string_value(json_object_get(v, "path"));
        if (p)
            umount2(p, MNT_DETACH);
    }
    json_int_t fd = json_integer_value(json_object_get(rec, "lock_fd"));
    if (fd >= KINSTANCE_FD_MIN && fd <= INT_MAX)
        close((int)fd);
    size_t bl = strlen(runtime_dir);
    if (!dir || strncmp(dir, runtime_dir, bl) != 0 || strncmp(dir + bl, "/gw-", 4) != 0 ||
        strchr(dir + bl + 1, '/'))
        return NULL;
    return dir + bl + 1;
}
