/* A FIFO of pointers in a ring that doubles when full. The entries are the caller's: ring_fini
 * frees only the ring, so drain it first (ring_pop) to release what it holds. A zeroed
 * ring_t is an empty ring. */
#ifndef KGW_COMMON_RING_H
#define KGW_COMMON_RING_H

#include <stddef.h>

typedef struct ring {
    void **v;
    size_t head, len, cap;
} ring_t;

void ring_fini(ring_t *r);
/* Appends p: 0, or -ENOMEM (the ring is unchanged). */
int ring_push(ring_t *r, void *p);
/* The oldest entry, NULL when empty: ring_peek leaves it in the ring, ring_pop takes it out. */
void *ring_peek(const ring_t *r);
void *ring_pop(ring_t *r);

#endif
