/* ckptapi.c: the checkpoint routes (rows of routes.c, docs/checkpoints.md) on ckpt.h's
 * operations. */
#ifndef KGW_GATEWAY_CKPTAPI_H
#define KGW_GATEWAY_CKPTAPI_H

#include "gateway/http.h"

/* GET (list) and POST (take) /api/kernels/{id}/checkpoints; GET and DELETE
 * /api/kernels/{id}/checkpoints/{cp}; POST /api/kernels/{id}/rollback {"checkpoint"}. */
void ckptapi_list(struct gw_req *r);
void ckptapi_one(struct gw_req *r);
void ckptapi_rollback(struct gw_req *r);
/* Cancels the request's operation. */
void ckptapi_req_fini(struct gw_req *r);

#endif
