#include "common/ring.h"

#include <errno.h>
#include <stdlib.h>

#define RING_FIRST_CAP 16

void ring_fini(ring_t *r)
{
    free(r->v);
    *r = (ring_t){0};
}

int ring_push(ring_t *r, void *p)
{
    if (r->len == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : RING_FIRST_CAP;
        void **v = malloc(cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < r->len; i++)
            v[i] = r->v[(r->head + i) % r->cap];
        free(r->v);
        r->v = v;
        r->head = 0;
        r->cap = cap;
    }
    r->v[(r->head + r->len) % r->cap] = p;
    r->len++;
    return 0;
}

void *ring_peek(const ring_t *r)
{
    return r->len ? r->v[r->head] : NULL;
}

void *ring_pop(ring_t *r)
{
    if (r->len == 0)
        return NULL;
    void *p = r->v[r->head];
    r->v[r->head] = NULL;
    r->head = (r->head + 1) % r->cap;
    r->len--;
    return p;
}
