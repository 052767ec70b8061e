/* ident_ok on untrusted bytes: every class is checked against an independent POSIX regular
 * expression of the rule ident.h documents, plus its length bound. */
#include "fuzz.h"
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/ident.h"

static const struct {
    enum ident_class c;
    size_t max;
    const char *re;
} refs[] = {
    {IDENT_TENANT, 64, "^[A-Za-z0-9_][A-Za-z0-9._-]*$"},
    {IDENT_KSPEC, 128, "^[A-Za-z0-9_-][A-Za-z0-9._-]*$"},
    {IDENT_NAME, 255, "^[A-Za-z0-9_][A-Za-z0-9._-]*$"},
    {IDENT_PYNAME, 64, "^[A-Za-z_][A-Za-z0-9_]*$"},
    {IDENT_ENVNAME, 128, "^[A-Za-z0-9_]+$"},
    {IDENT_UUIDISH, 128, "^[A-Za-z0-9_]+-[A-Za-z0-9_]+-[A-Za-z0-9_]+-[A-Za-z0-9_]+-[A-Za-z0-9_]+$"},
    {IDENT_TOKEN, 100, "^[!-~]+$"},
    {IDENT_INSTANCE, 128, "^[A-Za-z0-9._:-]+$"},
    {IDENT_KNAME, 64, "^[A-Za-z0-9_][A-Za-z0-9._-]*$"},
};
#define NREFS (sizeof(refs) / sizeof(refs[0]))

static regex_t re[NREFS];

static void init_regex(void)
{
    static int done;
    if (done)
        return;
    FUZZ_CHECK(NREFS == IDENT_N);
    for (size_t i = 0; i < NREFS; i++)
        FUZZ_CHECK(regcomp(&re[i], refs[i].re, REG_EXTENDED | REG_NOSUB) == 0);
    done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_regex();
    char *s = malloc(size + 1);
    FUZZ_CHECK(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';
    bool has_nul = memchr(s, '\0', size) != NULL;
    for (size_t i = 0; i < NREFS; i++) {
        bool want = !has_nul && size <= refs[i].max && regexec(&re[i], s, 0, NULL, 0) == 0;
        FUZZ_CHECK(ident_max(refs[i].c) == refs[i].max);
        FUZZ_CHECK(ident_ok(s, size, refs[i].c) == want);
        /* the NUL-terminated form sees the bytes up to the first NUL */
        size_t len = strlen(s);
        FUZZ_CHECK(ident_str_ok(s, refs[i].c) == ident_ok(s, len, refs[i].c));
        /* length-delimited: bytes after n are never read as part of the name */
        if (size > 0)
            FUZZ_CHECK(ident_ok((const char *)data, size - 1, refs[i].c) ==
                       ident_ok(s, size - 1, refs[i].c));
    }
    FUZZ_CHECK(!ident_ok(s, size, IDENT_N));
    free(s);
    return 0;
}
