/* gateway/lwsloop.c: common/evl.h on the libuv loop lws runs on. Readable fds, one-shot timers
 * in due order (also thousands), deleting a watch or timer from inside a callback, timers armed
 * with 0 that cannot starve the fds, and lws on the same loop: a connection closed from one of
 * kgw's timers goes at once, and the loop closes with nothing left open. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

#include "gateway/lwsloop.h"

static lwsloop_t L;
static evl_t *E;

/* Turns the loop until *flag or ms pass (a guard timer wakes it). */
static bool run_until(const bool *flag, uint64_t ms);

static void on_guard(void *data)
{
    *(bool *)data = true;
}

static bool run_until(const bool *flag, uint64_t ms)
{
    bool expired = false;
    evl_timer_t *guard = E->timer_new(E, on_guard, &expired);
    E->timer_arm(E, guard, ms);
    while (!*flag && !expired)
        lwsloop_turn(&L);
    evl_timer_destroy(E, &guard);
    return *flag;
}

/* Turns the loop n times without waiting. */
static void spin(int n)
{
    for (int i = 0; i < n; i++)
        uv_run(&L.uv, UV_RUN_NOWAIT);
}

/* ---- fds ---- */

struct pipe_w {
    int p[2];
    evl_io_t *io;
    int calls;
    struct pipe_w *other; /* deleted by this one's callback */
    bool self_del;        /* the callback deletes its own watch and closes the fd */
};

static void on_pipe(void *data)
{
    struct pipe_w *w = data;
    char buf[64];
    w->calls++;
    (void)!read(w->p[0], buf, sizeof(buf));
    if (w->other)
        evl_io_destroy(E, &w->other->io);
    if (w->self_del) {
        evl_io_destroy(E, &w->io);
        close(w->p[0]);
        w->p[0] = -1;
    }
}

static void pipe_open(struct pipe_w *w)
{
    *w = (struct pipe_w){0};
    CHECK_INT(pipe2(w->p, O_CLOEXEC), 0);
    w->io = E->io_add(E, w->p[0], on_pipe, w);
    CHECK(w->io != NULL);
}

static void pipe_close(struct pipe_w *w)
{
    evl_io_destroy(E, &w->io);
    if (w->p[0] >= 0)
        close(w->p[0]);
    close(w->p[1]);
}

static void test_fds(void)
{
    struct pipe_w a, b;
    bool never = false;

    CHECK_CASE("a readable fd runs its callback; a quiet one does not");
    pipe_open(&a);
    pipe_open(&b);
    CHECK_INT(write(a.p[1], "x", 1), 1);
    run_until(&never, 30);
    CHECK_INT(a.calls, 1);
    CHECK_INT(b.calls, 0);

    CHECK_CASE("the watch leaves the fd as blocking as it was");
    CHECK_INT(fcntl(a.p[0], F_GETFL) & O_NONBLOCK, 0);

    CHECK_CASE("level-triggered: unread data runs it again");
    CHECK_INT(
        write(b.p[1], "0123456789012345678901234567890123456789012345678901234567890123456789", 70),
        70);
    run_until(&never, 30);
    CHECK_INT(b.calls, 2); /* 64 bytes, then 6 */

    CHECK_CASE("a watch deleted by another's callback in the same turn does not run");
    a.calls = b.calls = 0;
    a.other = &b;
    b.other = &a;
    CHECK_INT(write(a.p[1], "x", 1), 1);
    CHECK_INT(write(b.p[1], "x", 1), 1);
    spin(3);
    CHECK_INT(a.calls + b.calls, 1);
    CHECK((a.io == NULL) != (b.io == NULL));
    pipe_close(&a);
    pipe_close(&b);

    CHECK_CASE("a callback deletes its own watch and closes the fd; the number is reused");
    pipe_open(&a);
    a.self_del = true;
    int was = a.p[0];
    CHECK_INT(write(a.p[1], "x", 1), 1);
    spin(2);
    CHECK_INT(a.calls, 1);
    CHECK(a.io == NULL);
    close(a.p[1]);
    pipe_open(&b); /* takes the lowest numbers: those just closed */
    CHECK_INT(b.p[0], was);
    CHECK_INT(write(b.p[1], "x", 1), 1);
    run_until(&never, 30);
    CHECK_INT(b.calls, 1);
    pipe_close(&b);
}

