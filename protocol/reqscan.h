/* The request targets in what a client sends on an HTTP/1.1 connection (untrusted bytes),
 * found as they arrive and marked where they cannot be decoded.
 *
 * libwebsockets percent-decodes a request's path and query as it parses them, and it drops the
 * connection without an answer when one decodes to a NUL (except right after a '/'), or answers
 * a bare 403 and closes on a '%' not followed by two hex digits. Before it sees them, such
 * escapes (and raw NULs) in a request target get their first byte replaced by DEL (0x7f), a
 * byte lws keeps as it is and the gateway refuses with 400 (a DEL is never valid in a URI), so
 * the client gets an answer and the connection stays usable.
 *
 * The scanner follows HTTP/1.1 framing to know where request targets are: request line, header
 * lines (Content-Length, Transfer-Encoding, Upgrade), then a body of that length, then the next
 * request. After a request that asks for an upgrade, or on anything it cannot follow, it stops
 * looking (passes bytes unchanged) for the rest of the connection. It never changes the number
 * of bytes, only '%' or NUL bytes inside request targets.
 *
 * It also tells where a request begins before the previous one was answered (pipelining):
 * libwebsockets 4.1 parses such a request over the one in flight, loses the first answer, and
 * on a request with a body spins without end. The caller keeps those bytes from lws. */
#ifndef KGW_PROTOCOL_REQSCAN_H
#define KGW_PROTOCOL_REQSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REQSCAN_MARK 0x7f /* what an undecodable escape's '%' (or a NUL) becomes */

typedef struct reqscan {
    uint8_t state;
    uint8_t field;       /* header being read: none, content-length, transfer-encoding... */
    uint8_t name_len;    /* bytes of the method or header name so far */
    bool body_method;    /* POST, PUT or PATCH */
    bool chunked;        /* a Transfer-Encoding */
    bool upgrade, has_length;
    bool busy;           /* a request began and is not answered yet */
    bool blocked;        /* the next request began while busy */
    char name[20];       /* method, or header name lowercased, while it may be one we read */
    uint64_t length;     /* Content-Length, or the current chunk's size */
    uint64_t remain;     /* body or chunk bytes still to pass */
    uint32_t line_len;   /* bytes of the current line (method, header, chunk line) */
} reqscan_t;

/* A new connection: the next bytes are a request line. */
void reqscan_init(reqscan_t *s);

/* Scans len bytes, rewriting undecodable escapes in request targets in place. Returns how many
 * leading bytes are settled and may be handed on. When reqscan_blocked(), the rest is a request
 * that began before the previous one was answered; else the rest (at most 2 bytes) ends in an
 * escape that the next bytes decide: present them again, followed by the next bytes. At the
 * end of the stream (eof), every byte is settled unless blocked. */
size_t reqscan_feed(reqscan_t *s, uint8_t *buf, size_t len, bool eof);

/* The request in flight has its answer: the next one may begin (a blocked one is presented
 * again). */
void reqscan_answered(reqscan_t *s);

/* True when a request began before the previous one was answered (until reqscan_answered). */
bool reqscan_blocked(const reqscan_t *s);

/* Stops looking: every later byte passes unchanged. */
void reqscan_stop(reqscan_t *s);

/* True once the scanner has stopped looking (an upgrade, or bytes it could not follow). */
bool reqscan_done(const reqscan_t *s);

#endif
