/* e2bconn.c: the Connect-RPC plumbing of the E2B sandbox plane (docs/e2b.md, "Connect-RPC"),
 * shared by its calls (e2bsbx.c, e2bwatch.c): errors of unary and streaming calls, request
 * headers, the chunks of a streamed answer. */
#ifndef KGW_GATEWAY_E2BCONN_H
#define KGW_GATEWAY_E2BCONN_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "gateway/http.h"

/* A Connect error of a unary call: the status of its code, {"code", "message"} (and kgw's
 * "reason"). */
void e2bconn_error(struct gw_req *r, const char *code, const char *msg);
/* A streaming call answered at once with its end: 200, one end-of-stream envelope holding
 * the error (Connect's streaming protocol has no error status). */
void e2bconn_stream_error(struct gw_req *r, const char *code, const char *msg);
/* A request header's value into out (NUL-terminated); false when missing or too long. name
 * is lower case with its ':' ("keepalive-ping-interval:"). */
bool e2bconn_header(struct lws *wsi, const char *name, char *out, size_t outsz);
/* Writes b as one chunk of a chunked answer: b holds room bytes (LWS_PRE + 24) then the
 * payload; with last, the end of the answer after it. 0 or -1. */
int e2bconn_chunk(struct lws *wsi, buf_t *b, size_t room, bool last);

#endif
