/* The workspace's files for the faces (files.h): paths resolved below a workspace's root,
 * directories made and given to its owner, the listing, a file read whole, and files written
 * from a child charged to a kernel's memory cgroup. The REST file routes are filesapi.c's.
 *
 * The kernel controls everything inside a workspace and may plant symlinks, fifos or hard links
 * there at any time, so every path is resolved below the workspace root with openat2()
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), one
 * call per use, and only regular files are read. */
#include "gateway/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/wspace.h"
#include "protocol/fpath.h"

#define LIST_MAX_ENTRIES 10000 /* entries in one listing (then "truncated") */

/* ---- resolution below the workspace root ---- */

int files_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC | O_NOFOLLOW),
        .mode = mode,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    /* EAGAIN: a rename raced with the resolution (RESOLVE_BENEATH) */
    for (int i = 0; i < 8; i++) {
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
    }
    return -EAGAIN;
}

int files_give(int fd, const wspace_t *w)
{
    uid_t uid = wspace_uid(w);
    gid_t gid = wspace_gid(w);
    if (uid == geteuid() && gid == getegid())
        return 0;
    return fchown(fd, uid, gid) < 0 ? -errno : 0;
}

/* Opens the directory holding path's last component; *ret_base points into path. With create,
 * missing directories are made (0755, given to the workspace's owner). */
int files_open_parent(int root,
                      const wspace_t *w,
                      const char *path,
                      bool create,
                      const char **ret_base)
{
    char comp[FPATH_NAME_MAX + 1];
    int dir = files_openat(root, ".", O_RDONLY | O_DIRECTORY, 0);
    const char *p = path;
    if (dir < 0)
        return dir;
    for (const char *slash; (slash = strchr(p, '/')); p = slash + 1) {
        size_t n = (size_t)(slash - p);
        if (n > FPATH_NAME_MAX) {
            close(dir);
            return -ENAMETOOLONG;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        int next = files_openat(dir, comp, O_RDONLY | O_DIRECTORY, 0);
        if (next == -ENOENT && create) {
            bool made = mkdirat(dir, comp, 0755) == 0;
            if (!made && errno != EEXIST) {
                next = -errno;
            } else { /* EEXIST: made meanwhile (by the kernel): just open it */
                next = files_openat(dir, comp, O_RDONLY | O_DIRECTORY, 0);
                int rc = next >= 0 && made ? files_give(next, w) : 0;
                if (rc < 0) {
                    close(next);
                    next = rc;
                }
            }
        }
        close(dir);
        if (next < 0)
            return next;
        dir = next;
    }
    *ret_base = p;
    return dir;
}

/* ---- the listing ---- */

struct lister {
    json_t *files;
    size_t count;
    bool truncated;
};

static void list_dir(struct lister *l, int dir, const char *prefix, int depth)
{
    int fd = fcntl(dir, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        size_t nlen = strlen(name);
        char path[FPATH_MAX + 1], when[40];
        struct stat st;
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        /* names the API could not address (or JSON not carry) are left out */
        if (!fpath_name_ok(name, nlen))
            continue;
        int n = snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "", name);
        if (n < 0 || (size_t)n >= sizeof(path))
            continue;
        if (l->count >= LIST_MAX_ENTRIES) {
            l->truncated = true;
            break;
        }
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        const char *type = S_ISREG(st.st_mode)   ? "file"
                           : S_ISDIR(st.st_mode) ? "directory"
                           : S_ISLNK(st.st_mode) ? "symlink"
                                                 : "other";
        util_iso_time(when, sizeof(when),
                      (int64_t)st.st_mtim.tv_sec * 1000000 + st.st_mtim.tv_nsec / 1000);
        json_array_append_new(l->files,
                              json_pack("{s:s, s:I, s:s, s:s}", "path", path, "size",
                                        (json_int_t)(S_ISREG(st.st_mode) ? st.st_size : 0), "type",
                                        type, "last_modified", when));
        l->count++;
        if (S_ISDIR(st.st_mode)) {
            if (depth + 1 >= FPATH_DEPTH_MAX) {
                l->truncated = true;
                continue;
            }
            int sub = files_openat(dirfd(d), name, O_RDONLY | O_DIRECTORY, 0);
            if (sub >= 0) {
                list_dir(l, sub, path, depth + 1);
                close(sub);
            }
        }
    }
    closedir(d);
}

json_t *files_list_at(wspace_t *w, int root)
{
    struct lister l = {.files = json_array()};
    list_dir(&l, root, "", 0);
    return json_pack("{s:s, s:o, s:b}", "workspace", wspace_id(w), "files", l.files, "truncated",
                     l.truncated);
}

