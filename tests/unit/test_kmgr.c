/* kernelmgr on its own: a real ipykernel driven through kmgr/kernel/kconn on a poll() loop,
 * without the gateway. Then callbacks: kernel code calls kgw_tools, the hook answers; run
 * unsandboxed, and sandboxed too when this runs as root on a host that can sandbox (not under
 * valgrind, which cannot run seccomp filters).
 *
 * Environment (set by meson): KGW_PYTHON_PATH, the directory of kgw_tools.py; KGW_SANDBOX_INIT,
 * kgw-sandbox-init. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "evl_poll.h"
#include "kernelmgr/kconn.h"
#include "kernelmgr/kmgr.h"
#include "protocol/jmsg.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static struct {
    int ready, gone, started, iopub, idle_for_us, reply_ok, stream_ok;
    char exec_id[64];
    int status;
} S;

/* one execution: its output and its reply */
static struct {
    char msg_id[64];
    char out[65536];
    size_t nout;
    bool idle;
    json_t *reply;
} X;

/* the callback hook */
enum hmode { H_VALUE, H_HOLD };
static struct {
    enum hmode mode;
    const char *value; /* H_VALUE: the answer */
    int calls;
    uint64_t id;
    char name[80], exec[80];
    json_t *args, *kwargs;
} H;

/* the last execution's end, as listeners hear it */
static struct {
    int n;
    enum kernel_outcome outcome;
    char msg_id[64], cause[256];
} E;

static void on_exec_end(void *user, kernel_t *k, const struct kernel_exec_end *e)
{
    E.n++;
    E.outcome = e->outcome;
    snprintf(E.msg_id, sizeof(E.msg_id), "%s", e->msg_id);
    snprintf(E.cause, sizeof(E.cause), "%s", e->cause);
}

static bool ours(const jmsg_t *m, const char *id)
{
    const jspan_t *p = &m->part[JPART_PARENT];
    return id[0] && memmem(p->p, p->n, id, strlen(id));
}

static void on_done(void *data, kernel_t *k, int status)
{
    S.ready++;
    S.status = status;
}

static void on_iopub(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    S.iopub++;
    const jspan_t *c = &m->part[JPART_CONTENT];
    if (ours(m, S.exec_id) && !strcmp(h->msg_type, "stream") && memmem(c->p, c->n, "42", 2))
        S.stream_ok = 1;
    if (ours(m, S.exec_id) && !strcmp(h->msg_type, "status") && memmem(c->p, c->n, "idle", 4))
        S.idle_for_us = 1;
    if (ours(m, X.msg_id)) {
        json_t *j = json_loadb(c->p, c->n, 0, NULL);
        const char *text = json_string_value(json_object_get(j, "text"));
        if (!strcmp(h->msg_type, "stream") && text)
            X.nout += (size_t)snprintf(X.out + X.nout, sizeof(X.out) - X.nout, "%s", text);
        if (X.nout >= sizeof(X.out))
            X.nout = sizeof(X.out) - 1;
        if (!strcmp(h->msg_type, "status") &&
            !strcmp(json_string_value(json_object_get(j, "execution_state")) ?: "", "idle"))
            X.idle = true;
        json_decref(j);
    }
}

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *d)
{
    S.gone += ev == KERNEL_EV_GONE;
    S.started += ev == KERNEL_EV_STARTED;
}

static void on_reply(void *user, kconn_t *c, enum jchan ch, const jmsg_t *m, const jhdr_t *h)
{
    if (ch != JCHAN_SHELL || strcmp(h->msg_type, "execute_reply"))
        return;
    if (memmem(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, "\"ok\"", 4))
        S.reply_ok = 1;
    if (ours(m, X.msg_id)) {
        json_decref(X.reply);
        X.reply = json_loadb(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, 0, NULL);
    }
}

