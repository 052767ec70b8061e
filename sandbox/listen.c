/* sbx_listen_in: a listening socket inside a sandbox's network namespace. */
#include "sandbox/sbx.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

struct listen_job {
    int nsfd;
    unsigned short port;
    int fd;
    int err;
};

static void *listen_thread(void *arg)
{
    struct listen_job *j = arg;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(j->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, s = -1;
    /* this thread only: it ends here, so nothing has to be restored */
    if (setns(j->nsfd, CLONE_NEWNET) < 0 ||
        (s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 64) < 0) {
        j->err = errno;
        if (s >= 0)
            close(s);
        return NULL;
    }
    j->fd = s;
    return NULL;
}

int sbx_listen_in(pid_t pid, int pidfd, unsigned short port, int *ret_fd)
{
    struct listen_job j = {.nsfd = pidfd, .port = port, .fd = -1};
    int own = -1, r;
    if (pid <= 1)
        return -ESRCH;
    if (pidfd < 0) {
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/ns/net", (int)pid);
        if ((own = open(p, O_RDONLY | O_CLOEXEC)) < 0)
            return -errno;
        j.nsfd = own;
    }
    pthread_t t;
    if ((r = pthread_create(&t, NULL, listen_thread, &j)) != 0) {
        if (own >= 0)
            close(own);
        return -r;
    }
    pthread_join(t, NULL);
    if (own >= 0)
        close(own);
    if (j.fd < 0)
        return -(j.err ? j.err : EIO);
    *ret_fd = j.fd;
    return 0;
}
