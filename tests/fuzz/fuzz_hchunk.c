/* hchunk_feed on arbitrary chunked bodies, fed whole and again split at every point the first
 * byte says. Invariants: the same result and data either way; the data never exceeds the
 * input, nor the output's limit; what is used is within the input. */
#include <string.h>

#include "fuzz.h"

#include "protocol/hchunk.h"

static int feed(const uint8_t *data, size_t size, size_t step, buf_t *out, size_t *used)
{
    struct hchunk c;
    hchunk_init(&c);
    size_t off = 0;
    *used = 0;
    while (off < size) {
        size_t n = size - off < step ? size - off : step;
        size_t u = 0;
        int rc = hchunk_feed(&c, data + off, n, out, &u);
        FUZZ_CHECK(u <= n);
        if (rc != 0) {
            *used = off + u;
            return rc;
        }
        FUZZ_CHECK(u == n);
        off += n;
    }
    *used = off;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)data[0] % 17 + 1;
    data++;
    size--;
    buf_t a, b;
    buf_init(&a, 4096);
    buf_init(&b, 4096);
    size_t ua, ub;
    int ra = feed(data, size, size ? size : 1, &a, &ua);
    int rb = feed(data, size, step, &b, &ub);
    FUZZ_CHECK(ra == rb);
    FUZZ_CHECK(a.len <= size && a.len <= 4096);
    if (ra >= 0) {
        FUZZ_CHECK(a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0));
        FUZZ_CHECK(ua == ub);
    }
    buf_fini(&a);
    buf_fini(&b);
    return 0;
}
