/* sbxcmd_parse (what kgw-sandbox-init reads from the gateway) on arbitrary bytes. Invariants:
 * what it accepts has its strings inside the buffer, NUL-terminated, within the limits; a
 * request sbxcmd_encode_spawn makes of them parses to the same strings. */
#include <string.h>

#include "fuzz.h"

#include "sandbox/sbxcmd.h"

static char *vec[2 * SBXCMD_STR_MAX + 2], *vec2[2 * SBXCMD_STR_MAX + 2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > SBXCMD_MSG_MAX)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    struct sbxcmd_req q;
    if (sbxcmd_parse(buf, size, vec, sizeof(vec) / sizeof(vec[0]), &q) == 0) {
        FUZZ_CHECK(q.h.magic == SBXCMD_MAGIC);
        if (q.h.op == SBXCMD_SPAWN) {
            FUZZ_CHECK(q.cwd[0] == '/' && q.argv[0] && q.argv[0][0]);
            size_t na = 0, ne = 0;
            for (; q.argv[na]; na++)
                FUZZ_CHECK(q.argv[na] >= buf && q.argv[na] < buf + size);
            for (; q.env[ne]; ne++)
                FUZZ_CHECK(q.env[ne] >= buf && q.env[ne] < buf + size);
            FUZZ_CHECK(na == q.h.nargv && ne == q.h.nenv);
            char *m = NULL;
            size_t len = 0;
            FUZZ_CHECK(sbxcmd_encode_spawn(q.h.id, q.h.flags, q.cwd, (const char *const *)q.argv,
                                           (const char *const *)q.env, &m, &len) == 0);
            FUZZ_CHECK(len == size && !memcmp(m, data, size));
            struct sbxcmd_req q2;
            char *m2 = realloc(m, len + 1);
            FUZZ_CHECK(m2 && sbxcmd_parse(m2, len, vec2, sizeof(vec2) / sizeof(vec2[0]), &q2) == 0);
            free(m2);
        } else {
            FUZZ_CHECK(q.h.op == SBXCMD_SIGNAL && q.h.sig >= 1 && q.h.sig <= 64);
        }
    }
    free(buf);
    return 0;
}
