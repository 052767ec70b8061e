/* e2bfs.c: the filesystem calls of the E2B-compatible API
 * (filesystem.Filesystem: Stat, ListDir, MakeDir, Remove, Move) on a workspace,
 * as envd answers them: EntryInfo objects in protobuf's JSON form, paths as the
 * sandbox names them (/home/user/...). The kernel controls everything inside
 * the workspace: every path is resolved below its root with openat2
 * (RESOLVE_BENEATH, no symlinks, no magic links, no mount crossings), nothing
 * is followed. Paths are normal workspace-relative ones (protocol/e2bwire.h,
 * e2bwire_path); "" is the workspace itself. Errors are -errno (ENOENT, EEXIST,
 * ENOTDIR, ELOOP, ...). */
#ifndef KGW_GATEWAY_E2BFS_H
#define KGW_GATEWAY_E2BFS_H

#include <jansson.h>

#include "kernelmgr/wspace.h"

#define E2BFS_LIST_MAX   10000  /* entries of one ListDir */
#define E2BFS_REMOVE_MAX 100000 /* entries one Remove deletes */

/* {"entry": EntryInfo} */
int e2bfs_stat(wspace_t *w, const char *path, json_t **ret);
/* {"entries": [EntryInfo]}, depth levels down (1: the directory's own entries).
 */
int e2bfs_list(wspace_t *w, const char *path, unsigned depth, json_t **ret);
/* Makes the directory and missing parents (given to the workspace's owner):
 * {"entry"}; -EEXIST when it exists. */
int e2bfs_mkdir(wspace_t *w, const char *path, json_t **ret);
/* Removes a file, or a directory with what it holds: {}. */
int e2bfs_remove(wspace_t *w, const char *path, json_t **ret);
/* Renames source to destination (missing parents made): {"entry"}. */
int e2bfs_move(wspace_t *w, const char *src, const char *dst, json_t **ret);

#endif
