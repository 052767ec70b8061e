/* Identifier classes (see ident.h). */
#include "common/ident.h"

#include <string.h>

/* Byte sets a class's first byte and later bytes are drawn from. */
enum {
    S_ALPHA = 1 << 0, /* A-Z a-z */
    S_DIGIT = 1 << 1, /* 0-9 */
    S_UNDER = 1 << 2, /* _ */
    S_DOT = 1 << 3,   /* . */
    S_DASH = 1 << 4,  /* - */
    S_COLON = 1 << 5, /* : */
    S_GRAPH = 1 << 6, /* 0x21..0x7e */
};
#define S_WORD (S_ALPHA | S_DIGIT | S_UNDER)

static const struct {
    unsigned first, rest;
    size_t max;
} rules[IDENT_N] = {
    [IDENT_TENANT] = {S_WORD, S_WORD | S_DOT | S_DASH, IDENT_TENANT_MAX},
    [IDENT_KSPEC] = {S_WORD | S_DASH, S_WORD | S_DOT | S_DASH, IDENT_KSPEC_MAX},
    [IDENT_NAME] = {S_WORD, S_WORD | S_DOT | S_DASH, IDENT_NAME_MAX},
    [IDENT_PYNAME] = {S_ALPHA | S_UNDER, S_WORD, IDENT_PYNAME_MAX},
    [IDENT_ENVNAME] = {S_WORD, S_WORD, IDENT_ENVNAME_MAX},
    [IDENT_UUIDISH] = {S_WORD, S_WORD | S_DASH, IDENT_UUIDISH_MAX}, /* + the group rule */
    [IDENT_TOKEN] = {S_GRAPH, S_GRAPH, IDENT_TOKEN_MAX},
    [IDENT_INSTANCE] = {S_WORD | S_DOT | S_DASH | S_COLON, S_WORD | S_DOT | S_DASH | S_COLON,
                        IDENT_INSTANCE_MAX},
    [IDENT_KNAME] = {S_WORD, S_WORD | S_DOT | S_DASH, IDENT_KNAME_MAX},
};

static bool in_set(unsigned char c, unsigned set)
{
    return ((set & S_ALPHA) && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) ||
           ((set & S_DIGIT) && c >= '0' && c <= '9') || ((set & S_UNDER) && c == '_') ||
           ((set & S_DOT) && c == '.') || ((set & S_DASH) && c == '-') ||
           ((set & S_COLON) && c == ':') || ((set & S_GRAPH) && c >= 0x21 && c <= 0x7e);
}

/* \w+-\w+-\w+-\w+-\w+ over bytes already known to be \w or '-' */
static bool five_groups(const char *s, size_t n)
{
    int groups = 1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '-') {
            run++;
            continue;
        }
        if (run == 0)
            return false;
        groups++;
        run = 0;
    }
    return groups == 5 && run > 0;
}

bool ident_ok(const char *s, size_t n, enum ident_class c)
{
    if ((unsigned)c >= IDENT_N || n == 0 || n > rules[c].max)
        return false;
    if (!in_set((unsigned char)s[0], rules[c].first))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!in_set((unsigned char)s[i], rules[c].rest))
            return false;
    return c != IDENT_UUIDISH || five_groups(s, n);
}

bool ident_str_ok(const char *s, enum ident_class c)
{
    return s && ident_ok(s, strlen(s), c);
}

size_t ident_max(enum ident_class c)
{
    return (unsigned)c < IDENT_N ? rules[c].max : 0;
}
