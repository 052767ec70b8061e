#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/kwire_int.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"

static const int chan_port[JCHAN_N] = {KPORT_SHELL, 0, KPORT_STDIN, KPORT_CONTROL};

static void on_reply(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    kconn_t *c = data;
    jmsg_t m;
    jhdr_t h;
    enum jchan chan = (enum jchan)(z - c->z);
    if (kwire__parse(c->k, frames, n, &m, &h) < 0) {
        log_debug("kernel=%s: malformed %s message dropped", c->k->id, jchan_name(chan));
        return;
    }
    kernel_touch(c->k);
    /* An answer to a request in flight always passes (docs/protocol.md "Output buffer limit");
     * what answers none (a late reply, one the kernel made up) counts as output: dropped
     * while the kernel is over its share of the output buffer. stdin is the kernel's own
     * requests (input_request): they pass. */
    obudget_share_t *share = kernel_out_share(c->k);
    if (!kexec__answered(c, &m, &h) && chan != JCHAN_STDIN && share &&
        !obudget_share_admit(share, kwire__bytes(&m))) {
        log_debug("kernel=%s: %s %s answering no request dropped: over its output share", c->k->id,
                  jchan_name(chan), h.msg_type);
        return;
    }
    kwire__count(c->k, KMGR_TO_CLIENT, &m);
    c->ops->reply(c->user, c, chan, &m, &h);
}

/* A reply over --max-kernel-message-bytes reset this session's socket. */
static void on_oversize(void *data, kzsock_t *z)
{
    kconn_t *c = data;
    kexec__oversize(c->k, jchan_name((enum jchan)(z - c->z)));
}

kconn_t *kconn_new(kernel_t *k, const char *session_id, const struct kconn_ops *ops, void *user)
{
    char ep[PATH_MAX + 16];
    int r = 0;
    kconn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->k = k;
    c->ops = ops;
    c->user = user;
    list_init(&c->pending);
    snprintf(c->session, sizeof(c->session), "%s", session_id);
    for (int ch = 0; ch < JCHAN_N && r == 0; ch++) {
        if (!chan_port[ch])
            continue;
        kwire__endpoint(k, chan_port[ch], ep, sizeof(ep));
        r = kz_open(&c->z[ch], k->m->evl, k->m->zctx, ZMQ_DEALER, c->session, ep, on_reply, c,
                    k->m->o.max_kernel_msg, on_oversize);
    }
    if (r < 0) {
        for (int ch = 0; ch < JCHAN_N; ch++)
            kz_close(&c->z[ch]);
        free(c);
        errno = -r;
        return NULL;
    }
    list_prepend(&k->conns, &c->link);
    return c;
}

void kconn_destroy(kconn_t **pc)
{
    kconn_t *c = *pc;
    if (!c)
        return;
    list_remove(&c->link);
    kexec__forget(c);
    for (int ch = 0; ch < JCHAN_N; ch++)
        kz_close(&c->z[ch]);
    free(c);
    *pc = NULL;
}

int kconn_send(kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    if (chan == JCHAN_IOPUB || (unsigned)chan >= JCHAN_N)
        return -EINVAL;
    if (!strncmp(h->msg_type, KCONN_RESERVED_PREFIX, strlen(KCONN_RESERVED_PREFIX)))
        return -EPERM; /* only the gateway sends these (docs/checkpoints.md) */
    kernel_touch(c->k);
    int r = kz_send_jmsg(&c->z[chan], c->k->sign, m);
    if (r == 0 && chan == JCHAN_SHELL && !strcmp(h->msg_type, "execute_request"))
        kexec__track_sent(c->k, h->msg_id);
    if (r == 0)
        kexec__sent(c, chan, m, h);
    if (r >= 0)
        kwire__count(c->k, KMGR_TO_KERNEL, m);
    return r;
}

kernel_t *kconn_kernel(const kconn_t *c)
{
    return c->k;
}

const char *kconn_session(const kconn_t *c)
{
    return c->session;
}
