/* chconn: one /channel websocket (docs/rpc.md): reading its messages, its object references,
 * its calls in progress, its refused calls (violations and their close codes), and the kernel
 * callbacks waiting for its answer. What a call does is in chrpc.c's table; the kernel-client
 * objects it holds are chclient.c's. These are the /channel files' shared types. */
#ifndef KGW_GATEWAY_CHCONN_H
#define KGW_GATEWAY_CHCONN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/list.h"
#include "gateway/gw.h"
#include "gateway/wsconn.h"
#include "protocol/rpc.h"

#define CH_MAX_REFS       64 /* object references per connection */
#define CH_MAX_PENDING    64 /* calls waiting at once per connection */
#define CH_MAX_VIOLATIONS 10 /* calls refused by the allowlist before the connection is closed */
#define CH_MAX_CALLBACKS  16 /* kernel callbacks awaiting this connection's answer */

typedef struct chconn chconn_t;
typedef struct chclient chclient_t;
typedef struct chcall chcall_t;

struct chref {
    enum rpc_obj type;
    char id[40];
    chclient_t *client; /* RPC_OBJ_CLIENT */
};

/* What a pending call waits for. */
enum chcall_kind {
    CHCALL_KERNEL,   /* a kernel's start, restart or shutdown (chrpc.c) */
    CHCALL_GET_MSG,  /* a message on one of its client's queues (chclient.c) */
    CHCALL_READY,    /* wait_for_ready (chclient.c) */
};

/* a call that has not been answered yet */
struct chcall {
    chconn_t *c;
    char rid[RPC_REQUEST_ID_MAX + 1];
    enum chcall_kind kind;
    enum rpc_err timeout_err; /* its answer when the timer fires */
    const char *timeout_msg;
    chclient_t *cl;        /* get_*_msg and wait_for_ready */
    int q;                 /* get_*_msg: the queue */
    bool reply_id;         /* CHCALL_KERNEL: answers the kernel id (start_kernel) */
    bool ignore_fail;      /* CHCALL_KERNEL: a failed end still answers None (shutdown) */
    char kernel_id[40];
    kwait_t *wait;
    evl_timer_t *timer;    /* the call's timeout */
    evl_timer_t *flush;    /* wait_for_ready: iopub quiet time */
    char info_id[40];      /* wait_for_ready: its kernel_info_request */
    int stage;             /* wait_for_ready: 0 kernel starting, 1 asked, 2 flushing */
    bool idle_seen;        /* wait_for_ready: its iopub idle came before its reply */
    struct list link;      /* on c->calls */
};

/* a kernel's callback waiting for this connection's answer */
struct chcb {
    char rid[40];
    char kernel_id[40];
    uint64_t call_id;
};

struct chconn {
    wsconn_t wc; /* the websocket: queue, input, tenant, who */
    gw_t *g;
    const struct chconn_handlers *h;
    int violations;
    char addr[RL_ADDR_MAX];
    struct chref refs[CH_MAX_REFS];
    size_t nrefs;
    chclient_t *clients;
    struct list calls; /* chcall_t.link, in call order */
    size_t ncalls;
    struct chcb cbs[CH_MAX_CALLBACKS];
    size_t ncbs;
    struct list link; /* on gw_t.ch_conns */
};

/* What a connection hands up (channel.c wires chrpc.c and chclient.c in): a call_request
 * the allowlist parser accepted, and the kernel-client objects it frees on closing. */
struct chconn_handlers {
    void (*dispatch)(chconn_t *c, const rpc_call_t *rc);
    void (*client_free)(chclient_t *cl);
};

/* LWS_CALLBACK_ESTABLISHED: a new connection in pss; 0, or -1 to close it. */
int chconn_open(gw_t *g, struct lws *wsi, struct gw_pss *pss, const struct chconn_handlers *h);

/* Replies. text (malloc'd, taken; NULL: out of memory, the connection closes 1011). */
void chconn_send_text(chconn_t *c, char *text);
void chconn_reply_value(chconn_t *c, const char *rid, json_t *value); /* takes value */
void chconn_reply_ref(chconn_t *c, const char *rid, enum rpc_obj type, const char *id);
void chconn_reply_error(chconn_t *c, const char *rid, enum rpc_err type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A call the allowlist or the reference table refused: answered (rid not NULL), logged,
 * audited and counted; too many close the connection (1008). */
void chconn_violation(chconn_t *c, const char *rid, const rpc_error_t *e);

/* A pending call, answered timeout_err/timeout_msg after timeout_s (0: none); NULL when the
 * connection has too many (the call is answered). */
chcall_t *chcall_new(chconn_t *c, const char *rid, enum chcall_kind kind, double timeout_s,
                     enum rpc_err timeout_err, const char *timeout_msg);
void chcall_free(chcall_t *call);

struct chref *chconn_ref_find(chconn_t *c, enum rpc_obj type, const char *id);
/* NULL when the connection has CH_MAX_REFS already. */
struct chref *chconn_ref_add(chconn_t *c, enum rpc_obj type, const char *id);
/* A kernel of the caller's tenant, by id; NULL for a missing one and another tenant's alike. */
kernel_t *chconn_kernel(chconn_t *c, const char *id);
static inline bool chconn_kernel_usable(const kernel_t *k)
{
    return k && kernel_state(k) != KERNEL_TERMINATING && kernel_state(k) != KERNEL_DEAD;
}
/* Sends a kernel's callback to this connection as a call_request on the client object
 * client_ref, to be answered there; the oldest unanswered one fails when CH_MAX_CALLBACKS
 * wait. */
void chconn_callback(chconn_t *c, kernel_t *k, uint64_t call_id, const char *client_ref,
                     const char *name, json_t *args, json_t *kwargs);
void chconn_close_all(gw_t *g, int code, const char *reason);

#endif
