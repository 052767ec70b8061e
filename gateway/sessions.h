/* sessions.c: /api/sessions (jupyter_server's sessions API). */
#ifndef KGW_GATEWAY_SESSIONS_H
#define KGW_GATEWAY_SESSIONS_H

#include "gateway/gw.h"
#include "gateway/http.h"

void sessions_init(gw_t *g);
/* GET and POST /api/sessions, GET, PATCH and DELETE /api/sessions/{id} (rows of routes.c) */
void sessions_all(struct gw_req *r);
void sessions_one(struct gw_req *r);
/* Frees the session a request was creating when it ends unanswered. */
void sessions_req_fini(struct gw_req *r);
/* Subscribes sessions to kernel events (a session ends with its kernel). */
int sessions_listen(gw_t *g);
void sessions_free_all(gw_t *g);
/* A restart in place (gateway/handover.h): the sessions of the kernels that go over, as a
 * record (an array; NULL: out of memory); in the next image, the record's sessions whose
 * kernels came over too, listed again as they were. */
json_t *sessions_export(gw_t *g);
void sessions_import(gw_t *g, const json_t *rec);

#endif
