/* protocol/jcap.c: an output message cut to the room left under the output cap. */
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "check.h"

#include "protocol/jcap.h"

#define NOTICE "[output truncated: the execution's output exceeded its limit of 100 bytes]"

static char *cut(const char *type, const char *content, size_t room, int *ret)
{
    char *out = (char *)"untouched";
    *ret = jcap_cut(type, (jspan_t){content, strlen(content)}, room, 100, &out);
    return out;
}

/* The "text" (or "data") of a cut content, compact and with sorted keys. */
static char *field(const char *json, const char *key)
{
    json_t *c = json_loads(json, 0, NULL);
    json_t *v = json_object_get(c, key);
    char *s = json_is_string(v) ? strdup(json_string_value(v))
              : v               ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
                                : NULL;
    json_decref(c);
    return s;
}

int main(void)
{
    int r;
    char *out, *s;

    CHECK(jcap_is_output("stream") && jcap_is_output("display_data") &&
          jcap_is_output("update_display_data") && jcap_is_output("execute_result"));
    CHECK(!jcap_is_output("error") && !jcap_is_output("status") && !jcap_is_output("streams"));

    /* a stream: the text up to the room, a new line, the notice */
    out = cut("stream", "{\"name\":\"stdout\",\"text\":\"abcdefgh\"}", 3, &r);
    CHECK(r == 0);
    s = field(out, "text");
    CHECK(!strcmp(s, "abc\n" NOTICE "\n"));
    free(s);
    s = field(out, "name");
    CHECK(!strcmp(s, "stdout"));
    free(s);
    free(out);

    /* cut at a line end: no empty line; room 0: the notice alone */
    out = cut("stream", "{\"name\":\"stderr\",\"text\":\"ab\\ncd\"}", 3, &r);
    s = field(out, "text");
    CHECK(r == 0 && !strcmp(s, "ab\n" NOTICE "\n"));
    free(s);
    free(out);
    out = cut("stream", "{\"name\":\"stderr\",\"text\":\"abc\"}", 0, &r);
    s = field(out, "text");
    CHECK(r == 0 && !strcmp(s, NOTICE "\n"));
    free(s);
    free(out);

    /* never within a character: "é" is 2 bytes, "€" 3 */
    out = cut("stream", "{\"name\":\"stdout\",\"text\":\"a\\u00e9\\u20ac\"}", 2, &r);
    s = field(out, "text");
    CHECK(r == 0 && !strcmp(s, "a\n" NOTICE "\n"));
    free(s);
    free(out);
    out = cut("stream", "{\"name\":\"stdout\",\"text\":\"a\\u00e9\\u20ac\"}", 5, &r);
    s = field(out, "text");
    CHECK(r == 0 && !strcmp(s, "a\xc3\xa9\n" NOTICE "\n"));
    free(s);
    free(out);

    /* room for it all: the text stays, the notice still says it ends there */
    out = cut("stream", "{\"name\":\"stdout\",\"text\":\"ab\\n\"}", 50, &r);
    s = field(out, "text");
    CHECK(r == 0 && !strcmp(s, "ab\n" NOTICE "\n"));
    free(s);
    free(out);

    /* rich outputs: data replaced by the notice, metadata emptied, the rest kept */
    out = cut("display_data",
              "{\"data\":{\"image/png\":\"AAAA\",\"text/plain\":\"<Figure>\"},"
              "\"metadata\":{\"image/png\":{\"width\":3}},\"transient\":"
              "{\"display_id\":\"d1\"}}",
              1000, &r);
    CHECK(r == 0);
    s = field(out, "data");
    CHECK(!strcmp(s, "{\"text/plain\":\"" NOTICE "\"}"));
    free(s);
    s = field(out, "metadata");
    CHECK(!strcmp(s, "{}"));
    free(s);
    s = field(out, "transient");
    CHECK(!strcmp(s, "{\"display_id\":\"d1\"}"));
    free(s);
    free(out);
    out = cut("execute_result", "{\"data\":{\"text/html\":\"<b>\"},\"execution_count\":7}", 0, &r);
    CHECK(r == 0);
    s = field(out, "execution_count");
    CHECK(!strcmp(s, "7"));
    free(s);
    free(out);

    /* not an output, not an object, a stream without text: an error, nothing written */
    out = cut("error", "{}", 5, &r);
    CHECK(r == -EINVAL && !strcmp(out, "untouched"));
    out = cut("stream", "[1]", 5, &r);
    CHECK(r == -EBADMSG && !strcmp(out, "untouched"));
    out = cut("stream", "{\"text\":1}", 5, &r);
    CHECK(r == -EBADMSG && !strcmp(out, "untouched"));
    out = cut("display_data", "{\"data\":", 5, &r);
    CHECK(r == -EBADMSG && !strcmp(out, "untouched"));
    return 0;
}
