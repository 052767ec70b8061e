/* Directory watches of the E2B sandbox plane (e2bwatch.h; docs/e2b.md). One inotify descriptor
 * serves the watches of a sandbox (so that one sandbox's flood of events, up to an overflow of
 * its queue, is its own): an inotify watch descriptor is a directory (an inode), which one or
 * more of them hold (a wref each: the watch and the directory's path below its root). A
 * watch's events are envd's (fsnotify's): a name relative to the watched directory and one of
 * create, write, remove, rename, chmod. Directories are opened below the workspace's root with
 * openat2 (files_openat: no symbolic link, magic link or mount crossed) and watched through
 * /proc/self/fd, so that the kernel, which controls the workspace, cannot make the gateway
 * watch anything outside it. */
#include "gateway/e2bwatch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "common/log.h"
#include "gateway/e2bconn.h"
#include "gateway/files.h"
#include "kernelmgr/kmgr.h"

#define WATCH_MASK                                                                               \
    (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_MOVE_SELF | IN_ATTRIB | IN_MODIFY |            \
     IN_DELETE | IN_DELETE_SELF | IN_ONLYDIR)
#define BUCKETS  256
#define READ_MAX (64 * 1024) /* bytes of events read at once */

struct wdir { /* one inotify watch descriptor: a directory */
    struct list link; /* in its bucket */
    int wd;
    struct list refs; /* struct wref.dlink */
    size_t nrefs;
};

struct wref { /* a directory one watch holds */
    struct list dlink, wlink;
    struct wdir *d;
    e2bwatch_t *w;
    char rel[]; /* its path below the watch's root ("" the root itself) */
};

/* The inotify descriptor of one sandbox's watches. */
struct ino {
    struct e2bwatches *all;
    struct list link; /* in all->inos */
    char sbx_id[UTIL_UUID_LEN + 1];
    int fd;
    evl_io_t *io;
    size_t nwatches;
    struct list buckets[BUCKETS]; /* struct wdir by wd */
};

struct e2bwatch {
    struct e2bwatches *all; /* NULL once e2bwatch_fini detached it */
    struct ino *ino;        /* its sandbox's (NULL: detached) */
    struct list link;       /* in all->watches */
    char sbx_id[UTIL_UUID_LEN + 1];
    char tenant[KEYFILE_TENANT_MAX + 1];
    char ws_id[WSPACE_ID_MAX + 1];
    char id[E2BWIRE_WATCHER_MAX + 1]; /* a watcher's ("": a stream) */
    char root[FPATH_MAX + 1];         /* the watched directory, workspace-relative */
    bool recursive;
    struct list refs; /* struct wref.wlink */
    size_t nrefs;
    bool done; /* no more events: its directory went, it failed, or its sandbox ended */
    /* a stream */
    struct e2breq *q;
    buf_t pend; /* enveloped messages not yet written */
    size_t pend_off;
    bool headers_sent, ended; /* ended: the end of the stream is in pend */
    uint64_t keepalive_ms;
    /* a watcher */
    json_t *events;          /* FilesystemEvent objects not asked for yet */
    char code[32], msg[256]; /* its failure, answered from then on ("": none) */
};

struct e2bwatches {
    struct e2b *e;
    struct list watches; /* e2bwatch_t.link: every sandbox's */
    struct list inos;    /* struct ino.link */
    uint8_t buf[READ_MAX] __attribute__((aligned(8))); /* what one read gives (any ino's) */
};

/* What a directory's event asks of a watch once the event is told (changes to what it holds). */
enum action { ACT_ADD, ACT_DROP, ACT_END };
struct todo {
    struct list link;
    enum action what;
    e2bwatch_t *w;
    char rel[];
};

/* ---- the directories ---- */

static struct wdir *wdir_find(struct ino *in, int wd)
{
    struct wdir *d;
    list_for_each(d, &in->buckets[(unsigned)wd % BUCKETS], link)
    {
        if (d->wd == wd)
            return d;
    }
    return NULL;
}

/* w lets go of one directory; the last to hold it removes its inotify watch (unless the kernel
 * removed it already: IN_IGNORED). */
