/* kernelmgr/kcall: a kernel's callback socket against a hostile peer. The "kernel" is a
 * sleeping process; this test plays the code inside it, speaking the frame protocol on the
 * socket directly (garbage, stalls, floods, pipelining, wrong uid), on a poll() loop.
 * tests/unit/test_kmgr.c covers the same path with a real ipykernel and kgw_tools. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/util.h"
#include "evl_poll.h"
#include "kernelmgr/kcall_int.h"
#include "kernelmgr/kmgr.h"
#include "kernelmgr/private.h"

#define MAX_BYTES  1024
#define TIMEOUT_MS 400
#define MAX_CALLS  2

static evl_poll_t *lp;
static evl_t *L;

/* ---- the hook ---- */

enum mode { M_VALUE, M_ERROR, M_HOLD, M_BIG };
static struct {
    enum mode mode;
    int calls;
    uint64_t id[16];
    size_t nid;
    char name[80], exec[80];
    json_t *args, *kwargs;
    uint64_t at_ms;
} H;

static void on_call(void *user, kernel_t *k, uint64_t id, const char *name, json_t *args,
                    json_t *kwargs, const char *exec_msg_id)
{
    H.calls++;
    H.at_ms = util_now_ms();
    snprintf(H.name, sizeof(H.name), "%s", name);
    snprintf(H.exec, sizeof(H.exec), "%s", exec_msg_id);
    json_decref(H.args);
    json_decref(H.kwargs);
    H.args = json_deep_copy(args);
    H.kwargs = json_deep_copy(kwargs);
    switch (H.mode) {
    case M_VALUE:
        CHECK_INT(kernel_call_reply(k, id, json_pack("{s:s, s:O}", "shown", name, "echo", args),
                                    NULL, NULL),
                  0);
        CHECK_INT(kernel_call_reply(k, id, json_true(), NULL, NULL), -ENOENT);
        break;
    case M_ERROR:
        CHECK_INT(kernel_call_reply(k, id, json_true(), "KeyError", "no such chart"), 0);
        break;
    case M_BIG: {
        char big[MAX_BYTES + 10];
        memset(big, 'b', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        CHECK_INT(kernel_call_reply(k, id, json_string(big), NULL, NULL), -EMSGSIZE);
        break;
    }
    case M_HOLD:
        if (H.nid < 16)
            H.id[H.nid++] = id;
        break;
    }
}

static int events_started, events_gone;

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *d)
{
    events_started += ev == KERNEL_EV_STARTED;
    events_gone += ev == KERNEL_EV_GONE;
}

/* ---- the peer ---- */

static int cconnect(kernel_t *k)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", k->dir, KCALL_SOCKET_NAME);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    return fd;
}

static void send_raw(int fd, const void *p, size_t n)
{
    CHECK_INT(send(fd, p, n, MSG_NOSIGNAL), (long long)n);
}

