#include "gateway/e2bfs.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gateway/files.h"
#include "protocol/e2bwire.h"
#include "protocol/fpath.h"

static int open_root(wspace_t *w)
{
    int fd = open(wspace_path(w), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* The permissions string as envd gives it (Go's FileMode.String() of the entry, not followed):
 * the type and mode letters (d, L, D, p, S, u, g, c, t; '-' for none) then rwxrwxrwx. */
static void perms(mode_t m, char out[16])
{
    static const char rwx[] = "rwxrwxrwx";
    size_t o = 0;
    const struct {
        bool on;
        char c;
    } letters[] = {
        {S_ISDIR(m), 'd'},           {S_ISLNK(m), 'L'},
        {S_ISBLK(m) || S_ISCHR(m), 'D'}, {S_ISFIFO(m), 'p'},
        {S_ISSOCK(m), 'S'},          {(m & S_ISUID) != 0, 'u'},
        {(m & S_ISGID) != 0, 'g'},   {S_ISCHR(m), 'c'},
        {(m & S_ISVTX) != 0, 't'},
    };
    for (size_t i = 0; i < sizeof(letters) / sizeof(letters[0]); i++)
        if (letters[i].on)
            out[o++] = letters[i].c;
    if (o == 0)
        out[o++] = '-';
    for (int i = 0; i < 9; i++)
        out[o++] = (m & (1u << (8 - i))) ? rwx[i] : '-';
    out[o] = '\0';
}

/* An owner or group as envd names it: the sandbox's user for the workspace's own id, else
 * the number (as envd shows an id without a name). */
static const char *id_name(unsigned id, unsigned own, char out[16])
{
    if (id == own)
        return "user";
    snprintf(out, 16, "%u", id);
    return out;
}

/* A link's target as envd gives it: absolute, a relative one taken from the link's
 * directory (link: the link's absolute path), "." and ".." resolved lexically. */
static void absolute_target(const char *link, const char *target, char *out, size_t outsz)
{
    char joined[2 * (sizeof(E2BWIRE_HOME) + FPATH_MAX + 2)];
    if (target[0] == '/') {
        snprintf(joined, sizeof(joined), "%s", target);
    } else {
        const char *slash = strrchr(link, '/');
        snprintf(joined, sizeof(joined), "%.*s/%s", (int)(slash - link), link, target);
    }
    size_t o = 0;
    const char *p = joined;
    while (*p) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 0)
            break;
        if (n == 1 && p[0] == '.') {
            /* nothing */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the '/' before it; "/.." is "/" */
        } else if (o + 1 + n < outsz) {
            out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
}

/* EntryInfo of the entry name in dir of w, at path (workspace-relative, "" the root). */
static json_t *entry(const wspace_t *w, int dir, const char *name, const char *path)
{
    struct stat st;
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW | (name[0] ? 0 : AT_EMPTY_PATH)) < 0)
        return NULL;
    char full[sizeof(E2BWIRE_HOME) + FPATH_MAX + 2], when[40], pm[16], size[24], on[16], gn[16];
    snprintf(full, sizeof(full), "%s%s%s", E2BWIRE_HOME, path[0] ? "/" : "", path);
    struct tm tm;
    gmtime_r(&st.st_mtim.tv_sec, &tm);
    size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%09ldZ", st.st_mtim.tv_nsec);
    perms(st.st_mode, pm);
    snprintf(size, sizeof(size), "%lld", (long long)st.st_size);
    const char *type = S_ISREG(st.st_mode)   ? "FILE_TYPE_FILE"
                       : S_ISDIR(st.st_mode) ? "FILE_TYPE_DIRECTORY"
                       : S_ISLNK(st.st_mode) ? "FILE_TYPE_SYMLINK"
                                             : "FILE_TYPE_UNSPECIFIED";
    const char *base = strrchr(full, '/') + 1;
    json_t *e =
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "name", base, "type", type,
                  "path", full, "size", size, "mode", (int)(st.st_mode & 0777), "permissions", pm,
                  "owner", id_name(st.st_uid, wspace_uid(w), on), "group",
                  id_name(st.st_gid, wspace_gid(w), gn), "modifiedTime", when);
    if (e && S_ISLNK(st.st_mode)) {
        char target[FPATH_MAX + 1];
        ssize_t tn = readlinkat(dir, name, target, sizeof(target) - 1);
        if (tn >= 0) {
            target[tn] = '\0';
            char abs[sizeof(full) + FPATH_MAX + 2];
            absolute_target(full, target, abs, sizeof(abs));
            json_object_set_new(e, "symlinkTarget", json_string_nocheck(abs));
        }
    }
    return e;
}

