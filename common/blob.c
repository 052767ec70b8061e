#include "common/blob.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

blob_t *blob_new(size_t headroom, size_t len)
{
    if (len > SIZE_MAX - headroom - sizeof(blob_t) - 1) {
        errno = ENOMEM;
        return NULL;
    }
    blob_t *b = malloc(sizeof(*b) + headroom + len + 1);
    if (!b)
        return NULL;
    b->refs = 1;
    b->flags = 0;
    b->share = NULL;
    b->len = len;
    b->data = b->mem + headroom;
    b->data[len] = '\0';
    return b;
}

blob_t *blob_ref(blob_t *b)
{
    b->refs++;
    return b;
}

void blob_unref(blob_t **pb)
{
    blob_t *b = *pb;
    if (!b)
        return;
    *pb = NULL;
    if (--b->refs > 0)
        return;
    if (b->share) {
        obudget_share_release(b->share, b->len);
        obudget_share_unref(&b->share);
    }
    free(b);
}

void blob_charge(blob_t *b, obudget_share_t *s)
{
    if (!s || b->share)
        return;
    b->share = obudget_share_ref(s);
    obudget_share_charge(s, b->len);
}
