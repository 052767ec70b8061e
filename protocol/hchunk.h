/* A chunked request body (HTTP/1.1 Transfer-Encoding: chunked, RFC 9112
 * section 7.1), decoded as it arrives: libwebsockets 4.1 hands a server the
 * chunked bytes as they are (SDKs such as E2B's, on undici, send every JSON
 * body so). Untrusted bytes: bounded lines, sizes, trailers. Pure: no gateway
 * state. */
#ifndef KGW_PROTOCOL_HCHUNK_H
#define KGW_PROTOCOL_HCHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define HCHUNK_LINE_MAX    1024       /* bytes of a chunk-size line (extensions included) */
#define HCHUNK_TRAILER_MAX (8 * 1024) /* bytes of the trailer section */

struct hchunk {
    int state;
    uint64_t left;  /* data bytes left in the current chunk */
    size_t line;    /* bytes of the current line */
    size_t trailer; /* bytes of trailer seen */
    int digits;     /* hex digits of the size */
    int ext;        /* in the size line's extensions */
};

void hchunk_init(struct hchunk *c);
/* Decodes in (len bytes), appending the data to out. 1 when the body ended
 * (*ret_used: the bytes of in that belonged to it), 0 when more is needed,
 * -EINVAL for bad framing, or buf_append's error (out's limit: the body is too
 * large). */
int hchunk_feed(struct hchunk *c, const uint8_t *in, size_t len, buf_t *out, size_t *ret_used);

#endif
