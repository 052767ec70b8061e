/* JSON-RPC 2.0 messages (untrusted): one message of a POST body to /mcp, classified as a
 * request, a notification or a response, with its id, method and params checked; and the
 * answers' envelopes. Pure: no gateway state. */
#ifndef KGW_PROTOCOL_JRPC_H
#define KGW_PROTOCOL_JRPC_H

#include <jansson.h>
#include <stddef.h>

#define JRPC_METHOD_MAX 128 /* bytes of a method name */
#define JRPC_ID_MAX     128 /* bytes of a string id */
#define JRPC_ERROR_MAX  256 /* bytes of a parse error's message */

/* The error codes of JSON-RPC 2.0. */
enum jrpc_code {
    JRPC_PARSE_ERROR = -32700,
    JRPC_INVALID_REQUEST = -32600,
    JRPC_METHOD_NOT_FOUND = -32601,
    JRPC_INVALID_PARAMS = -32602,
    JRPC_INTERNAL_ERROR = -32603,
};

enum jrpc_kind {
    JRPC_REQUEST,      /* method and id */
    JRPC_NOTIFICATION, /* method, no id */
    JRPC_RESPONSE,     /* result or error, and an id */
};

struct jrpc_msg {
    enum jrpc_kind kind;
    json_t *root;       /* the message (owned) */
    json_t *id;         /* borrowed from root: a string or an integer; NULL for a notification */
    const char *method; /* borrowed; NULL for a response */
    json_t *params;     /* borrowed: an object, or NULL when absent */
};

/* Why a body was refused: the JSON-RPC code (JRPC_PARSE_ERROR: not JSON, over max_bytes, or
 * not UTF-8; JRPC_INVALID_REQUEST: JSON, but not one valid message; a batch is refused), a
 * one-line message (printable ASCII), and the message's id when it had a valid one (new reference,
 * else NULL). */
struct jrpc_err {
    enum jrpc_code code;
    json_t *id;
    char message[JRPC_ERROR_MAX];
};

/* Parses one message of len bytes (at most max_bytes): an object with "jsonrpc": "2.0" and
 * either a method (1 to JRPC_METHOD_MAX printable ASCII bytes; params, when given, an object;
 * an id, when given, a string of at most JRPC_ID_MAX bytes or an integer) or, with an id,
 * exactly one of result and error. 0 with out filled (release with jrpc_fini), or -EINVAL with
 * err filled (release err->id). */
int jrpc_parse(
    const char *data, size_t len, size_t max_bytes, struct jrpc_msg *out, struct jrpc_err *err);
void jrpc_fini(struct jrpc_msg *m);

/* {"jsonrpc": "2.0", "id": id or null, "result": result} (result taken; id borrowed). NULL on
 * OOM. */
json_t *jrpc_result(json_t *id, json_t *result);
/* {"jsonrpc": "2.0", "id": id or null, "error": {"code", "message"}} (id borrowed). */
json_t *jrpc_error(json_t *id, int code, const char *message);
/* {"jsonrpc": "2.0", "method": method, "params": params} (params taken). */
json_t *jrpc_notification(const char *method, json_t *params);

#endif
