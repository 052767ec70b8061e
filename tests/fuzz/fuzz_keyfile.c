/* keyfile_parse_line on arbitrary lines. Invariants: an entry has a valid tenant name and a
 * recognised hash kind; the error text is NUL-terminated; nothing is read past len. */
#include "fuzz.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/ident.h"
#include "common/keyfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct keyfile_entry e;
    char err[160];
    char *line = malloc(size ? size : 1); /* exact size: ASan sees any overread */
    if (!line)
        return 0;
    memcpy(line, data, size);
    memset(err, 0x5a, sizeof(err));
    int r = keyfile_parse_line(line, size, &e, err, sizeof(err));
    FUZZ_CHECK(r == 1 || r == 0 || r == -EINVAL);
    if (r == 1) {
        FUZZ_CHECK(ident_str_ok(e.tenant, IDENT_TENANT));
        if (e.pw)
            FUZZ_CHECK(!strncmp(e.pwhash, "$argon2", 7) && memchr(e.pwhash, '\0',
                                                                 sizeof(e.pwhash)));
        /* a lookup against the entry never crashes (password hashes are not verified here:
         * that is libsodium's, and slow) */
        if (!e.pw) {
            keyfile_t kf = {.v = &e, .n = 1};
            FUZZ_CHECK(keyfile_lookup(&kf, line, size > KEYFILE_KEY_MAX ? 0 : size) == NULL ||
                       size > 0);
        }
    } else if (r < 0) {
        FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
    }
    free(line);
    return 0;
}
