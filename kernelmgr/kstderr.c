/* A kernel process's stderr: a pipe per process, read on the loop into a fixed ring of its
 * newest bytes (common/tailbuf.h, TAILBUF_SIZE: whatever the kernel writes, the gateway holds no
 * more; its first KSTDERR_EARLY_MAX bytes are held in a buffer of their size, the ring comes
 * after), written to the log when the process fails to start or dies unasked, and quoted in
 * short in the cause a client sees. The kernel's secrets (its connection key, the values of its
 * environment) are blotted out of both. Reading is paced (RATE_BYTES per RATE_WINDOW_MS): a
 * kernel flooding its stderr blocks on its own full pipe instead of costing the gateway's loop
 * more than that. */
#include "kernelmgr/kstderr_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/tailbuf.h"
#include "common/util.h"
#include "kernelmgr/private.h"

#define READ_CHUNK     16384
#define RATE_WINDOW_MS 100
#define RATE_BYTES     (128 * 1024) /* per window: 1.25 MiB/s per kernel, then paused */
#define DRAIN_MAX     (1 << 20)   /* read at the process's end, at most (a pipe holds 64 KiB) */
#define EXCERPT_LINES 3
#define LOG_LINES     40
/* Bytes kept in a buffer of their size before the ring is allocated: a kernel's start writes a
 * few hundred (warnings), and most write no more. */
#define KSTDERR_EARLY_MAX 2048
_Static_assert(KSTDERR_EARLY_MAX <= TAILBUF_SIZE, "the early bytes fit in the ring");

/* A kernel's stderr (k->err): allocated when its first process starts, kept with the kernel
 * (its last words outlive the process). */
struct kstderr {
    int fd;                 /* the pipe's read end (-1: none) */
    evl_io_t *io;           /* NULL while paused */
    evl_timer_t *pause;     /* the end of a pause (created by the first) */
    uint64_t window_ms;     /* the pacing window: since when, bytes read in it */
    size_t window_bytes;
    /* its newest bytes: the first KSTDERR_EARLY_MAX in early, sized to them (most kernels
     * write a few lines at start, then nothing); past that a ring (NULL until then) */
    struct tailbuf *tail;
    char *early;
    size_t early_len;
};

static void on_readable(void *data);

static void close_pipe(kernel_t *k)
{
    struct kstderr *e = k->err;
    if (!e)
        return;
    evl_io_destroy(k->m->evl, &e->io);
    if (e->pause)
        k->m->evl->timer_disarm(k->m->evl, e->pause);
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
}

/* Bytes written so far by the process. */
static uint64_t total(const struct kstderr *e)
{
    return e->tail ? e->tail->total : e->early_len;
}

/* Keeps n more bytes: in early, sized to them, while they are few; then in the ring. Bytes
 * that find no memory are lost (an excerpt is a courtesy, the kernel goes on). */
static void keep(struct kstderr *e, const char *p, size_t n)
{
    if (!e->tail && e->early_len + n <= KSTDERR_EARLY_MAX) {
        char *b = realloc(e->early, e->early_len + n);
        if (b) {
            memcpy(b + e->early_len, p, n);
            e->early = b;
            e->early_len += n;
        }
        return;
    }
    if (!e->tail) {
        if (!(e->tail = malloc(sizeof(*e->tail))))
            return;
        tailbuf_init(e->tail);
        if (e->early_len)
            tailbuf_append(e->tail, e->early, e->early_len);
        free(e->early);
        e->early = NULL;
        e->early_len = 0;
    }
    tailbuf_append(e->tail, p, n);
}

/* Forgets what was kept (a new process: its own last words). */
static void forget(struct kstderr *e)
{
    free(e->tail);
    e->tail = NULL;
    free(e->early);
    e->early = NULL;
    e->early_len = 0;
}

/* Reads up to max bytes; false at EOF or an error (the pipe is closed then). */
static bool read_some(kernel_t *k, size_t max)
{
    char buf[READ_CHUNK];
    for (size_t got = 0; got < max;) {
        ssize_t n = read(k->err->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0) {
            close_pipe(k);
            return false;
        }
        keep(k->err, buf, (size_t)n);
        got += (size_t)n;
    }
    return true;
}

static void on_pause_over(void *data);

static void on_readable(void *data)
{
    kernel_t *k = data;
    struct kstderr *e = k->err;
    evl_t *l = k->m->evl;
    uint64_t now = util_now_ms();
    if (now - e->window_ms >= RATE_WINDOW_MS) {
        e->window_ms = now;
        e->window_bytes = 0;
    }
    uint64_t before = total(e);
    if (!read_some(k, RATE_BYTES - e->window_bytes))
        return; /* EOF: closed */
    e->window_bytes += (size_t)(total(e) - before);
    if (e->window_bytes >= RATE_BYTES &&
        (e->pause || (e->pause = l->timer_new(l, on_pause_over, k)))) {
        /* its share of this window is read: not watched until the next one (a pause that
         * finds no memory for its timer is not made: reading goes on) */
        evl_io_destroy(l, &e->io);
        l->timer_arm(l, e->pause, e->window_ms + RATE_WINDOW_MS - now);
    }
}

