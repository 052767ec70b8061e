/* fpath_normalize on untrusted workspace paths (request paths and multipart "path" fields).
 * A path is accepted exactly when a reference check, written independently from the rules in
 * protocol/fpath.h (split on '/', RFC 3629's table of well-formed UTF-8 byte sequences), accepts
 * it; an accepted path comes back unchanged. Each component is also checked with
 * fpath_name_ok, and the Content-Disposition encoding of the last one must decode back to it
 * using only RFC 8187 attr-chars. */
#include "fuzz.h"
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "protocol/fpath.h"

/* RFC 3629, section 4: the well-formed sequences, by first byte. */
static size_t ref_utf8(const uint8_t *s, size_t n)
{
    static const struct {
        uint8_t lo0, hi0, lo1, hi1;
        size_t len;
    } rows[] = {
        {0x00, 0x7f, 0, 0, 1},       {0xc2, 0xdf, 0x80, 0xbf, 2}, {0xe0, 0xe0, 0xa0, 0xbf, 3},
        {0xe1, 0xec, 0x80, 0xbf, 3}, {0xed, 0xed, 0x80, 0x9f, 3}, {0xee, 0xef, 0x80, 0xbf, 3},
        {0xf0, 0xf0, 0x90, 0xbf, 4}, {0xf1, 0xf3, 0x80, 0xbf, 4}, {0xf4, 0xf4, 0x80, 0x8f, 4},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        if (s[0] < rows[r].lo0 || s[0] > rows[r].hi0)
            continue;
        size_t len = rows[r].len;
        if (len > n)
            return 0;
        if (len > 1 && (s[1] < rows[r].lo1 || s[1] > rows[r].hi1))
            return 0;
        for (size_t i = 2; i < len; i++)
            if (s[i] < 0x80 || s[i] > 0xbf)
                return 0;
        return len;
    }
    return 0;
}

static bool ref_name(const uint8_t *s, size_t n)
{
    if (n == 0 || n > 255 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x20 || s[i] == 0x7f || s[i] == '/')
            return false;
        size_t k = ref_utf8(s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

static bool ref_path(const uint8_t *s, size_t n)
{
    size_t start = 0, depth = 0;
    if (n == 0 || n > 1024)
        return false;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '/')
            continue;
        if (!ref_name(s + start, i - start) || ++depth > 32)
            return false;
        start = i + 1;
    }
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void check_attr(const char *name)
{
    char enc[3 * FPATH_NAME_MAX + 1], dec[FPATH_NAME_MAX + 1];
    int n = fpath_attr_encode(name, enc, sizeof(enc));
    FUZZ_CHECK(n >= 0 && (size_t)n == strlen(enc));
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        char c = enc[i];
        if (c == '%') {
            FUZZ_CHECK(i + 2 < n);
            int h = hexval(enc[i + 1]), l = hexval(enc[i + 2]);
            FUZZ_CHECK(h >= 0 && l >= 0);
            dec[o++] = (char)(h << 4 | l);
            i += 2;
        } else {
            FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       strchr("!#$&+-.^_`|~", c));
            dec[o++] = c;
        }
        FUZZ_CHECK(o <= FPATH_NAME_MAX);
    }
    dec[o] = '\0';
    FUZZ_CHECK(strcmp(dec, name) == 0);
    /* too small a buffer is an error, never a truncation */
    if (n > 0)
        FUZZ_CHECK(fpath_attr_encode(name, enc, (size_t)n) == -ENOBUFS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[FPATH_MAX + 1];
    const char *in = (const char *)data;
    int rc = fpath_normalize(in, size, out, sizeof(out));
    bool want = ref_path(data, size);
    FUZZ_CHECK((rc >= 0) == want);
    if (rc < 0) {
        FUZZ_CHECK(rc == -EINVAL || rc == -ENAMETOOLONG);
    } else {
        FUZZ_CHECK((size_t)rc == size && memcmp(out, in, size) == 0 && out[size] == '\0');
        /* the components one by one */
        const char *p = out;
        for (const char *slash; (slash = strchr(p, '/')); p = slash + 1)
            FUZZ_CHECK(fpath_name_ok(p, (size_t)(slash - p)));
        FUZZ_CHECK(fpath_name_ok(p, strlen(p)));
        FUZZ_CHECK(strcmp(fpath_basename(out), p) == 0);
        check_attr(p);
        /* a buffer one byte short is refused, not overrun */
        FUZZ_CHECK(fpath_normalize(in, size, out, size) == -ENOBUFS);
    }
    /* the input as one name */
    FUZZ_CHECK(fpath_name_ok(in, size) == ref_name(data, size));
    return 0;
}
