#include "common/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf_t *b, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

void buf_fini(buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_reset(buf_t *b)
{
    b->len = 0;
    if (b->cap > 65536) { /* do not keep a large buffer for an idle connection */
        buf_fini(b);
    }
}

int buf_append(buf_t *b, const void *p, size_t n)
{
    if (n > b->max || b->len > b->max - n)
        return -EMSGSIZE;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}
