/* common/list.h: insertion order, unlinking anywhere, moving, iteration that frees. */
#include <stdlib.h>

#include "check.h"

#include "common/list.h"

struct item {
    int v;
    struct list link;
};

/* The values on l, in order, as digits ("" when empty); checks the prev links too. */
static const char *values(struct list *l)
{
    static char b[32];
    size_t n = 0;
    struct item *it;
    list_for_each(it, l, link)
    {
        CHECK(it->link.next->prev == &it->link && it->link.prev->next == &it->link);
        if (n + 1 < sizeof(b))
            b[n++] = (char)('0' + it->v);
    }
    b[n] = '\0';
    return b;
}

static struct item *item(int v)
{
    struct item *it = calloc(1, sizeof(*it));
    it->v = v;
    list_init(&it->link);
    return it;
}

/* Lists held in two other types, drained in a loop with no call in it: the shape GCC 12
 * compiles into an endless loop under strict aliasing (see meson.build). */
struct holder {
    char name[16];
    struct list link;
    struct list items;
    int n;
};
struct owner {
    char name[16];
    struct list holders;
    struct list all;
};

static __attribute__((noinline)) size_t gather(struct owner *o)
{
    struct holder *h;
    size_t n = 0;
    list_for_each(h, &o->holders, link)
    {
        while (!list_empty(&h->items)) {
            struct item *it = list_first(&h->items, struct item, link);
            list_remove(&it->link);
            list_append(&o->all, &it->link);
        }
        h->n = 0;
        n++;
    }
    return n;
}

int main(void)
{
    struct list l, m;
    struct item *it, *tmp, *a = item(1), *b = item(2), *c = item(3), *d = item(4);

    CHECK_CASE("empty");
    list_init(&l);
    CHECK(list_empty(&l));
    CHECK_STR(values(&l), "");

    CHECK_CASE("prepend and append");
    list_prepend(&l, &a->link);
    list_prepend(&l, &b->link);
    list_append(&l, &c->link);
    CHECK(!list_empty(&l));
    CHECK_STR(values(&l), "213");
    CHECK(list_first(&l, struct item, link) == b);
    list_insert(&a->link, &d->link);
    CHECK_STR(values(&l), "2143");

    CHECK_CASE("remove first, middle, last");
    list_remove(&b->link);
    CHECK_STR(values(&l), "143");
    list_remove(&d->link);
    CHECK_STR(values(&l), "13");
    list_remove(&c->link);
    CHECK_STR(values(&l), "1");
    CHECK_CASE("remove twice is a no-op");
    list_remove(&c->link);
    CHECK_STR(values(&l), "1");
    list_remove(&a->link);
    CHECK(list_empty(&l));

    CHECK_CASE("move");
    list_move(&m, &l);
    CHECK(list_empty(&m) && list_empty(&l));
    list_append(&l, &a->link);
    list_append(&l, &b->link);
    list_append(&l, &c->link);
    list_move(&m, &l);
    CHECK(list_empty(&l));
    CHECK_STR(values(&m), "123");
    list_remove(&b->link);
    CHECK_STR(values(&m), "13");
    list_append(&m, &d->link);
    CHECK_STR(values(&m), "134");
    list_append(&l, &b->link);
    CHECK_STR(values(&l), "2");

    CHECK_CASE("for_each_safe frees as it goes");
    list_for_each_safe(it, tmp, &m, link)
    {
        list_remove(&it->link);
        free(it);
    }
    CHECK(list_empty(&m));
    list_for_each_safe(it, tmp, &l, link)
    {
        list_remove(&it->link);
        free(it);
    }
    CHECK(list_empty(&l));

    CHECK_CASE("a loop that empties lists it reaches through links ends");
    struct owner o;
    struct holder h1, h2;
    struct item its[3] = {{.v = 1}, {.v = 2}, {.v = 3}};
    list_init(&o.holders);
    list_init(&o.all);
    list_init(&h1.items);
    list_init(&h2.items);
    list_append(&o.holders, &h1.link);
    list_append(&o.holders, &h2.link);
    list_append(&h1.items, &its[0].link);
    list_append(&h2.items, &its[1].link);
    list_append(&h2.items, &its[2].link);
    CHECK(gather(&o) == 2);
    CHECK(list_empty(&h1.items) && list_empty(&h2.items));
    CHECK_STR(values(&o.all), "123");
    CHECK_DONE();
}