static void ref_drop(struct wref *ref, bool rm)
{
    struct wdir *d = ref->d;
    e2bwatch_t *w = ref->w;
    list_remove(&ref->dlink);
    list_remove(&ref->wlink);
    w->nrefs--;
    free(ref);
    if (--d->nrefs == 0) {
        if (rm)
            inotify_rm_watch(w->ino->fd, d->wd);
        list_remove(&d->link);
        free(d);
    }
}

static void drop_all(e2bwatch_t *w)
{
    while (!list_empty(&w->refs))
        ref_drop(list_first(&w->refs, struct wref, wlink), true);
}

/* w's directories at rel and below it (one moved away). */
static void drop_tree(e2bwatch_t *w, const char *rel)
{
    size_t n = strlen(rel);
    struct list *it = w->refs.next;
    while (it != &w->refs) {
        struct wref *ref = list_entry(it, struct wref, wlink);
        it = it->next;
        if (strncmp(ref->rel, rel, n) == 0 && (ref->rel[n] == '\0' || ref->rel[n] == '/'))
            ref_drop(ref, true);
    }
}

/* What the sandbox's and its tenant's watches hold, and the bounds. */
struct budget {
    long long sbx, tenant, max_sbx, max_tenant;
};

static void budget_of(struct e2bwatches *a, const e2bwatch_t *w, struct budget *b)
{
    gw_t *g = a->e->g;
    *b = (struct budget){.max_sbx = g->cfg.e2b_watch_dirs,
                         .max_tenant = g->cfg.e2b_tenant_watch_dirs};
    e2bwatch_t *o;
    list_for_each(o, &a->watches, link)
    {
        if (strcmp(o->tenant, w->tenant) == 0)
            b->tenant += (long long)o->nrefs;
        if (strcmp(o->sbx_id, w->sbx_id) == 0)
            b->sbx += (long long)o->nrefs;
    }
}

/* w holds the directory dirfd, at rel below its root: 0, -EDQUOT past a bound, -errno. */
static int hold(e2bwatch_t *w, int dirfd, const char *rel, struct budget *b)
{
    struct ino *in = w->ino;
    if (b->sbx >= b->max_sbx || b->tenant >= b->max_tenant)
        return -EDQUOT;
    char proc[40];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dirfd); /* the directory opened, itself */
    int wd = inotify_add_watch(in->fd, proc, WATCH_MASK);
    if (wd < 0)
        return -errno;
    struct wdir *d = wdir_find(in, wd);
    if (d) { /* held already (by another watch, or by w under another path: it moved) */
        struct wref *r;
        list_for_each(r, &d->refs, dlink)
        {
            if (r->w == w) {
                ref_drop(r, false);
                d = wdir_find(in, wd);
                break;
            }
        }
    }
    if (!d) {
        if (!(d = calloc(1, sizeof(*d)))) {
            inotify_rm_watch(in->fd, wd);
            return -ENOMEM;
        }
        d->wd = wd;
        list_init(&d->refs);
        list_append(&in->buckets[(unsigned)wd % BUCKETS], &d->link);
    }
    size_t n = strlen(rel);
    struct wref *ref = malloc(sizeof(*ref) + n + 1);
    if (!ref) {
        if (d->nrefs == 0) {
            inotify_rm_watch(in->fd, wd);
            list_remove(&d->link);
            free(d);
        }
        return -ENOMEM;
    }
    ref->d = d;
    ref->w = w;
    memcpy(ref->rel, rel, n + 1);
    list_append(&d->refs, &ref->dlink);
    list_append(&w->refs, &ref->wlink);
    d->nrefs++;
    w->nrefs++;
    b->sbx++;
    b->tenant++;
    return 0;
}

/* ---- the events a watch tells ---- */

static void wake(e2bwatch_t *w)
{
    if (w->q) {
        w->q->last_ms = util_now_ms();
        lws_callback_on_writable(w->q->r->wsi);
    }
}

/* Queues one message of a stream (with E2BWIRE_ENV_END its end). */
static void stream_send(e2bwatch_t *w, const char *json, uint8_t flags)
{
    if (e2bwire_envelope_write(&w->pend, flags, json, strlen(json)) < 0)
        log_warn("e2b: sandbox=%s: out of memory for a watch's events", w->sbx_id);
    if (flags & E2BWIRE_ENV_END)
        w->ended = true;
    wake(w);
}

/* No more events: the end of a stream (with an error when code is not NULL); a watcher's
 * failure is answered by its next GetWatcherEvents. Its directories are let go by reap(). */
