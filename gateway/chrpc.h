/* chrpc: what each /channel method does. One row per row of protocol/rpc.c's allowlist (the
 * single source of which methods exist), indexed by its enum rpc_method: the handler, what the
 * object must be, and for a kernel client's request the Jupyter msg_type and the channel it is
 * sent on (all those rows share one send function). tests/unit/test_chrpc.c checks that every
 * allowlisted method has exactly one row and that no row is outside the allowlist. */
#ifndef KGW_GATEWAY_CHRPC_H
#define KGW_GATEWAY_CHRPC_H

#include <jansson.h>
#include <stddef.h>

#include "gateway/chconn.h"
#include "protocol/jmsg.h"
#include "protocol/rpc.h"

/* A call bound to its row and its object. */
struct chrpc_call {
    chconn_t *c;
    const rpc_call_t *rc;
    const rpc_args_t *a;
    const struct chrpc_row *row;
    kernel_t *k;    /* the kernel: of the kernel_id argument, the kernel manager or the client */
    chclient_t *cl; /* RPC_OBJ_CLIENT */
};

typedef void chrpc_fn(const struct chrpc_call *x);

enum {
    CHRPC_KERNEL_ARG = 1 << 0, /* the kernel_id argument names the kernel: else KeyError */
    CHRPC_LIVE = 1 << 1,       /* the kernel (and the client's sockets) must be up */
};

struct chrpc_row {
    enum rpc_method method; /* its index, and its allowlist row */
    enum rpc_obj obj;       /* the allowlist row's object type */
    chrpc_fn *fn;
    unsigned flags;
    const char *msg_type; /* client requests: the Jupyter request sent */
    enum jchan chan;      /* ... and its channel; get_*_msg: the queue read */
    void (*content)(json_t *content); /* client requests: spec defaults over the arguments */
};

/* The rows, RPC_METHOD_N of them (for tests and docs). */
const struct chrpc_row *chrpc_rows(size_t *ret_n);
/* Binds a parsed call_request (rc->err unset) and runs its row, or answers the refusal. */
void chrpc_dispatch(chconn_t *c, const rpc_call_t *rc);

#endif
