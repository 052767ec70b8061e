/* protocol/jstr.c: JSON string literals checked and decoded without a tree, against jansson. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "protocol/jstr.h"

/* What jansson makes of lit as a whole document (flags as the gateway loads kernel content):
 * its string (n bytes in *ret_n, to free), or NULL when it is not one string. */
static char *jansson_value(const char *lit, size_t n, size_t *ret_n)
{
    json_t *v = json_loadb(lit, n, JSON_DECODE_ANY, NULL);
    char *s = NULL;
    if (json_is_string(v) && (s = malloc(json_string_length(v) + 1))) {
        memcpy(s, json_string_value(v), json_string_length(v));
        *ret_n = json_string_length(v);
    }
    json_decref(v);
    return s;
}

int main(void)
{
    static const struct {
        const char *lit; /* a literal (n from strlen, or given when it holds a NUL) */
        size_t n;
        const char *want; /* its text, or NULL: refused */
    } rows[] = {
        {"\"\"", 0, ""},
        {"\"hi\\n\"", 0, "hi\n"},
        {"\"a\\\"b\\\\c\\/d\\b\\f\\r\\t\"", 0, "a\"b\\c/d\b\f\r\t"},
        {"\"\\u001b[31mred\\u001B[0m\"", 0, "\x1b[31mred\x1b[0m"},
        {"\"caf\xc3\xa9 \\u00e9 \xe2\x82\xac \xf0\x9f\x98\x80\"", 0,
         "caf\xc3\xa9 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"\"\\ud83d\\ude00\"", 0, "\xf0\x9f\x98\x80"}, /* a surrogate pair */
        {"\"\\uD83D\\uDE00x\"", 0, "\xf0\x9f\x98\x80x"},
        {"\"\xe2\x80\xa8\"", 0, "\xe2\x80\xa8"}, /* U+2028 is fine in JSON */
        {"\"\x7f\"", 0, "\x7f"},
        /* refused: as jansson refuses them */
        {"\"abc", 0, NULL},    /* no closing quote */
        {"abc\"", 0, NULL},    /* no opening quote */
        {"\"", 0, NULL},       /* a lone quote */
        {"\"a\nb\"", 0, NULL}, /* a raw control character */
        {"\"a\tb\"", 0, NULL},
        {"\"a\\x41\"", 0, NULL}, /* not a JSON escape */
        {"\"a\\'\"", 0, NULL},
        {"\"\\u12\"", 0, NULL}, /* a short \u */
        {"\"\\u12g4\"", 0, NULL},
        {"\"\\u0000\"", 0, NULL}, /* NUL (jansson's default) */
        {"\"\\ud83d\"", 0, NULL}, /* a lone high surrogate */
        {"\"\\ud83dx\"", 0, NULL},
        {"\"\\ud83d\\u0041\"", 0, NULL}, /* high, then not a low one */
        {"\"\\ude00\"", 0, NULL},        /* a lone low surrogate */
        {"\"\xc3\"", 0, NULL},           /* cut UTF-8 */
        {"\"\xc0\xaf\"", 0, NULL},       /* overlong */
        {"\"\xe0\x80\xaf\"", 0, NULL},
        {"\"\xf0\x80\x80\xaf\"", 0, NULL},
        {"\"\xed\xa0\x80\"", 0, NULL},     /* a surrogate in UTF-8 */
        {"\"\xf4\x90\x80\x80\"", 0, NULL}, /* past U+10FFFF */
        {"\"\xff\"", 0, NULL},
        {"\"\x80\"", 0, NULL}, /* a stray continuation byte */
        {"\"a\0b\"", 5, NULL}, /* a raw NUL */
        {"\"\\", 0, NULL},     /* cut in an escape */
        {"\"\\u00", 0, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *lit = rows[i].lit;
        size_t n = rows[i].n ? rows[i].n : strlen(lit), len = 0, tlen = 0, out_n = 0, jn = 0;
        CHECK_CASE(lit);
        char *out = malloc(n + 1);
        int scanned = jstr_scan(lit, n, &len, &tlen);
        int decoded = jstr_decode(lit, n, out, &out_n);
        char *jv = jansson_value(lit, n, &jn);
        if (rows[i].want) {
            size_t wn = strlen(rows[i].want);
            CHECK_INT(scanned, 0);
            CHECK_INT(len, n);
            CHECK_INT(tlen, wn);
            CHECK_INT(decoded, 0);
            CHECK(out_n == wn && !memcmp(out, rows[i].want, wn));
            CHECK(jv && jn == wn && !memcmp(jv, rows[i].want, wn)); /* as jansson reads it */
        } else {
            CHECK_INT(scanned, -EBADMSG);
            CHECK_INT(decoded, -EBADMSG);
            CHECK(jv == NULL);
        }
        free(jv);
        free(out);
    }

    /* the literal at the start of longer bytes: its length; decode wants exactly one */
    {
        const char *s = "\"ab\\\"c\", \"next\"";
        size_t len = 0, tlen = 0, on = 0;
        char out[32];
        CHECK_CASE("prefix");
        CHECK_INT(jstr_scan(s, strlen(s), &len, &tlen), 0);
        CHECK_INT(len, 7);
        CHECK_INT(tlen, 4);
        CHECK_INT(jstr_decode(s, strlen(s), out, &on), -EBADMSG);
        CHECK_INT(jstr_decode(s, len, out, &on), 0);
        CHECK(on == 4 && !memcmp(out, "ab\"c", 4));
        CHECK_INT(jstr_scan(s, 0, &len, &tlen), -EBADMSG);
    }

    /* a large literal (a flood's message): every byte kind, decoded as jansson does */
    {
        size_t reps = 20000, n = 0, on = 0, jn = 0;
        const char *unit = "line \\u001b[1m\xc3\xa9\\n\\t\\\"q\\\" \xf0\x9f\x98\x80 ";
        char *big = malloc(reps * strlen(unit) + 3);
        big[n++] = '"';
        for (size_t i = 0; i < reps; i++) {
            memcpy(big + n, unit, strlen(unit));
            n += strlen(unit);
        }
        big[n++] = '"';
        char *out = malloc(n);
        CHECK_CASE("large");
        CHECK_INT(jstr_decode(big, n, out, &on), 0);
        char *jv = jansson_value(big, n, &jn);
        CHECK(jv && jn == on && !memcmp(jv, out, on));
        free(jv);
        free(out);
        free(big);
    }
    /* a text cut within max bytes at a character boundary */
    CHECK_CASE("utf8_cut");
    const char *u = "a\xc3\xa9\xf0\x9f\x98\x80"; /* a, U+00E9, U+1F600: 1 + 2 + 4 bytes */
    CHECK_INT(jstr_utf8_cut(u, 7, 10), 7);
    CHECK_INT(jstr_utf8_cut(u, 7, 7), 7);
    CHECK_INT(jstr_utf8_cut(u, 7, 6), 3);
    CHECK_INT(jstr_utf8_cut(u, 7, 3), 3);
    CHECK_INT(jstr_utf8_cut(u, 7, 2), 1);
    CHECK_INT(jstr_utf8_cut(u, 7, 0), 0);
    CHECK_DONE();
}
