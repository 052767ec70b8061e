/* protocol/jrpc.c: JSON-RPC 2.0 envelopes of /mcp. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "protocol/jrpc.h"

static int parse(const char *s, struct jrpc_msg *m, struct jrpc_err *e)
{
    return jrpc_parse(s, strlen(s), 4096, m, e);
}

static void valid(void)
{
    struct jrpc_msg m;
    struct jrpc_err e;
    CHECK_CASE("request");
    CHECK_INT(
        parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{}}", &m, &e), 0);
    CHECK(m.kind == JRPC_REQUEST && json_integer_value(m.id) == 7 && json_is_object(m.params));
    CHECK_STR(m.method, "tools/list");
    jrpc_fini(&m);

    CHECK_CASE("string id, no params");
    CHECK_INT(parse("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"}", &m, &e), 0);
    CHECK(m.kind == JRPC_REQUEST && m.params == NULL);
    CHECK_STR(json_string_value(m.id), "a");
    jrpc_fini(&m);

    CHECK_CASE("notification");
    CHECK_INT(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &m, &e), 0);
    CHECK(m.kind == JRPC_NOTIFICATION && m.id == NULL);
    jrpc_fini(&m);

    CHECK_CASE("responses");
    CHECK_INT(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &m, &e), 0);
    CHECK(m.kind == JRPC_RESPONSE && m.method == NULL);
    jrpc_fini(&m);
    CHECK_INT(
        parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"x\"}}", &m, &e),
        0);
    CHECK(m.kind == JRPC_RESPONSE);
    jrpc_fini(&m);
}

static void invalid(void)
{
    static const struct {
        const char *in;
        enum jrpc_code code;
        bool has_id;
    } rows[] = {
        {"", JRPC_PARSE_ERROR, false},
        {"{", JRPC_PARSE_ERROR, false},
        {"{\"jsonrpc\":\"2.0\",\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}", JRPC_PARSE_ERROR,
         false},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\u0000b\"}", JRPC_PARSE_ERROR, false},
        {"\"x\"", JRPC_INVALID_REQUEST, false},
        {"[]", JRPC_INVALID_REQUEST, false},
        {"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}]", JRPC_INVALID_REQUEST, false},
        {"{\"id\":1,\"method\":\"a\"}", JRPC_INVALID_REQUEST, true},
        {"{\"jsonrpc\":2,\"id\":1,\"method\":\"a\"}", JRPC_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"a\"}", JRPC_INVALID_REQUEST, false},
        {"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"a\"}", JRPC_INVALID_REQUEST, false},
        {"{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"a\"}", JRPC_INVALID_REQUEST, false},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", JRPC_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\nb\"}", JRPC_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":[]}", JRPC_INVALID_REQUEST,
         true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"result\":1}", JRPC_INVALID_REQUEST,
         true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1}", JRPC_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}", JRPC_INVALID_REQUEST, true},
        {"{\"jsonrpc\":\"2.0\",\"result\":1}", JRPC_INVALID_REQUEST, false},
        {"{\"jsonrpc\":\"2.0\"}", JRPC_INVALID_REQUEST, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct jrpc_msg m;
        struct jrpc_err e;
        CHECK_CASE(rows[i].in);
        CHECK_INT(parse(rows[i].in, &m, &e), -EINVAL);
        CHECK_INT(e.code, rows[i].code);
        CHECK(e.message[0] != '\0' && m.root == NULL);
        CHECK((e.id != NULL) == rows[i].has_id);
        json_decref(e.id);
    }

    CHECK_CASE("limits");
    char big[JRPC_METHOD_MAX + 64], id[JRPC_ID_MAX + 64];
    struct jrpc_msg m;
    struct jrpc_err e;
    memset(id, 'i', JRPC_ID_MAX + 1);
    id[JRPC_ID_MAX + 1] = '\0';
    snprintf(big, sizeof(big), "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"a\"}", id);
    CHECK_INT(parse(big, &m, &e), -EINVAL);
    CHECK_INT(e.code, JRPC_INVALID_REQUEST);
    char method[JRPC_METHOD_MAX + 2];
    memset(method, 'm', JRPC_METHOD_MAX + 1);
    method[JRPC_METHOD_MAX + 1] = '\0';
    snprintf(big, sizeof(big), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\"}", method);
    CHECK_INT(parse(big, &m, &e), -EINVAL);
    CHECK_INT(e.code, JRPC_INVALID_REQUEST);
    json_decref(e.id);
    const char *ok = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}";
    CHECK_INT(jrpc_parse(ok, strlen(ok), strlen(ok) - 1, &m, &e), -EINVAL);
    CHECK_INT(e.code, JRPC_PARSE_ERROR);
}

static void answers(void)
{
    CHECK_CASE("answers");
    json_t *id = json_integer(3);
    json_t *r = jrpc_result(id, json_object());
    char *s = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_STR(s, "{\"id\":3,\"jsonrpc\":\"2.0\",\"result\":{}}");
    free(s);
    json_decref(r);
    r = jrpc_error(NULL, JRPC_METHOD_NOT_FOUND, "no");
    s = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_STR(s,
              "{\"error\":{\"code\":-32601,\"message\":\"no\"},\"id\":null,\"jsonrpc\":\"2.0\"}");
    free(s);
    json_decref(r);
    r = jrpc_notification("notifications/progress", json_pack("{s:i}", "progress", 1));
    CHECK_STR(json_string_value(json_object_get(r, "method")), "notifications/progress");
    json_decref(r);
    json_decref(id);
}

int main(void)
{
    valid();
    invalid();
    answers();
    CHECK_DONE();
}