static void on_call(void *user, kernel_t *k, uint64_t id, const char *name, json_t *args,
                    json_t *kwargs, const char *exec_msg_id)
{
    H.calls++;
    H.id = id;
    snprintf(H.name, sizeof(H.name), "%s", name);
    snprintf(H.exec, sizeof(H.exec), "%s", exec_msg_id);
    json_decref(H.args);
    json_decref(H.kwargs);
    H.args = json_deep_copy(args);
    H.kwargs = json_deep_copy(kwargs);
    if (H.mode == H_VALUE)
        CHECK(kernel_call_reply(k, id, json_string(H.value), NULL, NULL) == 0);
}

/* Where pidfds are unavailable (valgrind) exits arrive only as SIGCHLD: poll for them. */
static kmgr_t *reap_m;
static evl_t *reap_l;
static evl_timer_t *reap_t;

static void reap(void *d)
{
    if (reap_m)
        kmgr_reap(reap_m);
    reap_l->timer_arm(reap_l, reap_t, 50);
}

static bool is_ready(void *d)
{
    return S.ready > 0;
}

static bool executed(void *d)
{
    return S.reply_ok && S.idle_for_us && S.stream_ok;
}

static bool is_gone(void *d)
{
    return S.gone > 0;
}

static bool x_done(void *d)
{
    return X.reply && X.idle;
}

static bool hook_called(void *d)
{
    return H.calls > *(int *)d;
}

static bool restarted(void *d)
{
    return S.started > *(int *)d;
}

static void send_execute(kconn_t *c, const char *code, char *ret_msg_id)
{
    char *hdr = jmsg_new_header("execute_request", "test-session", ret_msg_id);
    CHECK(hdr);
    json_t *content = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 0,
                                "store_history", 1, "user_expressions", "allow_stdin", 0,
                                "stop_on_error", 0);
    char *cs = json_dumps(content, JSON_COMPACT);
    json_decref(content);
    jmsg_t msg = {.nbuf = 0};
    msg.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
    msg.part[JPART_PARENT] = (jspan_t){"{}", 2};
    msg.part[JPART_METADATA] = (jspan_t){"{}", 2};
    msg.part[JPART_CONTENT] = (jspan_t){cs, strlen(cs)};
    jhdr_t h;
    CHECK(jhdr_parse(msg.part[JPART_HEADER], &h) == 0);
    CHECK(kconn_send(c, JCHAN_SHELL, &msg, &h) == 0);
    free(hdr);
    free(cs);
}

/* Starts an execution (its results arrive in X). */
static void start_exec(kconn_t *c, const char *code)
{
    json_decref(X.reply);
    memset(&X, 0, sizeof(X));
    send_execute(c, code, X.msg_id);
}

static void run(evl_poll_t *lp, kconn_t *c, const char *code)
{
    start_exec(c, code);
    if (!evl_poll_run(lp, x_done, NULL, 60000)) {
        fprintf(stderr, "no reply to: %s\noutput so far: %s\n", code, X.out);
        CHECK(!"execution timed out");
    }
}

static const char *reply_field(const char *f)
{
    return json_string_value(json_object_get(X.reply, f)) ?: "";
}

/* The execution ended with exception ename whose message contains needle. */
static void expect_error(const char *ename, const char *needle)
{
    if (strcmp(reply_field("status"), "error") || strcmp(reply_field("ename"), ename) ||
        !strstr(reply_field("evalue"), needle)) {
        fprintf(stderr, "want %s(...%s...), got %s: %s: %s\n", ename, needle,
                reply_field("status"), reply_field("ename"), reply_field("evalue"));
        CHECK(!"unexpected execute_reply");
    }
}

static void expect_output(const char *needle)
{
    if (strcmp(reply_field("status"), "ok") || !strstr(X.out, needle)) {
        fprintf(stderr, "want output containing %s, got %s (%s: %s)\n%s\n", needle,
                reply_field("status"), reply_field("ename"), reply_field("evalue"), X.out);
        CHECK(!"unexpected output");
    }
}

