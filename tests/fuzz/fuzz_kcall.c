/* The kernel callback stream (protocol/kcallmsg) on untrusted bytes from a kernel. The first
 * input byte picks how the rest is cut into reads; the rest is what the kernel sent.
 * Invariants: the decoder gives the same frames whatever the cuts (compared with one decoder
 * fed everything at once), uses at least one byte per call, never holds more than its limit;
 * a parsed request names an allowed callback and has a list and a dict, and its arguments
 * survive a reply's encoding unchanged; a refused request names ValueError, TypeError or
 * PermissionError with a printable message, which an error reply carries unchanged. */
#include "fuzz.h"
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ident.h"
#include "protocol/kcallmsg.h"

#define MAX_PAYLOAD 4096
#define MAX_EVENTS  4096

static const char *const allow[] = {"display_chart_to_user", "display_dataframe_to_user", "f",
                                    NULL};

struct ev {
    int type;
    size_t len;
    char *payload; /* FRAME */
};

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return 0;
    return 1;
}

static json_t *frame_json(const char *f, size_t n)
{
    FUZZ_CHECK(n >= KCALLMSG_HDR_BYTES);
    size_t len = (size_t)(unsigned char)f[0] << 24 | (size_t)(unsigned char)f[1] << 16 |
                 (size_t)(unsigned char)f[2] << 8 | (size_t)(unsigned char)f[3];
    FUZZ_CHECK(len + KCALLMSG_HDR_BYTES == n);
    json_t *j = json_loadb(f + KCALLMSG_HDR_BYTES, len, 0, NULL);
    FUZZ_CHECK(j != NULL);
    return j;
}

static void check_request(const char *p, size_t n)
{
    kcallmsg_req_t r;
    kcallmsg_err_t e = {.type = NULL};
    char *f;
    size_t fl;
    int rc = kcallmsg_parse(p, n, allow, &r, &e);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL);
    if (rc == 0) {
        int listed = 0;
        for (const char *const *a = allow; *a; a++)
            listed |= strcmp(*a, r.name) == 0;
        FUZZ_CHECK(listed && ident_str_ok(r.name, IDENT_PYNAME));
        FUZZ_CHECK(json_is_array(r.args) && json_is_object(r.kwargs));
        FUZZ_CHECK(strlen(r.parent) <= KCALLMSG_PARENT_MAX && printable(r.parent));
        /* what the hook would get travels back unchanged in a reply */
        json_t *v = json_pack("[O,O]", r.args, r.kwargs);
        FUZZ_CHECK(v != NULL);
        int er = kcallmsg_encode_value(json_incref(v), SIZE_MAX, &f, &fl);
        FUZZ_CHECK(er == 0);
        json_t *back = frame_json(f, fl);
        FUZZ_CHECK(json_equal(json_object_get(back, "value"), v));
        json_decref(back);
        json_decref(v);
        free(f);
        kcallmsg_req_fini(&r);
        FUZZ_CHECK(r.args == NULL && r.kwargs == NULL);
        return;
    }
    FUZZ_CHECK(e.type != NULL);
    FUZZ_CHECK(!strcmp(e.type, "ValueError") || !strcmp(e.type, "TypeError") ||
               !strcmp(e.type, "PermissionError"));
    FUZZ_CHECK(e.message[0] && printable(e.message));
    FUZZ_CHECK(kcallmsg_encode_error(e.type, e.message, &f, &fl) == 0);
    json_t *back = frame_json(f, fl);
    json_t *err = json_object_get(back, "error");
    FUZZ_CHECK(!strcmp(json_string_value(json_object_get(err, "type")), e.type));
    FUZZ_CHECK(!strcmp(json_string_value(json_object_get(err, "message")), e.message));
    json_decref(back);
    free(f);
}

/* Feeds data in reads of the given sizes (0: everything at once) and records the events. */
static size_t run(const uint8_t *data, size_t size, uint32_t seed, struct ev *out)
{
    kcallmsg_dec_t d;
    size_t nev = 0, off = 0;
    kcallmsg_dec_init(&d, MAX_PAYLOAD);
    while (off < size) {
        size_t chunk = size - off;
        if (seed) {
            seed = seed * 1103515245u + 12345u;
            size_t want = 1 + (seed >> 16) % 67;
            chunk = want < chunk ? want : chunk;
        }
        size_t pos = 0;
        while (pos < chunk) {
            size_t used = 0;
            int ev = kcallmsg_dec_feed(&d, data + off + pos, chunk - pos, &used);
            FUZZ_CHECK(ev >= 0);
            FUZZ_CHECK(used > 0 && used <= chunk - pos);
            FUZZ_CHECK(kcallmsg_dec_mem(&d) <= MAX_PAYLOAD);
            pos += used;
            if (ev == KCALLMSG_MORE) {
                FUZZ_CHECK(pos == chunk);
                continue;
            }
            FUZZ_CHECK(nev < MAX_EVENTS);
            out[nev].type = ev;
            out[nev].len = d.len;
            out[nev].payload = NULL;
            if (ev == KCALLMSG_FRAME) {
                const char *p;
                size_t n;
                kcallmsg_dec_payload(&d, &p, &n);
                FUZZ_CHECK(n == d.len && n <= MAX_PAYLOAD);
                FUZZ_CHECK(kcallmsg_dec_idle(&d));
                out[nev].payload = malloc(n ? n : 1);
                FUZZ_CHECK(out[nev].payload != NULL);
                memcpy(out[nev].payload, p, n);
            } else {
                FUZZ_CHECK(ev == KCALLMSG_OVERSIZE && d.len > MAX_PAYLOAD);
            }
            nev++;
        }
        off += chunk;
    }
    kcallmsg_dec_fini(&d);
    return nev;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ev a[MAX_EVENTS], b[MAX_EVENTS];
    if (size < 1 || size > 4 * MAX_EVENTS) /* at most one event per 4 bytes */
        return 0;
    uint32_t seed = data[0] | 1u;
    size_t na = run(data + 1, size - 1, 0, a);
    size_t nb = run(data + 1, size - 1, seed, b);
    FUZZ_CHECK(na == nb);
    for (size_t i = 0; i < na; i++) {
        FUZZ_CHECK(a[i].type == b[i].type && a[i].len == b[i].len);
        if (a[i].type == KCALLMSG_FRAME) {
            FUZZ_CHECK(memcmp(a[i].payload, b[i].payload, a[i].len) == 0);
            check_request(a[i].payload, a[i].len);
        }
        free(a[i].payload);
        free(b[i].payload);
    }

    /* the whole input as one payload, as if it had been framed */
    check_request((const char *)data, size);
    return 0;
}
