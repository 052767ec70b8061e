/* common/ident: each class's accepted and refused names, edge cases included (length bounds,
 * leading '.'/'-', non-ASCII, NUL, empty). These pin the rules the per-file checkers had. */
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/ident.h"

#define KID "4f1c8c3e-9d2a-4b7e-8f00-1234567890ab"

/* n copies of ch, after prefix (a static buffer: one at a time) */
static const char *rep(const char *prefix, char ch, size_t n)
{
    static char b[600];
    size_t p = strlen(prefix);
    memcpy(b, prefix, p);
    memset(b + p, ch, n);
    b[p + n] = '\0';
    return b;
}

static void ok(enum ident_class c, const char *s)
{
    CHECK_CASE(s);
    CHECK(ident_ok(s, strlen(s), c));
    CHECK(ident_str_ok(s, c));
}

static void no(enum ident_class c, const char *s)
{
    CHECK_CASE(s);
    CHECK(!ident_ok(s, strlen(s), c));
    CHECK(!ident_str_ok(s, c));
}

/* Refused by every class. */
static void test_common(void)
{
    for (int c = 0; c < IDENT_N; c++) {
        no(c, "");
        no(c, "\xc3\xa9"); /* é */
        no(c, "ab\xff");
        no(c, "a\x7f");
        no(c, "a\n");
        no(c, "a b");
        CHECK_CASE("NUL inside n");
        CHECK(!ident_ok("ab\0cd", 5, c));
        CHECK(!ident_ok(NULL, 0, c));
        CHECK(!ident_str_ok(NULL, c));
    }
    CHECK(!ident_ok("abc", 3, IDENT_N));
    CHECK(!ident_ok("abc", 3, (enum ident_class)(IDENT_N + 1)));
    CHECK_INT(ident_max(IDENT_N), 0);
}

static void test_tenant(void)
{
    enum ident_class c = IDENT_TENANT;
    ok(c, "alice");
    ok(c, "a");
    ok(c, "team.a-b_C9");
    ok(c, "_x");
    ok(c, "9lives");
    ok(c, "x.");
    ok(c, "x-");
    ok(c, rep("", 'a', 64));
    no(c, rep("", 'a', 65));
    no(c, ".");
    no(c, "..");
    no(c, ".x");
    no(c, "-x");
    no(c, "a/b");
    no(c, "a:b");
    no(c, "a%2e");
    CHECK_INT(ident_max(c), 64);
}

static void test_kspec(void)
{
    enum ident_class c = IDENT_KSPEC;
    ok(c, "python3");
    ok(c, "a.b-c_D9");
    ok(c, "x.");
    ok(c, "-x"); /* unlike tenants and RPC names, a leading '-' is allowed */
    ok(c, "-");
    ok(c, "logo-64x64.png");
    ok(c, rep("", 'k', 128));
    no(c, rep("", 'k', 129));
    no(c, ".");
    no(c, "..");
    no(c, ".x");
    no(c, "a/b");
    no(c, "a%2e");
    no(c, "a:b");
    CHECK_INT(ident_max(c), 128);
}

static void test_name(void)
{
    enum ident_class c = IDENT_NAME;
    ok(c, "python3");
    ok(c, "my-workspace.v2_x");
    ok(c, "x.");
    ok(c, rep("", 'w', 255));
    no(c, rep("", 'w', 256));
    no(c, ".");
    no(c, ".x");
    no(c, "-x");
    no(c, "a/b");
    no(c, "a:b");
    CHECK_INT(ident_max(c), 255);
}

static void test_pyname(void)
{
    enum ident_class c = IDENT_PYNAME;
    ok(c, "_x9");
    ok(c, "_");
    ok(c, "ask_user");
    ok(c, "X");
    ok(c, rep("", 'p', 64));
    no(c, rep("", 'p', 65));
    no(c, "9x");
    no(c, "a-b");
    no(c, "a.b");
    no(c, "-x");
    CHECK_INT(ident_max(c), 64);
}

static void test_envname(void)
{
    enum ident_class c = IDENT_ENVNAME;
    ok(c, "KERNEL_FOO");
    ok(c, "9"); /* a leading digit is allowed */
    ok(c, "_");
    ok(c, rep("", 'E', 128));
    no(c, rep("", 'E', 129));
    no(c, "A-B");
    no(c, "A.B");
    no(c, "A=B");
    CHECK_INT(ident_max(c), 128);
}

static void test_uuidish(void)
{
    enum ident_class c = IDENT_UUIDISH;
    ok(c, KID);
    ok(c, "a-b-c-d-e");
    ok(c, "A_-b-C-d-9");
    ok(c, "_-_-_-_-_");
    ok(c, rep("a-b-c-d-", 'e', 120)); /* 128 bytes */
    no(c, rep("a-b-c-d-", 'e', 121));
    no(c, "a-b-c-d");
    no(c, "a-b-c-d-e-f");
    no(c, "-a-b-c-d-e");
    no(c, "a-b-c-d-e-");
    no(c, "a--b-c-d-e");
    no(c, "a-b-c-d-");
    no(c, "a.b-c-d-e-f");
    no(c, "{4f1c8c3e-9d2a-4b7e-8f00-1234567890ab}");
    no(c, "4f1c8c3e9d2a4b7e8f001234567890ab");
    no(c, "..-..-..-..-..");
    CHECK_CASE("length-delimited");
    CHECK(ident_ok(KID "garbage", strlen(KID), c));
    CHECK(!ident_ok(KID, strlen(KID) - 12, c)); /* "...-8f00-": trailing dash */
    CHECK(!ident_ok(KID, strlen(KID) - 13, c)); /* four groups */
    CHECK(!ident_ok("a-b-c-d-e\0", 10, c));
    CHECK_INT(ident_max(c), 128);
}

static void test_token(void)
{
    enum ident_class c = IDENT_TOKEN;
    ok(c, "abc");
    ok(c, KID);
    ok(c, "!");
    ok(c, "~");
    ok(c, "a\"b'c<d>&%2F/..");
    ok(c, ".x");
    ok(c, "-x");
    ok(c, rep("", 't', 100));
    no(c, rep("", 't', 101));
    no(c, " ");
    no(c, "a\tb");
    no(c, "a\r\n");
    CHECK_INT(ident_max(c), 100);
}

static void test_instance(void)
{
    enum ident_class c = IDENT_INSTANCE;
    ok(c, "gw-1");
    ok(c, "gw-1.example.org:8888");
    ok(c, ":");
    ok(c, ".x");
    ok(c, "-x");
    ok(c, "_");
    ok(c, KID);
    ok(c, rep("", 'i', 128));
    no(c, rep("", 'i', 129));
    no(c, "a/b");
    no(c, "a@b");
    no(c, "a%b");
    CHECK_INT(ident_max(c), 128);
}

static void test_kname(void)
{
    enum ident_class c = IDENT_KNAME;
    ok(c, "analysis");
    ok(c, "user-42.scratch_1");
    ok(c, "0");
    ok(c, "_x");
    ok(c, rep("", 'k', 64));
    no(c, rep("", 'k', 65));
    no(c, ".hidden");
    no(c, "-x");
    no(c, "a b");
    no(c, "a/b");
    no(c, "a:b");
    no(c, "caf\xc3\xa9");
    no(c, "a\r\nb");
    CHECK_INT(ident_max(c), 64);
}

int main(void)
{
    test_common();
    test_tenant();
    test_kspec();
    test_name();
    test_pyname();
    test_envname();
    test_uuidish();
    test_token();
    test_instance();
    test_kname();
    CHECK_DONE();
}
