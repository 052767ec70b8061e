/* protocol/jschema.c: schemas of the subset checked, values validated against them with the
 * value and the rule named; and docs/mcp_tools.json's input schemas (argv[1]) in the subset. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "protocol/jschema.h"

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (!v)
        fprintf(stderr, "test_jschema: bad test JSON: %s: %s\n", text, je.text);
    return v;
}

/* A tool's arguments, as the MCP tools' schemas say them, and a nested one. */
static const char *const tool_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"code\":{\"type\":\"string\",\"description\":\"the code\"},"
    "\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":604800},"
    "\"count\":{\"type\":\"integer\",\"minimum\":1,\"exclusiveMaximum\":10},"
    "\"flag\":{\"type\":\"boolean\"},"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4,\"pattern\":\"^a$\"},"
    "\"short\":{\"type\":\"string\",\"maxLength\":2},"
    "\"long\":{\"type\":\"string\",\"minLength\":2},"
    "\"encoding\":{\"type\":\"string\",\"enum\":[\"utf-8\",\"base64\"],\"default\":\"utf-8\"},"
    "\"level\":{\"enum\":[1,2,null]},"
    "\"tags\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":\"string\",\"maxLength\":3}},"
    "\"opts\":{\"type\":\"object\",\"properties\":{\"deep\":{\"type\":\"array\",\"items\":"
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}}}"
    "},\"required\":[\"code\"],\"additionalProperties\":false}";

/* 8 and 7 characters of 2 bytes */
#define E8 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
#define E7 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"

static const struct {
    const char *value;
    const char *where, *what; /* NULL: valid */
} cases[] = {
    {"{\"code\":\"1\"}", NULL, NULL},
    {"{\"code\":\"\",\"timeout\":0.5,\"count\":9,\"flag\":false,\"name\":\"abcd\",\"short\":\"\","
     "\"long\":\"\xc3\xa9\xc3\xa9\",\"encoding\":\"base64\",\"level\":null,\"tags\":[\"a\"],"
     "\"opts\":{\"other\":1,\"deep\":[{\"x\":1.0}]}}",
     NULL, NULL},
    {"{\"code\":\"1\",\"timeout\":604800,\"level\":2.0,\"name\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}",
     NULL, NULL},
    {"{}", "code", "is required"},
    {"{\"code\":5}", "code", "must be a string"},
    {"{\"code\":null}", "code", "must be a string"},
    {"{\"code\":\"1\",\"timeout\":0}", "timeout", "must be a number > 0 and <= 604800"},
    {"{\"code\":\"1\",\"timeout\":-1}", "timeout", "must be a number > 0 and <= 604800"},
    {"{\"code\":\"1\",\"timeout\":604800.5}", "timeout", "must be a number > 0 and <= 604800"},
    {"{\"code\":\"1\",\"timeout\":\"5\"}", "timeout", "must be a number > 0 and <= 604800"},
    {"{\"code\":\"1\",\"timeout\":true}", "timeout", "must be a number > 0 and <= 604800"},
    {"{\"code\":\"1\",\"count\":1.5}", "count", "must be an integer >= 1 and < 10"},
    {"{\"code\":\"1\",\"count\":0}", "count", "must be an integer >= 1 and < 10"},
    {"{\"code\":\"1\",\"count\":10}", "count", "must be an integer >= 1 and < 10"},
    {"{\"code\":\"1\",\"flag\":1}", "flag", "must be true or false"},
    {"{\"code\":\"1\",\"name\":\"\"}", "name", "must be a string of 1 to 4 characters"},
    {"{\"code\":\"1\",\"name\":\"abcde\"}", "name", "must be a string of 1 to 4 characters"},
    {"{\"code\":\"1\",\"short\":\"abc\"}", "short", "must be a string of at most 2 characters"},
    {"{\"code\":\"1\",\"long\":\"\xc3\xa9\"}", "long", "must be a string of at least 2 characters"},
    {"{\"code\":\"1\",\"encoding\":\"utf-16\"}", "encoding",
     "must be one of \"utf-8\", \"base64\""},
    {"{\"code\":\"1\",\"encoding\":1}", "encoding", "must be one of \"utf-8\", \"base64\""},
    {"{\"code\":\"1\",\"level\":3}", "level", "must be one of 1, 2, null"},
    {"{\"code\":\"1\",\"level\":\"1\"}", "level", "must be one of 1, 2, null"},
    {"{\"code\":\"1\",\"tags\":\"a\"}", "tags", "must be an array of at most 2 items"},
    {"{\"code\":\"1\",\"tags\":[\"a\",\"b\",\"c\"]}", "tags", "must be an array of at most 2 items"},
    {"{\"code\":\"1\",\"tags\":[\"a\",\"abcd\"]}", "tags[1]", "must be a string of at most 3 characters"},
    {"{\"code\":\"1\",\"opts\":[]}", "opts", "must be an object"},
    {"{\"code\":\"1\",\"opts\":{\"deep\":[{\"x\":1},{\"x\":\"1\"}]}}", "opts.deep[1].x",
     "must be an integer"},
    {"{\"code\":\"1\",\"opts\":{\"deep\":[{\"y\":1}]}}", "opts.deep[0].x", "is required"},
    {"{\"code\":\"1\",\"extra\":1}", "extra",
     "is unknown (allowed: code, timeout, count, flag, name, short, long, encoding, level, tags, "
     "opts)"},
    /* the first wrong member, in the value's order, before a missing one */
    {"{\"flag\":0,\"code\":5}", "flag", "must be true or false"},
    {"{\"extra\":1}", "extra", NULL},
    {"[]", "", "must be an object"},
    /* a name as the error quotes it: control characters as '?', cut on a character */
    {"{\"a\\nb\\u001b\":1}", "a?b?", NULL},
    {"{\"x" E8 E8 E8 E8 "\":1}", "x" E8 E8 E8 E7, NULL},
};