static void finish(e2bwatch_t *w, const char *code, const char *msg)
{
    if (w->done)
        return;
    w->done = true;
    if (!w->q) {
        if (code) {
            snprintf(w->code, sizeof(w->code), "%s", code);
            snprintf(w->msg, sizeof(w->msg), "%s", msg);
        }
        return;
    }
    json_t *end = code ? json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg)
                       : json_object();
    char *s = end ? json_dumps(end, JSON_COMPACT) : NULL;
    json_decref(end);
    stream_send(w, s ? s : "{}", E2BWIRE_ENV_END);
    free(s);
}

static void emit(e2bwatch_t *w, const char *name, const char *type)
{
    json_t *ev = json_pack("{s:s, s:s}", "name", name, "type", type);
    if (!ev || w->done) {
        json_decref(ev);
        return;
    }
    if (!w->q) {
        json_array_append_new(w->events, ev);
        if (json_array_size(w->events) > E2BWATCH_QUEUED)
            finish(w, "resource_exhausted",
                   "more than 4096 events waited for GetWatcherEvents; the watcher stopped");
        return;
    }
    json_t *msg = json_pack("{s:o}", "filesystem", ev);
    char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (s)
        stream_send(w, s, 0);
    free(s);
    if (w->pend.len - w->pend_off > E2BWATCH_HELD)
        finish(w, "resource_exhausted",
               "the client took the watch's events too slowly (1 MiB of them waited); the "
               "watch stopped");
}

/* ---- watching directories ---- */

static int open_dir(e2bwatch_t *w, const char *rel)
{
    wspace_t *ws = kmgr_workspace(w->all->e->g->km, w->ws_id);
    if (!ws)
        return -ENOENT;
    int root = open(wspace_path(ws), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0)
        return -errno;
    char path[2 * FPATH_MAX + 2];
    snprintf(path, sizeof(path), "%s%s%s", w->root, w->root[0] && rel[0] ? "/" : "", rel);
    int fd = path[0] ? files_openat(root, path, O_RDONLY | O_DIRECTORY, 0) : dup(root);
    if (fd == -1)
        fd = -errno;
    close(root);
    return fd;
}

static size_t depth_of(const char *p)
{
    size_t n = p[0] != '\0';
    for (; *p; p++)
        n += *p == '/';
    return n;
}

/* w holds dirfd (at rel) and, when recursive, every directory below it; with announce, a
 * create event for each entry found below it (made before its directory was watched). */
static int hold_tree(e2bwatch_t *w, int dirfd, const char *rel, bool announce, struct budget *b)
{
    int rc = hold(w, dirfd, rel, b);
    if (rc < 0 || !w->recursive || depth_of(w->root) + depth_of(rel) >= FPATH_DEPTH_MAX)
        return rc;
    int fd = dup(dirfd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return 0; /* gone meanwhile */
    }
    size_t rl = strlen(rel), rootl = strlen(w->root);
    struct dirent *de;
    while (rc == 0 && !w->done && (de = readdir(dir))) {
        size_t nl = strlen(de->d_name);
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            !fpath_name_ok(de->d_name, nl) || rootl + rl + nl + 2 > FPATH_MAX)
            continue; /* not a name a path can hold: never told */
        char sub[FPATH_MAX + 1];
        snprintf(sub, sizeof(sub), "%s%s%s", rel, rl ? "/" : "", de->d_name);
        if (announce)
            emit(w, sub, "EVENT_TYPE_CREATE");
        if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
            continue;
        int child = files_openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY, 0);
        if (child >= 0) { /* (not a directory, a link, a mount: not watched) */
            rc = hold_tree(w, child, sub, announce, b);
            close(child);
        }
    }
    closedir(dir);
    return rc;
}

static void too_many(e2bwatch_t *w, int rc, char *msg, size_t msgsz)
{
    if (rc == -EDQUOT)
        snprintf(msg, msgsz,
                 "a sandbox's watches hold at most %lld directories, a tenant's %lld "
                 "(--e2b-max-watch-dirs, --e2b-tenant-max-watch-dirs)",
                 w->all->e->g->cfg.e2b_watch_dirs, w->all->e->g->cfg.e2b_tenant_watch_dirs);
    else
        snprintf(msg, msgsz, "the gateway cannot watch more directories: %s", strerror(-rc));
}

