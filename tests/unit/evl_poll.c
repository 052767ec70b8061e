#include "evl_poll.h"

#include <poll.h>
#include <stdlib.h>

#include "common/util.h"

#define MAX_IO     256
#define MAX_TIMERS 256

struct evl_io {
    int fd;
    evl_io_cb cb;
    void *data;
};

struct evl_timer {
    bool armed;
    uint64_t due;
    evl_timer_cb cb;
    void *data;
};

struct evl_poll {
    evl_t evl; /* first */
    evl_io_t *io[MAX_IO];
    evl_timer_t *timers[MAX_TIMERS];
};

static evl_io_t *io_add(evl_t *e, int fd, evl_io_cb cb, void *data)
{
    evl_poll_t *l = (evl_poll_t *)e;
    for (int i = 0; i < MAX_IO; i++)
        if (!l->io[i]) {
            evl_io_t *io = calloc(1, sizeof(*io));
            if (!io)
                return NULL;
            *io = (evl_io_t){fd, cb, data};
            l->io[i] = io;
            return io;
        }
    return NULL;
}

static void io_del(evl_t *e, evl_io_t *io)
{
    evl_poll_t *l = (evl_poll_t *)e;
    for (int i = 0; i < MAX_IO; i++)
        if (l->io[i] == io)
            l->io[i] = NULL;
    free(io);
}

static evl_timer_t *timer_new(evl_t *e, evl_timer_cb cb, void *data)
{
    evl_poll_t *l = (evl_poll_t *)e;
    for (int i = 0; i < MAX_TIMERS; i++)
        if (!l->timers[i]) {
            evl_timer_t *t = calloc(1, sizeof(*t));
            if (!t)
                return NULL;
            t->cb = cb;
            t->data = data;
            l->timers[i] = t;
            return t;
        }
    return NULL;
}

static void timer_arm(evl_t *e, evl_timer_t *t, uint64_t ms)
{
    t->armed = true;
    t->due = util_now_ms() + ms;
}

static void timer_disarm(evl_t *e, evl_timer_t *t)
{
    t->armed = false;
}

static void timer_free(evl_t *e, evl_timer_t *t)
{
    evl_poll_t *l = (evl_poll_t *)e;
    for (int i = 0; i < MAX_TIMERS; i++)
        if (l->timers[i] == t)
            l->timers[i] = NULL;
    free(t);
}

evl_poll_t *evl_poll_new(void)
{
    evl_poll_t *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->evl = (evl_t){io_add, io_del, timer_new, timer_arm, timer_disarm, timer_free};
    return l;
}

void evl_poll_destroy(evl_poll_t **pl)
{
    evl_poll_t *l = *pl;
    if (!l)
        return;
    for (int i = 0; i < MAX_IO; i++)
        free(l->io[i]);
    for (int i = 0; i < MAX_TIMERS; i++)
        free(l->timers[i]);
    free(l);
    *pl = NULL;
}

evl_t *evl_poll_evl(evl_poll_t *l)
{
    return &l->evl;
}

bool evl_poll_run(evl_poll_t *l, bool (*done)(void *), void *data, int timeout_ms)
{
    uint64_t end = util_now_ms() + (uint64_t)timeout_ms;
    while (!done(data)) {
        uint64_t now = util_now_ms();
        if (now >= end)
            return false;
        int wait = (int)(end - now);
        for (int i = 0; i < MAX_TIMERS; i++) {
            evl_timer_t *t = l->timers[i];
            if (t && t->armed)
                wait = t->due <= now ? 0 : (int)(t->due - now) < wait ? (int)(t->due - now) : wait;
        }
        struct pollfd pfd[MAX_IO];
        evl_io_t *who[MAX_IO];
        int n = 0;
        for (int i = 0; i < MAX_IO; i++)
            if (l->io[i]) {
                pfd[n] = (struct pollfd){.fd = l->io[i]->fd, .events = POLLIN};
                who[n++] = l->io[i];
            }
        poll(pfd, (nfds_t)n, wait);
        for (int i = 0; i < n; i++) {
            /* skip watches deleted by an earlier callback in this round */
            bool live = false;
            for (int j = 0; j < MAX_IO; j++)
                live = live || l->io[j] == who[i];
            if (live && (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                who[i]->cb(who[i]->data);
        }
        now = util_now_ms();
        for (int i = 0; i < MAX_TIMERS; i++) {
            evl_timer_t *t = l->timers[i];
            if (t && t->armed && t->due <= now) {
                t->armed = false;
                t->cb(t->data);
            }
        }
    }
    return true;
}
