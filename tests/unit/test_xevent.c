/* protocol/xevent.c: iopub messages to execute API events, and their framing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "protocol/xevent.h"

static char *event(const char *type, const char *content)
{
    json_t *c = json_loads(content, 0, NULL);
    const char *t = NULL;
    json_t *e = xevent_from_iopub(type, c, &t);
    char *s = e ? json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    CHECK(!e == !t); /* the static type string with every event */
    CHECK(!e || !strcmp(t, json_string_value(json_object_get(e, "type"))));
    json_decref(c);
    json_decref(e);
    return s;
}

int main(void)
{
    static const struct {
        const char *type, *content, *want;
    } rows[] = {
        {"stream", "{\"name\":\"stdout\",\"text\":\"hi\\n\"}",
         "{\"name\":\"stdout\",\"text\":\"hi\\n\",\"type\":\"stream\"}"},
        {"stream", "{\"name\":1}", "{\"name\":\"\",\"text\":\"\",\"type\":\"stream\"}"},
        {"display_data", "{\"data\":{\"text/plain\":\"x\"},\"metadata\":{},\"transient\":"
                         "{\"display_id\":\"d\"}}",
         "{\"data\":{\"text/plain\":\"x\"},\"display_id\":\"d\",\"metadata\":{},\"type\":"
         "\"display\",\"update\":false}"},
        {"update_display_data", "{\"data\":{}}",
         "{\"data\":{},\"display_id\":null,\"metadata\":{},\"type\":\"display\",\"update\":true}"},
        {"clear_output", "{\"wait\":true}", "{\"type\":\"clear\",\"wait\":true}"},
        {"execute_result", "{\"data\":{\"text/plain\":\"2\"},\"metadata\":{},"
                           "\"execution_count\":3}",
         "{\"data\":{\"text/plain\":\"2\"},\"execution_count\":3,\"metadata\":{},\"type\":"
         "\"result\"}"},
        {"error", "{\"ename\":\"E\",\"evalue\":\"v\",\"traceback\":[\"t\"]}",
         "{\"ename\":\"E\",\"evalue\":\"v\",\"traceback\":[\"t\"],\"type\":\"error\"}"},
        {"status", "{\"execution_state\":\"idle\"}", NULL},
        {"execute_input", "{\"code\":\"1\"}", NULL},
        {"comm_msg", "{}", NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        CHECK_CASE(rows[i].type);
        char *s = event(rows[i].type, rows[i].content);
        if (rows[i].want)
            CHECK_STR(s, rows[i].want);
        else
            CHECK(s == NULL);
        free(s);
    }
    CHECK_CASE("not an object");
    const char *t = NULL;
    CHECK(xevent_from_iopub("stream", NULL, &t) == NULL && t == NULL);

    /* stream contents without a tree: the event written from the kernel's own literals means
     * what the jansson path makes of the same content */
    static const struct {
        const char *content;
        bool fast; /* taken by xevent_stream_scan (else the caller uses jansson) */
    } streams[] = {
        {"{\"name\":\"stdout\",\"text\":\"hi\\n\"}", true},
        {"{\"name\": \"stderr\", \"text\": \"\\u001b[31merr\xc3\xa9\\u00e9\\ud83d\\ude00\"}", true},
        {" {\n\t\"text\" :\"x\" , \"extra\":\"y\",\"name\":\"std\\u006fut\"}\r\n", true},
        {"{\"name\":\"stdout\",\"text\":\"\"}", true},
        /* refused: the jansson path decides */
        {"{\"name\":\"stdout\",\"text\":\"a\\u0000b\"}", false}, /* jansson: no event */
        {"{\"name\":\"stdout\",\"text\":\"a\",\"text\":\"b\"}", false}, /* twice */
        {"{\"name\":\"stdout\",\"t\\u0065xt\":\"a\"}", false},          /* an escaped key */
        {"{\"name\":\"stdout\",\"text\":\"a\",\"n\":1}", false},         /* not a string */
        {"{\"name\":\"stdout\",\"text\":\"a\",\"m\":{}}", false},
        {"{\"name\":\"stdout\"}", false},                                 /* no text */
        {"{\"text\":\"a\"}", false},                                      /* no name */
        {"{}", false},
        {"{\"name\":\"stdout\",\"text\":\"a\"}x", false}, /* after the object */
        {"{\"name\":\"stdout\",\"text\":\"a\",}", false},
        {"{\"name\":\"stdout\",\"text\":\"a\"", false},
        {"{\"name\":\"stdout\" \"text\":\"a\"}", false},
        {"{\"name\"\"stdout\",\"text\":\"a\"}", false},
        {"[\"name\",\"text\"]", false},
        {"{\"name\":\"stdout\",\"text\":\"a\nb\"}", false}, /* a raw new line */
        {"{\"name\":\"stdout\",\"text\":\"\xc3\"}", false},  /* not UTF-8 */
        {"", false},
    };
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        const char *content = streams[i].content;
        jspan_t name = {NULL, 0}, text = {NULL, 0};
        size_t tlen = 0;
        CHECK_CASE(content);
        int rc = xevent_stream_scan((jspan_t){content, strlen(content)}, &name, &text, &tlen);
        CHECK_INT(rc, streams[i].fast ? 0 : -EBADMSG);
        if (rc < 0)
            continue;
        char *out = malloc(name.n + text.n + XEVENT_STREAM_OVERHEAD);
        size_t noff = 0, toff = 0;
        size_t len = xevent_stream_write(out, 123456789012345, name, text, &noff, &toff);
        CHECK_INT(len, strlen(out));
        CHECK(!memcmp(out + noff, name.p, name.n) && !memcmp(out + toff, text.p, text.n));
        CHECK(!strchr(out, '\n') && !strchr(out, '\r')); /* one SSE data line */
        json_t *fast = json_loads(out, 0, NULL), *c = json_loads(content, 0, NULL);
        const char *ty = NULL;
        json_t *slow = xevent_from_iopub("stream", c, &ty);
        CHECK(json_integer_value(json_object_get(fast, "seq")) == 123456789012345);
        json_object_del(fast, "seq");
        CHECK(fast && slow && json_equal(fast, slow));
        CHECK_INT(tlen, json_string_length(json_object_get(slow, "text")));
        /* the keys in the order of the jansson path's events */
        CHECK(!strncmp(out, "{\"seq\":123456789012345,\"type\":\"stream\",\"name\":", 46));
        json_decref(fast);
        json_decref(slow);
        json_decref(c);
        free(out);
    }
    /* refused ones the jansson path takes still become events there */
    CHECK_CASE("fallback");
    char *s = event("stream", "{\"name\":\"stdout\",\"text\":\"a\",\"text\":\"b\"}");
    CHECK_STR(s, "{\"name\":\"stdout\",\"text\":\"b\",\"type\":\"stream\"}");
    free(s);

    buf_t b;
    buf_init(&b, 1 << 20);
    CHECK_CASE("ndjson");
    CHECK_INT(xevent_frame(XREQ_NDJSON, 3, "stream", "{\"seq\":3}", 9, &b), 0);
    CHECK_STR(b.data, "{\"seq\":3}\n");
    buf_reset(&b);
    CHECK_CASE("sse");
    CHECK_INT(xevent_frame(XREQ_SSE, 3, "end", "{\"seq\":3}", 9, &b), 0);
    CHECK_STR(b.data, "id: 3\nevent: end\ndata: {\"seq\":3}\n\n");
    CHECK_CASE("json");
    CHECK_INT(xevent_frame(XREQ_JSON, 3, "end", "{}", 2, &b), -EINVAL);
    buf_fini(&b);
    CHECK_CASE("parts"); /* what xapi.c writes a piece at a time */
    char head[XEVENT_FRAME_HEAD_MAX];
    const char *tail = NULL;
    CHECK_INT(xevent_frame_parts(XREQ_SSE, 18446744073709551615ULL, "display", head, &tail), 46);
    CHECK_STR(head, "id: 18446744073709551615\nevent: display\ndata: ");
    CHECK_STR(tail, "\n\n");
    CHECK_INT(xevent_frame_parts(XREQ_NDJSON, 7, "end", head, &tail), 0);
    CHECK_STR(head, "");
    CHECK_STR(tail, "\n");
    CHECK_INT(xevent_frame_parts(XREQ_JSON, 7, "end", head, &tail), -EINVAL);
    CHECK_DONE();
}
