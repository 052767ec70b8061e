/* kernelmgr on its own: a real ipykernel driven through kmgr/kernel/kconn on a poll() loop,
 * without the gateway. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    int ready, gone, iopub, idle_for_us, reply_ok, stream_ok;
    char exec_id[64];
    int status;
} S;

static void on_done(void *data, kernel_t *k, int status)
{
    S.ready++;
    S.status = status;
}

static void on_iopub(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    S.iopub++;
    const jspan_t *p = &m->part[JPART_PARENT];
    bool ours = S.exec_id[0] && memmem(p->p, p->n, S.exec_id, strlen(S.exec_id));
    if (ours && !strcmp(h->msg_type, "stream") &&
        memmem(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, "42", 2))
        S.stream_ok = 1;
    if (ours && !strcmp(h->msg_type, "status") &&
        memmem(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, "idle", 4))
        S.idle_for_us = 1;
}

static void on_event(void *user, kernel_t *k, enum kernel_event ev, const char *d)
{
    if (ev == KERNEL_EV_GONE)
        S.gone++;
}

static void on_reply(void *user, kconn_t *c, enum jchan ch, const jmsg_t *m, const jhdr_t *h)
{
    if (ch == JCHAN_SHELL && !strcmp(h->msg_type, "execute_reply") &&
        memmem(m->part[JPART_CONTENT].p, m->part[JPART_CONTENT].n, "\"ok\"", 4))
        S.reply_ok = 1;
}

/* Where pidfds are unavailable (valgrind) exits arrive only as SIGCHLD: poll for them. */
static kmgr_t *reap_m;
static evl_t *reap_l;
static evl_timer_t *reap_t;

static void reap(void *d)
{
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

int main(void)
{
    char rundir[] = "/tmp/kgw-test-kmgr-XXXXXX";
    CHECK(mkdtemp(rundir));
    signal(SIGPIPE, SIG_IGN);
    evl_poll_t *lp = evl_poll_new();
    CHECK(lp);
    struct kmgr_opts o = {.runtime_dir = rundir,
                          .max_kernels = 2,
                          .start_timeout_ms = 60000,
                          .shutdown_grace_ms = 3000,
                          .hb_interval_ms = 1000,
                          .hb_misses = 3,
                          .cull_interval_s = 60,
                          .dead_linger_s = 60};
    struct kmgr_hooks h = {.iopub = on_iopub, .event = on_event};
    kmgr_t *m = kmgr_new(evl_poll_evl(lp), &o, &h);
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

    kernel_t *k = NULL;
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "nope"}, &k) == -ENOENT);
    CHECK(kmgr_start(m, &(struct kmgr_start){.spec_name = "python3"}, &k) == 0);
    CHECK(kmgr_find(m, kernel_id(k)) == k);
    kwait_t *w = NULL;
    CHECK(kernel_wait(k, on_done, NULL, &w) == 0);
    CHECK(evl_poll_run(lp, is_ready, NULL, 60000));
    CHECK(S.status == 0);
    CHECK(kernel_state(k) == KERNEL_RUNNING);
    CHECK(S.iopub > 0); /* readiness means iopub is proven live */

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
    CHECK(kconn_send(c, JCHAN_IOPUB, &msg) == -EINVAL);
    CHECK(kconn_send(c, JCHAN_SHELL, &msg) == 0);
    free(hdr);
    CHECK(evl_poll_run(lp, executed, NULL, 30000));
    kconn_destroy(&c);

    CHECK(kernel_shutdown(k) == 0);
    CHECK(evl_poll_run(lp, is_gone, NULL, 30000));
    CHECK(kmgr_count(m) == 0);
    kmgr_destroy(&m);
    evl_timer_destroy(reap_l, &reap_t);
    evl_poll_destroy(&lp);
    CHECK(rmdir(rundir) == 0); /* nothing left behind */
    printf("ok\n");
    return 0;
}