static void send_frame(int fd, const char *json)
{
    size_t n = strlen(json);
    unsigned char h[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    send_raw(fd, h, 4);
    send_raw(fd, json, n);
}

struct rx {
    int fd;
    char buf[8192];
    size_t n;
    bool eof;
};

static bool rx_frame_ready(struct rx *r)
{
    if (r->n < 4)
        return false;
    size_t len = (size_t)(unsigned char)r->buf[0] << 24 | (size_t)(unsigned char)r->buf[1] << 16 |
                 (size_t)(unsigned char)r->buf[2] << 8 | (size_t)(unsigned char)r->buf[3];
    return r->n >= 4 + len;
}

static bool rx_done(void *data)
{
    struct rx *r = data;
    while (!rx_frame_ready(r) && !r->eof && r->n < sizeof(r->buf)) {
        ssize_t n = recv(r->fd, r->buf + r->n, sizeof(r->buf) - r->n, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            r->eof = true;
        if (n <= 0)
            break;
        r->n += (size_t)n;
    }
    return rx_frame_ready(r) || r->eof;
}

/* Runs the loop until a whole reply frame arrives: its JSON, or NULL on EOF or timeout. */
static json_t *recv_reply(int fd, int timeout_ms)
{
    struct rx r = {.fd = fd};
    static char rest[8192];
    static size_t nrest;
    static int rest_fd = -1;
    if (rest_fd == fd && nrest) { /* frames that arrived together */
        memcpy(r.buf, rest, nrest);
        r.n = nrest;
    }
    nrest = 0;
    if (!evl_poll_run(lp, rx_done, &r, timeout_ms) || !rx_frame_ready(&r))
        return NULL;
    size_t len = (size_t)(unsigned char)r.buf[0] << 24 | (size_t)(unsigned char)r.buf[1] << 16 |
                 (size_t)(unsigned char)r.buf[2] << 8 | (size_t)(unsigned char)r.buf[3];
    nrest = r.n - 4 - len;
    memcpy(rest, r.buf + 4 + len, nrest);
    rest_fd = fd;
    return json_loadb(r.buf + 4, len, 0, NULL);
}

/* True when the gateway closed the connection (after any frames still queued). */
static bool closed_by_gateway(int fd, int timeout_ms)
{
    struct rx r = {.fd = fd};
    uint64_t end = util_now_ms() + (uint64_t)timeout_ms;
    while (util_now_ms() < end) {
        evl_poll_run(lp, rx_done, &r, 50);
        if (r.eof)
            return true;
        r.n = 0; /* drop frames */
    }
    return false;
}

static const char *err_type(json_t *j)
{
    return json_string_value(json_object_get(json_object_get(j, "error"), "type"));
}

static const char *err_msg(json_t *j)
{
    return json_string_value(json_object_get(json_object_get(j, "error"), "message"));
}

static bool never(void *d)
{
    return false;
}

static void spin(int ms)
{
    evl_poll_run(lp, never, NULL, ms);
}

#define CALL_OK "{\"name\":\"display_chart_to_user\",\"args\":[\"p\"],\"kwargs\":{\"title\":\"t\"}}"

static void test_calls(kernel_t *k)
{
    json_t *j;
    int fd = cconnect(k);

    CHECK_CASE("a call answered inside the hook");
    H.mode = M_VALUE;
    send_frame(fd, CALL_OK);
    j = recv_reply(fd, 5000);
    CHECK(j != NULL);
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "value"), "shown")),
              "display_chart_to_user");
    CHECK_STR(H.name, "display_chart_to_user");
    CHECK_STR(H.exec, ""); /* no execution the gateway knows of */
    CHECK(json_equal(H.args, json_object_get(json_object_get(j, "value"), "echo")));
    CHECK_STR(json_string_value(json_object_get(H.kwargs, "title")), "t");
    json_decref(j);

    CHECK_CASE("the same connection, again; an error answer");
    H.mode = M_ERROR;
    send_frame(fd, CALL_OK);
    j = recv_reply(fd, 5000);
    CHECK_STR(err_type(j), "KeyError");
    CHECK_STR(err_msg(j), "no such chart");
    json_decref(j);

    CHECK_CASE("not on the allowlist: refused, the hook never sees it");
    int before = H.calls;
    send_frame(fd, "{\"name\":\"os_system\",\"args\":[\"id\"]}");
    j = recv_reply(fd, 5000);
    CHECK_STR(err_type(j), "PermissionError");
    CHECK(err_msg(j) && strstr(err_msg(j), "'os_system' is not allowed"));
    json_decref(j);
    CHECK_INT(H.calls, before);

    CHECK_CASE("oversize: refused at the header, skipped, the connection stays usable");
    H.mode = M_VALUE;
    char big[MAX_BYTES + 200];
    memset(big, ' ', sizeof(big));
    unsigned char h[4] = {0, 0, (sizeof(big) >> 8) & 0xff, sizeof(big) & 0xff};
    send_raw(fd, h, 4);
    send_raw(fd, big, sizeof(big));
    j = recv_reply(fd, 5000);
    CHECK_STR(err_type(j), "ValueError");
    CHECK(err_msg(j) && strstr(err_msg(j), "over the gateway's limit of 1024 bytes"));
    json_decref(j);
    send_frame(fd, CALL_OK);
    j = recv_reply(fd, 5000);
    CHECK(json_object_get(j, "value") != NULL);
    json_decref(j);

    CHECK_CASE("a reply over the limit becomes a RuntimeError");
    H.mode = M_BIG;
    send_frame(fd, CALL_OK);
    j = recv_reply(fd, 5000);
    CHECK_STR(err_type(j), "RuntimeError");
    json_decref(j);
    close(fd);

    CHECK_CASE("answered later, from the loop");
    H.mode = M_HOLD;
    H.nid = 0;
    fd = cconnect(k);
    send_frame(fd, CALL_OK);
    CHECK(recv_reply(fd, 100) == NULL);
    CHECK_INT(H.nid, 1);
    CHECK_INT(kernel_call_reply(k, H.id[0], json_string("later"), NULL, NULL), 0);
    CHECK_INT(kernel_call_reply(k, H.id[0], NULL, NULL, NULL), -ENOENT);
    CHECK_INT(kernel_call_reply(k, 0, NULL, NULL, NULL), -ENOENT);
    CHECK_INT(kernel_call_reply(k, 987654321, NULL, "ValueError", "x"), -ENOENT);
    j = recv_reply(fd, 5000);
    CHECK_STR(json_string_value(json_object_get(j, "value")), "later");
    json_decref(j);

    CHECK_CASE("no answer: TimeoutError in the kernel, a late reply is -ENOENT");
    H.nid = 0;
    send_frame(fd, CALL_OK);
    uint64_t t0 = util_now_ms();
    j = recv_reply(fd, 5000);
    CHECK_STR(err_type(j), "TimeoutError");
    CHECK(util_now_ms() - t0 >= TIMEOUT_MS - 50);
    json_decref(j);
    CHECK_INT(H.nid, 1);
    CHECK_INT(kernel_call_reply(k, H.id[0], json_true(), NULL, NULL), -ENOENT);

    CHECK_CASE("bytes while a call is in progress: closed, the call is gone");
    H.nid = 0;
    send_frame(fd, CALL_OK);
    spin(50);
    CHECK_INT(H.nid, 1);
    send_frame(fd, CALL_OK);
    CHECK(closed_by_gateway(fd, 2000));
    CHECK_INT(kernel_call_reply(k, H.id[0], json_true(), NULL, NULL), -ENOENT);
    close(fd);

    CHECK_CASE("the kernel hangs up during a call");
    H.nid = 0;
    fd = cconnect(k);
    send_frame(fd, CALL_OK);
    spin(50);
    CHECK_INT(H.nid, 1);
    close(fd);
    spin(50);
    CHECK_INT(kernel_call_reply(k, H.id[0], json_true(), NULL, NULL), -ENOENT);

    CHECK_CASE("calls in progress per kernel are bounded");
    H.nid = 0;
    int c[MAX_CALLS + 1];
    for (int i = 0; i < MAX_CALLS + 1; i++) {
        c[i] = cconnect(k);
        send_frame(c[i], CALL_OK);
        spin(30);
    }
    CHECK_INT(H.nid, MAX_CALLS);
    j = recv_reply(c[MAX_CALLS], 5000);
    CHECK_STR(err_type(j), "RuntimeError");
    CHECK(err_msg(j) && strstr(err_msg(j), "too many callbacks in progress"));
    json_decref(j);
    for (int i = 0; i < MAX_CALLS; i++) {
        CHECK_INT(kernel_call_reply(k, H.id[i], json_integer(i), NULL, NULL), 0);
        j = recv_reply(c[i], 5000);
        CHECK_INT(json_integer_value(json_object_get(j, "value")), i);
        json_decref(j);
    }
    for (int i = 0; i < MAX_CALLS + 1; i++)
        close(c[i]);
    spin(30);
}