/* ---- timers ---- */

#define NT 20000

struct tmr {
    evl_timer_t *t;
    uint64_t due; /* loop time it was armed for */
    int fired;
    struct tmr *other; /* disarmed (or freed) by this one's callback */
    bool free_other, rearm0, free_self;
};

static int order[NT], norder, target;
static bool all_fired; /* norder reached target */
static struct tmr T[NT];

static void on_tmr(void *data)
{
    struct tmr *x = data;
    x->fired++;
    CHECK(uv_now(&L.uv) >= x->due);
    if (norder < NT)
        order[norder++] = (int)(x - T);
    all_fired = target && norder >= target;
    if (x->other) {
        if (x->free_other)
            evl_timer_destroy(E, &x->other->t);
        else
            E->timer_disarm(E, x->other->t);
    }
    if (x->rearm0 && x->fired < 3)
        E->timer_arm(E, x->t, 0);
    if (x->free_self)
        evl_timer_destroy(E, &x->t);
}

static void arm(struct tmr *x, uint64_t ms)
{
    E->timer_arm(E, x->t, ms);
    x->due = uv_now(&L.uv) + ms;
}

static void timers_reset(int n)
{
    for (int i = 0; i < NT; i++)
        evl_timer_destroy(E, &T[i].t);
    spin(1);
    memset(T, 0, sizeof(T));
    norder = target = 0;
    all_fired = false;
    for (int i = 0; i < n; i++) {
        T[i].t = E->timer_new(E, on_tmr, &T[i]);
        CHECK(T[i].t != NULL);
    }
}

static void test_timers(void)
{
    bool never = false;

    CHECK_CASE("timers fire once, in due order, not before they are due");
    timers_reset(3);
    arm(&T[0], 30);
    arm(&T[1], 10);
    arm(&T[2], 20);
    run_until(&never, 80);
    CHECK_INT(norder, 3);
    CHECK_INT(order[0], 1);
    CHECK_INT(order[1], 2);
    CHECK_INT(order[2], 0);
    for (int i = 0; i < 3; i++)
        CHECK_INT(T[i].fired, 1);

    CHECK_CASE("re-arming moves a timer; disarming stops it");
    timers_reset(2);
    arm(&T[0], 5);
    arm(&T[1], 10);
    arm(&T[0], 20);
    E->timer_disarm(E, T[1].t);
    run_until(&never, 60);
    CHECK_INT(T[0].fired, 1);
    CHECK_INT(T[1].fired, 0);

    CHECK_CASE("armed with 0: the next turn, in arming order");
    timers_reset(3);
    arm(&T[2], 0);
    arm(&T[0], 0);
    arm(&T[1], 0);
    spin(1);
    CHECK_INT(norder, 3);
    CHECK_INT(order[0], 2);
    CHECK_INT(order[1], 0);
    CHECK_INT(order[2], 1);

    CHECK_CASE("a timer disarmed or freed by an earlier callback of its turn does not run");
    timers_reset(4);
    T[0].other = &T[1];
    T[2].other = &T[3];
    T[2].free_other = true;
    arm(&T[0], 0);
    arm(&T[1], 0);
    arm(&T[2], 5);
    arm(&T[3], 5);
    run_until(&never, 40);
    CHECK_INT(T[0].fired, 1);
    CHECK_INT(T[1].fired, 0);
    CHECK_INT(T[2].fired, 1);
    CHECK_INT(T[3].fired, 0);
    CHECK(T[3].t == NULL);

    CHECK_CASE("a timer frees itself in its callback");
    timers_reset(1);
    T[0].free_self = true;
    arm(&T[0], 1);
    run_until(&never, 20);
    CHECK_INT(T[0].fired, 1);
    CHECK(T[0].t == NULL);

    CHECK_CASE("a timer re-armed with 0 from its callback runs once a turn: fds still run");
    timers_reset(1);
    struct pipe_w p;
    pipe_open(&p);
    CHECK_INT(write(p.p[1], "x", 1), 1);
    T[0].rearm0 = true;
    arm(&T[0], 0);
    spin(1);
    CHECK_INT(T[0].fired, 1); /* not again within the same turn */
    CHECK_INT(p.calls, 1);
    spin(4);
    CHECK_INT(T[0].fired, 3);
    pipe_close(&p);

    CHECK_CASE("many timers: each fires once, in due order; disarmed ones never");
    timers_reset(NT);
    uint32_t seed = 12345;
    for (int i = 0; i < NT; i++) {
        seed = seed * 1103515245u + 12345u;
        arm(&T[i], 1 + (seed >> 16) % 40);
    }
    int live = 0;
    for (int i = 0; i < NT; i++) {
        if (i % 3 == 0)
            E->timer_disarm(E, T[i].t);
        else
            live++;
    }
    target = live;
    run_until(&all_fired, 5000); /* the latest is due in 40 ms */
    CHECK_INT(norder, live);
    int bad = 0;
    for (int i = 1; i < norder; i++)
        bad += T[order[i]].due < T[order[i - 1]].due;
    CHECK_INT(bad, 0);
    for (int i = 0; i < NT; i++)
        CHECK_INT(T[i].fired, i % 3 == 0 ? 0 : 1);
    timers_reset(0);
}

