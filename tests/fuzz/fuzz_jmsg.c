/* Jupyter messages from ZeroMQ (a hostile kernel): jmsg_parse_frames, jhdr_parse, jsign_verify,
 * jmsg_parts_ok, and what a client then receives.
 * Input: byte 0 bit 0 picks the key ("fuzz-key", else unsigned); bits 1-3 equal to 001 pad
 * parent_header, metadata and content with JMSG_FULL_CHECK_MAX spaces (so jmsg_parts_ok takes
 * its shape-only path; one input in eight, as it is slow); then frames, each a uint16 LE length and
 * that many bytes (0xffff: the rest of the input; a short last frame is truncated). Every frame
 * gets its own allocation of its exact size, as ZeroMQ frames do. */
#include "fuzz.h"
#include <endian.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/jmsg.h"
#include "protocol/jsign.h"
#include "protocol/wsmsg.h"



#define FUZZ_KEY   "fuzz-key"
#define MAX_FRAMES (JMSG_MAX_IDS + 1 + 5 + JMSG_MAX_BUFFERS + 8)

static int span_same(jspan_t a, jspan_t b)
{
    return a.p == b.p && a.n == b.n;
}

static int is_delim(jspan_t f)
{
    return f.n == sizeof(JMSG_DELIM) - 1 && memcmp(f.p, JMSG_DELIM, f.n) == 0;
}

/* What jmsg_parse_frames must answer, written the obvious way. */
static int reference_parse(const jspan_t *f, size_t n, size_t *ret_delim)
{
    size_t d = 0;
    while (d < n && !is_delim(f[d]))
        d++;
    if (d == n || d > JMSG_MAX_IDS)
        return -EBADMSG;
    size_t after = n - d - 1; /* sig + 4 parts + buffers */
    if (after < 5 || after - 5 > JMSG_MAX_BUFFERS)
        return -EBADMSG;
    if (f[d + 2].n > JMSG_MAX_HEADER)
        return -EBADMSG;
    *ret_delim = d;
    return 0;
}

static void check_hdr(jspan_t s)
{
    jhdr_t h;
    int r = jhdr_parse(s, &h);
    FUZZ_CHECK(r == 0 || r == -EBADMSG);
    if (r == 0) {
        size_t a = strnlen(h.msg_id, sizeof(h.msg_id));
        size_t b = strnlen(h.msg_type, sizeof(h.msg_type));
        FUZZ_CHECK(a > 0 && a < sizeof(h.msg_id));
        FUZZ_CHECK(b > 0 && b < sizeof(h.msg_type));
        FUZZ_CHECK(s.n <= JMSG_MAX_HEADER);
        FUZZ_CHECK(jmsg_is_json_object(s));
    }
}

static void check_sign(jsign_t *s, int keyed, const jmsg_t *m)
{
    char sig[JSIGN_HEX_LEN + 1];
    bool ok = jsign_verify(s, m->part, m->sig);
    if (!keyed)
        FUZZ_CHECK(ok);
    FUZZ_CHECK(jsign_compute(s, m->part, sig) == 0);
    if (!keyed) {
        FUZZ_CHECK(sig[0] == '\0');
        return;
    }
    FUZZ_CHECK(strlen(sig) == JSIGN_HEX_LEN);
    FUZZ_CHECK(strspn(sig, "0123456789abcdef") == JSIGN_HEX_LEN);
    /* the received signature verifies exactly when it equals the computed one */
    FUZZ_CHECK(ok == (m->sig.n == JSIGN_HEX_LEN && memcmp(m->sig.p, sig, JSIGN_HEX_LEN) == 0));
    FUZZ_CHECK(jsign_verify(s, m->part, (jspan_t){sig, JSIGN_HEX_LEN}));
    sig[m->sig.n % JSIGN_HEX_LEN] ^= 1;
    FUZZ_CHECK(!jsign_verify(s, m->part, (jspan_t){sig, JSIGN_HEX_LEN}));
}

static int str_is(json_t *o, const char *key, const char *want)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v && strcmp(v, want) == 0;
}

/* A message the gateway accepts (header parses, jmsg_parts_ok) goes to legacy clients as one
 * JSON document with the kernel's parts spliced in. Whatever the parts hold, that document must
 * not show a client another channel, msg_id or msg_type than the gateway's; when every part was
 * fully checked (and is small enough that nesting one level deeper stays within jansson's
 * limit) it must also parse. */
