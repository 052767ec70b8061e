#include "protocol/jrpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int fail(struct jrpc_err *err, enum jrpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct jrpc_err *err, enum jrpc_code code, const char *fmt, ...)
{
    va_list ap;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    /* printable ASCII only: jansson's messages quote the input, which may not be UTF-8 */
    for (char *p = err->message; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    return -EINVAL;
}

void jrpc_fini(struct jrpc_msg *m)
{
    json_decref(m->root);
    memset(m, 0, sizeof(*m));
}

static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

static bool valid_id(json_t *id)
{
    if (json_is_integer(id))
        return true;
    return json_is_string(id) && json_string_length(id) <= JRPC_ID_MAX &&
           strlen(json_string_value(id)) == json_string_length(id);
}

int jrpc_parse(
    const char *data, size_t len, size_t max_bytes, struct jrpc_msg *out, struct jrpc_err *err)
{
    json_error_t je;
    memset(out, 0, sizeof(*out));
    memset(err, 0, sizeof(*err));
    if (len > max_bytes)
        return fail(err, JRPC_PARSE_ERROR, "message larger than %zu bytes", max_bytes);
    json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!v)
        return fail(err, JRPC_PARSE_ERROR, "not JSON: %.100s (byte %d)", je.text, je.position);
    if (json_is_array(v)) {
        json_decref(v);
        return fail(err, JRPC_INVALID_REQUEST,
                    "batches are not supported: send one message "
                    "per request");
    }
    if (!json_is_object(v)) {
        json_decref(v);
        return fail(err, JRPC_INVALID_REQUEST, "a message must be a JSON object");
    }
    json_t *id = json_object_get(v, "id");
    json_t *method = json_object_get(v, "method");
    json_t *params = json_object_get(v, "params");
    bool has_result = json_object_get(v, "result") != NULL;
    bool has_error = json_object_get(v, "error") != NULL;
    if (id && valid_id(id))
        err->id = json_incref(id);
    int rc = 0;
    const char *ver = json_string_value(json_object_get(v, "jsonrpc"));
    if (!ver || strcmp(ver, "2.0") != 0)
        rc = fail(err, JRPC_INVALID_REQUEST, "'jsonrpc' must be \"2.0\"");
    if (rc == 0 && id && !valid_id(id))
        rc = fail(err, JRPC_INVALID_REQUEST,
                  "'id' must be a string (at most %d bytes) or an integer", JRPC_ID_MAX);
    if (rc == 0 && method) {
        if (!json_is_string(method) || json_string_length(method) == 0 ||
            json_string_length(method) > JRPC_METHOD_MAX || !printable(json_string_value(method)) ||
            strlen(json_string_value(method)) != json_string_length(method))
            rc =
                fail(err, JRPC_INVALID_REQUEST,
                     "'method' must be a string of 1 to %d printable ASCII bytes", JRPC_METHOD_MAX);
        else if (has_result || has_error)
            rc = fail(err, JRPC_INVALID_REQUEST, "a request has no 'result' or 'error'");
        else if (params && !json_is_object(params))
            rc = fail(err, JRPC_INVALID_REQUEST, "'params' must be an object");
    } else if (rc == 0) {
        if (!id)
            rc = fail(err, JRPC_INVALID_REQUEST, "a message needs a 'method' or an 'id'");
        else if (has_result == has_error)
            rc = fail(err, JRPC_INVALID_REQUEST,
                      "a response has exactly one of 'result' and 'error'");
    }
    if (rc < 0) {
        json_decref(v);
        return rc;
    }
    json_decref(err->id);
    err->id = NULL;
    out->root = v;
    out->id = id;
    out->method = method ? json_string_value(method) : NULL;
    out->params = params;
    out->kind = !method ? JRPC_RESPONSE : id ? JRPC_REQUEST : JRPC_NOTIFICATION;
    return 0;
}

json_t *jrpc_result(json_t *id, json_t *result)
{
    if (!result)
        return NULL;
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
                     result);
}

json_t *jrpc_error(json_t *id, int code, const char *message)
{
    return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                     "error", "code", code, "message", message);
}

json_t *jrpc_notification(const char *method, json_t *params)
{
    if (!params)
        return NULL;
    return json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params", params);
}
