#include "gateway/reqguard.h"

#include <dlfcn.h>
#include <errno.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "protocol/reqscan.h"

#define HELD_MAX 2 /* bytes of an unfinished escape kept for the next read */

struct slot {
    reqscan_t scan;
    uint8_t held[HELD_MAX];
    uint8_t nheld;
    bool active;
    bool dropping; /* pipelined: what arrives now is read and dropped */
};

typedef ssize_t recv_fn(int, void *, size_t, int);
typedef int ssl_read_fn(SSL *, void *, int);

static struct slot *slots;
static size_t nslots;
static __thread bool loop_thread; /* set on the thread that runs the loop */
static recv_fn *real_recv;
static ssl_read_fn *real_ssl_read;

/* Before main, on a single thread: the lookups need no locking. */
__attribute__((constructor)) static void resolve(void)
{
    real_recv = (recv_fn *)dlsym(RTLD_NEXT, "recv");
    real_ssl_read = (ssl_read_fn *)dlsym(RTLD_NEXT, "SSL_read");
}

int reqguard_init(size_t nfds)
{
    if (!(slots = calloc(nfds, sizeof(*slots))))
        return -ENOMEM;
    nslots = nfds;
    loop_thread = true;
    return 0;
}

void reqguard_fini(void)
{
    free(slots);
    slots = NULL;
    nslots = 0;
}

void reqguard_open(int fd)
{
    if (fd < 0 || (size_t)fd >= nslots)
        return;
    memset(&slots[fd], 0, sizeof(slots[fd]));
    reqscan_init(&slots[fd].scan);
    slots[fd].active = true;
}

void reqguard_close(int fd)
{
    if (fd >= 0 && (size_t)fd < nslots)
        slots[fd].active = false;
}

static struct slot *slot_of(int fd)
{
    if (!loop_thread || fd < 0 || (size_t)fd >= nslots || !slots[fd].active)
        return NULL;
    if (reqscan_done(&slots[fd].scan) && !slots[fd].dropping)
        return NULL;
    return &slots[fd];
}

void reqguard_answered(int fd)
{
    if (fd >= 0 && (size_t)fd < nslots && slots[fd].active)
        reqscan_answered(&slots[fd].scan);
}

bool reqguard_pipelined(int fd)
{
    return fd >= 0 && (size_t)fd < nslots && slots[fd].active && slots[fd].dropping;
}

/* A read into (b, n), like recv: the C library's or the TLS library's. */
typedef ssize_t read_fn(void *ctx, void *b, size_t n);

#define DROP_READS_MAX 64 /* reads dropped per call: a fast sender cannot hold the loop */

/* Reads and drops what the client sends until the read would block (or fails, or ends); after
 * DROP_READS_MAX reads, "would block" all the same (poll reports the rest). */
static ssize_t drop_all(uint8_t *buf, size_t len, read_fn *rd, void *ctx)
{
    for (int i = 0; i < DROP_READS_MAX; i++) {
        ssize_t r = rd(ctx, buf, len);
        if (r <= 0)
            return r;
    }
    errno = EAGAIN;
    return -1;
}

static ssize_t scanned_read(struct slot *s, uint8_t *buf, size_t len, read_fn *rd, void *ctx)
{
    size_t h = s->nheld;
    if (s->dropping)
        return drop_all(buf, len, rd, ctx);
    if (len <= HELD_MAX) { /* too small to scan into (lws reads kilobytes): stop scanning */
        reqscan_stop(&s->scan);
        if (h == 0)
            return rd(ctx, buf, len);
        size_t n = h < len ? h : len;
        memcpy(buf, s->held, n);
        memmove(s->held, s->held + n, h - n);
        s->nheld = (uint8_t)(h - n);
        return (ssize_t)n;
    }
    memcpy(buf, s->held, h);
    for (;;) {
        ssize_t r = rd(ctx, buf + h, len - h);
        if (r < 0)
            return r; /* held bytes stay held */
        size_t total = h + (size_t)r;
        bool eof = r == 0;
        size_t ok = reqscan_feed(&s->scan, buf, total, eof);
        if (reqscan_blocked(&s->scan)) {
            s->dropping = true;
            s->nheld = 0;
            if (ok > 0 || eof)
                return (ssize_t)ok;
            return drop_all(buf, len, rd, ctx);
        }
        s->nheld = (uint8_t)(total - ok);
        memcpy(s->held, buf + ok, s->nheld);
        if (ok > 0 || eof)
            return (ssize_t)ok;
        h = s->nheld; /* only an unfinished escape so far: read on (EAGAIN ends it) */
    }
}

struct recv_ctx {
    int fd, flags;
};

static ssize_t do_recv(void *ctx, void *b, size_t n)
{
    struct recv_ctx *c = ctx;
    return real_recv(c->fd, b, n, c->flags);
}

__attribute__((visibility("default"))) ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    if (!real_recv) /* called before the constructor ran (another one's constructor) */
        resolve();
    struct slot *s = (flags & MSG_PEEK) ? NULL : slot_of(fd);
    if (!s)
        return real_recv(fd, buf, len, flags);
    struct recv_ctx c = {fd, flags};
    return scanned_read(s, buf, len, do_recv, &c);
}

static ssize_t do_ssl_read(void *ctx, void *b, size_t n)
{
    return real_ssl_read(ctx, b, n > INT32_MAX ? INT32_MAX : (int)n);
}

__attribute__((visibility("default"))) int SSL_read(SSL *ssl, void *buf, int num)
{
    if (!real_ssl_read)
        resolve();
    struct slot *s = num > 0 ? slot_of(SSL_get_fd(ssl)) : NULL;
    if (!s)
        return real_ssl_read(ssl, buf, num);
    return (int)scanned_read(s, buf, (size_t)num, do_ssl_read, ssl);
}
