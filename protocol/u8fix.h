/* A byte stream (a command's stdout or stderr) as valid UTF-8 text, chunk by chunk, for JSON
 * strings: valid sequences as they are, each byte that starts no valid sequence as U+FFFD, a
 * sequence cut at the end of a chunk carried to the next one. Pure; fuzzed
 * (tests/fuzz/fuzz_u8fix.c). */
#ifndef KGW_PROTOCOL_U8FIX_H
#define KGW_PROTOCOL_U8FIX_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

struct u8fix {
    unsigned char carry[4]; /* the start of a sequence the last chunk ended in */
    size_t ncarry;
};

/* Appends to out the text of what st carried and in's n bytes; final: nothing follows (a
 * carried start becomes U+FFFD). At most 3 bytes per input byte. 0 or buf_append's error. */
int u8fix_feed(struct u8fix *st, const char *in, size_t n, bool final, buf_t *out);

#endif
