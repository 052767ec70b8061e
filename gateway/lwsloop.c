#include "gateway/lwsloop.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#include "common/log.h"

/* A fd watched for readability. uv_poll_init sets O_NONBLOCK on the fd (libuv's rule for what
 * it polls); io_add gives a blocking fd its mode back, since the loop does not own the fd. */
struct evl_io {
    uv_poll_t h; /* first; h.data is the loop */
    evl_io_cb cb;
    void *data;
};

/* A one-shot timer: a uv_timer_t (libuv keeps them in a heap); armed with 0 it waits on the
 * loop's due list instead (libuv 1.44 runs a timer started with 0 inside a timer callback in
 * the same pass, so a callback re-arming itself with 0 would never let the loop poll). */
struct evl_timer {
    uv_timer_t h;    /* first; h.data is the loop */
    struct list due; /* on the loop's due list, or on none */
    evl_timer_cb cb;
    void *data;
};

/* After kgw's own callbacks (not lws's, which lws follows with this itself): lws's idle step
 * services what they may have asked of lws, e.g. a timeout to close a connection now, input
 * it buffered while flow control held a connection, or a write it could not finish, and
 * re-arms its own timer. Starting an idle handle costs no system call: the next turn polls
 * without waiting and runs the step before it. */
static void kick(lwsloop_t *l)
{
    if (l->lws_idle)
        uv_idle_start(l->lws_idle, l->lws_idle_cb);
    else if (l->ctx)
        lws_cancel_service(l->ctx); /* the same through lws's event pipe, a few calls more */
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    (void)events;
    evl_io_t *io = (evl_io_t *)h;
    io->cb(io->data); /* an error is for the callback's read to see */
    /* on an error (EPOLLERR) libuv stopped the watch: a callback that read data and kept its
     * watch still wants to hear of the fd (evl.h: level-triggered until deleted) */
    if (status < 0 && !uv_is_closing((uv_handle_t *)h))
        (void)uv_poll_start(h, UV_READABLE, on_poll);
    kick(h->data); /* io's memory lasts the turn even when the callback deleted it */
}

static evl_io_t *io_add(evl_t *e, int fd, evl_io_cb cb, void *data)
{
    lwsloop_t *l = (lwsloop_t *)e;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return NULL;
    evl_io_t *io = calloc(1, sizeof(*io));
    if (!io)
        return NULL;
    int r = uv_poll_init(&l->uv, &io->h, fd);
    if (r < 0) { /* nothing registered */
        free(io);
        errno = -r;
        return NULL;
    }
    if (!(fl & O_NONBLOCK))
        (void)fcntl(fd, F_SETFL, fl);
    io->h.data = l;
    io->cb = cb;
    io->data = data;
    if ((r = uv_poll_start(&io->h, UV_READABLE, on_poll)) < 0) {
        uv_close((uv_handle_t *)&io->h, free_handle);
        errno = -r;
        return NULL;
    }
    return io;
}

/* Stops at once (no callback after this, even for an event of the turn being run); the memory
 * goes at the end of the turn. The caller may close fd right after. */
static void io_del(evl_t *e, evl_io_t *io)
{
    (void)e;
    if (!io)
        return;
    uv_os_fd_t fd = -1;
    if (uv_fileno((uv_handle_t *)&io->h, &fd) == 0 && fcntl(fd, F_GETFD) < 0)
        log_error("loop: a watch on fd %d deleted after the fd was closed (it must be deleted "
                  "first: the fd may stay in the epoll set)",
                  fd);
    uv_close((uv_handle_t *)&io->h, free_handle);
}

static void run_timer(lwsloop_t *l, evl_timer_t *t)
{
    t->cb(t->data);
    kick(l);
}

static void on_timer(uv_timer_t *h)
{
    run_timer(h->data, (evl_timer_t *)h);
}

/* Runs the timers armed with 0 before this turn; those armed meanwhile wait for the next. A
 * timer taken off the list (disarmed, re-armed or freed by an earlier callback) is not run. */
