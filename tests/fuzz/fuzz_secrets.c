/* secrets_parse_line on arbitrary lines (an operator's --secrets-file). Invariants: an entry
 * has a valid tenant and secret name, at least one host and none that is "*", a value of
 * printable ASCII without a placeholder in it, copied exactly; the error text is
 * NUL-terminated and never holds the value; nothing is read past len. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#include "common/ident.h"
#include "common/secrets.h"
#include "common/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct secrets_entry e;
    char err[200];
    char *line = malloc(size ? size : 1); /* exact size: ASan sees any overread */
    if (!line)
        return 0;
    memcpy(line, data, size);
    memset(err, 0x5a, sizeof(err));
    int r = secrets_parse_line(line, size, &e, err, sizeof(err));
    FUZZ_CHECK(r == 1 || r == 0 || r == -EINVAL || r == -ENOMEM);
    if (r == 1) {
        FUZZ_CHECK(ident_str_ok(e.tenant, IDENT_TENANT));
        FUZZ_CHECK(secrets_name_ok(e.name, strlen(e.name)));
        FUZZ_CHECK(e.hosts && e.hosts->n >= 1);
        for (size_t i = 0; i < e.hosts->n; i++)
            FUZZ_CHECK(!e.hosts->v[i].any);
        FUZZ_CHECK(e.vlen >= 1 && e.vlen <= SECRETS_VALUE_MAX && strlen(e.value) == e.vlen);
        FUZZ_CHECK(util_printable(e.value, e.vlen));
        FUZZ_CHECK(!strstr(e.value, SECRETS_PH_PREFIX));
        FUZZ_CHECK(memmem(line, size, e.value, e.vlen) != NULL);
        secrets_t t = {.v = &e, .n = 1};
        FUZZ_CHECK(secrets_find(&t, e.tenant, e.name) == &e);
        secrets_entry_fini(&e);
    } else if (r == -EINVAL) {
        FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
    }
    free(line);
    return 0;
}
