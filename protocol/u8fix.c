#include "protocol/u8fix.h"

#include <string.h>

#include "protocol/jstr.h"

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

/* The length a lead byte announces (0: not a lead byte). */
static size_t seq_len(unsigned char c)
{
    return c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
}

/* Whether p[0..n) (n shorter than its lead announces) may begin a valid sequence. */
static bool may_start(const unsigned char *p, size_t n)
{
    unsigned char pad[4];
    size_t need = seq_len(p[0]);
    if (!need || n >= need)
        return false;
    /* complete it with the smallest continuation bytes the lead allows: valid iff a valid
     * sequence starts with these bytes (E0 and F0 need a higher second byte) */
    memcpy(pad, p, n);
    for (size_t i = n; i < need; i++)
        pad[i] = (i == 1 && (p[0] == 0xe0)) ? 0xa0 : (i == 1 && p[0] == 0xf0) ? 0x90 : 0x80;
    return jstr_utf8_seq(pad, need) == need;
}

static int feed(const unsigned char *p, size_t n, bool final, struct u8fix *st, buf_t *out)
{
    size_t i = 0, run = 0; /* run: valid bytes from i - run not yet appended */
    int rc = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            run++;
            continue;
        }
        size_t k = jstr_utf8_seq(p + i, n - i);
        if (k) {
            i += k;
            run += k;
            continue;
        }
        rc |= buf_append(out, (const char *)p + i - run, run);
        run = 0;
        if (!final && n - i < 4 && may_start(p + i, n - i)) {
            memcpy(st->carry, p + i, n - i);
            st->ncarry = n - i;
            return rc;
        }
        rc |= buf_append(out, REPLACEMENT, 3);
        i++;
    }
    rc |= buf_append(out, (const char *)p + i - run, run);
    return rc;
}

int u8fix_feed(struct u8fix *st, const char *in, size_t n, bool final, buf_t *out)
{
    const unsigned char *p = (const unsigned char *)in;
    int rc = 0;
    if (st->ncarry) { /* the carried start, with what this chunk adds to it */
        unsigned char seq[8];
        size_t have = st->ncarry, add = n < 4 ? n : 4;
        memcpy(seq, st->carry, have);
        memcpy(seq + have, p, add);
        size_t k = jstr_utf8_seq(seq, have + add);
        st->ncarry = 0;
        if (k > have) { /* completed */
            rc |= buf_append(out, (const char *)seq, k);
            p += k - have;
            n -= k - have;
        } else if (!final && n == add && have + add < 4 && may_start(seq, have + add)) {
            memcpy(st->carry, seq, have + add); /* still cut */
            st->ncarry = have + add;
            return rc;
        } else {
            rc |= buf_append(out, REPLACEMENT, 3);
            /* its other carried bytes are continuation bytes: each a replacement too */
            for (size_t j = 1; j < have; j++)
                rc |= buf_append(out, REPLACEMENT, 3);
        }
    }
    return rc | feed(p, n, final, st, out);
}