/* Opens path: the directory itself for "" or a directory, with the parent and
 * base for entry(). */
static int
resolve(wspace_t *w, const char *path, int *ret_root, int *ret_parent, const char **ret_base)
{
    int root = open_root(w);
    if (root < 0)
        return root;
    if (!path[0]) {
        *ret_root = root;
        *ret_parent = -1;
        *ret_base = "";
        return 0;
    }
    int parent = files_open_parent(root, w, path, false, ret_base);
    if (parent < 0) {
        close(root);
        return parent;
    }
    *ret_root = root;
    *ret_parent = parent;
    return 0;
}

int e2bfs_stat(wspace_t *w, const char *path, json_t **ret)
{
    int root, parent;
    const char *base;
    int rc = resolve(w, path, &root, &parent, &base);
    if (rc < 0)
        return rc;
    json_t *e = entry(w, parent >= 0 ? parent : root, base, path);
    rc = e ? 0 : errno == 0 ? -ENOMEM : -errno;
    if (parent >= 0)
        close(parent);
    close(root);
    if (rc < 0)
        return rc;
    *ret = json_pack("{s:o}", "entry", e);
    return *ret ? 0 : -ENOMEM;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir a path can hold, sorted (their count, or -errno); *ret_names and its
 * strings are malloc'd. At most E2BFS_LIST_MAX are read. */
static int dir_names(int dir, char ***ret_names)
{
    int fd = dup(dir);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    char **v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < E2BFS_LIST_MAX + 1) {
        size_t nl = strlen(de->d_name);
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            !fpath_name_ok(de->d_name, nl))
            continue; /* not a name a path can hold: not shown */
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc < 0) {
        while (n > 0)
            free(v[--n]);
        free(v);
        return rc;
    }
    qsort(v, n, sizeof(*v), name_cmp);
    *ret_names = v;
    return (int)n;
}

/* envd's order: each directory's entries by name, a directory's own entries right after it
 * (a depth-first walk), down to depth levels. */
