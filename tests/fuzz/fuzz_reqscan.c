/* reqscan_feed on untrusted client bytes. The first input byte picks how the rest is split into
 * reads; the result must not depend on the split: the same bytes marked and the same place
 * where a pipelined request is found, as when the whole input is one read. Only '%' or NUL
 * bytes ever change, only into REQSCAN_MARK, and a marked '%' is never the start of a
 * decodable escape other than %00. */
#include "fuzz.h"
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/reqscan.h"

static bool hex(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Scans in as reads of the given sizes (cycled); returns the bytes handed on (len of them, or
 * up to where a pipelined request began: *ret_blocked). */
static uint8_t *scan(const uint8_t *in, size_t len, const uint8_t *sizes, size_t nsizes,
                     long *ret_blocked)
{
    reqscan_t s;
    uint8_t *out = malloc(len + 1), *buf = malloc(len + 3);
    size_t olen = 0, held = 0, pos = 0, k = 0;
    reqscan_init(&s);
    *ret_blocked = -1;
    for (;;) {
        size_t want = nsizes ? (size_t)sizes[k++ % nsizes] + 1 : len;
        size_t n = len - pos < want ? len - pos : want;
        memcpy(buf + held, in + pos, n);
        pos += n;
        bool eof = pos == len;
        size_t total = held + n, ok = reqscan_feed(&s, buf, total, eof);
        FUZZ_CHECK(ok <= total);
        memcpy(out + olen, buf, ok);
        olen += ok;
        if (reqscan_blocked(&s)) {
            *ret_blocked = (long)olen;
            break;
        }
        held = total - ok;
        FUZZ_CHECK(held <= 2);
        FUZZ_CHECK(!(eof && held));
        memmove(buf, buf + ok, held);
        if (eof)
            break;
    }
    FUZZ_CHECK(*ret_blocked >= 0 || olen == len);
    free(buf);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t nsizes = data[0] % 8;
    if (size < 1 + nsizes)
        return 0;
    const uint8_t *sizes = data + 1, *in = data + 1 + nsizes;
    size_t len = size - 1 - nsizes;
    long whole_blocked, split_blocked;
    uint8_t *whole = scan(in, len, NULL, 0, &whole_blocked);
    uint8_t *split = scan(in, len, sizes, nsizes, &split_blocked);
    FUZZ_CHECK(whole_blocked == split_blocked);
    size_t n = whole_blocked >= 0 ? (size_t)whole_blocked : len;
    FUZZ_CHECK(memcmp(whole, split, n) == 0);
    for (size_t i = 0; i < n; i++) {
        if (whole[i] == in[i])
            continue;
        FUZZ_CHECK(whole[i] == REQSCAN_MARK && (in[i] == '%' || in[i] == '\0'));
        if (in[i] == '%' && i + 2 < len)
            FUZZ_CHECK(!hex(in[i + 1]) || !hex(in[i + 2]) || (in[i + 1] == '0' && in[i + 2] == '0'));
    }
    free(whole);
    free(split);
    return 0;
}
