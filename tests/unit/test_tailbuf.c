/* common/tailbuf: the ring keeps exactly the newest TAILBUF_SIZE bytes whatever the write sizes;
 * excerpts are the last lines, printable, bounded, keeping the end; redaction covers whole and
 * cut secrets. */
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/tailbuf.h"

static void test_ring(void)
{
    static tailbuf_t t;
    static char all[5 * TAILBUF_SIZE], got[TAILBUF_SIZE];
    size_t n = 0;
    CHECK_CASE("ring");
    tailbuf_init(&t);
    CHECK_INT(tailbuf_copy(&t, got, sizeof(got)), 0);
    srand(7);
    /* writes of every size class: tiny, around the ring's size, larger than it */
    size_t sizes[] = {1, 2, 100, 4000, TAILBUF_SIZE - 1, TAILBUF_SIZE, TAILBUF_SIZE + 3, 5, 3000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char chunk[TAILBUF_SIZE + 3];
        for (size_t j = 0; j < sizes[i]; j++)
            chunk[j] = (char)('a' + rand() % 26);
        tailbuf_append(&t, chunk, sizes[i]);
        if (n + sizes[i] > sizeof(all)) { /* keep only what matters */
            memmove(all, all + n - TAILBUF_SIZE, TAILBUF_SIZE);
            n = TAILBUF_SIZE;
        }
        memcpy(all + n, chunk, sizes[i]);
        n += sizes[i];
        size_t want = n < TAILBUF_SIZE ? n : TAILBUF_SIZE;
        CHECK_INT(t.len, want);
        CHECK_INT(tailbuf_copy(&t, got, sizeof(got)), want);
        CHECK(!memcmp(got, all + n - want, want));
        /* a smaller buffer gets the newest bytes */
        CHECK_INT(tailbuf_copy(&t, got, 10), want < 10 ? want : 10);
        CHECK(!memcmp(got, all + n - (want < 10 ? want : 10), want < 10 ? want : 10));
    }
    uint64_t total = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        total += sizes[i];
    CHECK(t.total == total);
}

static void ex(const char *in, size_t lines, size_t outsz, const char *want)
{
    char out[512];
    CHECK_CASE(in);
    size_t n = tailbuf_excerpt(in, strlen(in), lines, out, outsz);
    CHECK_STR(out, want);
    CHECK_INT(n, strlen(want));
}

static void test_excerpt(void)
{
    ex("", 3, 100, "");
    ex("\n\n  \r\n", 3, 100, "");
    ex("one line", 3, 100, "one line");
    ex("Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n"
       "ModuleNotFoundError: No module named 'nope'\n",
       2, 100, "  File \"<string>\", line 1, in <module> | ModuleNotFoundError: No module named 'nope'");
    ex("a\nb\n\n\nc\r\n", 3, 100, "a | b | c");
    ex("a\nb\nc\nd\n", 2, 100, "c | d");
    /* control bytes, escapes and non-ASCII cannot reach a log line or a JSON string */
    ex("bad\x1b[31mred\x07\tx\xc3\xa9\n", 1, 100, "bad [31mred  x??");
    /* too long: the end survives, after "..." */
    ex("0123456789abcdefghij", 1, 11, "...defghij");
    ex("first\nsecond line here", 5, 12, "...ine here");
    /* a separator that does not fit: whole lines only */
    ex("aaaa\nbbbbbbbb", 5, 10, "bbbbbbbb");
    ex("x", 0, 100, "");
    char small[4] = "zzz";
    CHECK_INT(tailbuf_excerpt("abc", 3, 1, small, sizeof(small)), 0);
    CHECK_STR(small, "");
}

static void red(const char *in, const char *secret, const char *want)
{
    char b[256];
    CHECK_CASE(in);
    size_t n = strlen(in);
    memcpy(b, in, n + 1);
    tailbuf_redact(b, n, secret, strlen(secret));
    CHECK_STR(b, want);
}

static void test_redact(void)
{
    red("key=hunter22 and hunter22", "hunter22", "key=******** and ********");
    red("nothing here", "hunter22", "nothing here");
    red("ter22 begins cut", "hunter22", "***** begins cut");
    red("ends cut hunt", "hunter22", "ends cut ****");
    red("h", "hunter22", "*");
}

int main(void)
{
    test_ring();
    test_excerpt();
    test_redact();
    CHECK_DONE();
}
