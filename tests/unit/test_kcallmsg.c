/* protocol/kcallmsg: the callback frame decoder, request parser, allowlist and reply encoders. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/ident.h"
#include "protocol/kcallmsg.h"

static const char *const allow[] = {"display_chart_to_user", "display_dataframe_to_user", NULL};

/* header + payload in a malloc'd buffer */
static char *mkframe(const char *payload, size_t n, size_t *ret_len)
{
    char *f = malloc(n + 4);
    f[0] = (char)(n >> 24);
    f[1] = (char)(n >> 16);
    f[2] = (char)(n >> 8);
    f[3] = (char)n;
    memcpy(f + 4, payload, n);
    *ret_len = n + 4;
    return f;
}

static void test_decoder(void)
{
    kcallmsg_dec_t d;
    size_t used, n, fl;
    const char *p;
    const char *json = "{\"name\":\"x\"}";
    char *f = mkframe(json, strlen(json), &fl);

    CHECK_CASE("whole frame");
    kcallmsg_dec_init(&d, 1024);
    CHECK(kcallmsg_dec_idle(&d));
    CHECK_INT(kcallmsg_dec_feed(&d, f, fl, &used), KCALLMSG_FRAME);
    CHECK_INT(used, fl);
    kcallmsg_dec_payload(&d, &p, &n);
    CHECK_MEM(p, n, json, strlen(json));
    CHECK(kcallmsg_dec_idle(&d));
    CHECK(kcallmsg_dec_mem(&d) <= strlen(json));

    CHECK_CASE("byte by byte");
    for (size_t i = 0; i < fl; i++) {
        int ev = kcallmsg_dec_feed(&d, f + i, 1, &used);
        CHECK_INT(used, 1);
        CHECK_INT(ev, i + 1 == fl ? KCALLMSG_FRAME : KCALLMSG_MORE);
        if (i + 1 < fl)
            CHECK(!kcallmsg_dec_idle(&d));
    }
    kcallmsg_dec_payload(&d, &p, &n);
    CHECK_MEM(p, n, json, strlen(json));

    CHECK_CASE("two frames in one buffer, then an empty one");
    char two[256];
    memcpy(two, f, fl);
    memcpy(two + fl, f, fl);
    memcpy(two + 2 * fl, "\0\0\0\0", 4);
    CHECK_INT(kcallmsg_dec_feed(&d, two, 2 * fl + 4, &used), KCALLMSG_FRAME);
    CHECK_INT(used, fl);
    CHECK_INT(kcallmsg_dec_feed(&d, two + fl, fl + 4, &used), KCALLMSG_FRAME);
    CHECK_INT(used, fl);
    kcallmsg_dec_payload(&d, &p, &n);
    CHECK_MEM(p, n, json, strlen(json));
    CHECK_INT(kcallmsg_dec_feed(&d, two + 2 * fl, 4, &used), KCALLMSG_FRAME);
    kcallmsg_dec_payload(&d, &p, &n);
    CHECK_INT(n, 0);
    kcallmsg_dec_fini(&d);

    CHECK_CASE("oversize: reported at the header, skipped, then back in sync");
    kcallmsg_dec_init(&d, 8);
    size_t big_len;
    char *big = mkframe("0123456789abcdef", 16, &big_len);
    char stream[64];
    memcpy(stream, big, big_len);
    memcpy(stream + big_len, f, 4); /* a header announcing more than 8 too */
    CHECK_INT(kcallmsg_dec_feed(&d, stream, 3, &used), KCALLMSG_MORE);
    CHECK_INT(kcallmsg_dec_feed(&d, stream + 3, sizeof(stream) - 3, &used), KCALLMSG_OVERSIZE);
    CHECK_INT(used, 1);
    CHECK_INT(d.len, 16);
    CHECK(!kcallmsg_dec_idle(&d));
    CHECK_INT(kcallmsg_dec_feed(&d, stream + 4, 10, &used), KCALLMSG_MORE);
    CHECK_INT(kcallmsg_dec_feed(&d, stream + 14, 6, &used), KCALLMSG_MORE);
    CHECK(kcallmsg_dec_idle(&d));
    CHECK_INT(kcallmsg_dec_mem(&d), 0); /* nothing of it was kept */
    size_t small_len;
    char *small = mkframe("[1]", 3, &small_len);
    CHECK_INT(kcallmsg_dec_feed(&d, small, small_len, &used), KCALLMSG_FRAME);
    kcallmsg_dec_payload(&d, &p, &n);
    CHECK_MEM(p, n, "[1]", 3);
    kcallmsg_dec_fini(&d);

    CHECK_CASE("the buffer grows with what arrives and large ones are not kept");
    size_t len = 3 * KCALLMSG_BUF_KEEP;
    char *payload = malloc(len);
    memset(payload, 'a', len);
    size_t hl;
    char *hf = mkframe(payload, len, &hl);
    kcallmsg_dec_init(&d, len);
    CHECK_INT(kcallmsg_dec_feed(&d, hf, 4 + 10, &used), KCALLMSG_MORE);
    CHECK(kcallmsg_dec_mem(&d) < 8192); /* a header alone does not allocate len */
    CHECK_INT(kcallmsg_dec_feed(&d, hf + 14, hl - 14, &used), KCALLMSG_FRAME);
    CHECK(kcallmsg_dec_mem(&d) == len);
    CHECK_INT(kcallmsg_dec_feed(&d, f, 2, &used), KCALLMSG_MORE);
    CHECK_INT(kcallmsg_dec_mem(&d), 0);
    kcallmsg_dec_fini(&d);

    CHECK_CASE("max is capped at 2^32-1");
    kcallmsg_dec_init(&d, SIZE_MAX);
    CHECK(d.max == UINT32_MAX);
    kcallmsg_dec_fini(&d);
    free(hf);
    free(payload);
    free(small);
    free(big);
    free(f);
}