/* A directory that appeared below a recursive watch: watched, and what it holds told. */
static void add_tree(e2bwatch_t *w, const char *rel)
{
    int fd = open_dir(w, rel);
    if (fd < 0)
        return; /* gone, or not something to watch (a link, a mount) */
    struct budget b;
    budget_of(w->all, w, &b);
    int rc = hold_tree(w, fd, rel, true, &b);
    close(fd);
    if (rc == -EDQUOT || rc == -ENOSPC || rc == -ENOMEM) {
        char msg[256];
        too_many(w, rc, msg, sizeof(msg));
        finish(w, "resource_exhausted", msg);
    }
}

static bool todo_add(struct list *todo, enum action what, e2bwatch_t *w, const char *rel)
{
    size_t n = strlen(rel);
    struct todo *t = malloc(sizeof(*t) + n + 1);
    if (!t)
        return false;
    t->what = what;
    t->w = w;
    memcpy(t->rel, rel, n + 1);
    list_append(todo, &t->link);
    return true;
}

/* One inotify event: told to each watch holding its directory, then what it changes of what
 * they hold (a directory made or moved in is watched, one moved out is let go, the root's
 * removal ends the watch). */
static void dispatch(struct ino *in, int wd, uint32_t mask, const char *name, size_t nlen)
{
    struct wdir *d = wdir_find(in, wd);
    if (!d)
        return; /* let go of already */
    struct list todo;
    list_init(&todo);
    struct wref *ref;
    list_for_each(ref, &d->refs, dlink)
    {
        e2bwatch_t *w = ref->w;
        if (w->done)
            continue;
        if (nlen == 0) { /* the directory itself: its parent tells what happened to it */
            if (!ref->rel[0] && (mask & (IN_DELETE_SELF | IN_IGNORED)))
                todo_add(&todo, ACT_END, w, "");
            continue;
        }
        size_t rl = strlen(ref->rel);
        char full[FPATH_MAX + 1];
        if (!fpath_name_ok(name, nlen) || strlen(w->root) + rl + nlen + 2 > FPATH_MAX)
            continue;
        snprintf(full, sizeof(full), "%s%s%.*s", ref->rel, rl ? "/" : "", (int)nlen, name);
        const char *types[E2BWIRE_WATCH_TYPES];
        size_t nt = e2bwire_watch_types(mask, types);
        for (size_t i = 0; i < nt; i++)
            emit(w, full, types[i]);
        if ((mask & IN_ISDIR) && w->recursive && (mask & (IN_CREATE | IN_MOVED_TO)))
            todo_add(&todo, ACT_ADD, w, full);
        else if ((mask & IN_ISDIR) && w->recursive && (mask & IN_MOVED_FROM))
            todo_add(&todo, ACT_DROP, w, full);
    }
    if (mask & IN_IGNORED) { /* the kernel removed the watch (the directory is gone) */
        while (!list_empty(&d->refs)) {
            struct wref *r = list_first(&d->refs, struct wref, dlink);
            bool last = d->nrefs == 1;
            ref_drop(r, false);
            if (last)
                break; /* d is freed */
        }
    }
    while (!list_empty(&todo)) {
        struct todo *t = list_first(&todo, struct todo, link);
        list_remove(&t->link);
        if (t->what == ACT_END)
            finish(t->w, NULL, NULL);
        else if (t->what == ACT_DROP)
            drop_tree(t->w, t->rel);
        else if (!t->w->done)
            add_tree(t->w, t->rel);
        free(t);
    }
}

/* Watches that stopped let go of their directories. */
static void reap(struct e2bwatches *a)
{
    e2bwatch_t *w;
    list_for_each(w, &a->watches, link)
    {
        if (w->done && w->nrefs)
            drop_all(w);
    }
}

