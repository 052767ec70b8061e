/* A fork of a running kernel into a new kernel (docs/checkpoints.md, "Fork").
 *
 * Interpreter state can only be copied by fork(2) inside the parent's process, and a process
 * cannot leave its namespaces: the fork lives in its parent's sandbox (pid, mount and network
 * namespaces, cgroup, workspace). The gateway builds the new kernel as any other (its id, key,
 * connection, its own runtime directory and empty cgroup, kept for a restart, which makes it
 * a fresh kernel of its own), but its process is not the gateway's child: the endpoints it
 * binds are in a directory the gateway makes in the parent's runtime directory (the only
 * place both see), and the gateway follows the process with a pidfd (kernel__adopt).
 *
 * The request is one of the gateway's own checkpoint requests (kckpt.c: KCKPT_FORK): a shell
 * request, it waits behind a running cell. */
#include "kernelmgr/kfork_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "kernelmgr/kckpt.h"
#include "kernelmgr/kernel_int.h"
#include "kernelmgr/kinstance_int.h"
#include "kernelmgr/klaunch_int.h"
#include "sandbox/sbx.h"

#define KFORK_PID_MAX 4194304 /* Linux's pid_max ceiling */

struct kfork {
    struct list link; /* on m->forks */
    kmgr_t *m;
    kernel_t *parent, *child;
    kernel_t *owner;  /* whose sandbox they live in: parent, or the kernel parent was forked
                         from (a fork of a fork) */
    kckpt_req_t *req; /* the kgw_fork_request (kckpt.c) */
};

static void kfork_free(struct kfork *f)
{
    list_remove(&f->link);
    kckpt_cancel(&f->req);
    free(f);
}

static void fail(struct kfork *f, const char *fmt, const char *a, const char *b)
{
    char why[400];
    kernel_t *k = f->child;
    snprintf(why, sizeof(why), fmt, a, b);
    kfork_free(f);
    if (k->ipc_dir) { /* a late kgw_fork_request finds no connection file: no fork then */
        char cf[PATH_MAX];
        snprintf(cf, sizeof(cf), "%s/connection.json", k->ipc_dir);
        unlink(cf);
    }
    log_warn("kernel=%s: fork of %s failed: %s", k->id, k->fork_of, why);
    kernel__adopt_failed(k, why);
}

/* The process of the parent's sandbox whose pid there is nspid: its pid here, or -ESRCH.
 * Only a process in the parent's cgroup counts: what the kernel says is not trusted. */
static pid_t host_pid(const kernel_t *owner, const kernel_t *parent, long nspid)
{
    if (!parent->m->o.sandbox) {
        /* unsandboxed (no boundary to keep): the leader of a session of its own, of our uid,
         * not the parent's own process */
        char p[64], buf[512];
        snprintf(p, sizeof(p), "/proc/%ld/stat", nspid);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n <= 0 || nspid == parent->pid)
            return -ESRCH;
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        char state;
        long ppid, pgrp, sid;
        if (!rp || sscanf(rp + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &sid) != 4 ||
            sid != nspid)
            return -ESRCH;
        return (pid_t)nspid;
    }
    DIR *d = opendir("/proc");
    pid_t found = -ESRCH;
    struct dirent *e;
    if (!d)
        return -errno;
    while (found < 0 && (e = readdir(d))) {
        char *end, p[300], buf[2048];
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1)
            continue;
        snprintf(p, sizeof(p), "/proc/%ld/status", pid);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        char *ns = strstr(buf, "\nNSpid:");
        if (!ns)
            continue;
        /* "NSpid:\t<here>\t...\t<innermost>": nested at least once, innermost nspid */
        char *eol = strchr(ns + 1, '\n');
        if (eol)
            *eol = '\0';
        char *last = strrchr(ns, '\t');
        if (!last || last == strchr(ns, '\t') || strtol(last + 1, NULL, 10) != nspid)
            continue;
        if (sbx_cgroup_has(owner->cgroup, (pid_t)pid))
            found = (pid_t)pid;
    }
    closedir(d);
    return found;
}

static void on_reply(void *data, kernel_t *parent, int status, json_t *c)
{
    struct kfork *f = data;
    f->req = NULL; /* answered: kckpt frees it */
    if (status == -ETIMEDOUT)
        return fail(f, "%s%s",
                    "the kernel it was forked from did not answer the fork request in time",
                    " (it waits behind a running cell)");
    if (status == -ECHILD) {
        f->child->fork_parent_gone = true;
        return fail(f, "%s%s", "the kernel it was forked from ended before the fork", "");
    }
    if (status == -EREMOTEIO || status == -ENOTSUP || status == -EMLINK) { /* (kckpt.h) */
        const char *en = json_string_value(json_object_get(c, "ename"));
        const char *ev = json_string_value(json_object_get(c, "evalue"));
        char ename[64], evalue[256];
        snprintf(ename, sizeof(ename), "%s", en ? en : "Error");
        snprintf(evalue, sizeof(evalue), "%s", ev ? ev : "");
        for (char *p = evalue; *p; p++)
            if (*p == '\r' || *p == '\n')
                *p = ' ';
        if (!strcmp(ename, "CheckpointError"))
            f->child->fork_unknown_cp = true;
        return fail(f, "the kernel could not fork: %.64s: %.256s", ename, evalue);
    }
    if (status < 0)
        return fail(f, "the fork request failed: %s%s", strerror(-status), "");
    json_int_t nspid = json_integer_value(json_object_get(c, "pid"));
    if (nspid <= 1 || nspid > KFORK_PID_MAX)
        return fail(f, "%s%s", "the fork's reply has no valid pid", "");
    pid_t pid = host_pid(f->owner, parent, (long)nspid);
    int pidfd = pid > 1 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if (pidfd < 0)
        return fail(f, "%s%s", "the forked process is not in the kernel's sandbox, or gone", "");
    kernel_t *k = f->child;
    kfork_free(f);
    log_info("kernel=%s: forked from %s%s%s (pid %d)", k->id, k->fork_of,
             k->fork_cp[0] ? " at checkpoint " : "", k->fork_cp, (int)pid);
    kernel__adopt(k, pid, pidfd);
}

