#include "protocol/jstr.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* JSON's one-character escapes: what the character after the backslash stands for (0: none) */
static const char unescape[128] = {['"'] = '"',  ['\\'] = '\\', ['/'] = '/',  ['b'] = '\b',
                                   ['f'] = '\f', ['n'] = '\n',  ['r'] = '\r', ['t'] = '\t'};

#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether any of the 8 bytes in w is not plain ASCII in a literal: below 0x20, 0x80 or above,
 * '"' or '\\' (the exact tests for "a byte is below k" and "a byte is zero", a word at once). */
static bool word_special(uint64_t w)
{
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return (((w - ONES * 0x20) & ~w) | ((q - ONES) & ~q) | ((b - ONES) & ~b) | w) & HIGHS;
}

static int hex4(const unsigned char *p, uint32_t *ret)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -EBADMSG;
    }
    *ret = v;
    return 0;
}

size_t jstr_utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    uint32_t v;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        v = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        v = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10ffff ||
        (v >= 0xd800 && v <= 0xdfff))
        return 0;
    return len;
}

static size_t utf8_put(uint32_t v, char *out)
{
    if (v < 0x80) {
        out[0] = (char)v;
        return 1;
    }
    if (v < 0x800) {
        out[0] = (char)(0xc0 | v >> 6);
        out[1] = (char)(0x80 | (v & 0x3f));
        return 2;
    }
    if (v < 0x10000) {
        out[0] = (char)(0xe0 | v >> 12);
        out[1] = (char)(0x80 | (v >> 6 & 0x3f));
        out[2] = (char)(0x80 | (v & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | v >> 18);
    out[1] = (char)(0x80 | (v >> 12 & 0x3f));
    out[2] = (char)(0x80 | (v >> 6 & 0x3f));
    out[3] = (char)(0x80 | (v & 0x3f));
    return 4;
}

/* One \u escape (or a surrogate pair of them) at p[i] ('\\', 'u'): its code point in *ret_v,
 * the bytes it takes in *ret_n. */
static int escape_u(const unsigned char *p, size_t n, size_t i, uint32_t *ret_v, size_t *ret_n)
{
    uint32_t v, lo;
    if (n - i < 6 || hex4(p + i + 2, &v) < 0 || v == 0 || (v >= 0xdc00 && v <= 0xdfff))
        return -EBADMSG;
    if (v < 0xd800 || v > 0xdbff) {
        *ret_v = v;
        *ret_n = 6;
        return 0;
    }
    if (n - i < 12 || p[i + 6] != '\\' || p[i + 7] != 'u' || hex4(p + i + 8, &lo) < 0 ||
        lo < 0xdc00 || lo > 0xdfff)
        return -EBADMSG;
    *ret_v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
    *ret_n = 12;
    return 0;
}

/* The scanner of both: out NULL only checks. */
static int scan(const char *s, size_t n, char *out, size_t *ret_len, size_t *ret_out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 1, o = 0;
    if (n < 2 || p[0] != '"')
        return -EBADMSG;
    while (i < n) {
        unsigned char c = p[i];
        if (c == '"') {
            *ret_len = i + 1;
            *ret_out = o;
            return 0;
        }
        if (c < 0x20)
            return -EBADMSG;
        if (c >= 0x20 && c < 0x80 && c != '\\') { /* the bulk: plain ASCII */
            size_t j = i + 1;
            uint64_t w;
            while (n - j >= 8 && (memcpy(&w, p + j, 8), !word_special(w)))
                j += 8;
            while (j < n && p[j] >= 0x20 && p[j] < 0x80 && p[j] != '"' && p[j] != '\\')
                j++;
            if (out)
                memcpy(out + o, p + i, j - i);
            o += j - i;
            i = j;
            continue;
        }
        if (c != '\\') {
            size_t len = jstr_utf8_seq(p + i, n - i);
            if (!len)
                return -EBADMSG;
            if (out)
                memcpy(out + o, p + i, len);
            o += len;
            i += len;
            continue;
        }
        if (i + 1 >= n)
            return -EBADMSG;
        if (p[i + 1] == 'u') {
            uint32_t v;
            size_t len;
            char tmp[4];
            if (escape_u(p, n, i, &v, &len) < 0)
                return -EBADMSG;
            o += utf8_put(v, out ? out + o : tmp);
            i += len;
            continue;
        }
        char e = p[i + 1] < 128 ? unescape[p[i + 1]] : 0;
        if (!e)
            return -EBADMSG;
        if (out)
            out[o] = e;
        o++;
        i += 2;
    }
    return -EBADMSG; /* no closing quote */
}

int jstr_scan(const char *p, size_t n, size_t *ret_len, size_t *ret_text_len)
{
    size_t len, o;
    int rc = scan(p, n, NULL, &len, &o);
    if (rc == 0) {
        *ret_len = len;
        *ret_text_len = o;
    }
    return rc;
}

size_t jstr_utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
        max--;
    return max;
}

int jstr_decode(const char *p, size_t n, char *out, size_t *ret_len)
{
    size_t len, o;
    int rc = scan(p, n, out, &len, &o);
    if (rc == 0 && len != n)
        return -EBADMSG;
    if (rc == 0)
        *ret_len = o;
    return rc;
}
