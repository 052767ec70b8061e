/* files.c: the workspace file endpoints (rows of routes.c): upload, download, check_file,
 * listing, delete. */
#ifndef KGW_GATEWAY_FILES_H
#define KGW_GATEWAY_FILES_H

#include <jansson.h>
#include <stddef.h>

#include "gateway/gw.h"
#include "gateway/http.h"
#include "kernelmgr/wspace.h"

/* check_file, listing, delete and the start of a download (which then continues in
 * files_download_write). */
void files_handle(struct gw_req *r);
/* An upload (struct route_ops's upload_* calls) */
int files_upload_start(struct gw_req *r, long long content_length);
/* Body bytes; failures are remembered and answered at the end. Returns 0. */
int files_upload_body(struct gw_req *r, const void *in, size_t len);
void files_upload_done(struct gw_req *r);
/* A download (struct route_ops's write) */
int files_download_write(struct gw_req *r);
/* Frees the request's transfer. */
void files_req_fini(struct gw_req *r);
/* Ends every transfer's use of its workspace (before the kernel manager goes). */
void files_shutdown(gw_t *g);
/* Writes a file (a normal path, protocol/fpath.h) into a workspace, replacing what is there;
 * missing directories are made. Owned by the workspace's uid. 0 or -errno. */
int files_write(wspace_t *w, const char *path, const void *data, size_t len);

/* The workspace's files as GET /files lists them ({"workspace", "files", "truncated"}), or
 * NULL. */
json_t *files_list(wspace_t *w);
/* Reads a regular file (a normal path) of the workspace, at most max bytes: 0 with
 * *ret_data (malloc'd) and *ret_len, or -ENOENT, -EISDIR (not a regular file), -EFBIG (over
 * max), -errno. */
int files_read(wspace_t *w, const char *path, size_t max, unsigned char **ret_data,
               size_t *ret_len);

#endif
