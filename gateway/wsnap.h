/* A bounded listing of a workspace (names, sizes, modification times), taken before and after
 * an execution to report its effect on the files: created, modified, deleted. The kernel
 * controls everything inside: nothing is followed (O_NOFOLLOW at every step, directories are
 * opened relative to their parent), and the walk stops at a number of entries and a depth. */
#ifndef KGW_GATEWAY_WSNAP_H
#define KGW_GATEWAY_WSNAP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct wsnap wsnap_t;

#define WSNAP_MAX_ENTRIES 1000 /* files and directories listed */
#define WSNAP_MAX_DEPTH   8    /* directory levels below the root */
#define WSNAP_MAX_LIST    100  /* paths per list of a difference */

/* Lists root (a directory; NULL + errno when it cannot be opened). Entries beyond max_entries
 * or deeper than max_depth are left out and the listing is marked truncated. */
wsnap_t *wsnap_take(const char *root, size_t max_entries, int max_depth);
void wsnap_destroy(wsnap_t **s);
/* {"created": [paths], "modified": [...], "deleted": [...], "truncated": bool}: files (not
 * directories) by path; modified when the size or the modification time differs. At most
 * max_list paths per list; truncated when a list was cut or either listing was. New
 * reference; NULL when out of memory. */
json_t *wsnap_diff(const wsnap_t *before, const wsnap_t *after, size_t max_list);

#endif
