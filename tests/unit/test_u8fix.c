/* protocol/u8fix.c: a byte stream as UTF-8, chunk by chunk. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "protocol/u8fix.h"

/* The text of the chunks (NULL-terminated; each a C string) fed one after the other. */
static char *feed(const char *const *chunks)
{
    struct u8fix st = {{0}, 0};
    buf_t b;
    buf_init(&b, SIZE_MAX);
    for (size_t i = 0; chunks[i]; i++)
        CHECK_INT(u8fix_feed(&st, chunks[i], strlen(chunks[i]), false, &b), 0);
    CHECK_INT(u8fix_feed(&st, "", 0, true, &b), 0);
    CHECK_INT(st.ncarry, 0);
    CHECK_INT(buf_append(&b, "", 1), 0);
    return b.data;
}

#define FFFD "\xef\xbf\xbd"

static const struct {
    const char *name;
    const char *chunks[5];
    const char *want;
} cases[] = {
    {"ascii", {"hello", " world", NULL}, "hello world"},
    {"valid multibyte",
     {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", NULL},
     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
    {"euro cut 2+1",
     {"a\xe2\x82",
      "\xac"
      "b",
      NULL},
     "a\xe2\x82\xac"
     "b"},
    {"euro cut 1+1+1", {"\xe2", "\x82", "\xac", NULL}, "\xe2\x82\xac"},
    {"emoji cut 1+3", {"\xf0", "\x9f\x98\x80!", NULL}, "\xf0\x9f\x98\x80!"},
    {"invalid byte",
     {"a\xff"
      "b",
      NULL},
     "a" FFFD "b"},
    {"lone continuation", {"\x80\x80", NULL}, FFFD FFFD},
    {"overlong", {"\xc0\xaf", NULL}, FFFD FFFD},
    {"surrogate", {"\xed\xa0\x80", NULL}, FFFD FFFD FFFD},
    {"cut, then not continued", {"x\xe2\x82", "y", NULL}, "x" FFFD FFFD "y"},
    {"cut at the end of the stream", {"x\xe2\x82", NULL}, "x" FFFD FFFD},
    {"E0 needs A0..BF", {"\xe0", "\x80\x80", NULL}, FFFD FFFD FFFD},
};

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_CASE(cases[i].name);
        char *got = feed(cases[i].chunks);
        CHECK_STR(got, cases[i].want);
        free(got);
    }
    CHECK_DONE();
}
