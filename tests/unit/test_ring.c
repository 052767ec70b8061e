/* common/ring.h: first in, first out across the growths of the ring, wherever its head is. */
#include <stdint.h>

#include "check.h"

#include "common/ring.h"

#define P(i) ((void *)(uintptr_t)(i))

int main(void)
{
    ring_t r = {0};

    CHECK_CASE("empty");
    CHECK(ring_peek(&r) == NULL);
    CHECK(ring_pop(&r) == NULL);
    ring_fini(&r);

    CHECK_CASE("the order holds while the ring grows with its head in the middle");
    uintptr_t next_in = 1, next_out = 1;
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 7; i++)
            CHECK_INT(ring_push(&r, P(next_in++)), 0);
        for (int i = 0; i < 4; i++) {
            CHECK(ring_peek(&r) == P(next_out));
            CHECK(ring_pop(&r) == P(next_out));
            next_out++;
        }
    }
    CHECK_INT(r.len, next_in - next_out);
    CHECK(r.cap >= r.len && r.cap % 16 == 0);
    while (r.len) {
        CHECK(ring_pop(&r) == P(next_out));
        next_out++;
    }
    CHECK_INT(next_out, next_in);
    CHECK(ring_pop(&r) == NULL);

    CHECK_CASE("fini leaves an empty ring that can be used again");
    ring_fini(&r);
    CHECK(r.v == NULL && r.len == 0 && r.cap == 0);
    CHECK_INT(ring_push(&r, P(42)), 0);
    CHECK(ring_pop(&r) == P(42));
    ring_fini(&r);
    CHECK_DONE();
}
