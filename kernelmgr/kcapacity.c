/* Capacity: how many more kernels the gateway's descriptors (and, reported only, the host's
 * memory) fit. A start that the descriptor limit could not carry is refused up front (-EMFILE,
 * kmgr.c, after the warm pool gave way) instead of failing half-way ("Too many open files" in
 * the fork server, then in exec). This file is the arithmetic only.
 *
 * The cost of a kernel is measured, not assumed: 10 open files once it runs idle (its iopub and
 * heartbeat ZeroMQ sockets with their mailboxes and ipc connections, iopub's oversize monitor,
 * the pidfd, its stderr pipe, its callback socket, its command socket; docs/operations.md
 * "Capacity" has the
 * table), more while it starts (its shell socket); KMGR_KERNEL_FDS rounds that up. The owner adds
 * what a kernel's clients cost (fd_per_client: one websocket) and keeps a reserve for everything
 * else (fd_reserve: new connections, file transfers, logs). Kernels still starting have not opened
 * all theirs yet: each counts half a kernel on top of what is open. */
#include "kernelmgr/kcapacity_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/resource.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/private.h"

long long kcapacity__mem_available(void)
{
    char line[128];
    long long kb = -1;
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static size_t starting(kernel_t *const *v, size_t n)
{
    size_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i]->state == KERNEL_STARTING || v[i]->state == KERNEL_RESTARTING;
    return s;
}

long long kcapacity__fd_per_kernel(const kmgr_t *m)
{
    return KMGR_KERNEL_FDS + (m->o.fd_per_client > 0 ? m->o.fd_per_client : 0);
}

/* Descriptors left for new kernels: the limit less what is open, what starting kernels will
 * still open and the reserve (may be negative; LLONG_MAX when unlimited or unknown). */
long long kcapacity__fd_left(const kmgr_t *m)
{
    struct rlimit rl;
    long long open = util_open_fds();
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || open < 0)
        return LLONG_MAX;
    long long pending = (long long)(starting(m->v, m->n) + starting(m->pv, m->pn)) *
                        (KMGR_KERNEL_FDS / 2);
    return (long long)rl.rlim_cur - open - pending - (m->o.fd_reserve > 0 ? m->o.fd_reserve : 0);
}

void kmgr_capacity(const kmgr_t *m, struct kmgr_capacity *ret)
{
    struct kmgr_capacity c = {.fd_limit = -1, .mem_available = -1, .mem_kernels = -1};
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        c.fd_limit = (long long)rl.rlim_cur;
    c.fd_open = util_open_fds();
    c.fd_per_kernel = kcapacity__fd_per_kernel(m);
    c.fd_reserve = m->o.fd_reserve > 0 ? m->o.fd_reserve : 0;
    long long left = kcapacity__fd_left(m);
    if (left != LLONG_MAX) /* pooled kernels give way to a start */
        left += (long long)m->pn * KMGR_KERNEL_FDS;
    c.fd_kernels = left == LLONG_MAX ? -1 : left > 0 ? left / c.fd_per_kernel : 0;
    long long slots = m->o.max_kernels > 0 && (size_t)m->o.max_kernels > m->n
                          ? m->o.max_kernels - (long long)m->n
                          : 0;
    c.kernels_free = c.fd_kernels >= 0 && c.fd_kernels < slots ? c.fd_kernels : slots;
    c.mem_per_kernel = m->o.sandbox ? m->o.sandbox->lim.mem_bytes : 0;
    c.mem_available = kcapacity__mem_available();
    if (c.mem_available >= 0 && c.mem_per_kernel > 0)
        c.mem_kernels = c.mem_available / c.mem_per_kernel;
    *ret = c;
}
