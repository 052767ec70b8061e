#include "protocol/xevent.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* content[key], or a JSON value of the right kind when the kernel sent none or another kind */
static json_t *field(json_t *content, const char *key, int kind)
{
    json_t *v = json_object_get(content, key);
    if (v && (int)json_typeof(v) == kind)
        return json_incref(v);
    switch (kind) {
    case JSON_OBJECT:
        return json_object();
    case JSON_ARRAY:
        return json_array();
    case JSON_STRING:
        return json_string("");
    default:
        return json_null();
    }
}

static json_t *display(json_t *content, bool update)
{
    json_t *id = json_object_get(json_object_get(content, "transient"), "display_id");
    return json_pack("{s:s, s:o, s:o, s:o, s:b}", "type", "display", "data",
                     field(content, "data", JSON_OBJECT), "metadata",
                     field(content, "metadata", JSON_OBJECT), "display_id",
                     json_is_string(id) ? json_incref(id) : json_null(), "update", update);
}

static json_t *from_iopub(const char *msg_type, json_t *content)
{
    if (!strcmp(msg_type, "stream"))
        return json_pack("{s:s, s:o, s:o}", "type", "stream", "name",
                         field(content, "name", JSON_STRING), "text",
                         field(content, "text", JSON_STRING));
    if (!strcmp(msg_type, "display_data"))
        return display(content, false);
    if (!strcmp(msg_type, "update_display_data"))
        return display(content, true);
    if (!strcmp(msg_type, "clear_output"))
        return json_pack("{s:s, s:b}", "type", "clear", "wait",
                         json_is_true(json_object_get(content, "wait")));
    if (!strcmp(msg_type, "execute_result")) {
        json_t *n = json_object_get(content, "execution_count");
        return json_pack("{s:s, s:o, s:o, s:o}", "type", "result", "data",
                         field(content, "data", JSON_OBJECT), "metadata",
                         field(content, "metadata", JSON_OBJECT), "execution_count",
                         json_is_integer(n) ? json_incref(n) : json_null());
    }
    if (!strcmp(msg_type, "error"))
        return json_pack("{s:s, s:o, s:o, s:o}", "type", "error", "ename",
                         field(content, "ename", JSON_STRING), "evalue",
                         field(content, "evalue", JSON_STRING), "traceback",
                         field(content, "traceback", JSON_ARRAY));
    return NULL;
}

json_t *xevent_from_iopub(const char *msg_type, json_t *content, const char **ret_type)
{
    static const char *const types[] = {"stream", "display", "clear", "result", "error"};
    if (!msg_type || !json_is_object(content))
        return NULL;
    json_t *ev = from_iopub(msg_type, content);
    const char *t = json_string_value(json_object_get(ev, "type"));
    for (size_t i = 0; t && i < sizeof(types) / sizeof(types[0]); i++) {
        if (!strcmp(t, types[i])) {
            *ret_type = types[i];
            return ev;
        }
    }
    json_decref(ev);
    return NULL;
}

int xevent_frame(enum xreq_format f, uint64_t seq, const char *type, const char *json,
                 size_t len, buf_t *out)
{
    char head[160];
    int rc;
    if (f == XREQ_NDJSON) {
        if ((rc = buf_append(out, json, len)) < 0)
            return rc;
        return buf_append(out, "\n", 1);
    }
    if (f != XREQ_SSE)
        return -EINVAL;
    /* compact JSON has no raw newline: one data line carries it */
    int n = snprintf(head, sizeof(head), "id: %" PRIu64 "\nevent: %.64s\ndata: ", seq, type);
    if ((rc = buf_append(out, head, (size_t)n)) < 0 || (rc = buf_append(out, json, len)) < 0)
        return rc;
    return buf_append(out, "\n\n", 2);
}
