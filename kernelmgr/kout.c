/* kout: a kernel's iopub output against its share of the output buffer budget (kout_int.h).
 *
 * The output a kernel's clients have not read yet is bounded by its share of the budget: an
 * iopub message (stream, display_data, update_display_data, comm_msg, ...) that would take it
 * over is dropped, with one notice in the stream per run of drops and execution (as
 * jupyter_server does when its IOPub data rate limit is exceeded). The iopub socket is never
 * paused for it: the kernel's PUB socket would drop what does not fit, its status messages
 * included.
 *
 * Status, execute_input, results, errors, clear_output and the comms' life tell clients how an
 * execution went: they pass over the share, up to its ceiling (twice the share). The kernel's
 * code can send them in a loop all the same, so over the share a repeat of the last one
 * relayed (the same status or clear_output under the same parent, nothing between) is
 * coalesced, and past the ceiling the clients holding more than a quarter of the share are
 * ended (a websocket closes with 1008, a detached session stops buffering its replay, a
 * /channel connection closes), and if the others still hold too much together, every client
 * holding any of it, before the message passes: what the gateway holds for one kernel stays
 * under its ceiling and one message, and a status or result is never lost to a client that
 * keeps up. */
#include "kernelmgr/kout_int.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernelmgr/kexec_int.h"
#include "kernelmgr/kwire_int.h"

/* A kernel's output against its share (k->out). */
struct kout {
    obudget_share_t *share;
    /* whether output is being dropped (from the first drop until it is under half its share
     * again), and in which execution (a hash of its msg_id: the next one's drops get a notice
     * of their own) */
    bool dropping;
    unsigned char drop_exec[16];
    /* the last iopub message relayed, when a status or clear_output: a hash of its type,
     * parent and content (a repeat of it is coalesced while over the share) */
    bool last_idem;
    unsigned char last[16];
};

enum kout_kind { KOUT_OUTPUT, KOUT_KEPT, KOUT_IDEM };

int kout__new(kernel_t *k)
{
    struct kout *o;
    if (!k->m->o.out_budget)
        return 0;
    if (!(o = calloc(1, sizeof(*o))))
        return -ENOMEM;
    if (!(o->share = obudget_share_new(k->m->o.out_budget))) {
        free(o);
        return -ENOMEM;
    }
    k->out = o;
    return 0;
}

void kout__free(kernel_t *k)
{
    if (!k->out)
        return;
    obudget_share_unref(&k->out->share);
    free(k->out);
    k->out = NULL;
}

obudget_share_t *kout__share(const kernel_t *k)
{
    return k->out ? k->out->share : NULL;
}

static enum kout_kind kind(const char *msg_type)
{
    /* jupyter_server's rate limit spares status, execute_input and comm_open; errors and
     * results too here; status and clear_output say the same thing twice when repeated */
    static const char *const keep[] = {"execute_input", "execute_result", "error", "comm_open",
                                       "comm_close"};
    if (!strcmp(msg_type, "status") || !strcmp(msg_type, "clear_output"))
        return KOUT_IDEM;
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
        if (!strcmp(msg_type, keep[i]))
            return KOUT_KEPT;
    return KOUT_OUTPUT;
}

/* A hash of m's type, parent and content: equal for a repeat (generic BLAKE2b; a collision
 * would only coalesce one status or clear_output while the kernel is over its share). */
static void idem_hash(const jmsg_t *m, const jhdr_t *h, unsigned char out[16])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 16);
    crypto_generichash_update(&st, (const unsigned char *)h->msg_type, strlen(h->msg_type) + 1);
    for (int p = JPART_PARENT; p <= JPART_CONTENT; p += JPART_CONTENT - JPART_PARENT) {
        unsigned char len[8];
        for (int i = 0; i < 8; i++)
            len[i] = (unsigned char)((uint64_t)m->part[p].n >> (8 * i));
        crypto_generichash_update(&st, len, sizeof(len));
        crypto_generichash_update(&st, (const unsigned char *)m->part[p].p, m->part[p].n);
    }
    crypto_generichash_final(&st, out, 16);
}

