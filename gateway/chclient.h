/* chclient: a /channel kernel client (jupyter_client's KernelClient): its own ZeroMQ session
 * with the kernel (shell/stdin DEALERs with its identity), three queues of unread messages
 * (iopub, shell, stdin) that get_*_msg reads or waits on, wait_for_ready, the requests it
 * sends, and the routing of kernel events and kernel callbacks to it. */
#ifndef KGW_GATEWAY_CHCLIENT_H
#define KGW_GATEWAY_CHCLIENT_H

#include <jansson.h>
#include <stdbool.h>

#include "common/list.h"
#include "common/obudget.h"
#include "common/ring.h"
#include "gateway/chconn.h"
#include "kernelmgr/kconn.h"
#include "protocol/jmsg.h"

#define CH_QUEUE_MAX 10000 /* unread messages per client channel */
#define CH_EXEC_IDS  16    /* recent execute_request ids per client (callback routing) */
#define CH_FLUSH_MS  200   /* wait_for_ready: iopub quiet time after kernel_info_reply */

enum { CHQ_IOPUB = 0, CHQ_SHELL, CHQ_STDIN, CHQ_N };

/* unread messages of one client channel: a ring of message dicts */
struct chclient {
    chconn_t *c;
    char ref[40]; /* its object reference id */
    char kernel_id[40];
    kernel_t *k; /* NULL once the kernel is gone */
    kconn_t *kc;
    char session[40];
    bool started; /* start_channels: iopub is collected */
    ring_t q[CHQ_N]; /* of json_t *, each a reference */
    /* the kernel message bytes of each (as uintptr_t), charged to the kernel's output share
     * (common/obudget.h) while queued; the share is referenced: it outlives the kernel */
    ring_t qn[CHQ_N];
    struct obudget_share *share;
    size_t held;                                 /* the sum of qn */
    char exec_ids[CH_EXEC_IDS][JMSG_MSG_ID_MAX]; /* its recent executions */
    unsigned nexec;
    chclient_t *next;
    struct list klink; /* on its kernel's list (kernel_data), while k */
};

/* A client of k on c, with its reference; NULL and the call answered (rid) on failure. */
chclient_t *chclient_new(chconn_t *c, const char *rid, kernel_t *k);
/* Frees cl (its connection is closing). */
void chclient_free(chclient_t *cl);

/* start_channels / stop_channels */
void chclient_start(chclient_t *cl);
void chclient_stop(chclient_t *cl);
/* get_*_msg on the queue of chan (iopub, shell, stdin): answers rid now or when a message
 * comes; timeout: seconds, < 0 for None (bounded wait). */
void chclient_get_msg(chclient_t *cl, const char *rid, enum jchan chan, double timeout);
/* wait_for_ready(timeout) */
void chclient_wait_ready(chclient_t *cl, const char *rid, double timeout);
/* Sends a request (msg_type, on chan) with content; ret_msg_id gets its id. 0, -EAGAIN (the
 * kernel does not accept messages), or -errno. */
int chclient_request(chclient_t *cl, enum jchan chan, const char *msg_type, json_t *content,
                     char ret_msg_id[37]);
/* Remembers an execution of cl: the kernel's callbacks under it come to cl. */
void chclient_note_exec(chclient_t *cl, const char *msg_id);

/* Kernel events for the /channel clients (iopub to started clients; a kernel gone detaches
 * them), and kernel callbacks (kgw_tools) to the client running the execution. */
extern const struct kmgr_listener_ops chclient_listener_ops;
void chclient_kernel_call(void *user, kernel_t *k, uint64_t call_id, const char *name,
                          json_t *args, json_t *kwargs, const char *exec_msg_id);

#endif
