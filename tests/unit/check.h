/* A minimal check harness for the unit tests: every failed CHECK prints where and what, the
 * test keeps going, and CHECK_DONE() makes main() return nonzero if anything failed. */
#ifndef KGW_TESTS_CHECK_H
#define KGW_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int check__failures __attribute__((unused));
static const char *check__case __attribute__((unused)) = "";

/* Names the case being checked (shown with each failure), e.g. a table row. */
#define CHECK_CASE(s) (check__case = (s))

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: [%s] CHECK(%s) failed\n", __FILE__, __LINE__, check__case, \
                    #cond);                                                                    \
            check__failures++;                                                                 \
        }                                                                                      \
    } while (0)

#define CHECK_INT(a, b)                                                                       \
    do {                                                                                      \
        long long check__a = (long long)(a), check__b = (long long)(b);                       \
        if (check__a != check__b) {                                                           \
            fprintf(stderr, "%s:%d: [%s] CHECK_INT(%s, %s) failed: %lld != %lld\n", __FILE__, \
                    __LINE__, check__case, #a, #b, check__a, check__b);                       \
            check__failures++;                                                                \
        }                                                                                     \
    } while (0)

#define CHECK_STR(a, b)                                                                           \
    do {                                                                                          \
        const char *check__a = (a), *check__b = (b);                                              \
        if (!check__a || !check__b || strcmp(check__a, check__b) != 0) {                          \
            fprintf(stderr, "%s:%d: [%s] CHECK_STR(%s, %s) failed: \"%s\" != \"%s\"\n", __FILE__, \
                    __LINE__, check__case, #a, #b, check__a ? check__a : "(null)",                \
                    check__b ? check__b : "(null)");                                              \
            check__failures++;                                                                    \
        }                                                                                         \
    } while (0)

/* Byte-exact comparison of (pa, na) with (pb, nb). */
#define CHECK_MEM(pa, na, pb, nb)                                                          \
    do {                                                                                   \
        size_t check__na = (na), check__nb = (nb);                                         \
        if (check__na != check__nb || (check__na && memcmp((pa), (pb), check__na) != 0)) { \
            fprintf(stderr,                                                                \
                    "%s:%d: [%s] CHECK_MEM(%s, %s) failed: %zu vs %zu bytes: \"%.*s\" vs " \
                    "\"%.*s\"\n",                                                          \
                    __FILE__, __LINE__, check__case, #pa, #pb, check__na, check__nb,       \
                    (int)(check__na > 200 ? 200 : check__na), (const char *)(pa),          \
                    (int)(check__nb > 200 ? 200 : check__nb), (const char *)(pb));         \
            check__failures++;                                                             \
        }                                                                                  \
    } while (0)

#define CHECK_DONE()                                                                \
    do {                                                                            \
        if (check__failures) {                                                      \
            fprintf(stderr, "%s: %d check(s) failed\n", __FILE__, check__failures); \
            return 1;                                                               \
        }                                                                           \
        printf("%s: all checks passed\n", __FILE__);                                \
        return 0;                                                                   \
    } while (0)

#endif
