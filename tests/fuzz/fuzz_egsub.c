/* The egress proxy's secret placeholders in request heads from code in a kernel: a head read
 * inside TLS (egreq_parse_origin), then its placeholders replaced (egsub_apply) by a resolver
 * that refuses every other one. Invariants: a parsed head lies within the input and
 * EGREQ_HEAD_MAX and its rewrite ends with "Connection: close" and the empty line; the
 * substitution replaces exactly the placeholders the resolver was asked about, in order, and
 * nothing else; it stays within its limits. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"

#include "protocol/egreq.h"
#include "protocol/egsub.h"

static char out[EGREQ_OUT_MAX];
static const char VAL[] = "V4LUE";

struct ctx {
    int asked, allowed;
};

static int resolve(void *p, const char *ph, const char **val, size_t *vlen, const char **why)
{
    struct ctx *c = p;
    FUZZ_CHECK(!memcmp(ph, EGSUB_PREFIX, EGSUB_PREFIX_LEN));
    c->asked++;
    if (ph[EGSUB_PH_LEN - 1] == 'f') { /* a placeholder of another host: refused */
        *why = "refused";
        return -EPERM;
    }
    c->allowed++;
    *val = VAL;
    *vlen = sizeof(VAL) - 1;
    return 0;
}

static void check_sub(const char *in, size_t len)
{
    struct ctx c = {0, 0};
    char *res = NULL;
    size_t rlen = 0;
    const char *why = NULL;
    int r = egsub_apply(in, len, resolve, &c, &res, &rlen, &why);
    FUZZ_CHECK(r >= -EMSGSIZE || r == -EPERM || r == -ENOMEM);
    if (r < 0) {
        FUZZ_CHECK(why != NULL || r == -ENOMEM);
        FUZZ_CHECK(res == NULL);
        return;
    }
    FUZZ_CHECK(r == c.allowed && r == c.asked && r <= EGSUB_MAX);
    if (r == 0) {
        FUZZ_CHECK(res == NULL);
        return;
    }
    FUZZ_CHECK(rlen == len - (size_t)r * EGSUB_PH_LEN + (size_t)r * (sizeof(VAL) - 1));
    FUZZ_CHECK(rlen <= EGSUB_OUT_MAX);
    /* substituting again finds only what the values and the joins make: never more than
     * before plus nothing (the value has no placeholder) */
    struct ctx c2 = {0, 0};
    char *res2 = NULL;
    size_t rlen2 = 0;
    int r2 = egsub_apply(res, rlen, resolve, &c2, &res2, &rlen2, &why);
    FUZZ_CHECK(r2 <= 0 || r2 < r + 1 + r);
    free(res2);
    free(res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = NULL;
    size_t out_len = 0, head_len = 0;
    check_sub((const char *)data, size);
    int hr = egreq_host_check((const char *)data, size, "api.example.com", 443, 443);
    FUZZ_CHECK(hr == 0 || hr == -EPERM);
    int rc = egreq_parse_origin((const char *)data, size, out, &out_len, &head_len, &why);
    FUZZ_CHECK(rc == 0 || rc == 1 || rc == -EMSGSIZE || rc == -EINVAL || rc == -ENOTSUP);
    FUZZ_CHECK(rc >= 0 || why != NULL);
    if (rc != 1)
        return 0;
    FUZZ_CHECK(head_len <= size && head_len <= EGREQ_HEAD_MAX);
    FUZZ_CHECK(out_len <= EGREQ_OUT_MAX && out_len >= 21);
    FUZZ_CHECK(!memcmp(out + out_len - 21, "Connection: close\r\n\r\n", 21));
    FUZZ_CHECK(out[0] >= 'A' && out[0] <= 'Z');
    check_sub(out, out_len);
    hr = egreq_host_check(out, out_len, "::1", 8080, 80);
    FUZZ_CHECK(hr == 0 || hr == -EPERM);
    return 0;
}
