/* kernelmgr/kegress.c on a poll() loop, without a sandbox: the proxy listens on a loopback port
 * of the test's own network namespace; "the internet" is a small HTTP server on loopback (a
 * thread). A client thread speaks to the proxy with blocking sockets while the loop runs.
 * Allowed forwarding and CONNECT, refusals (policy, garbage, a name resolving to loopback),
 * the connection and byte caps, and the statistics; run under valgrind by the valgrind setup. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "evl_poll.h"

#include "kernelmgr/kegress.h"

static int listen_on(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int one = 1, s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 16) < 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return s;
}

/* the upstream: answers every request with BODY_LEN bytes, or echoes after "ECHO" */
#define BODY_LEN 100000
static int up_fd, up_port, px_port;
static atomic_bool up_stop;

static void *upstream(void *arg)
{
    static char body[BODY_LEN];
    memset(body, 'b', sizeof(body));
    while (!atomic_load(&up_stop)) {
        int c = accept(up_fd, NULL, NULL);
        if (c < 0)
            break;
        char buf[4096];
        ssize_t n = recv(c, buf, sizeof(buf) - 1, 0);
        if (n > 0 && !strncmp(buf, "ECHO", 4)) {
            do {
                send(c, buf, (size_t)n, MSG_NOSIGNAL);
            } while ((n = recv(c, buf, sizeof(buf), 0)) > 0);
        } else if (n > 0) {
            char head[128];
            int hl = snprintf(head, sizeof(head),
                              "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
                              BODY_LEN);
            send(c, head, (size_t)hl, MSG_NOSIGNAL);
            send(c, body, sizeof(body), MSG_NOSIGNAL);
        }
        close(c);
    }
    return NULL;
}

/* client side: one exchange, returns what came back (up to cap bytes) */
static char *exchange(const char *req, size_t cap, size_t *ret_len)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)px_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {10, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char *out = calloc(1, cap + 1);
    size_t len = 0;
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
        send(s, req, strlen(req), MSG_NOSIGNAL);
        ssize_t n;
        while (len < cap && (n = recv(s, out + len, cap - len, 0)) > 0)
            len += (size_t)n;
    }
    close(s);
    *ret_len = len;
    return out;
}

static atomic_bool client_done;
static struct kegress_stats stats;

static bool starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

static void *client(void *arg)
{
    char req[256];
    size_t n;
    char *r;

    CHECK_CASE("forward");
    snprintf(req, sizeof(req), "GET http://127.0.0.1:%d/x HTTP/1.1\r\nHost: h\r\n\r\n", up_port);
    r = exchange(req, 2 * BODY_LEN, &n);
    CHECK(starts(r, "HTTP/1.1 200 OK"));
    CHECK(n > BODY_LEN && n < BODY_LEN + 200);
    free(r);

    CHECK_CASE("connect");
    snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\nECHO hello", up_port);
    r = exchange(req, 49, &n); /* all of it: the tunnel stays open */
    CHECK(starts(r, "HTTP/1.1 200 Connection established\r\n\r\nECHO hello"));
    free(r);

    CHECK_CASE("denied: port");
    snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", px_port);
    r = exchange(req, 1000, &n);
    CHECK(starts(r, "HTTP/1.1 403 kgw egress: host and port are not in"));
    free(r);

    CHECK_CASE("denied: a name resolving to loopback, not marked");
    snprintf(req, sizeof(req), "CONNECT localhost:%d HTTP/1.1\r\n\r\n", px_port);
    r = exchange(req, 1000, &n);
    CHECK(starts(r, "HTTP/1.1 403 kgw egress: the host resolves to a loopback address"));
    free(r);

    CHECK_CASE("garbage");
    r = exchange("\x16\x03\x01\x02 hello\r\n\r\n", 1000, &n);
    CHECK(starts(r, "HTTP/1.1 400 "));
    free(r);
    r = exchange("GET /local HTTP/1.1\r\n\r\n", 1000, &n);
    CHECK(starts(r, "HTTP/1.1 501 "));
    free(r);

    CHECK_CASE("allowed: a marked name (lookup thread)");
    snprintf(req, sizeof(req), "GET http://localhost:%d/ HTTP/1.1\r\n\r\n", up_port);
    r = exchange(req, 100, &n);
    CHECK(starts(r, "HTTP/1.1 200 OK"));
    free(r);

    CHECK_CASE("byte cap");
    /* over 100 KB relayed so far (the cap is 150 KB): this one is cut, or refused */
    snprintf(req, sizeof(req), "GET http://127.0.0.1:%d/x HTTP/1.1\r\n\r\n", up_port);
    r = exchange(req, 2 * BODY_LEN, &n);
    CHECK(n < BODY_LEN);
    free(r);
    r = exchange(req, 1000, &n);
    CHECK(starts(r, "HTTP/1.1 429 kgw egress: this kernel's egress byte cap"));
    free(r);
    atomic_store(&client_done, true);
    return NULL;
}