static void on_events(void *data)
{
    struct ino *in = data;
    struct e2bwatches *a = in->all;
    ssize_t n = read(in->fd, a->buf, sizeof(a->buf));
    if (n <= 0)
        return;
    size_t off = 0, nlen;
    int wd;
    uint32_t mask;
    const char *name;
    while (e2bwire_inotify_next(a->buf, (size_t)n, &off, &wd, &mask, &name, &nlen) == 1) {
        if (mask & IN_Q_OVERFLOW) {
            e2bwatch_t *w;
            list_for_each(w, &a->watches, link)
            {
                if (w->ino == in)
                    finish(w, "data_loss",
                           "events were lost (more came than the gateway could take); the "
                           "watch stopped");
            }
            log_info("e2b: sandbox=%s: its inotify queue overflowed; its watches stopped",
                     in->sbx_id);
            continue;
        }
        dispatch(in, wd, mask, name, nlen);
    }
    reap(a);
}

static struct e2bwatches *watches_of(struct e2b *e)
{
    if (!e->watches && (e->watches = calloc(1, sizeof(*e->watches)))) {
        e->watches->e = e;
        list_init(&e->watches->watches);
        list_init(&e->watches->inos);
    }
    return e->watches;
}

/* The inotify descriptor of sandbox sbx_id's watches, made with its first: NULL + errno. */
static struct ino *ino_of(struct e2bwatches *a, const char *sbx_id)
{
    struct ino *in;
    list_for_each(in, &a->inos, link)
    {
        if (strcmp(in->sbx_id, sbx_id) == 0)
            return in;
    }
    if (!(in = calloc(1, sizeof(*in))))
        return NULL;
    in->all = a;
    snprintf(in->sbx_id, sizeof(in->sbx_id), "%s", sbx_id);
    for (size_t i = 0; i < BUCKETS; i++)
        list_init(&in->buckets[i]);
    in->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    evl_t *l = &a->e->g->loop.evl;
    if (in->fd < 0 || !(in->io = l->io_add(l, in->fd, on_events, in))) {
        int err = errno;
        if (in->fd >= 0)
            close(in->fd);
        free(in);
        errno = err;
        return NULL;
    }
    list_append(&a->inos, &in->link);
    return in;
}

/* A watch lets go of its sandbox's descriptor; the last closes it (never from its own
 * callback: watches end from requests and the sandbox's end). */
static void ino_release(e2bwatch_t *w)
{
    struct ino *in = w->ino;
    w->ino = NULL;
    if (!in || --in->nwatches > 0)
        return;
    list_remove(&in->link);
    evl_io_destroy(&in->all->e->g->loop.evl, &in->io);
    close(in->fd);
    free(in);
}

/* ---- the calls ---- */

static void watch_free(e2bwatch_t *w)
{
    drop_all(w);
    ino_release(w);
    if (w->all)
        list_remove(&w->link);
    buf_fini(&w->pend);
    json_decref(w->events);
    free(w);
}

void e2bwatch_destroy(e2bwatch_t **pw)
{
    if (*pw) {
        watch_free(*pw);
        *pw = NULL;
    }
}

/* A watch of s's directory f->path (a watcher's, with its id and events, unless stream),
 * holding what it watches: 0, or a Connect error (code and message). */
