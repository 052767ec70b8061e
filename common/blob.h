/* Reference-counted immutable byte buffer with reserved headroom in front of the data (so a
 * websocket writer can put its frame header there). One encoded message is shared by every
 * connection it is queued on. */
#ifndef KGW_COMMON_BLOB_H
#define KGW_COMMON_BLOB_H

#include <stddef.h>

typedef struct blob {
    unsigned refs;
    unsigned flags; /* user bits, e.g. "binary frame" */
    size_t len;
    unsigned char *data; /* len bytes, headroom bytes before it are reserved */
    unsigned char mem[];
} blob_t;

/* Returns NULL with errno set. */
blob_t *blob_new(size_t headroom, size_t len);
blob_t *blob_ref(blob_t *b);
void blob_unref(blob_t **b);

#endif