static void basic(evl_poll_t *lp, kmgr_t *m)
{
    kernel_t *k = NULL;
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "nope"}, &k) == -ENOENT);
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "python3"}, &k) == 0);
    CHECK(kmgr_find(m, kernel_id(k)) == k);
    kwait_t *w = NULL;
    CHECK(kernel_wait(k, on_done, NULL, &w) == 0);
    CHECK(evl_poll_run(lp, is_ready, NULL, 60000));
    CHECK(S.status == 0);
    CHECK(kernel_state(k) == KERNEL_RUNNING);
    /* the statistics: one exec'd start (the unknown kernelspec is no start failure) */
    const struct kmgr_stats *st = kmgr_stats(m);
    CHECK(st->starts[KMGR_START_EXEC] == 1 && st->starts[KMGR_START_FORK] == 0 &&
          st->starts[KMGR_START_POOL] == 0);
    CHECK(st->start_seconds[KMGR_START_EXEC].count == 1);
    CHECK(st->start_seconds[KMGR_START_EXEC].sum > 0 && st->start_seconds[KMGR_START_EXEC].sum < 60);
    for (int i = 0; i < KMGR_FAIL_N; i++)
        CHECK(st->start_failures[i] == 0);
    struct kmgr_usage u;
    kmgr_usage(m, &u);
    CHECK(u.mem_bytes == -1 && u.cpu_ns == -1); /* no sandbox: no cgroups */
    /* readiness means iopub is proven live: the first request loses none of its iopub
     * messages (executed waits for its stream and its idle status) */

    static const struct kconn_ops ops = {.reply = on_reply};
    kconn_t *c = kconn_new(k, "test-session", &ops, NULL);
    CHECK(c);
    char *hdr = jmsg_new_header("execute_request", "test-session", S.exec_id);
    CHECK(hdr);
    const char *content = "{\"code\":\"print(6*7)\",\"silent\":false,\"store_history\":true,"
                          "\"user_expressions\":{},\"allow_stdin\":false,\"stop_on_error\":true}";
    jmsg_t msg = {.nbuf = 0};
    msg.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
    msg.part[JPART_PARENT] = (jspan_t){"{}", 2};
    msg.part[JPART_METADATA] = (jspan_t){"{}", 2};
    msg.part[JPART_CONTENT] = (jspan_t){content, strlen(content)};
    jhdr_t h;
    CHECK(jhdr_parse(msg.part[JPART_HEADER], &h) == 0);
    CHECK(kconn_send(c, JCHAN_IOPUB, &msg, &h) == -EINVAL);
    CHECK(kconn_send(c, JCHAN_SHELL, &msg, &h) == 0);
    free(hdr);
    /* an execution counts from the moment it is sent (a drain waits for it) to its idle */
    CHECK(kernel_executions(k) == 1 && kmgr_executions(m) == 1);
    CHECK(evl_poll_run(lp, executed, NULL, 30000));
    CHECK(kernel_executions(k) == 0);
    CHECK(st->executions[KMGR_EXEC_OK] == 1 && st->exec_seconds.count == 1);
    CHECK(st->messages[KMGR_TO_KERNEL] == 1); /* the iopub one was refused */
    CHECK(st->message_bytes[KMGR_TO_KERNEL] > strlen(content));
    CHECK(st->messages[KMGR_TO_CLIENT] >= 4); /* reply; busy, execute_input, stream, idle */

    /* queued executions count too, each until its own idle */
    char first[64];
    send_execute(c, "import time; time.sleep(0.2)", first);
    start_exec(c, "print('second')");
    CHECK(kernel_executions(k) == 2 && kmgr_executions(m) == 2);
    CHECK(evl_poll_run(lp, x_done, NULL, 30000));
    CHECK(kmgr_executions(m) == 0);
    expect_output("second");

    /* capacity: one of two kernels left; a start the open-file limit cannot carry is refused
     * before anything is opened for it, and the headroom shows it */
    struct kmgr_capacity cap;
    struct rlimit rl, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    kmgr_capacity(m, &cap);
    CHECK(cap.fd_limit == (long long)rl.rlim_cur && cap.fd_open > 0);
    CHECK(cap.fd_per_kernel == KMGR_KERNEL_FDS && cap.fd_reserve == 0);
    CHECK(cap.fd_kernels > 1 && cap.kernels_free == 1);
    low = rl;
    low.rlim_cur = (rlim_t)(cap.fd_open + KMGR_KERNEL_FDS - 1);
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    kmgr_capacity(m, &cap);
    CHECK(cap.fd_kernels == 0 && cap.kernels_free == 0);
    kernel_t *k3 = NULL;
    long long open0 = util_open_fds();
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "python3"}, &k3) == -EMFILE);
    CHECK(k3 == NULL && kmgr_count(m) == 1 && util_open_fds() == open0);
    CHECK(st->start_failures[KMGR_FAIL_LIMIT] == 1);
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    kmgr_capacity(m, &cap);
    CHECK(cap.kernels_free == 1);

    /* a drain refuses new kernels; the running one keeps working */
    CHECK(!kmgr_draining(m));
    kmgr_drain(m);
    CHECK(kmgr_draining(m));
    kernel_t *k2 = NULL;
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "python3"}, &k2) == -ESHUTDOWN);
    CHECK(k2 == NULL && kmgr_count(m) == 1);
    run(lp, c, "print(6*8)");
    expect_output("48");
    kconn_destroy(&c);

    CHECK(kernel_shutdown(k, NULL) == 0);
    CHECK(evl_poll_run(lp, is_gone, NULL, 30000));
    CHECK(kmgr_count(m) == 0);
    for (int i = 0; i < KMGR_DEATH_N; i++) /* asked to end: no death */
        CHECK(st->deaths[i] == 0);
    CHECK(st->restarts[KMGR_RESTART_AUTO] == 0 && st->restarts[KMGR_RESTART_REQUESTED] == 0);
}