/* The fork's endpoints' directory in the parent's runtime directory: made, with its
 * connection file. 0 or -errno. */
static int make_ipc_dir(kernel_t *owner, kernel_t *k)
{
    char dir[PATH_MAX], view[PATH_MAX], cf[PATH_MAX + 32], name[16];
    int r = -EEXIST;
    /* "f<n>": short, for the unix socket paths under it (108 bytes, with the checkpoints'
     * .ckpt-<uuid> of a fork's own); the first free name (a dead fork's may stay until its
     * kernel goes) */
    for (int n = 0; n < 4 * KMGR_FORKS_MAX && r == -EEXIST; n++) {
        snprintf(name, sizeof(name), "f%d", n);
        snprintf(dir, sizeof(dir), "%s/%s", owner->dir, name);
        r = mkdir(dir, 0700) < 0 ? -errno : 0;
    }
    if (r < 0)
        return r;
    if (strlen(dir) + sizeof("/k-N") > 108) {
        rmdir(dir);
        return -ENAMETOOLONG;
    }
    snprintf(view, sizeof(view), "%s/%s", k->m->o.sandbox ? SBX_RUNTIME_PATH : owner->dir, name);
    if (k->m->o.sandbox && chown(dir, k->ws->uid, k->ws->uid) < 0) {
        r = -errno;
        rmdir(dir);
        return r;
    }
    if (!(k->ipc_dir = strdup(dir))) {
        rmdir(dir);
        return -ENOMEM;
    }
    snprintf(cf, sizeof(cf), "%s/connection.json", dir);
    /* its endpoints as the parent's sandbox sees them */
    if ((r = klaunch__conn_file(k, cf, view)) < 0)
        return r; /* the directory goes with k (kernel__drop_ipc_dir) */
    return kernel__rewatch(k);
}

static int send_request(struct kfork *f, const char *cp)
{
    kernel_t *p = f->parent, *k = f->child;
    char view[PATH_MAX + 32];
    snprintf(view, sizeof(view), "%s/%s/connection.json",
             k->m->o.sandbox ? SBX_RUNTIME_PATH : f->owner->dir, strrchr(k->ipc_dir, '/') + 1);
    json_t *req = json_pack("{s:s, s:s?}", "connection_file", view, "checkpoint", cp);
    if (!req)
        return -ENOMEM;
    int r = kckpt_send(p, KCKPT_FORK, req, k->m->o.start_timeout_ms, on_reply, f, &f->req);
    json_decref(req);
    return r;
}

int kfork__start(kmgr_t *m,
                 kernel_t *parent,
                 kernel_t *owner,
                 const char *cp,
                 const struct kernel_owner_ops *own,
                 kernel_t **ret)
{
    int r;
    if (parent->state != KERNEL_RUNNING || parent->pid <= 0 || owner->adopted)
        return -EBUSY;
    struct kmgr_limits lim = {.mem_bytes = parent->lim.mem_bytes,
                              .cpu_millis = parent->lim.cpu_millis,
                              .pids = parent->lim.pids,
                              .workspace_bytes = parent->lim.workspace_bytes,
                              .exec_timeout_ms = parent->exec_timeout_ms,
                              .output_cap = parent->output_cap};
    struct kfork *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    list_init(&f->link);
    f->m = m;
    f->parent = parent;
    f->owner = owner;
    kernel_t *k = kinstance__build(m, parent->spec, NULL, &lim, parent->ws, NULL, parent->egpol,
                                   NULL, 0, own);
    if (!k) {
        r = -errno;
        kfork_free(f);
        return r;
    }
    f->child = k;
    snprintf(k->fork_of, sizeof(k->fork_of), "%s", parent->id);
    snprintf(k->fork_cp, sizeof(k->fork_cp), "%s", cp ? cp : "");
    if ((r = make_ipc_dir(owner, k)) < 0 || (r = send_request(f, cp)) < 0) {
        kfork_free(f);
        kinstance__free(k);
        return r;
    }
    list_append(&m->forks, &f->link);
    *ret = k;
    return 0;
}

void kfork__parent_ended(kmgr_t *m, kernel_t *k)
{
    for (size_t i = 0; i < m->n; i++) {
        kernel_t *c = m->v[i];
        if (c->adopted && c->pid > 1 && !strcmp(c->fork_of, k->id)) {
            log_info("kernel=%s: ending it: the kernel %s it was forked from ended", c->id, k->id);
            c->fork_parent_gone = true; /* a fork still starting: not its failure */
            klaunch__signal(c, SIGKILL);
        }
    }
}

void kfork__forget(kmgr_t *m, kernel_t *k)
{
    struct kfork *f, *tmp;
    list_for_each_safe(f, tmp, &m->forks, link)
    {
        if (f->child == k) {
            kfork_free(f);
        } else if (f->parent == k || f->owner == k) {
            f->child->fork_parent_gone = true;
            fail(f, "%s%s", "the kernel it was forked from ended before the fork", "");
        }
    }
}
