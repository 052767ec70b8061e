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
#include <unistd.h>

#include "common/log.h"
#include "gateway/glisten.h"

extern char **environ;

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

static int parse_record(const char *buf, size_t n, char *key, size_t keysz)
{
    json_error_t e;
    json_t *rec = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &e);
    if (!json_is_object(rec)) {
        json_decref(rec);
        return -EINVAL;
    }
    json_t *k = json_object_get(rec, "api_key");
    int r = 1;
    key[0] = '\0';
    if (json_is_string(k) && json_string_length(k) < keysz)
        memcpy(key, json_string_value(k), json_string_length(k) + 1);
    else if (k)
        r = -EINVAL;
    json_decref(rec);
    return r;
}

int handover_take(char *key, size_t keysz)
{
    const char *v = getenv(HANDOVER_ENV);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long fd = strtol(v, &end, 10);
    bool ok = errno == 0 && *end == '\0' && end != v && fd >= 3 && fd <= INT_MAX;
    unsetenv(HANDOVER_ENV);
    if (!ok)
        return -EBADF;
    char buf[HANDOVER_RECORD_MAX];
    ssize_t n = pread((int)fd, buf, sizeof(buf), 0);
    int err = n < 0 ? errno : 0;
    close((int)fd);
    if (n < 0)
        return -err;
    if ((size_t)n == sizeof(buf))
        return -E2BIG;
    return parse_record(buf, (size_t)n, key, keysz);
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
static int write_record(const char *api_key)
{
    json_t *rec = json_object();
    if (!rec || (api_key && json_object_set_new(rec, "api_key", json_string(api_key)) < 0)) {
        json_decref(rec);
        return -ENOMEM;
    }
    char *s = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    int fd = memfd_create("kgw-handover", 0); /* not close-on-exec: the new image reads it */
    int err = fd < 0 ? errno : 0;
    if (fd >= 0 && (n >= HANDOVER_RECORD_MAX || write(fd, s, n) != (ssize_t)n)) {
        err = n >= HANDOVER_RECORD_MAX ? E2BIG : errno ? errno : EIO;
        close(fd);
        fd = -1;
    }
    free(s);
    return fd < 0 ? -err : fd;
}

int handover_exec(int held[HANDOVER_LISTEN_MAX], const char *api_key, char **argv)
{
    int n = 0;
    for (int i = 0; i < HANDOVER_LISTEN_MAX; i++) {
        /* held[] sit above 3 + HANDOVER_LISTEN_MAX: no dup2 here lands on another */
        if (held[i] >= 0 && dup2(held[i], 3 + n) == 3 + n)
            n++;
    }
    int rfd = write_record(api_key);
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
