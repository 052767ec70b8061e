/* An intrusive doubly linked list, as libuv's QUEUE and PipeWire's spa_list: an object embeds a
 * `struct list` link and is on at most one list through it; a list is a `struct list` head whose
 * links form a ring. Unlinking is O(1) and needs no walk from the head.
 *
 *   struct item { int v; struct list link; };
 *   struct list items;  list_init(&items);
 *   list_prepend(&items, &it->link);
 *   list_for_each_safe(it, tmp, &items, link) if (...) { list_remove(&it->link); free(it); }
 *
 * A head must be list_init()ed before use (a zeroed one is not an empty list). The project is
 * built with -fno-strict-aliasing (meson.build): without it, GCC may assume a store through a
 * link never changes the head it is reached from. */
#ifndef KGW_COMMON_LIST_H
#define KGW_COMMON_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list {
    struct list *next, *prev;
};

/* An empty list; also makes a link "on no list" (list_remove on it is a no-op). */
static inline void list_init(struct list *l)
{
    l->next = l->prev = l;
}

static inline bool list_empty(const struct list *l)
{
    return l->next == l;
}

/* Puts e right after pos (a head or a link on the list). */
static inline void list_insert(struct list *pos, struct list *e)
{
    e->prev = pos;
    e->next = pos->next;
    pos->next->prev = e;
    pos->next = e;
}

/* Puts e first. */
static inline void list_prepend(struct list *head, struct list *e)
{
    list_insert(head, e);
}

/* Puts e last. */
static inline void list_append(struct list *head, struct list *e)
{
    list_insert(head->prev, e);
}

/* Takes e off its list; e is left on no list (list_remove again is a no-op). */
static inline void list_remove(struct list *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    list_init(e);
}

/* Moves every link of from to the empty list to, in order; from is left empty. */
static inline void list_move(struct list *to, struct list *from)
{
    if (list_empty(from)) {
        list_init(to);
        return;
    }
    *to = *from;
    to->next->prev = to;
    to->prev->next = to;
    list_init(from);
}

/* The object a link is embedded in. */
#define list_entry(l, type, member)    ((type *)((char *)(l)-offsetof(type, member)))
/* The first object of a non-empty list. */
#define list_first(head, type, member) list_entry((head)->next, type, member)

/* pos walks the objects of head in order; the body must not unlink pos. */
#define list_for_each(pos, head, member)                                                   \
    for (pos = list_entry((head)->next, __typeof__(*pos), member); &pos->member != (head); \
         pos = list_entry(pos->member.next, __typeof__(*pos), member))

/* As list_for_each, and the body may unlink (and free) pos, but no other object. */
#define list_for_each_safe(pos, tmp, head, member)                    \
    for (pos = list_entry((head)->next, __typeof__(*pos), member),    \
        tmp = list_entry(pos->member.next, __typeof__(*pos), member); \
         &pos->member != (head);                                      \
         pos = tmp, tmp = list_entry(pos->member.next, __typeof__(*pos), member))

#endif
