#include "protocol/promtext.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void promtext_init(promtext_t *p, buf_t *out)
{
    p->out = out;
    p->err = 0;
}

int promtext_status(const promtext_t *p)
{
    return p->err;
}

static void put(promtext_t *p, const char *s, size_t n)
{
    if (!p->err)
        p->err = buf_append(p->out, s, n);
}

static void put_str(promtext_t *p, const char *s)
{
    put(p, s, strlen(s));
}

/* s with the characters of esc replaced by a backslash and their letter in with. */
static void put_escaped(promtext_t *p, const char *s, const char *esc, const char *with)
{
    for (;;) {
        size_t n = strcspn(s, esc);
        put(p, s, n);
        if (!s[n])
            return;
        char two[2] = {'\\', with[strchr(esc, s[n]) - esc]};
        put(p, two, 2);
        s += n + 1;
    }
}

void promtext_family(promtext_t *p, const char *name, const char *type, const char *help)
{
    put_str(p, "# HELP ");
    put_str(p, name);
    put(p, " ", 1);
    put_escaped(p, help, "\\\n", "\\n");
    put_str(p, "\n# TYPE ");
    put_str(p, name);
    put(p, " ", 1);
    put_str(p, type);
    put(p, "\n", 1);
}

/* name{a="x",b="y"  -- without the closing brace when more may follow (le) */
static void put_head(promtext_t *p, const char *name, const char *suffix,
                     const struct promtext_label *l, size_t nl)
{
    put_str(p, name);
    put_str(p, suffix);
    for (size_t i = 0; i < nl; i++) {
        put(p, i ? "," : "{", 1);
        put_str(p, l[i].name);
        put(p, "=\"", 2);
        put_escaped(p, l[i].value, "\\\"\n", "\\\"n");
        put(p, "\"", 1);
    }
}

/* put_double, put_uint: a sample's value and the end of its line. */
static void put_double(promtext_t *p, double v)
{
    char num[40];
    int n;
    if (isnan(v))
        n = snprintf(num, sizeof(num), "NaN");
    else if (isinf(v))
        n = snprintf(num, sizeof(num), "%s", v > 0 ? "+Inf" : "-Inf");
    else
        n = snprintf(num, sizeof(num), "%.15g", v);
    put(p, num, (size_t)n);
    put(p, "\n", 1);
}

static void put_uint(promtext_t *p, uint64_t v)
{
    char num[24], *d = num + sizeof(num);
    do {
        *--d = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(p, d, (size_t)(num + sizeof(num) - d));
    put(p, "\n", 1);
}

/* name{labels} and the space before the value */
static void put_key(promtext_t *p, const char *name, const char *suffix,
                    const struct promtext_label *l, size_t nl)
{
    put_head(p, name, suffix, l, nl);
    put_str(p, nl ? "} " : " ");
}

void promtext_uint(promtext_t *p, const char *name, const struct promtext_label *labels,
                   size_t nl, uint64_t value)
{
    put_key(p, name, "", labels, nl);
    put_uint(p, value);
}

void promtext_double(promtext_t *p, const char *name, const struct promtext_label *labels,
                     size_t nl, double value)
{
    put_key(p, name, "", labels, nl);
    put_double(p, value);
}

void promtext_hist(promtext_t *p, const char *name, const struct promtext_label *labels,
                   size_t nl, const hist_t *h)
{
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->nbounds; i++) {
        cum += h->counts[i];
        put_head(p, name, "_bucket", labels, nl);
        put_str(p, nl ? ",le=\"" : "{le=\"");
        if (i < h->nbounds)
            put_str(p, h->le[i]);
        else
            put_str(p, "+Inf");
        put_str(p, "\"} ");
        put_uint(p, cum);
    }
    put_key(p, name, "_sum", labels, nl);
    put_double(p, h->sum);
    put_key(p, name, "_count", labels, nl);
    put_uint(p, h->count);
}
