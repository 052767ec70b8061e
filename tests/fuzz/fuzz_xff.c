/* rl_forwarded_client on arbitrary X-Forwarded-For values (the first line of the input is the
 * trusted list, the rest the header). Invariants: the result is a bounded address made only of
 * address characters; an untrusted peer never gets a forwarded address; nothing is read past
 * the header's length. */
#include "fuzz.h"
#include <string.h>

#include "gateway/ratelimit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char trusted[256], out[RL_ADDR_MAX];
    const uint8_t *nl = memchr(data, '\n', size);
    size_t tl = nl ? (size_t)(nl - data) : 0;
    if (tl >= sizeof(trusted))
        tl = sizeof(trusted) - 1;
    memcpy(trusted, data, tl);
    trusted[tl] = '\0';
    size_t off = nl ? (size_t)(nl - data) + 1 : 0;
    size_t n = size - off;
    char *xff = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    if (!xff)
        return 0;
    memcpy(xff, data + off, n);
    memset(out, 0x5a, sizeof(out));
    if (rl_forwarded_client("127.0.0.1", xff, n, trusted, out)) {
        size_t len = strnlen(out, sizeof(out));
        FUZZ_CHECK(len > 0 && len < sizeof(out));
        FUZZ_CHECK(strspn(out, "0123456789abcdefABCDEF.:") == len);
        FUZZ_CHECK(memmem(xff, n, out, len) != NULL);
    }
    FUZZ_CHECK(!rl_forwarded_client("192.0.2.250", xff, n, "127.0.0.1", out));
    free(xff);
    return 0;
}
