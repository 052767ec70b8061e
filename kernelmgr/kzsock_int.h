/* kernelmgr internal (floor 1, calls nothing in kernelmgr/): a watched ZeroMQ socket
 * (kzsock.c). */
#ifndef KGW_KERNELMGR_KZSOCK_INT_H
#define KGW_KERNELMGR_KZSOCK_INT_H

#include <stdbool.h>
#include <zmq.h>

#include "common/evl.h"
#include "protocol/jmsg.h"
#include "protocol/jsign.h"

#define KZ_MAX_FRAMES (JMSG_MAX_IDS + 6 + JMSG_MAX_BUFFERS)
/* Messages and bytes a socket reads per loop turn before it yields to the others: with several
 * kernels flooding output, a quiet kernel's message waits for one turn of all of them. */
#define KZ_DRAIN_BATCH 64
#define KZ_DRAIN_BYTES (64 * 1024)
/* Messages libzmq may queue for the gateway on a DEALER (shell, control, stdin, heartbeat):
 * each is at most --max-kernel-message-bytes, and libzmq's I/O thread reads ahead of the loop
 * (which checks a message's signature as it takes it), so a kernel sending large replies fast
 * had up to 10 000 of them held in the gateway (24 of 8 MiB: a peak RSS of 78-142 MiB; with
 * 4, 62 MiB). Replies are few (one per request, 256 in flight per session at most): the
 * kernel's ROUTER keeps the rest (its send queue of 1000, in the kernel's memory). */
#define KZ_DEALER_RCVHWM 4

/* A watched ZeroMQ socket. ZMQ_FD is edge-triggered: after every send on the socket the
 * owner re-checks ZMQ_EVENTS (kz_after_send) so no arrival is missed.
 *
 * With a message limit (maxmsg > 0) libzmq refuses a frame over it from its header, before
 * allocating it, and drops the connection for good (a protocol error: libzmq 4.3 does not
 * reconnect then, and ends the socket's pipe to it). A DEALER shows that at no cost: its
 * ZMQ_EVENTS loses ZMQ_POLLOUT for good (a peer that went away keeps the pipe, libzmq retries
 * at once), and the pipe's end signals ZMQ_FD. A SUB cannot send: a monitor tells the drop from
 * a peer that went away, a disconnect with no retry. Either seen for KZ_OVERSIZE_CONFIRM_MS is
 * an oversize message; the socket is then opened again and on_oversize runs. */
#define KZ_OVERSIZE_CONFIRM_MS 1000
typedef struct kzsock {
    void *s;
    evl_io_t *io;       /* on its ZMQ_FD */
    evl_timer_t *again; /* re-drain on the next turn */
    evl_t *evl;
    void (*on_msg)(void *data, struct kzsock *z, zmq_msg_t *frames, size_t n);
    void *data;
    /* to open it again, and the oversize watch (maxmsg > 0) */
    void *zctx;
    int type;
    char *identity, *endpoint;
    long long maxmsg;
    void (*on_oversize)(void *data, struct kzsock *z);
    bool watch;     /* the oversize watch is on */
    void *mon;      /* PAIR socket reading the socket's monitor events */
    evl_io_t *mon_io; /* on its ZMQ_FD */
    evl_timer_t *quiet; /* a disconnect not followed by a retry: oversize */
    bool suspect;       /* quiet is armed: an oversize frame is being confirmed */
} kzsock_t;

/* maxmsg: bytes per frame from the peer (0: libzmq's default, none); on_oversize runs once
 * the socket was reset for a frame over it (NULL: no watch, and the connection stays
 * dropped). The socket costs two descriptors (its mailbox, its ipc connection); a watch on a
 * SUB two more (the monitor's mailbox and the PAIR's), on a DEALER none. */
int kz_open(kzsock_t *z, evl_t *evl, void *zctx, int type, const char *identity,
            const char *endpoint, void (*on_msg)(void *, kzsock_t *, zmq_msg_t *, size_t),
            void *data, long long maxmsg, void (*on_oversize)(void *, kzsock_t *));
void kz_close(kzsock_t *z);
/* Closes the socket and opens it again, connected to the same endpoint: what libzmq holds for
 * it is freed and allocated anew (what is queued either way is dropped). 0; -EBUSY while an
 * oversize frame is being confirmed (nothing done: that goes first); or -errno (then the
 * socket is closed: kz_send fails with -ENOTCONN until a reopen succeeds). */
int kz_reopen(kzsock_t *z);
/* Sends frames (MORE on all but the last); -EAGAIN when the queue is full. */
int kz_send(kzsock_t *z, const jspan_t *frames, size_t n);
/* Sends a signed Jupyter message. */
int kz_send_jmsg(kzsock_t *z, jsign_t *sign, const jmsg_t *m);
/* Handles what has arrived now, outside the loop's order (a callback that must see the
 * kernel's iopub up to date). */
void kz_drain_now(kzsock_t *z);

#endif
