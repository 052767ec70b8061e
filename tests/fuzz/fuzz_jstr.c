/* jstr_scan/jstr_decode and xevent_stream_scan/_write on arbitrary bytes, against jansson (the
 * first byte picks what the rest is). Invariants: a literal jstr accepts is a string to
 * jansson with the same text, and a literal jansson takes is accepted; a stream content the
 * scan takes gives an event (no raw CR/LF: one SSE data line) equal to the jansson path's. */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"

#include "protocol/jstr.h"
#include "protocol/xevent.h"

static void literal(const char *p, size_t n)
{
    size_t len = 0, tlen = 0, on = 0;
    char *out = malloc(n ? n : 1);
    int scanned = jstr_scan(p, n, &len, &tlen), decoded = out ? jstr_decode(p, n, out, &on) : -1;
    FUZZ_CHECK(scanned != 0 || (len >= 2 && len <= n && p[len - 1] == '"'));
    FUZZ_CHECK((decoded == 0) == (scanned == 0 && len == n));
    json_t *v = json_loadb(p, n, JSON_DECODE_ANY, NULL);
    if (decoded == 0) {
        FUZZ_CHECK(on <= n && on == tlen);
        FUZZ_CHECK(json_is_string(v) && json_string_length(v) == on &&
                   !memcmp(json_string_value(v), out, on));
    }
    if (json_is_string(v) && n >= 2 && p[0] == '"' && p[n - 1] == '"')
        FUZZ_CHECK(decoded == 0); /* (jansson takes whitespace around it; jstr does not) */
    json_decref(v);
    free(out);
}

static void stream(const char *p, size_t n)
{
    jspan_t name, text;
    size_t tlen;
    if (xevent_stream_scan((jspan_t){p, n}, &name, &text, &tlen) < 0)
        return;
    FUZZ_CHECK(name.p >= p && name.p + name.n <= p + n && text.p >= p && text.p + text.n <= p + n);
    char *out = malloc(name.n + text.n + XEVENT_STREAM_OVERHEAD);
    size_t noff, toff, len = xevent_stream_write(out, 42, name, text, &noff, &toff);
    FUZZ_CHECK(len == strlen(out) && !memchr(out, '\n', len) && !memchr(out, '\r', len));
    FUZZ_CHECK(!memcmp(out + noff, name.p, name.n) && !memcmp(out + toff, text.p, text.n));
    json_t *fast = json_loadb(out, len, 0, NULL), *c = json_loadb(p, n, 0, NULL);
    const char *t = NULL;
    json_t *slow = xevent_from_iopub("stream", c, &t);
    FUZZ_CHECK(fast && slow);
    FUZZ_CHECK(json_integer_value(json_object_get(fast, "seq")) == 42);
    json_object_del(fast, "seq");
    FUZZ_CHECK(json_equal(fast, slow));
    FUZZ_CHECK(tlen == json_string_length(json_object_get(slow, "text")));
    json_decref(fast);
    json_decref(slow);
    json_decref(c);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t n = size - 1;
    char *p = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    if (!p)
        return 0;
    memcpy(p, data + 1, n);
    if (data[0] & 1)
        stream(p, n);
    else
        literal(p, n);
    free(p);
    return 0;
}
