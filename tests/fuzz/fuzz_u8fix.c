/* u8fix_feed on arbitrary bytes (the first byte picks where the stream is split in two).
 * Invariants: the text is valid UTF-8 (jansson takes it as a string); splitting the stream
 * does not change it; valid UTF-8 comes out unchanged. */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"

#include "protocol/u8fix.h"

static void text(const char *p, size_t n, size_t cut, buf_t *out)
{
    struct u8fix st = {{0}, 0};
    buf_init(out, SIZE_MAX);
    FUZZ_CHECK(u8fix_feed(&st, p, cut, false, out) == 0);
    FUZZ_CHECK(u8fix_feed(&st, p + cut, n - cut, true, out) == 0);
    FUZZ_CHECK(st.ncarry == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1, cut = n ? data[0] % (n + 1) : 0;
    buf_t whole, split;
    text(p, n, n, &whole);
    text(p, n, cut, &split);
    FUZZ_CHECK(whole.len <= 3 * n && whole.len == split.len &&
               (whole.len == 0 || !memcmp(whole.data, split.data, whole.len)));
    json_t *s = json_stringn(whole.len ? whole.data : "", whole.len);
    FUZZ_CHECK(s != NULL);
    json_decref(s);
    json_t *v = json_stringn(n ? p : "", n);
    if (v) /* valid UTF-8 in: the same out */
        FUZZ_CHECK(whole.len == n && (n == 0 || !memcmp(whole.data, p, n)));
    json_decref(v);
    buf_fini(&whole);
    buf_fini(&split);
    return 0;
}
