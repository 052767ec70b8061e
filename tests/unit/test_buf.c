/* buf_t (bounded byte buffer) and blob_t (refcounted buffer with headroom). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/blob.h"
#include "common/buf.h"

static void test_buf_basic(void)
{
    buf_t b;
    CHECK_CASE("buf basic");
    buf_init(&b, 16);
    CHECK(b.data == NULL);
    CHECK_INT(b.len, 0);
    CHECK_INT(buf_append(&b, "hello", 5), 0);
    CHECK_INT(b.len, 5);
    CHECK(b.data != NULL && b.data[5] == '\0');
    CHECK_STR(b.data, "hello");
    CHECK_INT(buf_append(&b, " world", 6), 0);
    CHECK_STR(b.data, "hello world");
    /* appending nothing keeps it terminated and unchanged */
    CHECK_INT(buf_append(&b, "", 0), 0);
    CHECK_INT(b.len, 11);
    CHECK(b.data[b.len] == '\0');
    buf_fini(&b);
    CHECK(b.data == NULL);
    CHECK_INT(b.len, 0);
    /* fini twice is harmless */
    buf_fini(&b);
}

static void test_buf_limit(void)
{
    buf_t b;
    char big[40];
    memset(big, 'x', sizeof(big));

    CHECK_CASE("buf limit: exactly max fits");
    buf_init(&b, 16);
    CHECK_INT(buf_append(&b, big, 16), 0);
    CHECK_INT(b.len, 16);
    CHECK(b.data[16] == '\0');
    CHECK_CASE("buf limit: one more byte is -EMSGSIZE");
    CHECK_INT(buf_append(&b, "y", 1), -EMSGSIZE);
    CHECK_INT(b.len, 16); /* unchanged on failure */
    CHECK(b.data[16] == '\0');
    buf_fini(&b);

    CHECK_CASE("buf limit: single append over max");
    buf_init(&b, 16);
    CHECK_INT(buf_append(&b, big, 17), -EMSGSIZE);
    CHECK_INT(b.len, 0);
    CHECK_CASE("buf limit: accumulated appends");
    CHECK_INT(buf_append(&b, big, 10), 0);
    CHECK_INT(buf_append(&b, big, 7), -EMSGSIZE);
    CHECK_INT(buf_append(&b, big, 6), 0);
    CHECK_INT(b.len, 16);
    buf_fini(&b);

    CHECK_CASE("buf limit: huge n does not wrap");
    buf_init(&b, 16);
    CHECK_INT(buf_append(&b, "abc", 3), 0);
    CHECK_INT(buf_append(&b, big, SIZE_MAX), -EMSGSIZE);
    CHECK_INT(buf_append(&b, big, SIZE_MAX - 1), -EMSGSIZE);
    CHECK_INT(b.len, 3);
    buf_fini(&b);

    CHECK_CASE("buf limit: max 0");
    buf_init(&b, 0);
    CHECK_INT(buf_append(&b, "a", 1), -EMSGSIZE);
    CHECK_INT(buf_append(&b, "", 0), 0);
    CHECK(b.data && b.data[0] == '\0');
    buf_fini(&b);
}

static void test_buf_growth_and_reset(void)
{
    buf_t b;
    char chunk[1000];
    CHECK_CASE("buf growth");
    buf_init(&b, 1 << 20);
    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (char)('a' + i % 26);
    for (int i = 0; i < 100; i++)
        CHECK_INT(buf_append(&b, chunk, sizeof(chunk)), 0);
    CHECK_INT(b.len, 100000);
    CHECK(b.cap > b.len);
    CHECK(b.data[b.len] == '\0');
    CHECK(memcmp(b.data + 99000, chunk, sizeof(chunk)) == 0);

    CHECK_CASE("buf reset releases a large buffer");
    buf_reset(&b);
    CHECK_INT(b.len, 0);
    CHECK(b.data == NULL);
    CHECK_INT(buf_append(&b, "z", 1), 0);
    CHECK_STR(b.data, "z");

    CHECK_CASE("buf reset keeps a small buffer");
    char *before = b.data;
    buf_reset(&b);
    CHECK_INT(b.len, 0);
    CHECK(b.data == before);
    CHECK_INT(buf_append(&b, "q", 1), 0);
    CHECK_STR(b.data, "q");
    buf_fini(&b);

    CHECK_CASE("buf binary data with NULs");
    buf_init(&b, 64);
    CHECK_INT(buf_append(&b, "a\0b", 3), 0);
    CHECK_INT(b.len, 3);
    CHECK(memcmp(b.data, "a\0b", 4) == 0);
    buf_fini(&b);
}

static void test_blob(void)
{
    CHECK_CASE("blob new");
    blob_t *b = blob_new(16, 5);
    CHECK(b != NULL);
    if (!b)
        return;
    CHECK_INT(b->refs, 1);
    CHECK_INT(b->flags, 0);
    CHECK_INT(b->len, 5);
    CHECK(b->data == b->mem + 16);
    CHECK(b->data[5] == '\0');
    memcpy(b->data, "hello", 5);
    memset(b->mem, 0xAA, 16); /* headroom is writable */
    CHECK_STR((char *)b->data, "hello");

    CHECK_CASE("blob ref/unref");
    blob_t *r = blob_ref(b);
    CHECK(r == b);
    CHECK_INT(b->refs, 2);
    blob_unref(&r);
    CHECK(r == NULL);
    CHECK_INT(b->refs, 1);
    blob_unref(&b);
    CHECK(b == NULL);
    blob_unref(&b); /* NULL is fine */

    CHECK_CASE("blob empty, no headroom");
    b = blob_new(0, 0);
    CHECK(b != NULL);
    if (b) {
        CHECK_INT(b->len, 0);
        CHECK(b->data[0] == '\0');
        blob_unref(&b);
    }

    CHECK_CASE("blob overflowing size");
    errno = 0;
    b = blob_new(64, SIZE_MAX - 8);
    CHECK(b == NULL);
    CHECK_INT(errno, ENOMEM);
    errno = 0;
    b = blob_new(SIZE_MAX / 2, SIZE_MAX / 2 + 100);
    CHECK(b == NULL);
    CHECK_INT(errno, ENOMEM);
}

int main(void)
{
    test_buf_basic();
    test_buf_limit();
    test_buf_growth_and_reset();
    test_blob();
    CHECK_DONE();
}
