/* protocol/jschema.c on untrusted JSON: a tool call's arguments validated against a schema
 * like the MCP tools' (docs/mcp_tools.json), and, when the input is a pair [schema, value], a
 * schema of any shape checked and, once taken, the value validated against it. Every answer
 * is 0, or -EINVAL with a rule said and a path that is valid UTF-8 without control
 * characters; arguments the tools' schema takes are what it says. */
#include <errno.h>
#include <string.h>

#include "fuzz.h"

#include "protocol/jschema.h"

static const char tool[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"code\":{\"type\":\"string\"},"
    "\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":604800},"
    "\"count\":{\"type\":\"integer\",\"minimum\":1,\"exclusiveMaximum\":10},"
    "\"flag\":{\"type\":\"boolean\"},"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4},"
    "\"encoding\":{\"type\":\"string\",\"enum\":[\"utf-8\",\"base64\"]},"
    "\"tags\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":\"string\"}},"
    "\"opts\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},"
    "\"required\":[\"x\"]}"
    "},\"required\":[\"code\"],\"additionalProperties\":false}";

static void answer_ok(int rc, const struct jschema_err *e)
{
    FUZZ_CHECK(rc == 0 || rc == -EINVAL);
    if (rc == 0)
        return;
    FUZZ_CHECK(e->what[0] != '\0' && strlen(e->what) < JSCHEMA_WHAT_MAX);
    FUZZ_CHECK(strlen(e->where) < JSCHEMA_WHERE_MAX);
    json_t *w = json_string(e->where); /* NULL: not UTF-8 */
    FUZZ_CHECK(w != NULL);
    json_decref(w);
    for (const char *p = e->where; *p; p++)
        FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
}

/* What a value the tools' schema takes must be. */
static void args_ok(const json_t *v)
{
    const char *key;
    json_t *m;
    FUZZ_CHECK(json_is_string(json_object_get(v, "code")));
    json_object_foreach((json_t *)v, key, m)
    {
        if (!strcmp(key, "timeout"))
            FUZZ_CHECK(json_is_number(m) && json_number_value(m) > 0 &&
                       json_number_value(m) <= 604800);
        else if (!strcmp(key, "count"))
            FUZZ_CHECK(json_is_number(m) && json_number_value(m) >= 1 &&
                       json_number_value(m) < 10);
        else if (!strcmp(key, "flag"))
            FUZZ_CHECK(json_is_boolean(m));
        else if (!strcmp(key, "name"))
            FUZZ_CHECK(json_is_string(m) && json_string_length(m) >= 1 &&
                       json_string_length(m) <= 4 * 4);
        else if (!strcmp(key, "encoding"))
            FUZZ_CHECK(json_is_string(m) && (!strcmp(json_string_value(m), "utf-8") ||
                                             !strcmp(json_string_value(m), "base64")));
        else if (!strcmp(key, "tags"))
            FUZZ_CHECK(json_is_array(m) && json_array_size(m) <= 2);
        else if (!strcmp(key, "opts"))
            FUZZ_CHECK(json_is_object(m) && json_object_get(m, "x"));
        else
            FUZZ_CHECK(!strcmp(key, "code"));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *schema;
    struct jschema_err e;
    if (!schema) {
        schema = json_loads(tool, 0, NULL);
        FUZZ_CHECK(schema && jschema_check(schema, &e) == 0);
    }
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!v)
        return 0;
    int rc = jschema_validate(schema, v, &e);
    answer_ok(rc, &e);
    if (rc == 0)
        args_ok(v);
    if (json_is_array(v) && json_array_size(v) == 2) {
        json_t *s = json_array_get(v, 0), *x = json_array_get(v, 1);
        rc = jschema_check(s, &e);
        answer_ok(rc, &e);
        if (rc == 0)
            answer_ok(jschema_validate(s, x, &e), &e);
    }
    json_decref(v);
    return 0;
}
