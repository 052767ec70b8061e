/* kzsock: a ZeroMQ socket on the event loop. */
#include "kernelmgr/kzsock_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "kernelmgr/private.h"
#include "protocol/jsign.h"

/* A DEALER that can no longer send has lost its only pipe (its connection dropped for good:
 * a frame over the limit) or has a full queue (a peer that stopped reading). Confirmed once the
 * queue would have had KZ_OVERSIZE_CONFIRM_MS to move: kz_on_quiet looks again. */
static void kz_pipe_check(kzsock_t *z, int ev)
{
    if (z->type != ZMQ_DEALER || !z->watch || (ev & ZMQ_POLLOUT) || z->suspect)
        return; /* (a check under way is not put off by every send: it would never end) */
    z->suspect = true;
    z->evl->timer_arm(z->evl, z->quiet, KZ_OVERSIZE_CONFIRM_MS);
}

static void kz_drain(void *data)
{
    kzsock_t *z = data;
    zmq_msg_t frames[KZ_MAX_FRAMES];

    size_t bytes = 0;
    for (int batch = 0; batch < KZ_DRAIN_BATCH && bytes < KZ_DRAIN_BYTES; batch++) {
        int ev = 0;
        size_t evsz = sizeof(ev);
        if (!z->s || zmq_getsockopt(z->s, ZMQ_EVENTS, &ev, &evsz) < 0)
            return;
        if (!(ev & ZMQ_POLLOUT))
            kz_pipe_check(z, ev);
        if (!(ev & ZMQ_POLLIN))
            return;
        size_t n = 0;
        bool overflow = false;
        int more = 1;
        while (more) {
            zmq_msg_t scratch, *f = n < KZ_MAX_FRAMES ? &frames[n] : &scratch;
            zmq_msg_init(f);
            if (zmq_msg_recv(f, z->s, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(f);
                break;
            }
            more = zmq_msg_more(f);
            bytes += zmq_msg_size(f);
            if (f == &scratch) {
                overflow = true;
                zmq_msg_close(f);
            } else {
                n++;
            }
        }
        if (overflow)
            log_warn("kernel socket: message with too many frames dropped");
        else if (n > 0)
            z->on_msg(z->data, z, frames, n);
        for (size_t i = 0; i < n; i++)
            zmq_msg_close(&frames[i]);
        if (!z->s) /* closed by the handler */
            return;
    }
    /* More may be waiting: let other sockets and clients run first. */
    z->evl->timer_arm(z->evl, z->again, 0);
}

void kz_drain_now(kzsock_t *z)
{
    if (z->s)
        kz_drain(z);
}

/* The monitor's events: a disconnect starts the oversize watch, a retry ends it. */
static void kz_mon_drain(void *data)
{
    kzsock_t *z = data;
    for (;;) {
        zmq_msg_t ev, ep;
        zmq_msg_init(&ev);
        if (!z->mon || zmq_msg_recv(&ev, z->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= sizeof(event))
            memcpy(&event, zmq_msg_data(&ev), sizeof(event));
        bool more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        while (more) { /* the endpoint */
            zmq_msg_init(&ep);
            if (zmq_msg_recv(&ep, z->mon, ZMQ_DONTWAIT) < 0)
                more = false;
            else
                more = zmq_msg_more(&ep);
            zmq_msg_close(&ep);
        }
        z->suspect = event == ZMQ_EVENT_DISCONNECTED;
        if (z->suspect)
            z->evl->timer_arm(z->evl, z->quiet, KZ_OVERSIZE_CONFIRM_MS);
        else
            z->evl->timer_disarm(z->evl, z->quiet);
    }
}

static int kz_monitor(kzsock_t *z)
{
    static unsigned long long seq;
    char ep[64];
    int zero = 0, zfd;
    size_t fdsz = sizeof(zfd);
    snprintf(ep, sizeof(ep), "inproc://kgw-kzmon-%llu", ++seq);
    if (zmq_socket_monitor(z->s, ep,
                           ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED |
                               ZMQ_EVENT_CONNECT_DELAYED | ZMQ_EVENT_CONNECT_RETRIED) < 0)
        return -errno;
    if (!(z->mon = zmq_socket(z->zctx, ZMQ_PAIR)))
        return -errno;
    zmq_setsockopt(z->mon, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(z->mon, ep) < 0 || zmq_getsockopt(z->mon, ZMQ_FD, &zfd, &fdsz) < 0)
        return -errno;
    /* (the loop watches a dup of its own: no second one here, descriptors add up per session) */
    if (!(z->mon_io = z->evl->io_add(z->evl, zfd, kz_mon_drain, z)))
        return errno ? -errno : -ENOMEM;
    /* ZMQ_FD is edge-triggered, and its first signal may have gone to the calls above: read
     * what is there, so the next event signals again (only kz_mon_drain uses the socket). */
    kz_mon_drain(z);
    return 0;
}

/* The ZeroMQ side: socket, options, connect, its fd on the loop (and its monitor). */
static int kz_connect(kzsock_t *z)
{
    int zero = 0, ivl = 10, hwm = 10000, zfd;
    size_t fdsz = sizeof(zfd);
    z->s = zmq_socket(z->zctx, z->type);
    if (!z->s)
        return -errno;
    zmq_setsockopt(z->s, ZMQ_LINGER, &zero, sizeof(zero));
    /* The kernel binds its sockets some 0.5 s after it starts. libzmq's default 100 ms
     * reconnect interval would add tens of ms to every start, and exponential backoff
     * (RECONNECT_IVL_MAX) far more: retry every 10 ms (connecting to a missing ipc path is one
     * failed syscall). */
    zmq_setsockopt(z->s, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
    zmq_setsockopt(z->s, ZMQ_RECONNECT_IVL_MAX, &zero, sizeof(zero));
    /* A kernel's PUB socket drops what does not fit in its queue plus ours: give iopub a deep
     * queue on this side, so a gateway briefly starved of CPU (the kernel and its client
     * spinning on two cores) does not lose a kernel's output, its final status included. */
    int rcvhwm = z->type == ZMQ_SUB ? 100000 : KZ_DEALER_RCVHWM;
    zmq_setsockopt(z->s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
    zmq_setsockopt(z->s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    if (z->maxmsg > 0) {
        int64_t max = z->maxmsg;
        if (zmq_setsockopt(z->s, ZMQ_MAXMSGSIZE, &max, sizeof(max)) < 0)
            return -errno;
    }
    if (z->identity && zmq_setsockopt(z->s, ZMQ_ROUTING_ID, z->identity, strlen(z->identity)) < 0)
        return -errno;
    if (z->type == ZMQ_SUB && zmq_setsockopt(z->s, ZMQ_SUBSCRIBE, "", 0) < 0)
        return -errno;
    /* A DEALER shows the loss by its ZMQ_EVENTS (kz_pipe_check), at no descriptor; a SUB
     * cannot send and shows nothing: a monitor watches it. */
    z->watch = z->maxmsg > 0 && z->on_oversize;
    int r = z->watch && z->type != ZMQ_DEALER ? kz_monitor(z) : 0; /* before connect */
    if (r < 0)
        return r;
    if (zmq_connect(z->s, z->endpoint) < 0)
        return -errno;
    if (zmq_getsockopt(z->s, ZMQ_FD, &zfd, &fdsz) < 0)
        return -errno;
    /* ZMQ_FD itself, owned by libzmq: watched until the socket is closed (kz_disconnect ends
     * the watch first), no copy of it held */
    z->io = z->evl->io_add(z->evl, zfd, kz_drain, z);
    if (!z->io)
        return errno ? -errno : -ENOMEM;
    z->evl->timer_arm(z->evl, z->again, 0); /* what was signalled before the watch began */
    return 0;
}

static void kz_disconnect(kzsock_t *z)
{
    if (z->evl) {
        evl_io_destroy(z->evl, &z->io);
        evl_io_destroy(z->evl, &z->mon_io);
    }
    if (z->s) {
        if (z->mon)
            zmq_socket_monitor(z->s, NULL, 0);
        zmq_close(z->s);
    }
    z->s = NULL;
    if (z->mon)
        zmq_close(z->mon);
    z->mon = NULL;
}

/* A disconnect libzmq does not retry: the peer sent a frame over the limit. */
static void kz_on_quiet(void *data)
{
    kzsock_t *z = data;
    int r, ev = 0;
    size_t evsz = sizeof(ev);
    z->suspect = false;
    if (z->type == ZMQ_DEALER &&
        (!z->s || zmq_getsockopt(z->s, ZMQ_EVENTS, &ev, &evsz) < 0 || (ev & ZMQ_POLLOUT)))
        return; /* a full queue that moved again: its pipe is there */
    log_warn("kernel socket %.128s: a message over the limit of %lld bytes per frame was "
             "refused; connecting again",
             z->endpoint, z->maxmsg);
    kz_disconnect(z);
    if ((r = kz_connect(z)) < 0) {
        log_error("kernel socket %.128s: cannot connect again: %s", z->endpoint, strerror(-r));
        kz_disconnect(z);
    }
    if (z->on_oversize)
        z->on_oversize(z->data, z);
}

int kz_reopen(kzsock_t *z)
{
    int r;
    if (z->suspect)
        return -EBUSY;
    z->evl->timer_disarm(z->evl, z->again);
    kz_disconnect(z);
    if ((r = kz_connect(z)) < 0)
        kz_disconnect(z);
    return r;
}

int kz_open(kzsock_t *z, evl_t *evl, void *zctx, int type, const char *identity,
            const char *endpoint, void (*on_msg)(void *, kzsock_t *, zmq_msg_t *, size_t),
            void *data, long long maxmsg, void (*on_oversize)(void *, kzsock_t *))
{
    int err;

    memset(z, 0, sizeof(*z));
    z->evl = evl;
    z->zctx = zctx;
    z->type = type;
    z->on_msg = on_msg;
    z->data = data;
    z->maxmsg = maxmsg;
    z->on_oversize = on_oversize;
    if ((identity && !(z->identity = strdup(identity))) || !(z->endpoint = strdup(endpoint)) ||
        !(z->again = evl->timer_new(evl, kz_drain, z)) ||
        !(z->quiet = evl->timer_new(evl, kz_on_quiet, z))) {
        err = errno ? -errno : -ENOMEM;
        goto fail;
    }
    if ((err = kz_connect(z)) < 0)
        goto fail;
    return 0;
fail:
    kz_close(z);
    return err ? err : -EIO;
}

void kz_close(kzsock_t *z)
{
    kz_disconnect(z);
    if (z->evl) {
        evl_timer_destroy(z->evl, &z->again);
        evl_timer_destroy(z->evl, &z->quiet);
    }
    free(z->identity);
    z->identity = NULL;
    free(z->endpoint);
    z->endpoint = NULL;
}

int kz_send(kzsock_t *z, const jspan_t *frames, size_t n)
{
    int err = 0;
    if (!z->s)
        return -ENOTCONN;
    for (size_t i = 0; i < n; i++) {
        int flags = ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0);
        if (zmq_send(z->s, frames[i].p, frames[i].n, flags) < 0) {
            /* A multipart message is atomic: nothing was queued if the first part failed;
             * later parts cannot fail with EAGAIN once the first was accepted. */
            err = -errno;
            break;
        }
    }
    /* ZMQ_FD is edge-triggered and a send may have consumed its signal. */
    int ev = 0;
    size_t evsz = sizeof(ev);
    if (zmq_getsockopt(z->s, ZMQ_EVENTS, &ev, &evsz) == 0) {
        if (ev & ZMQ_POLLIN)
            z->evl->timer_arm(z->evl, z->again, 0);
        kz_pipe_check(z, ev);
    }
    return err;
}

int kz_send_jmsg(kzsock_t *z, jsign_t *sign, const jmsg_t *m)
{
    char sig[JSIGN_HEX_LEN + 1];
    jspan_t frames[6 + JMSG_MAX_BUFFERS];
    int r;

    if (m->nbuf > JMSG_MAX_BUFFERS)
        return -EMSGSIZE;
    if ((r = jsign_compute(sign, m->part, sig)) < 0)
        return r;
    frames[0] = (jspan_t){JMSG_DELIM, sizeof(JMSG_DELIM) - 1};
    frames[1] = (jspan_t){sig, strlen(sig)};
    for (int i = 0; i < 4; i++)
        frames[2 + i] = m->part[i];
    for (size_t i = 0; i < m->nbuf; i++)
        frames[6 + i] = m->buf[i];
    return kz_send(z, frames, 6 + m->nbuf);
}
