/* protocol/fpath.c: workspace-relative paths from clients. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "protocol/fpath.h"

static void test_good(void)
{
    static const char *const good[] = {
        "a",
        "a.txt",
        "dir/sub/file.csv",
        "...",
        ".hidden",
        "..x/x..",
        "a b/ c ",
        "100%;#?&=+.txt",
        "back\\slash",
        "données/ré sumé.txt",
        "\xf0\x9d\x84\x9e/\xf0\x9f\x98\x80",
        "\xef\xbf\xbf",     /* U+FFFF */
        "\xf4\x8f\xbf\xbf", /* U+10FFFF */
    };
    char out[FPATH_MAX + 1];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CHECK_CASE(good[i]);
        memset(out, 'z', sizeof(out));
        CHECK_INT(fpath_normalize(good[i], strlen(good[i]), out, sizeof(out)), strlen(good[i]));
        CHECK_STR(out, good[i]);
    }
}

static void test_bad(void)
{
    static const struct {
        const char *p;
        size_t n; /* 0: strlen */
        int rc;
    } bad[] = {
        {"", 0, -EINVAL},
        {"/", 0, -EINVAL},
        {"/etc/passwd", 0, -EINVAL},
        {"a/", 0, -EINVAL},
        {"a//b", 0, -EINVAL},
        {".", 0, -EINVAL},
        {"..", 0, -EINVAL},
        {"./a", 0, -EINVAL},
        {"a/.", 0, -EINVAL},
        {"a/../b", 0, -EINVAL},
        {"../../etc/passwd", 0, -EINVAL},
        {"a\0b", 3, -EINVAL},
        {"a\nb", 0, -EINVAL},
        {"a\rb", 0, -EINVAL},
        {"\t", 0, -EINVAL},
        {"a\x7f", 0, -EINVAL},
        {"\x80", 0, -EINVAL},             /* lone continuation */
        {"\xc0\xaf", 0, -EINVAL},         /* overlong '/' */
        {"\xc1\xbf", 0, -EINVAL},         /* overlong */
        {"\xe0\x80\xaf", 0, -EINVAL},     /* overlong */
        {"\xf0\x80\x80\xaf", 0, -EINVAL}, /* overlong */
        {"\xed\xa0\x80", 0, -EINVAL},     /* surrogate U+D800 */
        {"\xed\xbf\xbf", 0, -EINVAL},     /* surrogate U+DFFF */
        {"\xf4\x90\x80\x80", 0, -EINVAL}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 0, -EINVAL},
        {"\xff", 0, -EINVAL},
        {"a\xe2\x82", 0, -EINVAL}, /* truncated */
        {"\xe2\x82/x", 0, -EINVAL},
    };
    char out[FPATH_MAX + 1];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = bad[i].n ? bad[i].n : strlen(bad[i].p);
        CHECK_CASE(bad[i].p);
        CHECK_INT(fpath_normalize(bad[i].p, n, out, sizeof(out)), bad[i].rc);
    }
}

static void test_limits(void)
{
    char p[4096], out[FPATH_MAX + 1];
    CHECK_CASE("component length");
    memset(p, 'x', 256);
    CHECK_INT(fpath_normalize(p, 255, out, sizeof(out)), 255);
    CHECK_INT(fpath_normalize(p, 256, out, sizeof(out)), -ENAMETOOLONG);
    CHECK(fpath_name_ok(p, 255));
    CHECK(!fpath_name_ok(p, 256));

    CHECK_CASE("depth");
    size_t n = 0;
    for (int i = 0; i < 33; i++) {
        p[n++] = 'd';
        p[n++] = '/';
    }
    CHECK_INT(fpath_normalize(p, 32 * 2 - 1, out, sizeof(out)), 63); /* 32 components */
    CHECK_INT(fpath_normalize(p, 33 * 2 - 1, out, sizeof(out)), -ENAMETOOLONG);

    CHECK_CASE("total length");
    memset(p, 'y', sizeof(p));
    for (size_t i = 100; i < sizeof(p); i += 256)
        p[i] = '/';
    CHECK_INT(fpath_normalize(p, FPATH_MAX, out, sizeof(out)), FPATH_MAX);
    CHECK_INT(fpath_normalize(p, FPATH_MAX + 1, out, sizeof(out)), -ENAMETOOLONG);
    CHECK_INT(fpath_normalize(p, sizeof(p), out, sizeof(out)), -ENAMETOOLONG);

    CHECK_CASE("output buffer");
    CHECK_INT(fpath_normalize("abc", 3, out, 3), -ENOBUFS);
    CHECK_INT(fpath_normalize("abc", 3, out, 4), 3);

    CHECK_CASE("length-delimited");
    CHECK_INT(fpath_normalize("a/b/../c", 3, out, sizeof(out)), 3);
    CHECK_STR(out, "a/b");
}

static void test_names_and_encoding(void)
{
    char enc[64];
    CHECK_CASE("basename");
    CHECK_STR(fpath_basename("a/b/c.txt"), "c.txt");
    CHECK_STR(fpath_basename("c.txt"), "c.txt");

    CHECK_CASE("name_ok");
    CHECK(fpath_name_ok("a", 1));
    CHECK(!fpath_name_ok("a/b", 3));
    CHECK(!fpath_name_ok("..", 2));
    CHECK(!fpath_name_ok("", 0));

    CHECK_CASE("attr encoding");
    CHECK_INT(fpath_attr_encode("report 2024.csv", enc, sizeof(enc)), 17);
    CHECK_STR(enc, "report%202024.csv");
    CHECK_INT(fpath_attr_encode("r\xc3\xa9sum\xc3\xa9\"';%", enc, sizeof(enc)), 28);
    CHECK_STR(enc, "r%C3%A9sum%C3%A9%22%27%3B%25");
    CHECK_INT(fpath_attr_encode("!#$&+-.^_`|~", enc, sizeof(enc)), 12);
    CHECK_STR(enc, "!#$&+-.^_`|~");
    CHECK_INT(fpath_attr_encode("a\r\nb", enc, sizeof(enc)), 8);
    CHECK_STR(enc, "a%0D%0Ab");
    CHECK_INT(fpath_attr_encode("abc", enc, 3), -ENOBUFS);
    CHECK_INT(fpath_attr_encode(" ", enc, 3), -ENOBUFS);
    CHECK_INT(fpath_attr_encode(" ", enc, 4), 3);
}

int main(void)
{
    test_good();
    test_bad();
    test_limits();
    test_names_and_encoding();
    CHECK_DONE();
}
