/* The event loop as the lower layers see it: readable fds and one-shot timers. The gateway
 * implements it on libwebsockets' loop (one loop for HTTP, websockets, ZeroMQ, timers and
 * signals); tests may implement it on poll(). Callbacks never run after their object is
 * deleted. */
#ifndef KGW_COMMON_EVL_H
#define KGW_COMMON_EVL_H

#include <stddef.h>
#include <stdint.h>

typedef struct evl_io evl_io_t;
typedef struct evl_timer evl_timer_t;
typedef void (*evl_io_cb)(void *data);
typedef void (*evl_timer_cb)(void *data);

typedef struct evl {
    /* Watches fd for readability (level-triggered). The loop does not own fd, and fd must stay
     * open until the watch is deleted (io_del before close: with epoll a closed fd whose file
     * lives on elsewhere, e.g. a pipe a child holds, stays in the set under a number the next
     * descriptor reuses). One watch per fd. NULL + errno. */
    evl_io_t *(*io_add)(struct evl *l, int fd, evl_io_cb cb, void *data);
    void (*io_del)(struct evl *l, evl_io_t *io);
    /* A disarmed timer; NULL + errno. */
    evl_timer_t *(*timer_new)(struct evl *l, evl_timer_cb cb, void *data);
    /* (Re)arms: fires once after ms (0: on the next loop iteration). */
    void (*timer_arm)(struct evl *l, evl_timer_t *t, uint64_t ms);
    void (*timer_disarm)(struct evl *l, evl_timer_t *t);
    void (*timer_free)(struct evl *l, evl_timer_t *t);
} evl_t;

static inline void evl_timer_destroy(evl_t *l, evl_timer_t **t)
{
    if (*t) {
        l->timer_free(l, *t);
        *t = NULL;
    }
}

static inline void evl_io_destroy(evl_t *l, evl_io_t **io)
{
    if (*io) {
        l->io_del(l, *io);
        *io = NULL;
    }
}

#endif
