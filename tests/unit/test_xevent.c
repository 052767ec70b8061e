/* protocol/xevent.c: iopub messages to execute API events, and their framing. */
#include <errno.h>
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
    CHECK_DONE();
}
