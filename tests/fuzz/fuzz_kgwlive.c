/* kckpt_live_parse on untrusted bytes (a kernel's <runtime dir>/.kgw-live): the answer agrees
 * with an independent reading (a copy, strspn over the digits and strtol) of the rule kckpt.h
 * documents. */
#include "fuzz.h"
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernelmgr/kckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long got = kckpt_live_parse((const char *)data, size);
    char buf[16];
    size_t n = size;
    if (n > 0 && data[n - 1] == '\n')
        n--;
    long want = -EINVAL;
    if (n >= 1 && n <= 7) {
        memcpy(buf, data, n);
        buf[n] = '\0';
        if (strspn(buf, "0123456789") == n) {
            long v = strtol(buf, NULL, 10);
            want = v <= 4194304 ? v : -EINVAL;
        }
    }
    FUZZ_CHECK(got == want);
    FUZZ_CHECK(got == -EINVAL || (got >= 0 && got <= 4194304));
    return 0;
}