static int watch_new(struct gw_req *r, struct e2bsbx *s, const struct e2bwire_fsreq *f,
                     bool stream, e2bwatch_t **ret, const char **code, char *msg, size_t msgsz)
{
    struct e2bwatches *a = watches_of(r->g->e2b);
    *code = "resource_exhausted";
    if (!a) {
        snprintf(msg, msgsz, "the gateway cannot watch directories now");
        return -ENOMEM;
    }
    size_t mine = 0;
    e2bwatch_t *o;
    list_for_each(o, &a->watches, link)
    {
        mine += strcmp(o->sbx_id, s->id) == 0;
    }
    if (mine >= E2BWATCH_PER_SBX) {
        snprintf(msg, msgsz, "a sandbox has at most %d watches at once", E2BWATCH_PER_SBX);
        return -EDQUOT;
    }
    e2bwatch_t *w = calloc(1, sizeof(*w));
    json_t *events = stream || !w ? NULL : json_array();
    bool oom = !w || (!stream && !events);
    struct ino *in = oom ? NULL : ino_of(a, s->id);
    if (!in) {
        snprintf(msg, msgsz, "the gateway cannot watch directories now: %s%s",
                 oom ? "out of memory" : strerror(errno),
                 !oom && errno == EMFILE ? " (the host's fs.inotify.max_user_instances)" : "");
        json_decref(events);
        free(w);
        return -ENOMEM;
    }
    w->events = events;
    if (!stream) {
        w->id[0] = 'w';
        util_random_hex(w->id + 1, 16);
    }
    w->all = a;
    w->ino = in;
    in->nwatches++;
    list_init(&w->refs);
    buf_init(&w->pend, SIZE_MAX);
    snprintf(w->sbx_id, sizeof(w->sbx_id), "%s", s->id);
    snprintf(w->tenant, sizeof(w->tenant), "%s", s->tenant);
    snprintf(w->ws_id, sizeof(w->ws_id), "%s", s->ws_id);
    snprintf(w->root, sizeof(w->root), "%s", f->path);
    w->recursive = f->recursive;
    list_append(&a->watches, &w->link);
    int fd = open_dir(w, ""), rc = fd;
    if (fd >= 0) {
        struct budget b;
        budget_of(a, w, &b);
        rc = hold_tree(w, fd, "", false, &b);
        close(fd);
    }
    if (rc < 0) {
        const char *p = f->path;
        if (rc == -EDQUOT || rc == -ENOSPC || rc == -ENOMEM) {
            too_many(w, rc, msg, msgsz);
        } else {
            *code = rc == -ENOENT ? "not_found" : e2bwire_code_name(rc);
            snprintf(msg, msgsz, "%s%s%s: %s", E2BWIRE_HOME, p[0] ? "/" : "", p,
                     rc == -ENOTDIR  ? "not a directory"
                     : rc == -ENOENT ? "no such directory"
                     : rc == -ELOOP || rc == -EXDEV
                         ? "a symbolic link or mount point is in the way (never followed)"
                         : strerror(-rc));
        }
        watch_free(w);
        return rc;
    }
    *ret = w;
    return 0;
}

static e2bwatch_t *watcher_find(struct e2b *e, const char *sbx_id, const char *id)
{
    e2bwatch_t *w;
    if (!e->watches)
        return NULL;
    list_for_each(w, &e->watches->watches, link)
    {
        if (!w->q && strcmp(w->id, id) == 0 && strcmp(w->sbx_id, sbx_id) == 0)
            return w;
    }
    return NULL;
}

static void watch_stream(struct gw_req *r, struct e2bsbx *s)
{
    char msg[512];
    uint8_t flags;
    size_t off, n, used;
    int rc = e2bwire_envelope_parse((const uint8_t *)(r->body.data ? r->body.data : ""),
                                    r->body.len, E2BWIRE_ENVELOPE_MAX, &flags, &off, &n, &used);
    if (rc < 0 || used != r->body.len)
        return e2bconn_stream_error(r, "invalid_argument",
                                         "one Connect envelope (uncompressed) holding a "
                                         "WatchDirRequest is expected");
    struct e2bwire_fsreq f;
    rc = e2bwire_fsreq_parse("WatchDir", r->body.data + off, n, &f, msg, sizeof(msg));
    if (rc < 0)
        return e2bconn_stream_error(r, e2bwire_code_name(rc), msg);
    e2bwatch_t *w;
    const char *code;
    if (watch_new(r, s, &f, true, &w, &code, msg, sizeof(msg)) < 0)
        return e2bconn_stream_error(r, code, msg);
    struct e2breq *q = calloc(1, sizeof(*q));
    if (!q) {
        watch_free(w);
        return e2bconn_stream_error(r, "resource_exhausted", "out of memory");
    }
    q->kind = E2BREQ_WATCH;
    q->r = r;
    q->watch = w;
    snprintf(q->sbx_id, sizeof(q->sbx_id), "%s", s->id);
    w->q = q;
    w->keepalive_ms = 50000;
    char ka[16];
    if (e2bconn_header(r->wsi, "keepalive-ping-interval:", ka, sizeof(ka))) {
        long v = strtol(ka, NULL, 10);
        if (v >= 1 && v <= 3600)
            w->keepalive_ms = (uint64_t)v * 1000;
    }
    r->face = q;
    list_append(&r->g->e2b->runs, &q->link);
    log_info("e2b: sandbox=%s: watching %s%s%s%s (%zu directories)", s->id, E2BWIRE_HOME,
             f.path[0] ? "/" : "", f.path, f.recursive ? " recursively" : "", w->nrefs);
    stream_send(w, "{\"start\":{}}", 0);
}