static void check_client_view(const jmsg_t *m, const jhdr_t *h)
{
    int small = 1;
    for (int i = 0; i < 4; i++)
        small = small && m->part[i].n <= 2048;
    blob_t *b = wsmsg_encode(WSPROTO_LEGACY, JCHAN_IOPUB, m, h, 0);
    FUZZ_CHECK(b != NULL);
    const char *doc = (const char *)b->data;
    size_t len = b->len;
    FUZZ_CHECK(!(b->flags & BLOB_BINARY) == (m->nbuf == 0));
    if (b->flags & BLOB_BINARY) { /* the JSON is slice 0 */
        uint32_t o0, o1;
        memcpy(&o0, doc + 4, 4);
        memcpy(&o1, doc + 8, 4);
        o0 = be32toh(o0);
        o1 = be32toh(o1);
        FUZZ_CHECK(o0 == 4 * (m->nbuf + 2) && o0 <= o1 && o1 <= len);
        doc += o0;
        len = o1 - o0;
    }
    json_error_t err;
    json_t *j = json_loadb(doc, len, 0, &err);
    if (small)
        FUZZ_CHECK(json_is_object(j));
    if (j) {
        FUZZ_CHECK(json_is_object(j));
        FUZZ_CHECK(str_is(j, "channel", "iopub"));
        FUZZ_CHECK(str_is(j, "msg_id", h->msg_id));
        FUZZ_CHECK(str_is(j, "msg_type", h->msg_type));
    }
    json_decref(j);
    /* and our own decoder (what a client would parse) agrees */
    wsmsg_t w;
    int r = wsmsg_decode(WSPROTO_LEGACY, (b->flags & BLOB_BINARY) != 0, (const char *)b->data,
                         b->len, &w);
    if (small)
        FUZZ_CHECK(r == 0);
    if (r == 0) {
        FUZZ_CHECK(w.chan == JCHAN_IOPUB && w.m.nbuf == m->nbuf);
        wsmsg_fini(&w);
    }
    blob_unref(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static jsign_t *signer[2];
    jspan_t f[MAX_FRAMES];
    size_t n = 0;

    if (size < 1)
        return 0;
    int keyed = data[0] & 1;
    int padded = (data[0] & 0x0e) == 0x02;
    if (!signer[keyed]) {
        signer[keyed] = keyed ? jsign_new(FUZZ_KEY, strlen(FUZZ_KEY)) : jsign_new("", 0);
        FUZZ_CHECK(signer[keyed] != NULL);
    }
    size_t o = 1;
    while (o < size && n < MAX_FRAMES) {
        size_t len = o + 1 < size ? (size_t)data[o] | (size_t)data[o + 1] << 8 : size - o;
        o += 2;
        if (o > size)
            o = size;
        if (len == 0xffff || len > size - o)
            len = size - o;
        char *p = malloc(len ? len : 1);
        FUZZ_CHECK(p != NULL);
        memcpy(p, data + o, len);
        f[n++] = (jspan_t){p, len};
        o += len;
    }

    size_t d = 0;
    if (padded && reference_parse(f, n, &d) == 0) {
        for (size_t i = d + 3; i < d + 6; i++) {
            char *p = realloc((void *)f[i].p, f[i].n + JMSG_FULL_CHECK_MAX);
            FUZZ_CHECK(p != NULL);
            memset(p + f[i].n, ' ', JMSG_FULL_CHECK_MAX);
            f[i] = (jspan_t){p, f[i].n + JMSG_FULL_CHECK_MAX};
        }
    }
    jmsg_t m;
    int want = reference_parse(f, n, &d);
    int r = jmsg_parse_frames(f, n, &m);
    FUZZ_CHECK(r == want);
    if (r == 0) {
        FUZZ_CHECK(span_same(m.sig, f[d + 1]));
        for (int i = 0; i < 4; i++)
            FUZZ_CHECK(span_same(m.part[i], f[d + 2 + i]));
        FUZZ_CHECK(m.nbuf == n - d - 6);
        for (size_t i = 0; i < m.nbuf; i++)
            FUZZ_CHECK(span_same(m.buf[i], f[d + 6 + i]));
        check_hdr(m.part[JPART_HEADER]);
        check_sign(signer[keyed], keyed, &m);
        int objects = 1, full = 1;
        for (int i = 0; i < 4; i++) {
            objects = objects && jmsg_is_json_object(m.part[i]);
            full = full && m.part[i].n <= JMSG_FULL_CHECK_MAX;
        }
        bool ok = jmsg_parts_ok(&m);
        if (full)
            FUZZ_CHECK(ok == objects);
        else if (objects)
            FUZZ_CHECK(ok);
        jhdr_t h;
        if (ok && jhdr_parse(m.part[JPART_HEADER], &h) == 0)
            check_client_view(&m, &h);
    } else if (n > 0) {
        /* headers arrive in many shapes: parse each frame as one */
        for (size_t i = 0; i < n && i < 8; i++)
            check_hdr(f[i]);
    }
    for (size_t i = 0; i < n; i++)
        free((void *)f[i].p);
    return 0;
}
