/* Events of the execute API: what a kernel's iopub message becomes in an execution's stream,
 * and how one event is framed for each format (NDJSON line, Server-Sent Event). Pure. */
#ifndef KGW_PROTOCOL_XEVENT_H
#define KGW_PROTOCOL_XEVENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "protocol/jmsg.h"
#include "protocol/xreq.h"

/* The event of an iopub message of an execution (msg_type, its parsed content): a new object
 * with "type" (also in *ret_type, a static string) and its fields, without "seq", or NULL when
 * the message is not an output:
 * stream {name, text}; display_data / update_display_data: display {data, metadata,
 * display_id, update}; clear_output: clear {wait}; execute_result: result {data, metadata,
 * execution_count}; error {ename, evalue, traceback}. */
json_t *xevent_from_iopub(const char *msg_type, json_t *content, const char **ret_type);

/* The name and text of a stream message's content found without a JSON tree, for the common
 * case: a flat object (whitespace as JSON has it, nothing after it) whose keys and values are
 * all strings, keys without escapes, "name" and "text" each once. 0 and *ret_name, *ret_text:
 * their values as the JSON string literals in content (quotes included), checked as jstr_scan
 * does, so each means what jansson would make of it, and *ret_text_len the bytes of text the
 * literal stands for; -EBADMSG for anything else, where the caller falls back to jansson
 * (xevent_from_iopub). */
int xevent_stream_scan(jspan_t content, jspan_t *ret_name, jspan_t *ret_text,
                       size_t *ret_text_len);

/* Bytes of a stream event's text besides its name and text (and its NUL). */
#define XEVENT_STREAM_OVERHEAD 64
/* Writes the stream event {"seq":seq,"type":"stream","name":NAME,"text":TEXT} (name and text:
 * JSON string literals, e.g. from xevent_stream_scan, copied as they are) to out, which has
 * room for name.n + text.n + XEVENT_STREAM_OVERHEAD bytes; NUL-terminated. Returns its length;
 * *ret_name_off and *ret_text_off: where the literals start in it. */
size_t xevent_stream_write(char *out, uint64_t seq, jspan_t name, jspan_t text,
                           size_t *ret_name_off, size_t *ret_text_off);

#define XEVENT_FRAME_HEAD_MAX 160 /* bytes of a frame's head */

/* How f frames an event (see xevent_frame): its head, written into head (NUL-terminated), goes
 * before the event's JSON text, *ret_tail after it. The head's length, or -EINVAL for
 * XREQ_JSON. */
int xevent_frame_parts(enum xreq_format f, uint64_t seq, const char *type,
                       char head[XEVENT_FRAME_HEAD_MAX], const char **ret_tail);

/* Appends one event (its compact JSON text, len bytes, holding "seq" and "type") framed for
 * f: NDJSON: the text and "\n"; SSE: "id: seq\nevent: type\ndata: text\n\n". XREQ_JSON
 * documents are not framed per event: -EINVAL. 0 or buf_append's error. */
int xevent_frame(enum xreq_format f, uint64_t seq, const char *type, const char *json,
                 size_t len, buf_t *out);

#endif
