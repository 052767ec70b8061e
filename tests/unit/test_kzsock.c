/* kernelmgr/kzsock: a watched ZeroMQ socket's descriptors and its oversize watch, on a poll()
 * loop against a peer socket in the test. A DEALER's watch costs no descriptor (its lost
 * ZMQ_POLLOUT tells the drop); a SUB's is a monitor. A peer that goes away and comes back is
 * not an oversize message. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "evl_poll.h"

#include "kernelmgr/kzsock_int.h"

#define MAXMSG 1000

static evl_poll_t *lp;
static evl_t *L;
static int got_msgs, got_oversize;

static void on_msg(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    got_msgs++;
}

static void on_oversize(void *data, kzsock_t *z)
{
    got_oversize++;
}

static bool oversize_seen(void *data)
{
    return got_oversize > 0;
}

static bool msg_seen(void *data)
{
    return got_msgs > 0;
}

static bool never(void *data)
{
    return false;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static void *router(void *zctx, const char *ep)
{
    void *r = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0, tmo = 3000;
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(r, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
    CHECK(zmq_bind(r, ep) == 0);
    return r;
}

/* The DEALER's "hello" reached the router (its connection is up). */
static bool hello(kzsock_t *z, void *r)
{
    char buf[16];
    jspan_t f = {"hello", 5};
    CHECK(kz_send(z, &f, 1) == 0);
    return zmq_recv(r, buf, sizeof(buf), 0) == 2 && zmq_recv(r, buf, sizeof(buf), 0) == 5;
}

static void send_to_me(void *r, size_t size)
{
    char *big = calloc(1, size);
    CHECK(zmq_send(r, "me", 2, ZMQ_SNDMORE) == 2);
    CHECK(zmq_send(r, big, size, 0) == (int)size);
    free(big);
}

static void dealer(const char *dir, void *zctx)
{
    char ep[256];
    kzsock_t z;
    snprintf(ep, sizeof(ep), "ipc://%s/dealer", dir);
    void *r = router(zctx, ep);

    CHECK_CASE("a watched DEALER costs its mailbox and its connection, no monitor");
    int before = open_fds();
    CHECK(kz_open(&z, L, zctx, ZMQ_DEALER, "me", ep, on_msg, NULL, MAXMSG, on_oversize) == 0);
    CHECK(hello(&z, r));
    /* ours: the mailbox and the ipc connection; the router's: its end of the connection */
    CHECK_INT(open_fds() - before, 3);

    CHECK_CASE("a message within the limit is read");
    got_msgs = 0;
    send_to_me(r, MAXMSG / 2);
    CHECK(evl_poll_run(lp, msg_seen, NULL, 3000));
    CHECK_INT(got_oversize, 0);

    CHECK_CASE("a frame over the limit is seen, and the socket connects again");
    send_to_me(r, MAXMSG * 4);
    CHECK(evl_poll_run(lp, oversize_seen, NULL, 3 * KZ_OVERSIZE_CONFIRM_MS + 3000));
    CHECK_INT(got_oversize, 1);
    CHECK(hello(&z, r));
    got_msgs = 0;
    send_to_me(r, 10);
    CHECK(evl_poll_run(lp, msg_seen, NULL, 3000));

    CHECK_CASE("a peer that goes away and comes back is no oversize message");
    zmq_close(r);
    evl_poll_run(lp, never, NULL, 200);
    r = router(zctx, ep);
    evl_poll_run(lp, never, NULL, KZ_OVERSIZE_CONFIRM_MS + 500);
    CHECK_INT(got_oversize, 1);
    CHECK(hello(&z, r));

    kz_close(&z);
    zmq_close(r);
}

static void sub(const char *dir, void *zctx)
{
    char ep[256];
    kzsock_t z;
    int zero = 0;
    snprintf(ep, sizeof(ep), "ipc://%s/pub", dir);
    void *p = zmq_socket(zctx, ZMQ_PUB);
    zmq_setsockopt(p, ZMQ_LINGER, &zero, sizeof(zero));
    CHECK(zmq_bind(p, ep) == 0);

    CHECK_CASE("a SUB's oversize watch is a monitor");
    got_oversize = got_msgs = 0;
    CHECK(kz_open(&z, L, zctx, ZMQ_SUB, NULL, ep, on_msg, NULL, MAXMSG, on_oversize) == 0);
    /* until the subscription has reached the publisher */
    for (int i = 0; i < 100 && !got_msgs; i++) {
        zmq_send(p, "x", 1, 0);
        evl_poll_run(lp, msg_seen, NULL, 50);
    }
    CHECK(got_msgs > 0);
    char *big = calloc(1, MAXMSG * 4);
    CHECK(zmq_send(p, big, MAXMSG * 4, 0) == MAXMSG * 4);
    free(big);
    CHECK(evl_poll_run(lp, oversize_seen, NULL, 3 * KZ_OVERSIZE_CONFIRM_MS + 3000));
    CHECK_INT(got_oversize, 1);

    kz_close(&z);
    zmq_close(p);
}

int main(void)
{
    char dir[] = "/tmp/kgw-test-kzsock-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    lp = evl_poll_new();
    L = evl_poll_evl(lp);
    void *zctx = zmq_ctx_new();
    dealer(dir, zctx);
    sub(dir, zctx);
    zmq_ctx_term(zctx);
    evl_poll_destroy(&lp);
    snprintf(path, sizeof(path), "%s/dealer", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/pub", dir);
    unlink(path);
    rmdir(dir);
    CHECK_DONE();
}
