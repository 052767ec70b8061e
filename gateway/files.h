/* files.c: a workspace's files for the faces: paths resolved below its root (nothing
 * followed), directories made for its owner, its listing, a file read whole, files written from
 * a child in a kernel's memory cgroup. The REST file routes are filesapi.h's. */
#ifndef KGW_GATEWAY_FILES_H
#define KGW_GATEWAY_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "kernelmgr/wspace.h"

/* Writes a request's files (normal paths, protocol/fpath.h) into a workspace, replacing what
 * is there (missing directories are made, all owned by the workspace's uid), without any
 * work or wait on the loop: one child, in the memory cgroup of a kernel of the workspace (so
 * the files count against that kernel's memory limit, as its own writes do), writes them
 * all (wspace_charge_start). 0: done(data, rc, failed) runs from the loop when it has ended
 * (rc 0, or -errno for files[failed]), unless files_put_cancel; -errno: it could not start
 * (-ENOMEM: over the kernel's memory limit). The items and their bytes stay until the end. */
struct files_item {
    const char *path;
    const void *data;
    size_t len;
};
typedef struct files_put files_put_t;
typedef void (*files_put_cb)(void *data, int rc, size_t failed);
int files_put(wspace_t *w, const struct files_item *v, size_t n, files_put_cb done, void *data,
              files_put_t **ret, size_t *ret_failed);
void files_put_cancel(files_put_t **pp);

/* The workspace's files as GET /files lists them ({"workspace", "files", "truncated"}), or
 * NULL. */
json_t *files_list(wspace_t *w);
/* The same, of w's root directory already open. */
json_t *files_list_at(wspace_t *w, int root);
/* openat2 below dirfd: no symbolic link, no magic link, no other mount followed (-errno). */
int files_openat(int dirfd, const char *path, int flags, mode_t mode);
/* Gives fd to the workspace's owner (a directory or file the gateway made in it). */
int files_give(int fd, const wspace_t *w);
/* Opens the directory holding path's last component below root (*ret_base points into path);
 * with create, missing directories are made (0755, given to the workspace's owner). */
int files_open_parent(int root,
                      const wspace_t *w,
                      const char *path,
                      bool create,
                      const char **ret_base);
/* Reads a regular file (a normal path) of the workspace, at most max bytes: 0 with
 * *ret_data (malloc'd) and *ret_len, or -ENOENT, -EISDIR (not a regular file), -EFBIG (over
 * max), -errno. */
int files_read(wspace_t *w, const char *path, size_t max, unsigned char **ret_data,
               size_t *ret_len);

#endif
