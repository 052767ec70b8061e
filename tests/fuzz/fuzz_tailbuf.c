/* tailbuf on untrusted bytes (a kernel's stderr): the first byte picks the excerpt's line count
 * and size and the write sizes; the rest is the stream. The ring must hold exactly the newest
 * bytes; an excerpt must be bounded, printable ASCII, end with the stream's last non-blank byte
 * (sanitised) and contain no newline; a redacted secret must be gone. */
#include "fuzz.h"
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/tailbuf.h"

static bool blank(char c)
{
    return c == '\n' || c == '\r' || c == ' ' || c == '\t';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tailbuf_t t;
    static char lin[TAILBUF_SIZE];
    char out[320];
    if (size < 1)
        return 0;
    size_t lines = data[0] & 7, outsz = 8 + (size_t)(data[0] >> 3) * 9; /* 8..287 */
    const char *s = (const char *)data + 1;
    size_t n = size - 1;

    tailbuf_init(&t);
    for (size_t off = 0, step = 1 + (data[0] % 13) * 97; off < n; off += step)
        tailbuf_append(&t, s + off, n - off < step ? n - off : step);
    size_t keep = n < TAILBUF_SIZE ? n : TAILBUF_SIZE;
    FUZZ_CHECK(t.total == n && t.len == keep);
    FUZZ_CHECK(tailbuf_copy(&t, lin, sizeof(lin)) == keep);
    FUZZ_CHECK(!memcmp(lin, s + n - keep, keep));

    size_t r = tailbuf_excerpt(lin, keep, lines, out, outsz);
    FUZZ_CHECK(r < outsz && strlen(out) == r);
    for (size_t i = 0; i < r; i++)
        FUZZ_CHECK(out[i] >= 0x20 && out[i] < 0x7f);
    size_t e = keep;
    while (e > 0 && blank(lin[e - 1]))
        e--;
    if (!lines || !e)
        FUZZ_CHECK(r == 0);
    if (r) {
        unsigned char c = (unsigned char)lin[e - 1];
        char want = c >= 0x80 ? '?' : (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
        FUZZ_CHECK(out[r - 1] == want);
    }

    /* the secret: the stream's first 1..8 bytes (when it has more) */
    size_t sn = 1 + (data[0] % 8);
    if (keep > sn) {
        char secret[8];
        memcpy(secret, lin, sn);
        if (!memchr(secret, '*', sn)) {
            tailbuf_redact(lin, keep, secret, sn);
            FUZZ_CHECK(!memmem(lin, keep, secret, sn));
        }
    }
    return 0;
}