static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

/* parses and expects an error of type (NULL: success) whose message contains needle */
static void expect(const char *json, size_t n, const char *type, const char *needle)
{
    kcallmsg_req_t r;
    kcallmsg_err_t e = {.type = NULL};
    CHECK_CASE(json);
    int rc = kcallmsg_parse(json, n, allow, &r, &e);
    if (!type) {
        CHECK_INT(rc, 0);
        if (rc == 0)
            kcallmsg_req_fini(&r);
        return;
    }
    CHECK_INT(rc, -EINVAL);
    CHECK_STR(e.type, type);
    CHECK(printable(e.message));
    if (needle && !strstr(e.message, needle)) {
        fprintf(stderr, "message: %s\n", e.message);
        CHECK(!"message lacks the expected text");
    }
}

#define EXPECT(json, type, needle) expect(json, sizeof(json) - 1, type, needle)

static void test_parse(void)
{
    kcallmsg_req_t r;
    kcallmsg_err_t e;
    const char *ok = "{\"name\":\"display_chart_to_user\",\"args\":[\"p\",1],"
                     "\"kwargs\":{\"title\":\"t\"},\"parent\":\"abc-1\"}";
    CHECK_CASE("full request");
    CHECK_INT(kcallmsg_parse(ok, strlen(ok), allow, &r, &e), 0);
    CHECK_STR(r.name, "display_chart_to_user");
    CHECK_STR(r.parent, "abc-1");
    CHECK(json_is_array(r.args) && json_array_size(r.args) == 2);
    CHECK_STR(json_string_value(json_object_get(r.kwargs, "title")), "t");
    kcallmsg_req_fini(&r);
    kcallmsg_req_fini(&r); /* twice is harmless */

    CHECK_CASE("name only: empty args and kwargs");
    const char *bare = "{\"name\":\"display_dataframe_to_user\",\"args\":null,\"parent\":null}";
    CHECK_INT(kcallmsg_parse(bare, strlen(bare), allow, &r, &e), 0);
    CHECK(json_is_array(r.args) && json_array_size(r.args) == 0);
    CHECK(json_is_object(r.kwargs) && json_object_size(r.kwargs) == 0);
    CHECK_STR(r.parent, "");
    kcallmsg_req_fini(&r);

    EXPECT("{\"name\":\"os_system\"}", "PermissionError",
           "'os_system' is not allowed by the gateway (allowed: display_chart_to_user, "
           "display_dataframe_to_user)");
    EXPECT("{\"name\":\"__class__\"}", "PermissionError", "'__class__'");
    EXPECT("{\"name\":\"display_chart_to_user.x\"}", "PermissionError", NULL);
    EXPECT("{\"name\":\"a\\nb\\u00e9'\"}", "PermissionError", "'a?b?\?\?'");
    EXPECT("{\"name\":\"\"}", "PermissionError", NULL);
    EXPECT("{\"name\":\"display_chart_to_user\",\"args\":{}}", "TypeError", "args must be a list");
    EXPECT("{\"name\":\"display_chart_to_user\",\"kwargs\":[]}", "TypeError",
           "kwargs must be a dict");
    EXPECT("{\"name\":\"display_chart_to_user\",\"kwargs\":\"x\"}", "TypeError", NULL);
    EXPECT("{\"name\":\"display_chart_to_user\",\"method\":\"x\"}", "TypeError",
           "unexpected key 'method'");
    EXPECT("{\"name\":\"display_chart_to_user\",\"parent\":1}", "TypeError", "parent");
    EXPECT("{\"name\":\"display_chart_to_user\",\"parent\":\"a\\tb\"}", "TypeError", "parent");
    EXPECT("{\"name\":1}", "TypeError", "name must be a string");
    EXPECT("{}", "TypeError", "name must be a string");
    EXPECT("[\"display_chart_to_user\"]", "TypeError", "JSON object");
    EXPECT("", "ValueError", "not valid JSON");
    EXPECT("{\"name\":", "ValueError", "not valid JSON");
    EXPECT("\"display_chart_to_user\"", "ValueError", "not valid JSON");
    EXPECT("{\"name\":\"display_chart_to_user\",\"name\":\"x\"}", "ValueError", NULL);
    EXPECT("{\"name\":\"display_chart_to_user\",\"args\":[\"a\\u0000b\"]}", "ValueError", NULL);
    EXPECT("{\"name\":\"display_chart_to_user\",\"args\":[\"\xff\"]}", "ValueError", NULL);
    EXPECT("{\"name\":\"display_chart_to_user\"} x", "ValueError", NULL);
    EXPECT("{\"name\":\"display_chart_to_user\",\"args\":[NaN]}", "ValueError", NULL);

    CHECK_CASE("parent of the maximal length");
    char longp[256];
    snprintf(longp, sizeof(longp), "{\"name\":\"display_chart_to_user\",\"parent\":\"%0*d\"}",
             KCALLMSG_PARENT_MAX, 0);
    expect(longp, strlen(longp), NULL, NULL);
    snprintf(longp, sizeof(longp), "{\"name\":\"display_chart_to_user\",\"parent\":\"%0*d\"}",
             KCALLMSG_PARENT_MAX + 1, 0);
    expect(longp, strlen(longp), "TypeError", NULL);

    CHECK_CASE("nesting");
    char deep[512];
    int lv = KCALLMSG_MAX_DEPTH - 1; /* the object is one level */
    int o = snprintf(deep, sizeof(deep), "{\"name\":\"display_chart_to_user\",\"args\":");
    for (int i = 0; i < lv; i++)
        deep[o++] = '[';
    for (int i = 0; i < lv; i++)
        deep[o++] = ']';
    deep[o++] = '}';
    expect(deep, (size_t)o, NULL, NULL);
    o = snprintf(deep, sizeof(deep), "{\"name\":\"display_chart_to_user\",\"args\":");
    for (int i = 0; i < lv + 1; i++)
        deep[o++] = '[';
    for (int i = 0; i < lv + 1; i++)
        deep[o++] = ']';
    deep[o++] = '}';
    expect(deep, (size_t)o, "ValueError", "nested deeper than 32");
    /* brackets inside strings do not count */
    const char *strs = "{\"name\":\"display_chart_to_user\",\"args\":[\"[[[[[[[[[[[[[[[[[[[[[[[["
                       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[[[[\"]}";
    expect(strs, strlen(strs), NULL, NULL);

    CHECK_CASE("empty allowlist");
    const char *none[] = {NULL};
    CHECK_INT(kcallmsg_parse(ok, strlen(ok), none, &r, &e), -EINVAL);
    CHECK_STR(e.type, "PermissionError");
    CHECK(strstr(e.message, "(allowed: none)") != NULL);
    CHECK_INT(kcallmsg_parse(ok, strlen(ok), NULL, &r, &e), -EINVAL);
}

static void test_allow(void)
{
    char **a;
    CHECK_CASE("allowlist");
    a = kcallmsg_allow_new(" a_1 ,b,, \tc ,");
    CHECK(a && a[0] && a[1] && a[2] && !a[3]);
    if (a && a[0] && a[1] && a[2]) {
        CHECK_STR(a[0], "a_1");
        CHECK_STR(a[1], "b");
        CHECK_STR(a[2], "c");
    }
    kcallmsg_allow_destroy(&a);
    CHECK(a == NULL);
    a = kcallmsg_allow_new("");
    CHECK(a && !a[0]);
    kcallmsg_allow_destroy(&a);
    errno = 0;
    CHECK(kcallmsg_allow_new("ok,not ok") == NULL && errno == EINVAL);
    CHECK(kcallmsg_allow_new("a.b") == NULL && errno == EINVAL);
    CHECK(kcallmsg_allow_new("1abc") == NULL && errno == EINVAL);
    char longname[80];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK(kcallmsg_allow_new(longname) == NULL && errno == EINVAL);
    longname[KCALLMSG_NAME_MAX] = '\0';
    a = kcallmsg_allow_new(longname);
    CHECK(a && a[0]);
    kcallmsg_allow_destroy(&a);
    kcallmsg_allow_destroy(&a); /* NULL is fine */
    CHECK(ident_ok("_x9", 3, IDENT_PYNAME));
    CHECK(!ident_ok("9x", 2, IDENT_PYNAME));
    CHECK(!ident_ok("", 0, IDENT_PYNAME));
}

static json_t *payload_json(const char *f, size_t n)
{
    CHECK(n >= 4);
    size_t len = (size_t)(unsigned char)f[0] << 24 | (size_t)(unsigned char)f[1] << 16 |
                 (size_t)(unsigned char)f[2] << 8 | (size_t)(unsigned char)f[3];
    CHECK_INT(len + 4, n);
    return json_loadb(f + 4, n - 4, 0, NULL);
}

static void test_encode(void)
{
    char *f;
    size_t n;
    CHECK_CASE("value");
    CHECK_INT(kcallmsg_encode_value(json_pack("{s:[i,s]}", "a", 1, "x"), 1024, &f, &n), 0);
    json_t *j = payload_json(f, n);
    CHECK_MEM(f + 4, n - 4, "{\"value\":{\"a\":[1,\"x\"]}}", 23);
    json_decref(j);
    free(f);
    CHECK_INT(kcallmsg_encode_value(NULL, 1024, &f, &n), 0);
    CHECK_MEM(f + 4, n - 4, "{\"value\":null}", 14);
    free(f);
    CHECK_CASE("value over the limit");
    CHECK_INT(kcallmsg_encode_value(json_string("0123456789"), 16, &f, &n), -EMSGSIZE);
    CHECK_INT(kcallmsg_encode_value(json_string("0123456"), 21, &f, &n), 0); /* exactly */
    free(f);

    CHECK_CASE("error");
    CHECK_INT(kcallmsg_encode_error("KeyError", "no such chart", &f, &n), 0);
    CHECK_MEM(f + 4, n - 4, "{\"error\":{\"type\":\"KeyError\",\"message\":\"no such chart\"}}", 55);
    free(f);
    CHECK_INT(kcallmsg_encode_error("os.system", "\xc3\xa9x\r\ny\tz", &f, &n), 0);
    j = payload_json(f, n);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
              "RuntimeError");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
              "??x?\ny\tz");
    json_decref(j);
    free(f);
    CHECK_INT(kcallmsg_encode_error(NULL, NULL, &f, &n), 0);
    free(f);
    char longmsg[3000];
    memset(longmsg, 'm', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    CHECK_INT(kcallmsg_encode_error("ValueError", longmsg, &f, &n), 0);
    j = payload_json(f, n);
    CHECK_INT(strlen(json_string_value(json_object_get(json_object_get(j, "error"), "message"))),
              KCALLMSG_MESSAGE_MAX);
    json_decref(j);
    free(f);
}

int main(void)
{
    test_decoder();
    test_parse();
    test_allow();
    test_encode();
    CHECK_DONE();
}