static void test_validate(void)
{
    json_t *s = load(tool_schema);
    struct jschema_err e;
    CHECK(s != NULL);
    CHECK_INT(jschema_check(s, &e), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_CASE(cases[i].value);
        json_t *v = load(cases[i].value);
        CHECK(v != NULL);
        int rc = jschema_validate(s, v, &e);
        CHECK_INT(rc, cases[i].where ? -EINVAL : 0);
        if (cases[i].where)
            CHECK_STR(e.where, cases[i].where);
        if (cases[i].what)
            CHECK_STR(e.what, cases[i].what);
        else if (cases[i].where)
            CHECK(!strncmp(e.what, "is unknown (allowed: code, ", 27));
        json_decref(v);
    }
    CHECK_CASE("");
    json_decref(s);
}

/* Objects open to other members, none allowed, a schema without a type. */
static void test_open_and_closed(void)
{
    struct jschema_err e;
    json_t *open = load("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}");
    json_t *none = load("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}");
    json_t *any = load("{\"minimum\":3,\"maxLength\":1}");
    json_t *v = load("{\"b\":[1,{\"c\":2}],\"a\":\"x\"}");
    CHECK_INT(jschema_check(open, &e), 0);
    CHECK_INT(jschema_check(none, &e), 0);
    CHECK_INT(jschema_check(any, &e), 0);
    CHECK_INT(jschema_validate(open, v, &e), 0);
    CHECK_INT(jschema_validate(none, v, &e), -EINVAL);
    CHECK_STR(e.where, "b");
    CHECK_STR(e.what, "is unknown (none allowed)");
    json_t *empty = json_object(), *n2 = json_integer(2), *s2 = json_string("ab");
    CHECK_INT(jschema_validate(none, empty, &e), 0);
    CHECK_INT(jschema_validate(any, empty, &e), 0);
    CHECK_INT(jschema_validate(any, n2, &e), -EINVAL);
    CHECK_STR(e.where, "");
    CHECK_STR(e.what, "must be an integer >= 3");
    CHECK_INT(jschema_validate(any, s2, &e), -EINVAL);
    CHECK_STR(e.what, "must be a string of at most 1 characters");
    json_decref(open);
    json_decref(none);
    json_decref(any);
    json_decref(v);
    json_decref(empty);
    json_decref(n2);
    json_decref(s2);
}

/* A schema nested n deep: {"type":"array","items":{... {"type":"string"}}}. */
static json_t *nested(int n)
{
    json_t *s = json_pack("{s:s}", "type", "string");
    for (int i = 0; i < n; i++)
        s = json_pack("{s:s, s:o}", "type", "array", "items", s);
    return s;
}

static void test_depth(void)
{
    struct jschema_err e;
    json_t *ok = nested(JSCHEMA_DEPTH_MAX), *deep = nested(JSCHEMA_DEPTH_MAX + 1);
    CHECK_INT(jschema_check(ok, &e), 0);
    CHECK_INT(jschema_check(deep, &e), -EINVAL);
    CHECK_STR(e.what, "nests deeper than 8 schemas");
    /* a value deeper than its schema is not looked into below it */
    json_t *v = load("[[[[[[[[[[[[1]]]]]]]]]]]]");
    CHECK_INT(jschema_validate(ok, v, &e), -EINVAL);
    CHECK_STR(e.where, "[0][0][0][0][0][0][0][0]");
    CHECK_STR(e.what, "must be a string");
    /* an unchecked schema too deep: refused, not followed */
    json_t *w = load("[[[[[[[[[\"x\"]]]]]]]]]");
    CHECK_INT(jschema_validate(deep, w, &e), -EINVAL);
    CHECK(strstr(e.what, "cannot be checked") != NULL);
    json_decref(ok);
    json_decref(deep);
    json_decref(v);
    json_decref(w);
}

