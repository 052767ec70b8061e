#include "gateway/handover.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "gateway/glisten.h"

extern char **environ;

#define HANDOVER_CLOSE_RANGE_CLOEXEC (1U << 2) /* CLOSE_RANGE_CLOEXEC, Linux 5.11 */

static char self_path[PATH_MAX]; /* handover_init's */

int handover_init(void)
{
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
    if (n < 0) {
        self_path[0] = '\0';
        return -errno;
    }
    self_path[n] = '\0';
    return 0;
}

int handover_check(void)
{
    struct stat st;
    if (!self_path[0]) {
        log_error("restart: the path kgw was started from is unknown");
        return -ENOENT;
    }
    if (stat(self_path, &st) < 0 || access(self_path, X_OK) < 0) {
        int err = errno;
        log_error("restart: cannot exec %s: %s", self_path, strerror(err));
        return -err;
    }
    if (!S_ISREG(st.st_mode)) {
        log_error("restart: %s is not a file", self_path);
        return -EACCES;
    }
    return 0;
}

int handover_take(json_t **ret)
{
    const char *v = getenv(HANDOVER_ENV);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long fd = strtol(v, &end, 10);
    bool ok = errno == 0 && *end == '\0' && end != v && fd >= 3 && fd <= INT_MAX;
    unsetenv(HANDOVER_ENV);
    /* the kernels' descriptors the record names (kmgr_hand_over): close-on-exec at once, so
     * no process started from here gets them, whatever becomes of the record */
    if (syscall(SYS_close_range, KMGR_HANDOVER_FD_MIN, ~0U, HANDOVER_CLOSE_RANGE_CLOEXEC) < 0)
        for (int d = KMGR_HANDOVER_FD_MIN; d < HANDOVER_FD_SCAN_MAX; d++)
            fcntl(d, F_SETFD, FD_CLOEXEC);
    if (!ok)
        return -EBADF;
    struct stat st;
    if (fstat((int)fd, &st) < 0 || st.st_size > HANDOVER_RECORD_MAX) {
        int err = errno;
        close((int)fd);
        return st.st_size > HANDOVER_RECORD_MAX ? -E2BIG : -err;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    ssize_t n = buf ? pread((int)fd, buf, (size_t)st.st_size, 0) : -1;
    int err = n < 0 ? (buf ? errno : ENOMEM) : 0;
    close((int)fd);
    json_error_t e;
    json_t *rec = n < 0 ? NULL : json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &e);
    free(buf);
    if (n < 0)
        return -err;
    if (!json_is_object(rec)) {
        json_decref(rec);
        return -EINVAL;
    }
    *ret = rec;
    return 1;
}

void handover_hold(const gw_t *g, int held[HANDOVER_LISTEN_MAX])
{
    const struct glisten *ls[HANDOVER_LISTEN_MAX] = {g->listener, g->metrics_listener};
    for (int i = 0; i < HANDOVER_LISTEN_MAX; i++) {
        held[i] = -1;
        if (ls[i] && (held[i] = fcntl(glisten_fd(ls[i]), F_DUPFD_CLOEXEC,
                                      3 + HANDOVER_LISTEN_MAX)) < 0)
            log_warn("restart: cannot keep a listening socket: %s", strerror(errno));
    }
}

/* The record in a memfd left open across exec: its descriptor, or -errno. */
static int write_record(const json_t *rec)
{
    char *s = json_dumps(rec, JSON_COMPACT);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    int fd = memfd_create("kgw-handover", 0); /* not close-on-exec: the new image reads it */
    int err = fd < 0 ? errno : 0;
    if (fd >= 0 && (n > HANDOVER_RECORD_MAX || write(fd, s, n) != (ssize_t)n)) {
        err = n > HANDOVER_RECORD_MAX ? E2BIG : errno ? errno : EIO;
        close(fd);
        fd = -1;
    }
    free(s);
    return fd < 0 ? -err : fd;
}

int handover_exec(int held[HANDOVER_LISTEN_MAX], const json_t *rec, char **argv)
{
    int n = 0;
    for (int i = 0; i < HANDOVER_LISTEN_MAX; i++) {
        /* held[] sit above 3 + HANDOVER_LISTEN_MAX: no dup2 here lands on another */
        if (held[i] >= 0 && dup2(held[i], 3 + n) == 3 + n)
            n++;
    }
    int rfd = write_record(rec);
    if (rfd < 0) {
        log_error("restart: cannot write the hand-over record: %s", strerror(-rfd));
        return rfd;
    }
    char num[16], pid[16], nfds[16];
    snprintf(num, sizeof(num), "%d", rfd);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    snprintf(nfds, sizeof(nfds), "%d", n);
    setenv(HANDOVER_ENV, num, 1);
    if (n > 0) {
        setenv("LISTEN_FDS", nfds, 1);
        setenv("LISTEN_PID", pid, 1);
    }
    log_info("restart: exec %s with %d listening socket%s", self_path, n, n == 1 ? "" : "s");
    fflush(NULL);
    execve(self_path, argv, environ);
    int err = errno;
    unsetenv(HANDOVER_ENV);
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_PID");
    close(rfd);
    log_error("restart: exec %s: %s", self_path, strerror(err));
    return -err;
}
