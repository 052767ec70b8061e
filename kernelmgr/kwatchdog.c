/* A kernel's watchdog: its heartbeats (every --hb-interval-ms, one sweep over all kernels by
 * the manager, so that idle kernels cost one timer wake-up per interval together and their
 * answers arrive in a burst; a kernel that misses three in a row is hung and killed), the
 * deadline of its start (no kernel_info_reply within --start-timeout: killed) and the
 * escalation of its stop (a shutdown_request ignored for --shutdown-grace-ms: SIGTERM, then
 * SIGKILL). It only signals the process: its end is handled by kernel.c like any other. */
#include "kernelmgr/kwatchdog_int.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernelmgr/klaunch_int.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"

#define TERM_KILL_MS 1000 /* SIGTERM -> SIGKILL */
/* Pings sent on one heartbeat socket before it is opened again. libzmq queues messages between
 * a socket and its connection in chunks of 256 (16 KiB each way), allocated as they fill, and
 * keeps the last one emptied for reuse: after 256 pings an idle kernel's heartbeat held 32 KiB
 * more for good. Renewed before that (every 10 minutes at the default --hb-interval-ms), it
 * holds one chunk each way. docs/operations.md "Capacity". */
#define HB_RENEW     200

/* A kernel's heartbeats (k->wd). */
struct kwatchdog {
    int missed;       /* in a row */
    bool outstanding; /* a ping is unanswered */
    unsigned sent;    /* pings sent on the heartbeat socket since it was opened */
};

int kwatchdog__new(kernel_t *k)
{
    if (!(k->wd = calloc(1, sizeof(*k->wd))))
        return -ENOMEM;
    return 0;
}

void kwatchdog__free(kernel_t *k)
{
    free(k->wd);
    k->wd = NULL;
}

void kwatchdog__reset(kernel_t *k)
{
    k->wd->outstanding = false;
    k->wd->missed = 0;
}

void kwatchdog__on_hb(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n)
{
    kwatchdog__reset(data);
}

void kwatchdog__on_deadline(void *data)
{
    kernel_t *k = data;
    switch (k->stop_stage) {
    case 0: /* started but never answered */
        if (k->state == KERNEL_STARTING || k->state == KERNEL_RESTARTING) {
            log_warn("kernel=%s: no kernel_info_reply within %d ms; killing it", k->id,
                     k->m->o.start_timeout_ms);
            k->exit_status = -ETIMEDOUT;
            klaunch__signal(k, SIGKILL);
        }
        break;
    case 1: /* shutdown_request was ignored */
        k->stats->shutdown_forced++;
        log_warn("kernel=%s: still running %d ms after shutdown_request%s; SIGTERM", k->id,
                 k->m->o.shutdown_grace_ms, k->stop_end ? " and being signalled" : "");
        klaunch__signal(k, SIGTERM);
        k->stop_stage = 2;
        k->m->evl->timer_arm(k->m->evl, k->deadline, TERM_KILL_MS);
        break;
    default:
        log_debug("kernel=%s: still running after SIGTERM; SIGKILL", k->id);
        klaunch__signal(k, SIGKILL);
        break;
    }
}

bool kwatchdog__beat(kernel_t *k)
{
    struct kwatchdog *w = k->wd;
    bool renewed = false;
    if (k->state != KERNEL_RUNNING || k->stop_stage > 0 || k->paused) /* a frozen kernel */
        return false;
    if (w->outstanding && ++w->missed >= k->m->o.hb_misses) {
        log_warn("kernel=%s: %d heartbeats missed; treating it as hung", k->id, w->missed);
        k->exit_status = -ETIMEDOUT;
        k->hb_killed = true;
        klaunch__signal(k, SIGKILL);
        return false;
    }
    if (!k->hb.s || (w->sent >= HB_RENEW && !w->outstanding)) {
        int r = kz_reopen(&k->hb);
        if (r == 0) {
            log_debug("kernel=%s: heartbeat socket opened anew after %u pings", k->id, w->sent);
            w->sent = 0;
            renewed = true;
        } else if (r != -EBUSY) { /* the gateway's trouble (descriptors, memory), not the
                                     kernel's: no ping, no miss */
            log_warn("kernel=%s: cannot open its heartbeat socket again: %s", k->id, strerror(-r));
            return false;
        } /* -EBUSY: an oversize frame is being confirmed on it; renewed at a later beat */
    }
    jspan_t ping = {"ping", 4};
    kz_send(&k->hb, &ping, 1);
    w->sent++;
    w->outstanding = true;
    return renewed;
}