static void on_soon(uv_idle_t *h)
{
    lwsloop_t *l = h->data;
    struct list now;
    list_move(&now, &l->due);
    while (!list_empty(&now)) {
        evl_timer_t *t = list_first(&now, evl_timer_t, due);
        list_remove(&t->due);
        run_timer(l, t);
    }
    if (list_empty(&l->due))
        uv_idle_stop(&l->soon);
}

static evl_timer_t *timer_new(evl_t *e, evl_timer_cb cb, void *data)
{
    lwsloop_t *l = (lwsloop_t *)e;
    evl_timer_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    uv_timer_init(&l->uv, &t->h); /* cannot fail */
    t->h.data = l;
    list_init(&t->due);
    t->cb = cb;
    t->data = data;
    return t;
}

static void timer_disarm(evl_t *e, evl_timer_t *t)
{
    (void)e;
    uv_timer_stop(&t->h);
    list_remove(&t->due);
}

static void timer_arm(evl_t *e, evl_timer_t *t, uint64_t ms)
{
    lwsloop_t *l = (lwsloop_t *)e;
    timer_disarm(e, t);
    if (!ms) {
        list_append(&l->due, &t->due);
        uv_idle_start(&l->soon, on_soon);
        return;
    }
    /* from now, not from when this turn began (a long turn would fire it early) */
    uv_update_time(&l->uv);
    uv_timer_start(&t->h, on_timer, ms, 0);
}

/* Disarms at once; the memory goes at the end of the turn. */
static void timer_free(evl_t *e, evl_timer_t *t)
{
    if (!t)
        return;
    timer_disarm(e, t);
    uv_close((uv_handle_t *)&t->h, free_handle);
}

int lwsloop_init(lwsloop_t *l)
{
    *l = (lwsloop_t){.evl = {.io_add = io_add,
                             .io_del = io_del,
                             .timer_new = timer_new,
                             .timer_arm = timer_arm,
                             .timer_disarm = timer_disarm,
                             .timer_free = timer_free}};
    list_init(&l->due);
    int r = uv_loop_init(&l->uv);
    if (r < 0)
        return r;
    uv_idle_init(&l->uv, &l->soon);
    l->soon.data = l;
    l->foreign[0] = &l->uv;
    l->live = true;
    return 0;
}

void **lwsloop_foreign(lwsloop_t *l)
{
    return l->foreign;
}

static void find_lws_idle(uv_handle_t *h, void *arg)
{
    lwsloop_t *l = arg;
    if (h->type == UV_IDLE && h != (uv_handle_t *)&l->soon && !l->lws_idle &&
        ((uv_idle_t *)h)->idle_cb) {
        l->lws_idle = (uv_idle_t *)h;
        l->lws_idle_cb = l->lws_idle->idle_cb;
    }
}

void lwsloop_attach(lwsloop_t *l, struct lws_context *ctx)
{
    l->ctx = ctx;
    /* lws's libuv glue (4.1) made one idle handle on the loop and started it */
    uv_walk(&l->uv, find_lws_idle, l);
    if (!l->lws_idle)
        log_debug("loop: lws's idle handle not found; kgw's callbacks wake lws through its pipe");
}

void lwsloop_turn(lwsloop_t *l)
{
    uv_run(&l->uv, UV_RUN_ONCE);
}

/* Turns the loop without waiting until nothing is left to close (bounded: a watch left open
 * keeps it alive). */
static void settle(lwsloop_t *l)
{
    for (int i = 0; i < 1000 && uv_run(&l->uv, UV_RUN_NOWAIT); i++)
        ;
}

int lwsloop_fini(lwsloop_t *l)
{
    if (!l->live)
        return 0;
    l->lws_idle = NULL; /* lws closes it */
    if (l->ctx) {
        /* lws 4.1 on a foreign libuv loop: the first call starts closing every connection and
         * listener (each close completes on a later turn), the second, once they are, frees
         * the context */
        lws_context_destroy(l->ctx);
        settle(l);
        lws_context_destroy(l->ctx);

        l->ctx = NULL;
    }
    uv_close((uv_handle_t *)&l->soon, NULL);
    settle(l);
    int r = uv_loop_close(&l->uv);
    if (r < 0)
        log_warn("loop: a watch or timer was left open at exit");
    l->live = false;
    return r;
}
