/* A listening socket accepted on the gateway's loop, handed to lws (gateway/glisten.h). */
#include "gateway/glisten.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"

#define GLISTEN_PAUSE_MS 100 /* out of descriptors: the next try at accepting */

struct glisten {
    evl_t *l;
    int fd;
    evl_io_t *io;
    evl_timer_t *pause; /* armed while out of descriptors: accepting resumes when it fires */
    struct lws_vhost *vh;
    lws_adoption_type type;
    glisten_filter_fn *filter;
    void *data;
};

/* Whether fd is a listening TCP socket bound to port and to addr (a wildcard address matches
 * only a wildcard of the same family). */
static bool bound_to(int fd, const struct sockaddr *addr, long long port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int type = 0, listening = 0;
    socklen_t tl = sizeof(type), ll = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) < 0 || !listening ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0 || ss.ss_family != addr->sa_family)
        return false;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)&ss, *b = (const void *)addr;
        return ntohs(a->sin_port) == port && a->sin_addr.s_addr == b->sin_addr.s_addr;
    }
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)&ss, *b = (const void *)addr;
        return ntohs(a->sin6_port) == port &&
               !memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr));
    }
    return false;
}

static int make_socket(const struct addrinfo *ai, long long port)
{
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        (ss.ss_family == AF_INET6 && /* "::" takes IPv4 too, as lws's listener did */
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0) ||
        bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) < 0 || listen(fd, GLISTEN_BACKLOG) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

int glisten_socket(const char *ip, long long port, int *inherited, int n)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (port < 1 || port > 65535)
        return -EINVAL;
    int rc = getaddrinfo(ip && ip[0] ? ip : NULL, NULL, &hints, &res);
    if (rc != 0)
        return rc == EAI_SYSTEM ? -errno : rc == EAI_MEMORY ? -ENOMEM : -EADDRNOTAVAIL;
    /* "": the IPv6 wildcard takes IPv4 too; otherwise the first address */
    const struct addrinfo *ai = res;
    for (const struct addrinfo *p = res; p && !(ip && ip[0]); p = p->ai_next)
        if (p->ai_family == AF_INET6)
            ai = p;
    if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) {
        struct sockaddr_storage want;
        memcpy(&want, ai->ai_addr, ai->ai_addrlen);
        for (int i = 0; i < n; i++) {
            if (inherited[i] >= 0 && bound_to(inherited[i], (struct sockaddr *)&want, port)) {
                int fd = inherited[i];
                inherited[i] = -1;
                freeaddrinfo(res);
                int fl = fcntl(fd, F_GETFL);
                if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
                    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
                    int err = errno;
                    close(fd);
                    return -err;
                }
                log_info("listening on %.64s port %lld: the socket kgw was given", ip, port);
                return fd;
            }
        }
        rc = make_socket(ai, port);
    } else {
        rc = -EAFNOSUPPORT;
    }
    freeaddrinfo(res);
    return rc;
}

static void on_readable(void *data);

static void on_pause_end(void *data)
{
    glisten_t *gl = data;
    if (!gl->io && !(gl->io = gl->l->io_add(gl->l, gl->fd, on_readable, gl)))
        gl->l->timer_arm(gl->l, gl->pause, GLISTEN_PAUSE_MS);
}

static void on_readable(void *data)
{
    glisten_t *gl = data;
    for (int i = 0; i < GLISTEN_ACCEPT_MAX; i++) {
        struct lws_filter_network_conn_args a;
        memset(&a, 0, sizeof(a));
        a.clilen = sizeof(a.cli_addr);
        int fd = accept4(gl->fd, (struct sockaddr *)&a.cli_addr, &a.clilen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* the connection stays in the backlog; a level-triggered watch would spin */
                log_warn("cannot accept a connection: %s (trying again in %d ms)",
                         strerror(errno), GLISTEN_PAUSE_MS);
                evl_io_destroy(gl->l, &gl->io);
                gl->l->timer_arm(gl->l, gl->pause, GLISTEN_PAUSE_MS);
            }
            return; /* EAGAIN, or the client gave up meanwhile (ECONNABORTED): the next turn */
        }
        a.accept_fd = fd;
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (gl->filter && gl->filter(gl->data, &a) != 0) {
            close(fd);
            continue;
        }
        lws_sock_file_fd_type sock = {.sockfd = fd};
        if (!lws_adopt_descriptor_vhost(gl->vh, gl->type, sock, NULL, NULL))
            log_warn("cannot serve a connection: lws did not take it"); /* lws closed it */
    }
}

glisten_t *glisten_new(evl_t *l, int fd, struct lws_vhost *vh, bool tls, glisten_filter_fn *filter,
                       void *data)
{
    glisten_t *gl = calloc(1, sizeof(*gl));
    if (!gl) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    *gl = (glisten_t){.l = l, .fd = fd, .vh = vh, .filter = filter, .data = data,
                      .type = LWS_ADOPT_SOCKET | LWS_ADOPT_HTTP | (tls ? LWS_ADOPT_ALLOW_SSL : 0)};
    if (!(gl->pause = l->timer_new(l, on_pause_end, gl)) ||
        !(gl->io = l->io_add(l, fd, on_readable, gl))) {
        int err = errno;
        glisten_destroy(&gl);
        errno = err;
        return NULL;
    }
    return gl;
}

void glisten_destroy(glisten_t **p)
{
    glisten_t *gl = *p;
    if (!gl)
        return;
    evl_io_destroy(gl->l, &gl->io);
    evl_timer_destroy(gl->l, &gl->pause);
    if (gl->fd >= 0)
        close(gl->fd);
    free(gl);
    *p = NULL;
}

int glisten_fd(const glisten_t *gl)
{
    return gl->fd;
}