static bool done(void *d)
{
    return atomic_load(&client_done);
}

/* The client thread ends outside the loop: a tick makes the loop look at done() again (else
 * it would sleep until its timeout once the proxy has nothing left to do). */
static evl_t *tick_evl;
static evl_timer_t *tick_timer;

static void on_tick(void *d)
{
    tick_evl->timer_arm(tick_evl, tick_timer, 20);
}

int main(void)
{
    evl_poll_t *lp = evl_poll_new();
    char pol_text[128], err[128];
    egpol_t pol;
    int lfd;
    up_fd = listen_on(&up_port);
    lfd = listen_on(&px_port);
    CHECK(up_fd >= 0 && lfd >= 0);
    /* localhost: marked at the upstream's port, not marked at the proxy's own */
    snprintf(pol_text, sizeof(pol_text), "127.0.0.1:%d,+localhost:%d,localhost:%d", up_port,
             up_port, px_port);
    CHECK_INT(egpol_parse(pol_text, strlen(pol_text), &pol, err, sizeof(err)), 0);
    struct kegress_limits lim = {.max_conns = 4, .max_bytes = 150000, .idle_ms = 5000,
                                 .connect_timeout_ms = 5000};
    kegress_t *e = kegress_new(evl_poll_evl(lp), lfd, &pol, &lim, &stats, "tenant", "kernel");
    CHECK(e != NULL);
    tick_evl = evl_poll_evl(lp);
    tick_timer = tick_evl->timer_new(tick_evl, on_tick, NULL);
    CHECK(tick_timer != NULL);
    on_tick(NULL);
    pthread_t up, cl;
    pthread_create(&up, NULL, upstream, NULL);
    pthread_create(&cl, NULL, client, NULL);
    CHECK(evl_poll_run(lp, done, NULL, 60000));
    pthread_join(cl, NULL);
    json_t *hosts = kegress_hosts_take(e), *again = kegress_hosts_take(e);
    char want1[64], want2[64];
    snprintf(want1, sizeof(want1), "127.0.0.1:%d", up_port);
    snprintf(want2, sizeof(want2), "localhost:%d", up_port);
    CHECK_INT(json_array_size(hosts), 2);
    CHECK_STR(json_string_value(json_array_get(hosts, 0)), want1);
    CHECK_STR(json_string_value(json_array_get(hosts, 1)), want2);
    CHECK_INT(json_array_size(again), 0);
    json_decref(hosts);
    json_decref(again);
    kegress_destroy(&e);
    CHECK(e == NULL);
    CHECK(stats.allowed >= 3);
    CHECK(stats.denied >= 5);
    CHECK(stats.bytes_in >= BODY_LEN);
    atomic_store(&up_stop, true);
    shutdown(up_fd, SHUT_RDWR);
    close(up_fd);
    pthread_join(up, NULL);
    evl_timer_destroy(tick_evl, &tick_timer);
    evl_poll_destroy(&lp);
    CHECK_DONE();
}
