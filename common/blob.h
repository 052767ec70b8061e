/* Reference-counted immutable byte buffer with reserved headroom in front of the data (so a
 * websocket writer can put its frame header there). One encoded message is shared by every
 * connection it is queued on. */
#ifndef KGW_COMMON_BLOB_H
#define KGW_COMMON_BLOB_H

#include <stddef.h>

#include "common/obudget.h"

typedef struct blob {
    unsigned refs;
    unsigned flags; /* user bits, e.g. "binary frame" */
    obudget_share_t *share; /* charged with len while the blob lives (NULL: none) */
    size_t len;
    unsigned char *data; /* len bytes, headroom bytes before it are reserved */
    unsigned char mem[];
} blob_t;

/* Returns NULL with errno set. */
blob_t *blob_new(size_t headroom, size_t len);
blob_t *blob_ref(blob_t *b);
void blob_unref(blob_t **b);
/* Charges the blob's bytes to a kernel's output share until it is freed (once: a blob already
 * charged stays with its share). */
void blob_charge(blob_t *b, obudget_share_t *s);

#endif