/* The output cap cuts the message that crosses it; a message over the per-message limit
 * (libzmq refuses it and drops the connection for good) reopens the socket, ends the execution
 * with output_limit and restarts the kernel, which then works. */
static void limits(evl_poll_t *lp, kmgr_t *m)
{
    kernel_t *k = NULL;
    kwait_t *w = NULL;
    S.ready = 0;
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "python3"}, &k) == 0);
    CHECK(kernel_wait(k, on_done, NULL, &w) == 0);
    CHECK(evl_poll_run(lp, is_ready, NULL, 60000) && S.status == 0);
    static const struct kconn_ops ops = {.reply = on_reply};
    kconn_t *c = kconn_new(k, "test-session", &ops, NULL);
    CHECK(c);

    run(lp, c, "print('a' * 300)"); /* one stream message, three times the cap (100) */
    expect_output("[output truncated: the execution's output exceeded its limit of 100 bytes]");
    CHECK(strspn(X.out, "a") > 50 && strspn(X.out, "a") <= 100);
    CHECK(E.outcome == KERNEL_OUT_OUTPUT_LIMIT && !strcmp(E.msg_id, X.msg_id));

    int started = S.started;
    run(lp, c,
        "k = get_ipython().kernel\n"
        "k.session.send(k.iopub_socket, 'display_data', {'data': {'text/plain': 'x'}, "
        "'metadata': {}}, parent=k.get_parent('shell'), buffers=[b'x' * (2 << 20)])");
    /* the kernel's own reply may come first: the outcome is the listeners' */
    CHECK(E.outcome == KERNEL_OUT_OUTPUT_LIMIT && !strcmp(E.msg_id, X.msg_id));
    CHECK(strstr(E.cause, "on iopub") && strstr(E.cause, "limit of 1048576 bytes"));
    CHECK(evl_poll_run(lp, restarted, &started, 60000));
    run(lp, c, "print(6*7)");
    expect_output("42");
    kconn_destroy(&c);
    S.gone = 0;
    CHECK(kernel_shutdown(k, NULL) == 0);
    CHECK(evl_poll_run(lp, is_gone, NULL, 30000));
}

#define TIMEOUT_MS 2000

