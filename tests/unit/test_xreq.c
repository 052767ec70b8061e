/* protocol/xreq.c: execute API request bodies, the since / Last-Event-ID number and the
 * Accept header. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#include "protocol/xreq.h"

static int parse(const char *body, bool oneshot, struct xreq *x, char *err)
{
    return xreq_parse(body, strlen(body), oneshot, 16, x, err, 256);
}

static void bodies(void)
{
    struct xreq x;
    char err[256];
    CHECK_CASE("minimal");
    CHECK_INT(parse("{\"code\": \"1+1\"}", false, &x, err), 0);
    CHECK_STR(x.code, "1+1");
    CHECK(x.store_history && !x.silent && x.timeout == 0 && !x.user_expressions);
    xreq_fini(&x);

    CHECK_CASE("all fields");
    CHECK_INT(parse("{\"code\": \"x\", \"timeout\": 1.5, \"store_history\": false, "
                    "\"silent\": true, \"user_expressions\": {\"a\": \"1\"}}",
                    false, &x, err),
              0);
    CHECK(x.timeout == 1.5 && !x.store_history && x.silent && x.user_expressions);
    xreq_fini(&x);

    CHECK_CASE("one-shot");
    CHECK_INT(parse("{\"code\": \"x\", \"kernel_name\": \"python3\", \"keep\": true, \"files\": ["
                    "{\"path\": \"a/b.txt\", \"content\": \"hi\"},"
                    "{\"path\": \"c\", \"content\": \"AAEC\", \"encoding\": \"base64\"}]}",
                    true, &x, err),
              0);
    CHECK_STR(x.kernel_name, "python3");
    CHECK(x.keep && x.nfiles == 2);
    if (x.nfiles == 2) {
        CHECK_STR(x.files[0].path, "a/b.txt");
        CHECK_MEM(x.files[0].data, x.files[0].len, "hi", 2);
        CHECK_MEM(x.files[1].data, x.files[1].len, "\0\1\2", 3);
    }
    xreq_fini(&x);

    static const struct {
        const char *body;
        bool oneshot;
        const char *says;
    } bad[] = {
        {"", false, "JSON object"},
        {"[]", false, "JSON object"},
        {"{\"code\": 1}", false, "'code'"},
        {"{}", false, "'code'"},
        {"{\"code\": \"\", \"code\": \"\"}", false, "JSON object"},
        {"{\"code\": \"\", \"timeout\": 0}", false, "'timeout'"},
        {"{\"code\": \"\", \"timeout\": 1e9}", false, "'timeout'"},
        {"{\"code\": \"\", \"timeout\": true}", false, "'timeout'"},
        {"{\"code\": \"\", \"silent\": \"no\"}", false, "'silent'"},
        {"{\"code\": \"\", \"user_expressions\": []}", false, "user_expressions"},
        {"{\"code\": \"\", \"user_expressions\": {\"a\": 1}}", false, "user_expressions"},
        {"{\"code\": \"\", \"keep\": true}", false, "unknown field 'keep'"},
        {"{\"code\": \"\", \"x\\u0001\": 1}", false, "unknown field 'x?'"},
        {"{\"code\": \"\", \"kernel_name\": \"../x\"}", true, "kernel_name"},
        {"{\"code\": \"\", \"files\": {}}", true, "'files'"},
        {"{\"code\": \"\", \"files\": [1]}", true, "files[0]"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"../a\", \"content\": \"\"}]}", true, "path"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"/a\", \"content\": \"\"}]}", true, "path"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"a\"}]}", true, "'content'"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"a\", \"content\": \"\", \"mode\": 1}]}", true,
         "unknown field"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"a\", \"content\": \"!\", \"encoding\": "
         "\"base64\"}]}",
         true, "base64"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"a\", \"content\": \"\", \"encoding\": "
         "\"latin1\"}]}",
         true, "encoding"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"a\", \"content\": \"01234567890123456\"}]}",
         true, "larger"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"a\", \"content\": "
         "\"MDEyMzQ1Njc4OTAxMjM0NTY=\", \"encoding\": \"base64\"}]}",
         true, "larger"},
        {"{\"code\": \"\", \"files\": [{\"path\": \"a\", \"content\": \"\"}, {\"path\": \"a\", "
         "\"content\": \"\"}]}",
         true, "twice"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i].body);
        err[0] = '\0';
        CHECK_INT(parse(bad[i].body, bad[i].oneshot, &x, err), -EINVAL);
        CHECK(strstr(err, bad[i].says) != NULL);
        CHECK(x.code == NULL && x.files == NULL); /* nothing left to free */
    }
}

static void since(void)
{
    uint64_t v = 7;
    CHECK_CASE("since");
    CHECK_INT(xreq_since("0", 1, &v), 0);
    CHECK_INT(v, 0);
    CHECK_INT(xreq_since("12345", 5, &v), 0);
    CHECK_INT(v, 12345);
    CHECK_INT(xreq_since("9223372036854775807", 19, &v), 0);
    CHECK(v == INT64_MAX);
    static const char *const bad[] = {"", "-1", "+1", "1a", " 1", "9223372036854775808",
                                      "000000000000000000001"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        v = 7;
        CHECK_INT(xreq_since(bad[i], strlen(bad[i]), &v), -EINVAL);
        CHECK_INT(v, 7);
    }
    CHECK_INT(xreq_since(NULL, 0, &v), -EINVAL);
}

static void accept(void)
{
    static const struct {
        const char *h;
        enum xreq_format f;
    } rows[] = {
        {"", XREQ_NDJSON},
        {"*/*", XREQ_NDJSON},
        {"text/event-stream", XREQ_SSE},
        {"Text/Event-Stream; charset=utf-8", XREQ_SSE},
        {"application/json", XREQ_JSON},
        {"application/x-ndjson, application/json", XREQ_NDJSON},
        {"application/json;q=0, text/event-stream", XREQ_SSE},
        {"application/json; q=0.000, */*", XREQ_NDJSON},
        {"application/json; q=0.5", XREQ_JSON},
        {"text/html,application/xhtml+xml , application/json", XREQ_JSON},
        {"application/jsonx", XREQ_NDJSON},
        {";;,,;", XREQ_NDJSON},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        CHECK_CASE(rows[i].h);
        CHECK_INT(xreq_accept(rows[i].h, strlen(rows[i].h)), rows[i].f);
    }
    CHECK_INT(xreq_accept(NULL, 0), XREQ_NDJSON);
}

int main(void)
{
    bodies();
    since();
    accept();
    CHECK_DONE();
}