static void test_hostile(kernel_t *k)
{
    json_t *j;
    CHECK_CASE("repeated garbage: four refusals, then the connection is closed");
    int fd = cconnect(k);
    for (int i = 0; i < 4; i++)
        send_frame(fd, "not json");
    for (int i = 0; i < 4; i++) {
        j = recv_reply(fd, 5000);
        CHECK_STR(err_type(j), "ValueError");
        json_decref(j);
    }
    CHECK(closed_by_gateway(fd, 2000));
    close(fd);

    CHECK_CASE("a stall in the middle of a frame: closed after the timeout");
    fd = cconnect(k);
    send_raw(fd, "\0\0", 2);
    CHECK(!closed_by_gateway(fd, TIMEOUT_MS / 2));
    CHECK(closed_by_gateway(fd, TIMEOUT_MS * 4));
    close(fd);

    CHECK_CASE("an idle connection is closed too");
    fd = cconnect(k);
    CHECK(closed_by_gateway(fd, TIMEOUT_MS * 4));
    close(fd);

    CHECK_CASE("connections per kernel are bounded");
    int c[2 * MAX_CALLS + 4];
    int n = 2 * MAX_CALLS + 4; /* the gateway keeps at most max(4, 2*max_calls) */
    for (int i = 0; i < n; i++)
        c[i] = cconnect(k);
    spin(50);
    int open_ = 0;
    for (int i = 0; i < n; i++) {
        char b;
        ssize_t r = recv(c[i], &b, 1, MSG_DONTWAIT);
        open_ += r < 0 && errno == EAGAIN;
    }
    CHECK_INT(open_, 2 * MAX_CALLS < 4 ? 4 : 2 * MAX_CALLS);
    for (int i = 0; i < n; i++)
        close(c[i]);
    spin(30);

    CHECK_CASE("a kernel naming an execution the gateway has not seen: a bounded wait");
    H.mode = M_VALUE;
    fd = cconnect(k);
    uint64_t t0 = util_now_ms();
    send_frame(fd, "{\"name\":\"display_chart_to_user\",\"parent\":\"not-seen-yet\"}");
    j = recv_reply(fd, 5000);
    CHECK(json_object_get(j, "value") != NULL);
    CHECK(H.at_ms - t0 >= 900);
    CHECK_STR(H.exec, ""); /* routing never takes the kernel's word */
    json_decref(j);
    close(fd);

    if (geteuid() == 0) {
        CHECK_CASE("a peer with another uid is refused");
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/%s", k->dir, KCALL_SOCKET_NAME);
        /* open the way (the directory is the gateway's, 0700): only the uid check is left */
        CHECK(chmod(k->dir, 0711) == 0 && chmod(path, 0666) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
                _exit(2);
            struct sockaddr_un sa = {.sun_family = AF_UNIX};
            snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
            int s = socket(AF_UNIX, SOCK_STREAM, 0);
            if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                _exit(3);
            char hdr[4] = {0, 0, 0, 12}, b;
            /* closed without an answer: the sends or the read fail, or the read sees EOF */
            if (send(s, hdr, 4, MSG_NOSIGNAL) < 0 ||
                send(s, "{\"name\":\"f\"}", 12, MSG_NOSIGNAL) < 0)
                _exit(0);
            _exit(recv(s, &b, 1, 0) <= 0 ? 0 : 5);
        }
        int st = 0;
        pid_t w = 0;
        for (int i = 0; i < 200 && w == 0; i++) {
            spin(20);
            w = waitpid(pid, &st, WNOHANG);
        }
        if (w == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        CHECK(WIFEXITED(st));
        CHECK_INT(WEXITSTATUS(st), 0);
        CHECK(chmod(k->dir, 0700) == 0 && chmod(path, 0600) == 0);
    }
}

static void test_restart(kernel_t *k)
{
    char path[PATH_MAX + 16];
    json_t *j;
    CHECK_CASE("restart while a call is in progress");
    H.mode = M_HOLD;
    H.nid = 0;
    int fd = cconnect(k);
    send_frame(fd, CALL_OK);
    spin(50);
    CHECK_INT(H.nid, 1);
    /* the kernel replaces its socket with a symlink to somewhere else */
    snprintf(path, sizeof(path), "%s/%s", k->dir, KCALL_SOCKET_NAME);
    CHECK(unlink(path) == 0 && symlink("/run/systemd/notify", path) == 0);
    CHECK_INT(kernel_restart(k), 0);
    CHECK(closed_by_gateway(fd, 5000)); /* the old process is gone, and its calls */
    close(fd);
    CHECK_INT(kernel_call_reply(k, H.id[0], json_true(), NULL, NULL), -ENOENT);
    spin(100);
    struct stat st;
    CHECK(lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)); /* a fresh socket again */
    H.mode = M_VALUE;
    fd = cconnect(k);
    send_frame(fd, CALL_OK);
    j = recv_reply(fd, 5000);
    CHECK(json_object_get(j, "value") != NULL);
    json_decref(j);
    close(fd);

    CHECK_CASE("shutdown while a call is in progress");
    H.mode = M_HOLD;
    H.nid = 0;
    fd = cconnect(k);
    send_frame(fd, CALL_OK);
    spin(50);
    CHECK_INT(H.nid, 1);
    uint64_t id = H.id[0];
    CHECK_INT(kernel_call_reply(k, id, json_true(), NULL, NULL), 0); /* still fine */
    send_frame(fd, CALL_OK);
    spin(50);
    CHECK_INT(H.nid, 2);
    CHECK_INT(kernel_shutdown(k, NULL), 0);
    CHECK(closed_by_gateway(fd, 5000));
    close(fd);
}