/* ---- lws on the loop ---- */

static struct lws *accepted;
static bool destroyed;

static int
lws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    switch (reason) {
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
        accepted = wsi;
        return 0;
    case LWS_CALLBACK_WSI_DESTROY:
        if (wsi == accepted)
            destroyed = true;
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"http", lws_cb, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void on_kill(void *data)
{
    (void)data;
    lws_set_timeout(accepted, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
}

static void test_lws(void)
{
    CHECK_CASE("lws serves on the loop");
    lws_set_log_level(LLL_ERR, NULL);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS |
                   LWS_SERVER_OPTION_DISABLE_IPV6;
    info.foreign_loops = lwsloop_foreign(&L);
    info.protocols = protocols;
    struct lws_context *ctx = lws_create_context(&info);
    CHECK(ctx != NULL);
    if (!ctx)
        return;
    lwsloop_attach(&L, ctx);
    CHECK(L.lws_idle != NULL);
    info.port = 0;
    info.iface = "127.0.0.1";
    struct lws_vhost *vh = lws_create_vhost(ctx, &info);
    CHECK(vh != NULL);
    int port = vh ? lws_get_vhost_listen_port(vh) : 0;
    CHECK(port > 0);

    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_INT(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    CHECK_INT(write(fd, "GET / HTTP/1.1\r\n", 16), 16); /* headers never end */
    bool got = false;
    for (int i = 0; i < 200 && !accepted; i++)
        run_until(&got, 10);
    CHECK(accepted != NULL);

    CHECK_CASE("a connection killed from kgw's timer goes at once, not at lws's next timeout");
    if (accepted) {
        evl_timer_t *k = E->timer_new(E, on_kill, NULL);
        E->timer_arm(E, k, 1);
        run_until(&destroyed, 2000); /* lws's own timeouts for it are 10 s and more */
        CHECK(destroyed);
        evl_timer_destroy(E, &k);
        char c;
        if (destroyed) /* the peer sees the close */
            CHECK_INT(recv(fd, &c, 1, MSG_DONTWAIT), 0);
    }
    close(fd);

    CHECK_CASE("fini destroys lws and closes the loop with nothing left open");
    CHECK_INT(lwsloop_fini(&L), 0);
    CHECK(L.ctx == NULL);
}

int main(void)
{
    CHECK_INT(lwsloop_init(&L), 0);
    E = &L.evl;
    test_fds();
    test_timers();
    test_lws();
    CHECK_DONE();
}