static void callbacks(evl_poll_t *lp, kmgr_t *m, bool sandboxed, const char *cwd)
{
    kernel_t *k = NULL;
    int n;
    char code[512], want[PATH_MAX + 64];
    const char *label = sandboxed ? "sandboxed" : "unsandboxed";
    memset(&S, 0, sizeof(S));
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "python3"}, &k) == 0);
    kwait_t *w = NULL;
    CHECK(kernel_wait(k, on_done, NULL, &w) == 0);
    CHECK(evl_poll_run(lp, is_ready, NULL, 60000));
    CHECK(S.status == 0);
    struct kmgr_usage u;
    kmgr_usage(m, &u); /* sandboxed: what the kernel's cgroup holds */
    CHECK(sandboxed ? u.mem_bytes > (1 << 20) : u.mem_bytes == -1);
    static const struct kconn_ops ops = {.reply = on_reply};
    kconn_t *c = kconn_new(k, "test-session", &ops, NULL);
    CHECK(c);

    fprintf(stderr, "%s: a call answered by the hook\n", label);
    H.mode = H_VALUE;
    H.value = "shown-4242";
    run(lp, c,
        "import kgw_tools\n"
        "print(kgw_tools.call_function('display_chart_to_user', ['p'], {'title': 't'}))\n"
        "print(kgw_tools.__file__)\n");
    expect_output("shown-4242");
    CHECK(!strcmp(H.name, "display_chart_to_user"));
    CHECK(!strcmp(H.exec, X.msg_id)); /* the gateway's view of the running execution */
    CHECK(json_array_size(H.args) == 1 &&
          !strcmp(json_string_value(json_array_get(H.args, 0)), "p"));
    CHECK(!strcmp(json_string_value(json_object_get(H.kwargs, "title")), "t"));
    if (sandboxed) {
        expect_output(SBX_PYTHON_PATH "/kgw_tools.py");
        fprintf(stderr, "%s: the module's directory is read-only\n", label);
        run(lp, c, "open('" SBX_PYTHON_PATH "/evil.py', 'w')");
        expect_error("OSError", "Read-only file system");
    }

    fprintf(stderr, "%s: a name not on the allowlist\n", label);
    n = H.calls;
    run(lp, c, "import kgw_tools; kgw_tools.call_function('os_system', ['id'])");
    expect_error("PermissionError", "'os_system' is not allowed by the gateway");
    CHECK(H.calls == n);

    fprintf(stderr, "%s: arguments over the limit\n", label);
    run(lp, c,
        "import kgw_tools; kgw_tools.call_function('display_chart_to_user', ['x' * 100000])");
    expect_error("ValueError", "over the gateway's limit of 65536 bytes");
    CHECK(H.calls == n);
    run(lp, c, "import kgw_tools; kgw_tools.call_function('display_chart_to_user', [float('nan')])");
    expect_error("TypeError", "JSON-serialisable");

    fprintf(stderr, "%s: answered later, with an exception\n", label);
    H.mode = H_HOLD;
    n = H.calls;
    start_exec(c, "import kgw_tools; kgw_tools.display_matplotlib_image_to_user('T', 'why', [1])");
    CHECK(evl_poll_run(lp, hook_called, &n, 30000));
    CHECK(!strcmp(H.name, "display_matplotlib_image_to_user"));
    CHECK(!strcmp(json_string_value(json_object_get(H.kwargs, "reason")), "why"));
    CHECK(!strcmp(json_string_value(json_array_get(json_object_get(H.kwargs, "exception_ids"), 0)),
                  "1"));
    CHECK(kernel_call_reply(k, H.id, NULL, "KeyError", "no such image") == 0);
    CHECK(evl_poll_run(lp, x_done, NULL, 30000));
    expect_error("KeyError", "no such image");

    fprintf(stderr, "%s: no answer: TimeoutError\n", label);
    n = H.calls;
    run(lp, c,
        "import kgw_tools; kgw_tools.display_chart_to_user('/mnt/data/c.png', 'T', 'bar')");
    expect_error("TimeoutError", "no reply from the client within 2000 ms");
    CHECK(H.calls == n + 1);
    CHECK(!strcmp(json_string_value(json_object_get(H.kwargs, "chart_type")), "bar"));
    CHECK(kernel_call_reply(k, H.id, json_true(), NULL, NULL) == -ENOENT);

    fprintf(stderr, "%s: display_dataframe_to_user writes the CSV into the workspace\n", label);
    H.mode = H_VALUE;
    H.value = "df-shown";
    run(lp, c,
        "import kgw_tools, os, pandas as pd\n"
        "df = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', None]})\n"
        "print(kgw_tools.display_dataframe_to_user('Sales Q1/2024', df))\n"
        "print(open(os.path.join(kgw_tools._output_dir(), 'Sales_Q1_2024.csv')).read())\n");
    expect_output("df-shown");
    expect_output("a,b\n1,x\n2,y\n3,\n");
    snprintf(want, sizeof(want), "%s/Sales_Q1_2024.csv", sandboxed ? SBX_WORKSPACE_PATH : cwd);
    CHECK(!strcmp(json_string_value(json_object_get(H.kwargs, "path")), want));
    CHECK(!strcmp(json_string_value(json_object_get(H.kwargs, "title")), "Sales Q1/2024"));
    json_t *pv = json_object_get(H.kwargs, "preview");
    CHECK(json_integer_value(json_object_get(pv, "total_rows")) == 3);
    CHECK(!strcmp(json_string_value(json_array_get(json_object_get(pv, "columns"), 1)), "b"));
    CHECK(json_is_null(json_array_get(json_array_get(json_object_get(pv, "rows"), 2), 1)));
    if (!sandboxed) {
        struct stat st;
        CHECK(stat(want, &st) == 0 && S_ISREG(st.st_mode));
        CHECK(unlink(want) == 0);
    }

    fprintf(stderr, "%s: restart while a call is in progress\n", label);
    H.mode = H_HOLD;
    n = H.calls;
    int started = S.started;
    start_exec(c, "import kgw_tools; kgw_tools.call_function('display_chart_to_user')");
    CHECK(evl_poll_run(lp, hook_called, &n, 30000));
    uint64_t held = H.id;
    CHECK(kernel_restart(k) == 0);
    CHECK(evl_poll_run(lp, restarted, &started, 60000));
    /* the old process died in the call, before its timeout: the gateway answers for it */
    CHECK(X.reply && !strcmp(reply_field("status"), "error") &&
          !strcmp(reply_field("ename"), "KernelRestarted"));
    CHECK(X.idle);
    CHECK(kernel_call_reply(k, held, json_true(), NULL, NULL) == -ENOENT);
    H.mode = H_VALUE;
    H.value = "after-restart";
    snprintf(code, sizeof(code),
             "import kgw_tools; print(kgw_tools.call_function('display_chart_to_user'))");
    run(lp, c, code);
    expect_output("after-restart");

    kconn_destroy(&c);
    S.gone = 0;
    CHECK(kernel_shutdown(k, NULL) == 0);
    CHECK(evl_poll_run(lp, is_gone, NULL, 30000));
    CHECK(kmgr_count(m) == 0);
}