static bool all_gone(void *d)
{
    return kmgr_count(d) == 0;
}

static kmgr_t *new_mgr(const char *rundir, bool with_hook)
{
    struct kmgr_opts o = {.runtime_dir = rundir,
                          .max_kernels = 4,
                          .start_timeout_ms = 600000,
                          .shutdown_grace_ms = 100,
                          .max_restarts = 5,
                          .cull_interval_s = 60,
                          .dead_linger_s = 60,
                          .callbacks = "display_chart_to_user , display_dataframe_to_user",
                          .callback_max_bytes = MAX_BYTES,
                          .callback_timeout_ms = TIMEOUT_MS,
                          .callback_max_calls = MAX_CALLS};
    static const struct kmgr_listener_ops ops = {.event = on_event};
    static struct kmgr_listener listeners[2];
    kmgr_t *m = kmgr_new(L, &o);
    CHECK(m != NULL);
    CHECK_INT(kmgr_listen(m, &listeners[with_hook], &ops, NULL), 0);
    if (with_hook)
        kmgr_on_call(m, on_call, NULL);
    return m;
}

/* Where pidfds are unavailable (valgrind) exits arrive only as SIGCHLD: poll for them. */
static kmgr_t *reap_m[2];
static evl_timer_t *reap_t;

static void reap(void *d)
{
    for (int i = 0; i < 2; i++)
        if (reap_m[i])
            kmgr_reap(reap_m[i]);
    L->timer_arm(L, reap_t, 50);
}