static void notice_drop(kernel_t *k, const jmsg_t *m, size_t held, size_t share)
{
    struct kout *o = k->out;
    const char *exec = kexec__running(k);
    unsigned char in[sizeof(o->drop_exec)];
    crypto_generichash(in, sizeof(in), (const unsigned char *)exec, strlen(exec), NULL, 0);
    if (o->dropping && !memcmp(o->drop_exec, in, sizeof(in)))
        return;
    char text[512];
    o->dropping = true;
    memcpy(o->drop_exec, in, sizeof(in));
    snprintf(text, sizeof(text),
             /* under 290 bytes: the execute API's notice event keeps 300 */
             "Output buffer limit exceeded.\n"
             "This kernel's stream, display and comm output is dropped\n"
             "until its clients read what the gateway holds for them.\n"
             "To change this limit, set `--output-buffer-bytes`.\n\n"
             "Current values: held %zu bytes, share %zu,\n"
             "--output-buffer-bytes=%zu",
             held, share, k->m->o.out_budget->limit);
    log_warn("kernel=%s: output buffer share exceeded (%zu bytes held, share %zu); dropping "
             "output",
             k->id, held, share);
    if (jmsg_is_json_object(m->part[JPART_PARENT]))
        k->own->notice(k, m->part[JPART_PARENT], text);
}

/* A status, result, error, ... of n bytes over the share: coalesced, passed up to the
 * ceiling, or past it the clients that hold the most are ended first. */
static bool admit_kept(kernel_t *k,
                       const jmsg_t *m,
                       const jhdr_t *h,
                       enum kout_kind kd,
                       const unsigned char *hash,
                       size_t n)
{
    obudget_share_t *s = k->out->share;
    obudget_t *b = k->m->o.out_budget;
    if (kd == KOUT_IDEM && k->out->last_idem && !memcmp(hash, k->out->last, sizeof(k->out->last))) {
        b->coalesced++;
        return false;
    }
    size_t ceiling = obudget_share_ceiling(s);
    if (obudget_share_held(s) + n <= ceiling)
        return true;
    size_t held = obudget_share_held(s), min = obudget_share_limit(s) / 4;
    unsigned ended = k->own->overflow(k, min);
    if (obudget_share_held(s) > 0 && obudget_share_held(s) + n > ceiling) {
        /* many clients, each a little behind, hold it together: none of them keeps up */
        min = 0;
        ended += k->own->overflow(k, min);
    }
    b->ended += ended;
    if (ended)
        log_warn("kernel=%s: its clients hold %zu bytes of its output, past its ceiling (%zu) "
                 "with a %s of %zu bytes; ended %u client(s) holding more than %zu",
                 k->id, held, ceiling, h->msg_type, n, ended, min);
    held = obudget_share_held(s);
    if (held == 0 || held + n <= ceiling)
        return true;
    /* what no client holds any more is still held (it should not be): refused */
    b->dropped++;
    b->dropped_bytes += n;
    notice_drop(k, m, held, obudget_share_limit(s));
    return false;
}

bool kout__admit(kernel_t *k, const jmsg_t *m, const jhdr_t *h)
{
    struct kout *o = k->out;
    if (!o || !o->share)
        return true;
    enum kout_kind kd = kind(h->msg_type);
    unsigned char hash[16];
    size_t n = kwire__bytes(m);
    size_t held = obudget_share_held(o->share), share = obudget_share_limit(o->share);
    if (kd == KOUT_IDEM)
        idem_hash(m, h, hash);
    if (kd == KOUT_OUTPUT) {
        if (!obudget_share_admit(o->share, n)) {
            notice_drop(k, m, held, share);
            return false;
        }
        if (o->dropping && held <= share / 2) {
            o->dropping = false;
            log_info("kernel=%s: output resumed (%zu bytes held for its clients)", k->id, held);
        }
    } else if (obudget_share_ceiling(o->share) > 0 /* 0: no budget */ && held + n > share &&
               !admit_kept(k, m, h, kd, hash, n)) {
        return false;
    }
    o->last_idem = kd == KOUT_IDEM;
    if (o->last_idem)
        memcpy(o->last, hash, sizeof(o->last));
    return true;
}