static bool under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD"), *x = getenv("KGW_EXTRA_ARGS");
    return (p && strstr(p, "vgpreload")) || (x && strstr(x, "--no-sandbox"));
}

static const struct kmgr_listener_ops listener_ops = {
    .iopub = on_iopub, .event = on_event, .exec_end = on_exec_end};
static struct kmgr_listener listener;

static kmgr_t *open_mgr(evl_t *evl, const struct kmgr_opts *o)
{
    kmgr_t *m = kmgr_new(evl, o);
    if (m) {
        CHECK(kmgr_listen(m, &listener, &listener_ops, NULL) == 0);
        kmgr_on_call(m, on_call, NULL);
    }
    return m;
}

int main(void)
{
    char rundir[] = "/tmp/kgw-test-kmgr-XXXXXX", ws[PATH_MAX];
    CHECK(mkdtemp(rundir));
    CHECK(chmod(rundir, 0711) == 0); /* sandboxes' set-up runs as unprivileged uids */
    snprintf(ws, sizeof(ws), "%s/ws", rundir);
    signal(SIGPIPE, SIG_IGN);
    evl_poll_t *lp = evl_poll_new();
    CHECK(lp);
    const char *pydir = getenv("KGW_PYTHON_PATH");
    struct kmgr_opts o = {.runtime_dir = rundir,
                          .max_kernels = 2,
                          .start_timeout_ms = 60000,
                          .shutdown_grace_ms = 3000,
                          .hb_interval_ms = 1000,
                          .hb_misses = 3,
                          .cull_interval_s = 60,
                          .dead_linger_s = 60,
                          .callback_max_bytes = 65536,
                          .callback_timeout_ms = TIMEOUT_MS,
                          .python_dir = pydir};
    kmgr_t *m = open_mgr(evl_poll_evl(lp), &o);
    CHECK(m);
    if (!kspecs_find(kmgr_kspecs(m), "python3")) {
        fprintf(stderr, "no python3 kernelspec (install python3-ipykernel)\n");
        return 77;
    }
    reap_m = m;
    reap_l = evl_poll_evl(lp);
    reap_t = reap_l->timer_new(reap_l, reap, NULL);
    CHECK(reap_t);
    reap_l->timer_arm(reap_l, reap_t, 50);

    basic(lp, m);
    kmgr_destroy(&m);

    o.output_cap = 100;
    o.max_kernel_msg = 1 << 20;
    reap_m = m = open_mgr(evl_poll_evl(lp), &o);
    CHECK(m);
    limits(lp, m);
    kmgr_destroy(&m);
    o.output_cap = 0;
    o.max_kernel_msg = 0;

    if (!pydir) {
        fprintf(stderr, "KGW_PYTHON_PATH unset: callbacks not tested\n");
    } else {
        /* unsandboxed: the kernel works in ws, the CSV lands there */
        CHECK(mkdir(ws, 0700) == 0);
        o.kernel_cwd = ws;
        o.shutdown_grace_ms = 300; /* a kernel stuck in a call dies well before its timeout */
        reap_m = m = open_mgr(evl_poll_evl(lp), &o);
        CHECK(m);
        callbacks(lp, m, false, ws);
        kmgr_destroy(&m);
        CHECK(rmdir(ws) == 0);

        const char *init = getenv("KGW_SANDBOX_INIT");
        int init_fd = init ? open(init, O_RDONLY | O_CLOEXEC) : -1;
        if (geteuid() != 0 || init_fd < 0 || under_valgrind()) {
            fprintf(stderr, "sandboxed callbacks not tested (needs root, KGW_SANDBOX_INIT and no "
                            "valgrind)\n");
        } else if (unshare(CLONE_NEWNS) < 0 ||
                   mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
            fprintf(stderr, "sandboxed callbacks not tested: no private mount namespace: %s\n",
                    strerror(errno));
        } else {
            struct kmgr_sandbox sb = {
                .lim = {.mem_bytes = 1LL << 30,
                        .pids = 256,
                        .cpu_millis = 1000,
                        .workspace_bytes = 64LL << 20,
                        .tmp_bytes = 64LL << 20,
                        .fsize_bytes = 64LL << 20,
                        .nofile = 1024},
                .init_fd = init_fd,
                /* away from a gateway's default (200000) */
                .uid_base = 3000000 + (unsigned)(getpid() % 10000) * 8,
            };
            o.kernel_cwd = NULL;
            o.sandbox = &sb;
            reap_m = m = open_mgr(evl_poll_evl(lp), &o);
            CHECK(m);
            if (kmgr_sandbox_error(m))
                fprintf(stderr, "sandboxed callbacks not tested: %s\n", kmgr_sandbox_error(m));
            else
                callbacks(lp, m, true, NULL);
            kmgr_destroy(&m);
        }
        if (init_fd >= 0)
            close(init_fd);
    }

    json_decref(X.reply);
    json_decref(H.args);
    json_decref(H.kwargs);
    evl_timer_destroy(reap_l, &reap_t);
    evl_poll_destroy(&lp);
    CHECK(rmdir(rundir) == 0); /* nothing left behind */
    printf("ok\n");
    return 0;
}