int main(void)
{
    char tmp[] = "/tmp/kgw-test-kcall-XXXXXX", rundir[64], share[64], kdir[128], spec[160];
    signal(SIGPIPE, SIG_IGN);
    CHECK(mkdtemp(tmp) != NULL);
    CHECK(chmod(tmp, 0711) == 0); /* for the peer with another uid */
    snprintf(rundir, sizeof(rundir), "%s/run", tmp);
    snprintf(share, sizeof(share), "%s/share", tmp);
    snprintf(kdir, sizeof(kdir), "%s/kernels/sleeper", share);
    CHECK(mkdir(share, 0755) == 0);
    snprintf(spec, sizeof(spec), "%s/kernels", share);
    CHECK(mkdir(spec, 0755) == 0 && mkdir(kdir, 0755) == 0);
    snprintf(spec, sizeof(spec), "%s/kernel.json", kdir);
    FILE *f = fopen(spec, "w");
    CHECK(f != NULL);
    fputs("{\"argv\": [\"/bin/sleep\", \"600\"], \"display_name\": \"sleeper\"}\n", f);
    fclose(f);
    setenv("JUPYTER_PATH", share, 1);

    lp = evl_poll_new();
    L = evl_poll_evl(lp);
    reap_t = L->timer_new(L, reap, NULL);
    L->timer_arm(L, reap_t, 50);

    CHECK_CASE("a bad allowlist is refused");
    struct kmgr_opts bad = {.runtime_dir = rundir, .callbacks = "ok,os.system"};
    errno = 0;
    CHECK(kmgr_new(L, &bad) == NULL && errno == EINVAL);

    kmgr_t *m = reap_m[0] = new_mgr(rundir, true);
    kernel_t *k = NULL;
    CHECK_INT(kmgr_start(m, &(struct kmgr_start){.spec_name = "sleeper"}, &k), 0);
    if (!k)
        return 1;
    char *e = NULL;
    for (char **v = k->envp; *v; v++)
        if (!strncmp(*v, "KGW_CALLBACK_SOCKET=", 20))
            e = *v + 20;
    CHECK_CASE("unsandboxed kernels are told where the socket is");
    char want[PATH_MAX + 16];
    snprintf(want, sizeof(want), "%s/%s", k->dir, KCALL_SOCKET_NAME);
    CHECK_STR(e, want);
    test_calls(k);
    test_hostile(k);
    test_restart(k);
    CHECK(evl_poll_run(lp, all_gone, m, 10000));

    CHECK_CASE("no hook: the kernel is told no client listens");
    kmgr_t *m2 = reap_m[1] = new_mgr(rundir, false);
    CHECK_INT(kmgr_start(m2, &(struct kmgr_start){.spec_name = "sleeper"}, &k), 0);
    int fd = cconnect(k);
    send_frame(fd, CALL_OK);
    json_t *j = recv_reply(fd, 5000);
    CHECK_STR(err_type(j), "RuntimeError");
    CHECK(err_msg(j) && strstr(err_msg(j), "no client is connected to receive callbacks"));
    json_decref(j);
    /* the kernel can still be torn down with a connection open */
    kmgr_destroy(&m2);
    reap_m[1] = NULL;
    CHECK(closed_by_gateway(fd, 2000));
    close(fd);

    kmgr_destroy(&m);
    json_decref(H.args);
    json_decref(H.kwargs);
    evl_timer_destroy(L, &reap_t);
    evl_poll_destroy(&lp);
    CHECK(rmdir(rundir) == 0);
    unlink(spec);
    rmdir(kdir);
    snprintf(spec, sizeof(spec), "%s/kernels", share);
    rmdir(spec);
    rmdir(share);
    CHECK(rmdir(tmp) == 0); /* nothing left behind */
    CHECK_DONE();
}