static const struct {
    const char *schema;
    const char *where, *what;
} bad_schemas[] = {
    {"[]", "", "must be a schema (an object)"},
    {"{\"format\":\"uri\"}", "", "has the keyword \"format\", which is not in the subset taken"},
    {"{\"anyOf\":[]}", "", "has the keyword \"anyOf\", which is not in the subset taken"},
    {"{\"type\":\"null\"}", "/type", NULL},
    {"{\"type\":[\"string\"]}", "/type", NULL},
    {"{\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":-1}}}",
     "/properties/a/minLength", "must be an integer >= 0"},
    {"{\"properties\":{\"a\":{\"maxLength\":1.5}}}", "/properties/a/maxLength",
     "must be an integer >= 0"},
    {"{\"properties\":[]}", "/properties", NULL},
    {"{\"properties\":{\"a\":true}}", "/properties/a", "must be a schema (an object)"},
    {"{\"required\":\"a\"}", "/required", NULL},
    {"{\"required\":[1]}", "/required", "must hold strings"},
    {"{\"properties\":{},\"additionalProperties\":false,\"required\":[\"a\"]}", "/required",
     "names \"a\", which is not among the properties"},
    {"{\"additionalProperties\":{}}", "/additionalProperties", "must be true or false"},
    {"{\"enum\":[]}", "/enum", NULL},
    {"{\"enum\":[{}]}", "/enum", "must hold strings, numbers, booleans or null"},
    {"{\"minimum\":\"1\"}", "/minimum", "must be a number"},
    {"{\"items\":{\"items\":{\"x\":1}}}", "/items/items", NULL},
    {"{\"description\":1}", "/description", "must be a string"},
    {"{\"pattern\":null}", "/pattern", "must be a string"},
};

static void test_check(void)
{
    struct jschema_err e;
    for (size_t i = 0; i < sizeof(bad_schemas) / sizeof(bad_schemas[0]); i++) {
        CHECK_CASE(bad_schemas[i].schema);
        json_t *s = load(bad_schemas[i].schema);
        CHECK(s != NULL);
        CHECK_INT(jschema_check(s, &e), -EINVAL);
        CHECK_STR(e.where, bad_schemas[i].where);
        if (bad_schemas[i].what)
            CHECK_STR(e.what, bad_schemas[i].what);
        CHECK(e.what[0] != '\0');
        json_decref(s);
    }
    CHECK_CASE("many properties");
    json_t *props = json_object();
    for (int i = 0; i <= JSCHEMA_KEYS_MAX; i++) {
        char name[16];
        snprintf(name, sizeof(name), "p%d", i);
        json_object_set_new(props, name, json_object());
    }
    json_t *s = json_pack("{s:O}", "properties", props);
    CHECK_INT(jschema_check(s, &e), -EINVAL);
    json_object_del(props, "p0");
    json_decref(s);
    s = json_pack("{s:O}", "properties", props);
    CHECK_INT(jschema_check(s, &e), 0);
    json_decref(s);
    json_decref(props);
    CHECK_CASE("");
}

/* docs/mcp_tools.json: every tool's inputSchema is one the subset takes, of type object, and
 * refuses an unknown argument; the schemas the gateway checks arguments against. */
static void test_tools_file(const char *path)
{
    json_error_t je;
    struct jschema_err e;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    CHECK_CASE(path);
    CHECK(doc != NULL);
    json_t *tools = json_object_get(doc, "tools"), *t;
    size_t i;
    CHECK(json_array_size(tools) >= 8);
    json_array_foreach(tools, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        json_t *in = json_object_get(t, "inputSchema");
        CHECK_CASE(name ? name : "?");
        CHECK_INT(jschema_check(in, &e), 0);
        CHECK_STR(json_string_value(json_object_get(in, "type")), "object");
        CHECK(json_is_false(json_object_get(in, "additionalProperties")));
        json_t *v = json_pack("{s:i}", "no_such_argument", 1);
        CHECK_INT(jschema_validate(in, v, &e), -EINVAL);
        CHECK_STR(e.where, "no_such_argument");
        json_decref(v);
    }
    CHECK_CASE("");
    json_decref(doc);
}

int main(int argc, char **argv)
{
    test_validate();
    test_open_and_closed();
    test_depth();
    test_check();
    if (argc > 1)
        test_tools_file(argv[1]);
    CHECK_DONE();
}
