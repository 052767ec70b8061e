/* Growable byte buffer with a hard size limit (for bytes arriving from peers). */
#ifndef KGW_COMMON_BUF_H
#define KGW_COMMON_BUF_H

#include <stddef.h>

typedef struct buf {
    char *data;
    size_t len, cap, max;
} buf_t;

void buf_init(buf_t *b, size_t max);
void buf_fini(buf_t *b);
/* Appends; returns 0, -EMSGSIZE past the limit, or -ENOMEM. Keeps data NUL-terminated. */
int buf_append(buf_t *b, const void *p, size_t n);
void buf_reset(buf_t *b);

#endif
