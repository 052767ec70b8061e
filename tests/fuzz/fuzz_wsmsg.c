/* wsmsg_decode on untrusted websocket frames. Input: byte 0 picks the encoding (bit 0: v1,
 * bit 1: binary frame), the rest is the frame. A frame that decodes must survive
 * encode -> decode unchanged in its own encoding, and in the other one where that is defined. */
#include "fuzz.h"
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/blob.h"
#include "protocol/jmsg.h"
#include "protocol/wsmsg.h"



static int span_eq(jspan_t a, jspan_t b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

static int inside(jspan_t s, const char *base, size_t len)
{
    return s.p >= base && s.n <= len && (size_t)(s.p - base) <= len - s.n;
}

/* JSON value equality (legacy decoding re-serialises the parts). */
static int json_span_eq(jspan_t a, jspan_t b)
{
    json_error_t err;
    json_t *x = json_loadb(a.p, a.n, 0, &err), *y = json_loadb(b.p, b.n, 0, &err);
    int eq = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

static void check_decoded(const wsmsg_t *w, const char *frame, size_t len)
{
    FUZZ_CHECK((unsigned)w->chan < JCHAN_N);
    FUZZ_CHECK(w->m.nbuf <= JMSG_MAX_BUFFERS);
    FUZZ_CHECK(w->hdr.msg_id[0] && memchr(w->hdr.msg_id, '\0', sizeof(w->hdr.msg_id)));
    FUZZ_CHECK(w->hdr.msg_type[0] && memchr(w->hdr.msg_type, '\0', sizeof(w->hdr.msg_type)));
    for (size_t i = 0; i < w->m.nbuf; i++)
        FUZZ_CHECK(inside(w->m.buf[i], frame, len));
    for (int i = 0; i < 4; i++) {
        if (w->owned)
            FUZZ_CHECK(w->m.part[i].p >= w->owned);
        else
            FUZZ_CHECK(inside(w->m.part[i], frame, len));
    }
    /* the header is what the gateway routes on: it must parse to the same fields again */
    jhdr_t h;
    FUZZ_CHECK(jhdr_parse(w->m.part[JPART_HEADER], &h) == 0);
    FUZZ_CHECK(strcmp(h.msg_id, w->hdr.msg_id) == 0);
    FUZZ_CHECK(strcmp(h.msg_type, w->hdr.msg_type) == 0);
}

/* Encodes w in `to`, decodes it again and compares. exact: parts must be byte-identical. */
static void round_trip(const wsmsg_t *w, enum wsproto to, int exact)
{
    blob_t *b = wsmsg_encode(to, w->chan, &w->m, &w->hdr, 16);
    FUZZ_CHECK(b != NULL);
    FUZZ_CHECK(b->data == b->mem + 16 && b->data[b->len] == '\0');
    int binary = (b->flags & BLOB_BINARY) != 0;
    FUZZ_CHECK(binary == (to == WSPROTO_V1 || w->m.nbuf > 0));

    wsmsg_t w2;
    int r = wsmsg_decode(to, binary, (const char *)b->data, b->len, &w2);
    FUZZ_CHECK(r == 0);
    check_decoded(&w2, (const char *)b->data, b->len);
    FUZZ_CHECK(w2.chan == w->chan);
    FUZZ_CHECK(strcmp(w2.hdr.msg_id, w->hdr.msg_id) == 0);
    FUZZ_CHECK(strcmp(w2.hdr.msg_type, w->hdr.msg_type) == 0);
    FUZZ_CHECK(w2.m.nbuf == w->m.nbuf);
    for (size_t i = 0; i < w->m.nbuf; i++)
        FUZZ_CHECK(span_eq(w2.m.buf[i], w->m.buf[i]));
    for (int i = 0; i < 4; i++)
        FUZZ_CHECK(exact ? span_eq(w2.m.part[i], w->m.part[i])
                         : json_span_eq(w2.m.part[i], w->m.part[i]));
    wsmsg_fini(&w2);
    blob_unref(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum wsproto proto = (data[0] & 1) ? WSPROTO_V1 : WSPROTO_LEGACY;
    int binary = (data[0] & 2) != 0;
    const char *frame = (const char *)data + 1;
    size_t len = size - 1;

    wsmsg_t w;
    int r = wsmsg_decode(proto, binary, frame, len, &w);
    FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOENT || r == -ENOMEM);
    if (r < 0) {
        FUZZ_CHECK(w.owned == NULL);
        return 0;
    }
    check_decoded(&w, frame, len);

    /* Same encoding: legacy parts are already jansson's compact form and v1 parts are
     * verbatim, so both must come back byte for byte. */
    round_trip(&w, proto, 1);
    if (proto == WSPROTO_LEGACY) {
        /* legacy parts are JSON objects: v1 carries them verbatim */
        round_trip(&w, WSPROTO_V1, 1);
    } else {
        /* v1 passes non-header parts through unchecked; the legacy encoding is defined only
         * when they are objects (the gateway checks this before encoding, see wschan.c).
         * Parts are capped so that neither jansson's nesting limit (one level deeper inside
         * the legacy document) nor JMSG_MAX_HEADER (compact re-serialisation can be longer:
         * "1e5" -> "100000.0") is what decides the outcome. */
        int objects = 1;
        for (int i = 0; i < 4; i++)
            objects = objects && w.m.part[i].n <= 2048 && jmsg_is_json_object(w.m.part[i]);
        if (objects)
            round_trip(&w, WSPROTO_LEGACY, 0);
    }
    wsmsg_fini(&w);
    return 0;
}