void e2bwatch_rpc(struct gw_req *r, struct e2bsbx *s, const char *method, bool stream)
{
    if (stream)
        return watch_stream(r, s);
    char msg[512];
    struct e2bwire_fsreq f;
    int rc = e2bwire_fsreq_parse(method, r->body.data ? r->body.data : "", r->body.len, &f, msg,
                                 sizeof(msg));
    if (rc < 0)
        return e2bconn_error(r, e2bwire_code_name(rc), msg);
    if (strcmp(method, "CreateWatcher") == 0) {
        e2bwatch_t *w;
        const char *code;
        if (watch_new(r, s, &f, false, &w, &code, msg, sizeof(msg)) < 0)
            return e2bconn_error(r, code, msg);
        return req_reply(r, 200, json_pack("{s:s}", "watcherId", w->id));
    }
    e2bwatch_t *w = watcher_find(r->g->e2b, s->id, f.watcher);
    if (!w) {
        snprintf(msg, sizeof(msg), "watcher with id %s not found", f.watcher);
        return e2bconn_error(r, "not_found", msg);
    }
    if (strcmp(method, "RemoveWatcher") == 0) {
        watch_free(w);
        return req_reply(r, 200, json_object());
    }
    if (w->code[0])
        return e2bconn_error(r, w->code, w->msg);
    json_t *fresh = json_array();
    if (!fresh)
        return e2bconn_error(r, "resource_exhausted", "out of memory");
    json_t *ans = json_pack("{s:o}", "events", w->events);
    w->events = fresh;
    req_reply(r, 200, ans);
}

int e2bwatch_write(struct e2breq *q)
{
    struct gw_req *r = q->r;
    e2bwatch_t *w = q->watch;
    if (!w->headers_sent) {
        if (http_write_head(r, 200, "application/connect+json", NULL, NULL, -1) < 0)
            return -1;
        w->headers_sent = true;
    }
    while (!lws_send_pipe_choked(r->wsi)) {
        static const char room[LWS_PRE + 24];
        size_t left = w->pend.len - w->pend_off;
        size_t take = left < E2B_BATCH_BYTES ? left : E2B_BATCH_BYTES;
        if (take == 0)
            break;
        bool last = w->ended && take == left;
        buf_t b;
        buf_init(&b, SIZE_MAX);
        int rc = buf_append(&b, room, sizeof(room));
        rc |= buf_append(&b, w->pend.data + w->pend_off, take);
        rc = rc < 0 ? rc : e2bconn_chunk(r->wsi, &b, sizeof(room), last);
        buf_fini(&b);
        if (rc < 0)
            return -1;
        w->pend_off += take;
        if (w->pend_off == w->pend.len) {
            buf_reset(&w->pend);
            w->pend_off = 0;
        }
        if (last)
            return 1;
    }
    if (w->pend.len > w->pend_off || lws_partial_buffered(r->wsi)) {
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
        lws_callback_on_writable(r->wsi);
    } else {
        lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0); /* the keepalives keep it */
    }
    return 0;
}

void e2bwatch_tick(struct e2breq *q, uint64_t now_ms)
{
    e2bwatch_t *w = q->watch;
    if (w && !w->ended && now_ms - q->last_ms >= w->keepalive_ms)
        stream_send(w, "{\"keepalive\":{}}", 0);
}

void e2bwatch_sbx_end(struct e2b *e, const char *sbx_id)
{
    if (!e->watches)
        return;
    struct list *it = e->watches->watches.next;
    while (it != &e->watches->watches) {
        e2bwatch_t *w = list_entry(it, e2bwatch_t, link);
        it = it->next;
        if (strcmp(w->sbx_id, sbx_id) != 0)
            continue;
        if (w->q) { /* its stream is dropped: no more events meanwhile */
            w->done = true;
            drop_all(w);
        } else {
            watch_free(w);
        }
    }
}

void e2bwatch_fini(struct e2b *e)
{
    struct e2bwatches *a = e->watches;
    if (!a)
        return;
    while (!list_empty(&a->watches)) {
        e2bwatch_t *w = list_first(&a->watches, e2bwatch_t, link);
        if (!w->q) {
            watch_free(w);
            continue;
        }
        drop_all(w); /* its request, closed later, frees it */
        ino_release(w);
        list_remove(&w->link);
        w->all = NULL;
        w->done = true;
    }
    free(a);
    e->watches = NULL;
}
