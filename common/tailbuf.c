/* A fixed ring of an untrusted stream's newest bytes, and the excerpt of its last lines. */
#include "common/tailbuf.h"

#include <stdbool.h>
#include <string.h>

void tailbuf_init(tailbuf_t *t)
{
    t->head = t->len = 0;
    t->total = 0;
}

void tailbuf_append(tailbuf_t *t, const void *p, size_t n)
{
    const char *s = p;
    t->total += n;
    if (n >= TAILBUF_SIZE) { /* only its end survives */
        memcpy(t->b, s + n - TAILBUF_SIZE, TAILBUF_SIZE);
        t->head = 0;
        t->len = TAILBUF_SIZE;
        return;
    }
    size_t tail = (t->head + t->len) % TAILBUF_SIZE; /* where the next byte goes */
    size_t first = TAILBUF_SIZE - tail < n ? TAILBUF_SIZE - tail : n;
    memcpy(t->b + tail, s, first);
    memcpy(t->b, s + first, n - first);
    if (t->len + n > TAILBUF_SIZE) {
        size_t drop = t->len + n - TAILBUF_SIZE;
        t->head = (t->head + drop) % TAILBUF_SIZE;
        t->len = TAILBUF_SIZE;
    } else {
        t->len += n;
    }
}

size_t tailbuf_copy(const tailbuf_t *t, char *out, size_t outsz)
{
    size_t n = t->len < outsz ? t->len : outsz;
    size_t start = (t->head + (t->len - n)) % TAILBUF_SIZE;
    size_t first = TAILBUF_SIZE - start < n ? TAILBUF_SIZE - start : n;
    memcpy(out, t->b + start, first);
    memcpy(out + first, t->b, n - first);
    return n;
}

void tailbuf_redact(char *s, size_t n, const char *secret, size_t sn)
{
    if (!sn)
        return;
    for (char *p = s; (size_t)(p - s) + sn <= n;) {
        char *hit = memmem(p, n - (size_t)(p - s), secret, sn);
        if (!hit)
            break;
        memset(hit, '*', sn);
        p = hit + sn;
    }
    /* cut in two: s starts with the secret's end, or ends with its start */
    for (size_t k = sn - 1; k > 0; k--)
        if (k <= n && !memcmp(s, secret + sn - k, k)) {
            memset(s, '*', k);
            break;
        }
    for (size_t k = sn - 1; k > 0; k--)
        if (k <= n && !memcmp(s + n - k, secret, k)) {
            memset(s + n - k, '*', k);
            break;
        }
}

static bool blank(char c)
{
    return c == '\n' || c == '\r' || c == ' ' || c == '\t';
}

size_t tailbuf_excerpt(const char *s, size_t n, size_t max_lines, char *out, size_t outsz)
{
    static const char sep[] = " | ", more[] = "...";
    size_t cap, o;
    if (!outsz)
        return 0;
    out[0] = '\0';
    if (outsz < 8 || !max_lines)
        return 0;
    cap = outsz - 1;
    /* the lines, newest first, written from the end of out backwards */
    size_t end = n, lines = 0;
    size_t w = cap; /* out[w, cap) is filled */
    bool cut = false;
    while (end > 0 && lines < max_lines && !cut) {
        while (end > 0 && blank(s[end - 1]))
            end--;
        if (!end)
            break;
        size_t start = end;
        while (start > 0 && s[start - 1] != '\n')
            start--;
        if (lines) { /* the separator after this line */
            if (w < sizeof(sep) - 1)
                break;
            w -= sizeof(sep) - 1;
            memcpy(out + w, sep, sizeof(sep) - 1);
        }
        for (size_t i = end; i > start; i--) {
            if (!w) {
                cut = true;
                break;
            }
            unsigned char c = (unsigned char)s[i - 1];
            out[--w] = c >= 0x80 ? '?' : (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
        }
        lines++;
        end = start;
    }
    if (!lines)
        return 0;
    if (cut) { /* out[0, cap) is full: "..." covers the oldest bytes of it */
        memcpy(out, more, sizeof(more) - 1);
        w = 0;
    }
    o = cap - w;
    memmove(out, out + w, o);
    out[o] = '\0';
    return o;
}
