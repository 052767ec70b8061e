/* egreq_parse on bytes from code in a kernel (the egress proxy's request heads). Invariants:
 * the result does not depend on extra bytes after the head; a complete head lies within the
 * input and EGREQ_HEAD_MAX; a forwarded request's rewritten head fits its buffer, starts with
 * the method and an origin-form target and ends with the empty line; host and port are sane. */
#include "fuzz.h"
#include <errno.h>
#include <string.h>

#include "protocol/egreq.h"

static char out[EGREQ_OUT_MAX], out2[EGREQ_OUT_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct egreq r, r2;
    const char *why = NULL;
    int rc = egreq_parse((const char *)data, size, &r, out, &why);
    FUZZ_CHECK(rc == 0 || rc == 1 || rc == -EMSGSIZE || rc == -EINVAL || rc == -ENOTSUP);
    FUZZ_CHECK(rc >= 0 || why != NULL);
    if (rc == 0)
        FUZZ_CHECK(size < EGREQ_HEAD_MAX);
    if (rc != 1)
        return 0;
    FUZZ_CHECK(r.head_len <= size && r.head_len <= EGREQ_HEAD_MAX);
    FUZZ_CHECK(r.port >= 1 && r.port <= 65535);
    FUZZ_CHECK(r.host[0] && strlen(r.host) <= EGREQ_HOST_MAX);
    if (!r.connect) {
        FUZZ_CHECK(r.out_len <= EGREQ_OUT_MAX && r.out_len >= 4);
        FUZZ_CHECK(!memcmp(out + r.out_len - 4, "\r\n\r\n", 4));
        const char *sp = memchr(out, ' ', r.out_len);
        FUZZ_CHECK(sp && sp[1] == '/');
    }
    /* the head alone parses the same */
    FUZZ_CHECK(egreq_parse((const char *)data, r.head_len, &r2, out2, NULL) == 1);
    FUZZ_CHECK(r2.head_len == r.head_len && r2.port == r.port && !strcmp(r2.host, r.host));
    FUZZ_CHECK(r.connect || (r2.out_len == r.out_len && !memcmp(out, out2, r.out_len)));
    return 0;
}