/* ---- files written from a child (gateway/xexec.c, mcp.c, e2b.c) ---- */

struct files_put {
    wspace_t *w;
    const struct files_item *v;
    size_t n;
    wspace_charge_t *wc;
    files_put_cb done;
    void *data;
};

/* (In the writing child: system calls only.) */
static int open_for_write(wspace_t *w, const char *path)
{
    const char *base;
    int root = open(wspace_path(w), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0)
        return -errno;
    int dir = files_open_parent(root, w, path, true, &base);
    close(root);
    if (dir < 0)
        return dir;
    int fd = files_openat(dir, base, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK, 0644);
    close(dir);
    if (fd < 0)
        return fd;
    int rc = files_give(fd, w);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

static int write_all(int fd, const void *data, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, (const char *)data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        off += (size_t)n;
    }
    return 0;
}

#define PUT_ERRNO_BITS 12 /* a child's outcome: (failed file << 12) | errno, 0 when all went */

/* The child's work, in the kernel's memory cgroup: system calls only (the gateway has other
 * threads; the child has a copy of the items). */
static int put_in_child(void *arg)
{
    const files_put_t *p = arg;
    for (size_t i = 0; i < p->n; i++) {
        int fd = open_for_write(p->w, p->v[i].path), rc = fd < 0 ? fd : 0;
        if (fd >= 0) {
            rc = write_all(fd, p->v[i].data, p->v[i].len);
            close(fd);
        }
        if (rc < 0)
            return (int)(i << PUT_ERRNO_BITS) | (-rc & ((1 << PUT_ERRNO_BITS) - 1));
    }
    return 0;
}

static void put_done(void *data, int rc)
{
    files_put_t *p = data;
    size_t failed = 0;
    p->wc = NULL;
    if (rc > 0) {
        failed = (size_t)rc >> PUT_ERRNO_BITS;
        rc = -(rc & ((1 << PUT_ERRNO_BITS) - 1));
    }
    files_put_cb done = p->done;
    void *d = p->data;
    free(p);
    done(d, rc, failed);
}

int files_put(wspace_t *w, const struct files_item *v, size_t n, files_put_cb done, void *data,
              files_put_t **ret, size_t *ret_failed)
{
    long long need = 0;
    if (n >= ((size_t)1 << (31 - PUT_ERRNO_BITS))) {
        *ret_failed = 0;
        return -E2BIG;
    }
    files_put_t *p = calloc(1, sizeof(*p));
    if (!p) {
        *ret_failed = 0;
        return -ENOMEM;
    }
    *p = (files_put_t){.w = w, .v = v, .n = n, .done = done, .data = data};
    for (size_t i = 0; i < n; i++)
        need += (long long)v[i].len;
    if (!(p->wc = wspace_charge_start(w, need, put_in_child, p, put_done, p))) {
        int err = errno;
        free(p);
        *ret_failed = 0;
        return -err;
    }
    log_debug("files: workspace=%s: writing %zu files (%lld bytes) from one child", wspace_id(w),
              n, need);
    *ret = p;
    return 0;
}

void files_put_cancel(files_put_t **pp)
{
    files_put_t *p = *pp;
    if (!p)
        return;
    wspace_charge_cancel(&p->wc);
    free(p);
    *pp = NULL;
}

/* ---- the workspace as the faces see it ---- */

json_t *files_list(wspace_t *w)
{
    int root = open(wspace_path(w), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0)
        return NULL;
    json_t *l = files_list_at(w, root);
    close(root);
    return l;
}

int files_read(wspace_t *w, const char *path, size_t max, unsigned char **ret_data,
               size_t *ret_len)
{
    struct stat st;
    int root = open(wspace_path(w), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0)
        return -errno;
    int fd = files_openat(root, path, O_RDONLY | O_NONBLOCK, 0);
    close(root);
    if (fd < 0)
        return fd == -ENXIO ? -ENOENT : fd;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    if ((unsigned long long)st.st_size > max) {
        close(fd);
        return -EFBIG;
    }
    size_t cap = (size_t)st.st_size, len = 0;
    unsigned char *data = malloc(cap + 1);
    int rc = data ? 0 : -ENOMEM;
    while (rc == 0 && len < cap) { /* (a file growing meanwhile is read up to its size) */
        ssize_t n = read(fd, data + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : 0;
            break;
        }
        len += (size_t)n;
    }
    close(fd);
    if (rc < 0) {
        free(data);
        return rc;
    }
    *ret_data = data;
    *ret_len = len;
    return 0;
}
