#include "gateway/wsnap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/fpath.h"

struct wsnap_entry {
    char *path;
    long long size;
    int64_t mtime_ns;
};

struct wsnap {
    struct wsnap_entry *e;
    size_t n, cap, max;
    bool truncated;
};

void wsnap_destroy(wsnap_t **s)
{
    if (!s || !*s)
        return;
    for (size_t i = 0; i < (*s)->n; i++)
        free((*s)->e[i].path);
    free((*s)->e);
    free(*s);
    *s = NULL;
}

static int add(wsnap_t *s, const char *path, const struct stat *st)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        struct wsnap_entry *e = realloc(s->e, cap * sizeof(*e));
        if (!e)
            return -ENOMEM;
        s->e = e;
        s->cap = cap;
    }
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    s->e[s->n++] = (struct wsnap_entry){
        p, (long long)st->st_size, (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec};
    return 0;
}

/* Walks the directory fd (taken) whose path below the root is prefix ("" for the root). */
static int walk(wsnap_t *s, int fd, const char *prefix, int depth_left, size_t *seen)
{
    char path[FPATH_MAX + 1];
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0; /* unreadable: what can be seen is listed */
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (*seen >= s->max) {
            s->truncated = true;
            break;
        }
        (*seen)++;
        int n = snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name);
        if (n < 0 || (size_t)n >= sizeof(path) || !fpath_name_ok(de->d_name, strlen(de->d_name))) {
            s->truncated = true; /* a name no client could ask for: not listed */
            continue;
        }
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* gone meanwhile */
        if (!S_ISDIR(st.st_mode)) {
            rc = add(s, path, &st);
            continue;
        }
        if (depth_left <= 0) {
            s->truncated = true;
            continue;
        }
        int sub = openat(dirfd(d), de->d_name,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (sub >= 0)
            rc = walk(s, sub, path, depth_left - 1, seen);
    }
    closedir(d);
    return rc;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct wsnap_entry *)a)->path, ((const struct wsnap_entry *)b)->path);
}

wsnap_t *wsnap_take(const char *root, size_t max_entries, int max_depth)
{
    size_t seen = 0;
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    wsnap_t *s = calloc(1, sizeof(*s));
    if (!s) {
        close(fd);
        return NULL;
    }
    s->max = max_entries;
    if (walk(s, fd, "", max_depth, &seen) < 0) {
        wsnap_destroy(&s);
        errno = ENOMEM;
        return NULL;
    }
    if (s->n > 1)
        qsort(s->e, s->n, sizeof(*s->e), by_path);
    return s;
}

static void put(json_t *list, const char *path, size_t max, bool *truncated)
{
    if (json_array_size(list) >= max)
        *truncated = true;
    else
        json_array_append_new(list, json_string(path));
}

json_t *wsnap_diff(const wsnap_t *before, const wsnap_t *after, size_t max_list)
{
    json_t *created = json_array(), *modified = json_array(), *deleted = json_array();
    bool truncated = before->truncated || after->truncated;
    size_t i = 0, j = 0;
    while (i < before->n || j < after->n) {
        int c = i == before->n  ? 1
                : j == after->n ? -1
                                : strcmp(before->e[i].path, after->e[j].path);
        if (c < 0) {
            put(deleted, before->e[i++].path, max_list, &truncated);
        } else if (c > 0) {
            put(created, after->e[j++].path, max_list, &truncated);
        } else {
            if (before->e[i].size != after->e[j].size ||
                before->e[i].mtime_ns != after->e[j].mtime_ns)
                put(modified, after->e[j].path, max_list, &truncated);
            i++;
            j++;
        }
    }
    return json_pack("{s:o, s:o, s:o, s:b}", "created", created, "modified", modified, "deleted",
                     deleted, "truncated", truncated);
}