static int list_dir(const wspace_t *w, int dir, const char *path, unsigned depth, json_t *out)
{
    char **names = NULL;
    int n = dir_names(dir, &names);
    if (n < 0)
        return n;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *name = names[i];
        size_t nl = strlen(name), pl = strlen(path);
        if (rc < 0 || pl + 1 + nl > FPATH_MAX)
            continue;
        if (json_array_size(out) >= E2BFS_LIST_MAX) {
            rc = -E2BIG;
            continue;
        }
        char sub[FPATH_MAX + 1];
        snprintf(sub, sizeof(sub), "%s%s%s", path, pl ? "/" : "", name);
        json_t *e = entry(w, dir, name, sub);
        if (!e)
            continue; /* gone meanwhile */
        bool isdir =
            strcmp(json_string_value(json_object_get(e, "type")), "FILE_TYPE_DIRECTORY") == 0;
        if (json_array_append_new(out, e) < 0)
            rc = -ENOMEM;
        if (rc == 0 && isdir && depth > 1) {
            int child = files_openat(dir, name, O_RDONLY | O_DIRECTORY, 0);
            if (child >= 0) {
                rc = list_dir(w, child, sub, depth - 1, out);
                close(child);
            }
        }
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int e2bfs_list(wspace_t *w, const char *path, unsigned depth, json_t **ret)
{
    int root = open_root(w);
    if (root < 0)
        return root;
    int dir = path[0] ? files_openat(root, path, O_RDONLY | O_DIRECTORY, 0) : dup(root);
    close(root);
    if (dir < 0)
        return dir == -1 ? -errno : dir;
    json_t *arr = json_array();
    int rc = arr ? list_dir(w, dir, path, depth, arr) : -ENOMEM;
    close(dir);
    if (rc == -E2BIG)
        rc = 0; /* cut at E2BFS_LIST_MAX */
    if (rc < 0) {
        json_decref(arr);
        return rc;
    }
    *ret = json_pack("{s:o}", "entries", arr);
    return *ret ? 0 : -ENOMEM;
}

int e2bfs_mkdir(wspace_t *w, const char *path, json_t **ret)
{
    if (!path[0])
        return -EEXIST;
    int root = open_root(w);
    if (root < 0)
        return root;
    const char *base;
    int parent = files_open_parent(root, w, path, true, &base);
    close(root);
    if (parent < 0)
        return parent;
    int rc = mkdirat(parent, base, 0755) < 0 ? -errno : 0;
    if (rc == 0) {
        int fd = files_openat(parent, base, O_RDONLY | O_DIRECTORY, 0);
        rc = fd < 0 ? fd : files_give(fd, w);
        if (fd >= 0)
            close(fd);
    }
    json_t *e = rc == 0 ? entry(w, parent, base, path) : NULL;
    close(parent);
    if (rc < 0)
        return rc;
    if (!e || !(*ret = json_pack("{s:o}", "entry", e)))
        return -ENOMEM;
    return 0;
}

/* Removes name in dir and, for a directory, what it holds (*budget entries at
 * most). */
static int remove_at(int dir, const char *name, int depth, long *budget)
{
    if (--*budget < 0)
        return -E2BIG;
    if (unlinkat(dir, name, 0) == 0)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    if (depth > FPATH_DEPTH_MAX * 4)
        return -ELOOP;
    int sub = files_openat(dir, name, O_RDONLY | O_DIRECTORY, 0);
    if (sub < 0)
        return sub;
    int fd = dup(sub);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        close(sub);
        return rc;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        rc = remove_at(sub, de->d_name, depth + 1, budget);
        if (rc == -ENOENT)
            rc = 0;
    }
    closedir(d);
    close(sub);
    if (rc == 0 && unlinkat(dir, name, AT_REMOVEDIR) < 0)
        rc = -errno;
    return rc;
}

int e2bfs_remove(wspace_t *w, const char *path, json_t **ret)
{
    if (!path[0])
        return -EINVAL; /* not the workspace itself */
    int root = open_root(w);
    if (root < 0)
        return root;
    const char *base;
    int parent = files_open_parent(root, w, path, false, &base);
    close(root);
    if (parent < 0 && parent != -ENOENT)
        return parent;
    long budget = E2BFS_REMOVE_MAX;
    int rc = parent < 0 ? parent : remove_at(parent, base, 0, &budget);
    if (parent >= 0)
        close(parent);
    if (rc < 0 && rc != -ENOENT) /* what is not there is removed already, as envd says */
        return rc;
    *ret = json_object();
    return *ret ? 0 : -ENOMEM;
}

int e2bfs_move(wspace_t *w, const char *src, const char *dst, json_t **ret)
{
    if (!src[0] || !dst[0])
        return -EINVAL;
    int root = open_root(w);
    if (root < 0)
        return root;
    const char *sb, *db;
    int sp = files_open_parent(root, w, src, false, &sb);
    int dp = sp >= 0 ? files_open_parent(root, w, dst, true, &db) : -1;
    close(root);
    int rc = sp < 0 ? sp : dp < 0 ? dp : 0;
    if (rc == 0 && renameat(sp, sb, dp, db) < 0)
        rc = -errno;
    json_t *e = rc == 0 ? entry(w, dp, db, dst) : NULL;
    if (sp >= 0)
        close(sp);
    if (dp >= 0)
        close(dp);
    if (rc < 0)
        return rc;
    if (!e || !(*ret = json_pack("{s:o}", "entry", e)))
        return -ENOMEM;
    return 0;
}
