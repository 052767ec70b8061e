/* filesapi.c: the workspace file endpoints (rows of routes.c): upload, download, check_file,
 * listing, delete. The files themselves are files.h's. */
#ifndef KGW_GATEWAY_FILESAPI_H
#define KGW_GATEWAY_FILESAPI_H

#include <stddef.h>

#include "gateway/gw.h"
#include "gateway/http.h"

/* GET /check_file/{path}, GET /files, DELETE /files/{path}, and GET /download/{path}, which
 * continues in filesapi_download_write. */
void filesapi_check_file(struct gw_req *r);
void filesapi_list(struct gw_req *r);
void filesapi_delete(struct gw_req *r);
void filesapi_download(struct gw_req *r);
/* An upload (struct route_ops's upload_* calls): POST /upload (multipart/form-data) or PUT
 * /upload/{path} (the raw file) */
int filesapi_post_start(struct gw_req *r, long long content_length);
int filesapi_put_start(struct gw_req *r, long long content_length);
/* Body bytes; failures are remembered and answered at the end. Returns 0. */
int filesapi_upload_body(struct gw_req *r, const void *in, size_t len);
void filesapi_upload_done(struct gw_req *r);
/* A download (struct route_ops's write) */
int filesapi_download_write(struct gw_req *r);
/* Frees the request's transfer. */
void filesapi_req_fini(struct gw_req *r);
/* Ends every transfer's use of its workspace (before the kernel manager goes). */
void filesapi_shutdown(gw_t *g);

#endif
