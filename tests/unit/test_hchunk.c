/* protocol/hchunk.c: chunked request bodies decoded as they come, in any pieces. */
#include <errno.h>
#include <string.h>

#include "check.h"

#include "protocol/hchunk.h"

/* Decodes in, fed step bytes at a time: the result, the data in out (NUL-terminated). */
static int decode(const char *in, size_t step, char *out, size_t outsz, size_t *used)
{
    struct hchunk c;
    buf_t b;
    size_t len = strlen(in), off = 0;
    int rc = 0;
    hchunk_init(&c);
    buf_init(&b, 64);
    *used = 0;
    while (off < len && rc == 0) {
        size_t n = len - off < step ? len - off : step, u = 0;
        rc = hchunk_feed(&c, (const uint8_t *)in + off, n, &b, &u);
        off += u;
    }
    *used = off;
    snprintf(out, outsz, "%.*s", (int)b.len, b.data ? b.data : "");
    buf_fini(&b);
    return rc;
}

int main(void)
{
    char out[128];
    size_t used;
    static const char sdk[] = "24\r\n{\"templateID\":\"code-interpreter-v1\"}\r\n0\r\n\r\n";
    for (size_t step = 1; step <= sizeof(sdk); step++) {
        CHECK(decode(sdk, step, out, sizeof(out), &used) == 1);
        CHECK(strcmp(out, "{\"templateID\":\"code-interpreter-v1\"}") == 0);
        CHECK(used == strlen(sdk));
    }
    /* extensions, several chunks, trailers; bytes after the end are not taken */
    CHECK(decode("3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\nGET /", 1000, out,
                 sizeof(out), &used) == 1);
    CHECK(strcmp(out, "abc0123456789") == 0);
    CHECK(used == strlen("3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\n"));
    /* incomplete */
    CHECK(decode("5\r\nab", 1000, out, sizeof(out), &used) == 0);
    /* malformed */
    CHECK(decode("x\r\n", 1000, out, sizeof(out), &used) == -EINVAL);
    CHECK(decode("\r\n", 1000, out, sizeof(out), &used) == -EINVAL);
    CHECK(decode("3\r\nabcX", 1000, out, sizeof(out), &used) == -EINVAL);
    CHECK(decode("3\nabc", 1000, out, sizeof(out), &used) == -EINVAL);
    CHECK(decode("1000000000000000\r\n", 1000, out, sizeof(out), &used) == -EINVAL);
    /* over the output's limit (64) */
    CHECK(decode("41\r\n", 1000, out, sizeof(out), &used) == 0);
    CHECK(decode("41\r\n00000000000000000000000000000000000000000000000000000000000000000\r\n",
                 1000, out, sizeof(out), &used) < 0);
    /* an over-long size line */
    char line[HCHUNK_LINE_MAX + 8];
    memset(line, ' ', sizeof(line));
    line[0] = '1';
    line[1] = ';';
    line[sizeof(line) - 1] = '\0';
    CHECK(decode(line, 1000, out, sizeof(out), &used) == -EINVAL);
    CHECK_DONE();
}
