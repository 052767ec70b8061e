/* protocol/xreq.c on untrusted bytes: execute API bodies (both kinds), the since /
 * Last-Event-ID number and the Accept header. A parse either fails with a message and nothing
 * to free, or yields a request within its bounds; a sequence number is all digits and at most
 * INT64_MAX. */
#include "fuzz.h"
#include <errno.h>
#include <string.h>

#include "protocol/xreq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    char err[256];
    struct xreq x;
    for (int oneshot = 0; oneshot < 2; oneshot++) {
        err[0] = '\0';
        int rc = xreq_parse(s, size, oneshot, 4096, &x, err, sizeof(err));
        FUZZ_CHECK(rc == 0 || rc == -EINVAL);
        if (rc < 0) {
            FUZZ_CHECK(err[0] != '\0' && x.code == NULL && x.files == NULL);
            continue;
        }
        FUZZ_CHECK(x.code != NULL && x.timeout >= 0 && x.timeout <= XREQ_TIMEOUT_MAX);
        FUZZ_CHECK(x.nfiles <= XREQ_FILES_MAX && (oneshot || x.nfiles == 0));
        for (size_t i = 0; i < x.nfiles; i++)
            FUZZ_CHECK(x.files[i].len <= 4096 && x.files[i].path[0] != '/');
        xreq_fini(&x);
    }
    uint64_t v;
    if (xreq_since(s, size, &v) == 0) {
        FUZZ_CHECK(size > 0 && size <= XREQ_SINCE_MAX && v <= INT64_MAX);
        for (size_t i = 0; i < size; i++)
            FUZZ_CHECK(s[i] >= '0' && s[i] <= '9');
    }
    enum xreq_format f = xreq_accept(s, size);
    FUZZ_CHECK(f == XREQ_NDJSON || f == XREQ_SSE || f == XREQ_JSON);
    return 0;
}
