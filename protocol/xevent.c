#include "protocol/xevent.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "protocol/jstr.h"

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

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(jspan_t s, size_t i)
{
    while (i < s.n && is_ws(s.p[i]))
        i++;
    return i;
}

/* The string literal at s.p[i]: its span and its text's length, i moved past it. */
static int literal(jspan_t s, size_t *i, jspan_t *ret, size_t *ret_text_len)
{
    size_t len;
    if (*i >= s.n || jstr_scan(s.p + *i, s.n - *i, &len, ret_text_len) < 0)
        return -EBADMSG;
    *ret = (jspan_t){s.p + *i, len};
    *i += len;
    return 0;
}

int xevent_stream_scan(jspan_t content, jspan_t *ret_name, jspan_t *ret_text,
                       size_t *ret_text_len)
{
    jspan_t name = {NULL, 0}, text = {NULL, 0}, k, v;
    size_t i = skip_ws(content, 0), kn, vn, text_len = 0;
    if (i >= content.n || content.p[i] != '{')
        return -EBADMSG;
    i = skip_ws(content, i + 1);
    if (i < content.n && content.p[i] == '}')
        return -EBADMSG; /* {}: no name nor text */
    for (;;) {
        if (literal(content, &i, &k, &kn) < 0 || memchr(k.p, '\\', k.n))
            return -EBADMSG;
        i = skip_ws(content, i);
        if (i >= content.n || content.p[i] != ':')
            return -EBADMSG;
        i = skip_ws(content, i + 1);
        if (literal(content, &i, &v, &vn) < 0)
            return -EBADMSG;
        jspan_t *slot = k.n == 6 && !memcmp(k.p, "\"name\"", 6)   ? &name
                        : k.n == 6 && !memcmp(k.p, "\"text\"", 6) ? &text
                                                                  : NULL;
        if (slot && slot->p)
            return -EBADMSG; /* twice: jansson keeps the last one; not worth the trouble */
        if (slot)
            *slot = v;
        if (slot == &text)
            text_len = vn;
        i = skip_ws(content, i);
        if (i < content.n && content.p[i] == ',') {
            i = skip_ws(content, i + 1);
            continue;
        }
        if (i < content.n && content.p[i] == '}')
            break;
        return -EBADMSG;
    }
    if (skip_ws(content, i + 1) != content.n || !name.p || !text.p)
        return -EBADMSG;
    *ret_name = name;
    *ret_text = text;
    *ret_text_len = text_len;
    return 0;
}

size_t xevent_stream_write(char *out, uint64_t seq, jspan_t name, jspan_t text,
                           size_t *ret_name_off, size_t *ret_text_off)
{
    int n = snprintf(out, XEVENT_STREAM_OVERHEAD,
                     "{\"seq\":%" PRIu64 ",\"type\":\"stream\",\"name\":", seq);
    size_t len = (size_t)n;
    *ret_name_off = len;
    memcpy(out + len, name.p, name.n);
    len += name.n;
    memcpy(out + len, ",\"text\":", 8);
    len += 8;
    *ret_text_off = len;
    memcpy(out + len, text.p, text.n);
    len += text.n;
    out[len++] = '}';
    out[len] = '\0';
    return len;
}

int xevent_frame_parts(enum xreq_format f, uint64_t seq, const char *type,
                       char head[XEVENT_FRAME_HEAD_MAX], const char **ret_tail)
{
    if (f == XREQ_NDJSON) {
        head[0] = '\0';
        *ret_tail = "\n";
        return 0;
    }
    if (f != XREQ_SSE)
        return -EINVAL;
    /* compact JSON has no raw newline: one data line carries it */
    int n = snprintf(head, XEVENT_FRAME_HEAD_MAX, "id: %" PRIu64 "\nevent: %.64s\ndata: ", seq,
                     type);
    *ret_tail = "\n\n";
    return n;
}

int xevent_frame(enum xreq_format f, uint64_t seq, const char *type, const char *json,
                 size_t len, buf_t *out)
{
    char head[XEVENT_FRAME_HEAD_MAX];
    const char *tail;
    int rc, n = xevent_frame_parts(f, seq, type, head, &tail);
    if (n < 0)
        return n;
    if ((rc = buf_append(out, head, (size_t)n)) < 0 || (rc = buf_append(out, json, len)) < 0)
        return rc;
    return buf_append(out, tail, strlen(tail));
}
