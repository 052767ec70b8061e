#include "gateway/lwsloop.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

struct evl_io {
    struct lws *wsi;
    evl_io_cb cb;
    void *data;
};

struct evl_timer {
    lws_sorted_usec_list_t sul; /* first */
    lwsloop_t *l;
    evl_timer_cb cb;
    void *data;
};

static evl_io_t *io_add(evl_t *e, int fd, evl_io_cb cb, void *data)
{
    lwsloop_t *l = (lwsloop_t *)e;
    evl_io_t *io = calloc(1, sizeof(*io));
    if (!io)
        return NULL;
    /* lws closes what it adopts; the caller keeps its own fd. */
    int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dupfd < 0) {
        free(io);
        return NULL;
    }
    lws_sock_file_fd_type u;
    u.filefd = dupfd;
    io->cb = cb;
    io->data = data;
    io->wsi = lws_adopt_descriptor_vhost(l->vh, LWS_ADOPT_RAW_FILE_DESC, u, LWSLOOP_PROTOCOL, NULL);
    if (!io->wsi) {
        /* lws closed dupfd on failure */
        free(io);
        errno = EMFILE;
        return NULL;
    }
    lws_set_opaque_user_data(io->wsi, io);
    return io;
}

static void io_del(evl_t *e, evl_io_t *io)
{
    if (!io)
        return;
    if (io->wsi) {
        lws_set_opaque_user_data(io->wsi, NULL);
        lws_set_timeout(io->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
    }
    free(io);
}

static void sul_cb(lws_sorted_usec_list_t *sul)
{
    evl_timer_t *t = (evl_timer_t *)sul;
    t->cb(t->data);
}

static evl_timer_t *timer_new(evl_t *e, evl_timer_cb cb, void *data)
{
    evl_timer_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->l = (lwsloop_t *)e;
    t->cb = cb;
    t->data = data;
    return t;
}

static void timer_arm(evl_t *e, evl_timer_t *t, uint64_t ms)
{
    lws_sul_schedule(t->l->ctx, 0, &t->sul, sul_cb, (lws_usec_t)(ms ? ms * 1000 : 1));
}

static void timer_disarm(evl_t *e, evl_timer_t *t)
{
    lws_sul_cancel(&t->sul);
}

static void timer_free(evl_t *e, evl_timer_t *t)
{
    if (!t)
        return;
    lws_sul_cancel(&t->sul);
    free(t);
}

void lwsloop_init(lwsloop_t *l, struct lws_context *ctx, struct lws_vhost *vh)
{
    l->evl = (evl_t){.io_add = io_add,
                     .io_del = io_del,
                     .timer_new = timer_new,
                     .timer_arm = timer_arm,
                     .timer_disarm = timer_disarm,
                     .timer_free = timer_free};
    l->ctx = ctx;
    l->vh = vh;
}

int lwsloop_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
    evl_io_t *io;
    switch (reason) {
    case LWS_CALLBACK_RAW_RX_FILE:
        io = lws_get_opaque_user_data(wsi);
        if (io) {
            io->cb(io->data);
            return 0;
        }
        return -1; /* deleted: let lws close it */
    case LWS_CALLBACK_RAW_CLOSE_FILE:
        io = lws_get_opaque_user_data(wsi);
        if (io)
            io->wsi = NULL;
        return 0;
    default:
        return 0;
    }
}
