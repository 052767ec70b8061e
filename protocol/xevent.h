/* Events of the execute API: what a kernel's iopub message becomes in an execution's stream,
 * and how one event is framed for each format (NDJSON line, Server-Sent Event). Pure. */
#ifndef KGW_PROTOCOL_XEVENT_H
#define KGW_PROTOCOL_XEVENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "protocol/xreq.h"

/* The event of an iopub message of an execution (msg_type, its parsed content): a new object
 * with "type" (also in *ret_type, a static string) and its fields, without "seq", or NULL when
 * the message is not an output:
 * stream {name, text}; display_data / update_display_data: display {data, metadata,
 * display_id, update}; clear_output: clear {wait}; execute_result: result {data, metadata,
 * execution_count}; error {ename, evalue, traceback}. */
json_t *xevent_from_iopub(const char *msg_type, json_t *content, const char **ret_type);

/* Appends one event (its compact JSON text, len bytes, holding "seq" and "type") framed for
 * f: NDJSON: the text and "\n"; SSE: "id: seq\nevent: type\ndata: text\n\n". XREQ_JSON
 * documents are not framed per event: -EINVAL. 0 or buf_append's error. */
int xevent_frame(enum xreq_format f, uint64_t seq, const char *type, const char *json,
                 size_t len, buf_t *out);

#endif