static void on_pause_over(void *data)
{
    kernel_t *k = data;
    struct kstderr *e = k->err;
    if (e->fd < 0 || e->io)
        return;
    if (!(e->io = k->m->evl->io_add(k->m->evl, e->fd, on_readable, k)))
        close_pipe(k); /* cannot watch it: the kernel's writes fail from now on */
}

int kstderr__open(kernel_t *k, int *ret_wfd)
{
    int p[2];
    struct kstderr *e = k->err;
    close_pipe(k);
    if (!e) {
        if (!(e = calloc(1, sizeof(*e))))
            return -ENOMEM;
        e->fd = -1;
        k->err = e;
    }
    forget(e); /* a new process: its own last words */
    e->window_ms = 0;
    e->window_bytes = 0;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0 ||
        !(e->io = k->m->evl->io_add(k->m->evl, p[0], on_readable, k))) {
        int r = errno ? -errno : -ENOMEM;
        close(p[0]);
        close(p[1]);
        return r;
    }
    e->fd = p[0];
    *ret_wfd = p[1];
    return 0;
}

void kstderr__drain(kernel_t *k)
{
    if (k->err && k->err->fd >= 0)
        read_some(k, DRAIN_MAX);
    close_pipe(k);
}

int kstderr__resume(kernel_t *k, int fd)
{
    int wfd = -1, r = kstderr__open(k, &wfd);
    if (r < 0)
        return r;
    /* the pipe kstderr__open made is for a new process: the one the process has replaces it */
    close(wfd);
    struct kstderr *e = k->err;
    evl_io_destroy(k->m->evl, &e->io);
    close(e->fd);
    e->fd = -1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
        return -errno;
    if (!(e->io = k->m->evl->io_add(k->m->evl, fd, on_readable, k)))
        return errno ? -errno : -ENOMEM;
    e->fd = fd;
    return 0;
}

int kstderr__fd(const kernel_t *k)
{
    return k->err ? k->err->fd : -1;
}

void kstderr__free(kernel_t *k)
{
    if (!k->err)
        return;
    close_pipe(k);
    evl_timer_destroy(k->m->evl, &k->err->pause);
    forget(k->err);
    free(k->err);
    k->err = NULL;
}

/* Environment variables whose values are not secrets and help to read an error. */
static bool harmless(const char *name, size_t n)
{
    static const char *const names[] = {"PATH", "HOME", "LANG", "TERM", "USER", "SHELL",
                                        "PYTHONPATH", "MPLBACKEND", "PWD", "TMPDIR"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == n && !memcmp(names[i], name, n))
            return true;
    return n >= 3 && !memcmp(name, "LC_", 3);
}

/* The tail, oldest first, with the kernel's secrets blotted out; its length. */
static size_t tail_copy(const kernel_t *k, char out[TAILBUF_SIZE])
{
    const struct kstderr *e = k->err;
    size_t n = e ? e->early_len : 0;
    if (e && e->tail)
        n = tailbuf_copy(e->tail, out, TAILBUF_SIZE);
    else if (n)
        memcpy(out, e->early, n);
    else
        return 0;
    tailbuf_redact(out, n, k->key, strlen(k->key));
    for (size_t i = 0; k->envp && k->envp[i]; i++) {
        const char *eq = strchr(k->envp[i], '=');
        if (eq && !harmless(k->envp[i], (size_t)(eq - k->envp[i])) && strlen(eq + 1) >= 6)
            tailbuf_redact(out, n, eq + 1, strlen(eq + 1));
    }
    return n;
}

size_t kstderr__excerpt(const kernel_t *k, char *out, size_t outsz)
{
    char t[TAILBUF_SIZE];
    size_t n = tail_copy(k, t);
    if (outsz)
        out[0] = '\0';
    return n ? tailbuf_excerpt(t, n, EXCERPT_LINES, out, outsz) : 0;
}

void kstderr__log(const kernel_t *k)
{
    char t[TAILBUF_SIZE], line[TAILBUF_SIZE];
    size_t n = tail_copy(k, t);
    if (!n) {
        log_debug("kernel=%s: its stderr was empty", k->id);
        return;
    }
    /* the last LOG_LINES lines, each sanitised as an excerpt of one line */
    size_t start = n, lines = 0;
    while (start > 0 && lines <= LOG_LINES)
        if (t[--start] == '\n')
            lines++;
    if (lines > LOG_LINES)
        start++;
    log_warn("kernel=%s: the end of its stderr (%llu bytes in all):", k->id,
             (unsigned long long)total(k->err));
    for (size_t i = start; i < n;) {
        const char *nl = memchr(t + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (t + i)) : n - i;
        if (tailbuf_excerpt(t + i, len, 1, line, sizeof(line)))
            log_warn("kernel=%s: stderr: %s", k->id, line);
        i += len + 1;
    }
}
