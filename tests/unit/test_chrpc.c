/* gateway/chrpc.c: the /channel method table against protocol/rpc.c's allowlist. Every
 * allowlisted method has exactly one row, and no row is outside the allowlist: a row names an
 * allowlisted method (its own index) on the allowlist row's object type, with a handler. */
#include <string.h>

#include "check.h"

#include "gateway/chrpc.h"

int main(void)
{
    size_t n, rows_of[RPC_METHOD_N] = {0};
    const struct chrpc_row *rows = chrpc_rows(&n);
    CHECK_INT(n, RPC_METHOD_N);
    for (size_t i = 0; i < n; i++) {
        const struct chrpc_row *r = &rows[i];
        const rpc_spec_t *spec = rpc_spec(r->method);
        CHECK_CASE(spec ? spec->name : "(a row outside the allowlist)");
        CHECK(spec != NULL); /* its method is on the allowlist */
        if (!spec)
            continue;
        rows_of[r->method]++;
        CHECK_INT(r->method, i);         /* found by its method */
        CHECK_INT(r->obj, spec->obj);    /* on the allowlist row's object */
        CHECK(r->fn != NULL);
        if (r->msg_type) { /* a request is a kernel client's, on shell or stdin */
            CHECK_INT(r->obj, RPC_OBJ_CLIENT);
            CHECK(r->chan == JCHAN_SHELL || r->chan == JCHAN_STDIN);
            CHECK(strlen(r->msg_type) > 0 && strlen(r->msg_type) < JMSG_MSG_TYPE_MAX);
        }
        /* the kernel_id argument names the kernel exactly when the method has one */
        bool has_id = rpc_args_get(&(rpc_args_t){.spec = spec}, "kernel_id") != NULL;
        CHECK_INT(!!(r->flags & CHRPC_KERNEL_ARG), has_id);
    }
    for (int m = 0; m < RPC_METHOD_N; m++) {
        CHECK_CASE(rpc_spec(m)->name);
        CHECK_INT(rows_of[m], 1); /* one row per allowlisted method */
    }
    /* the requests named in the messaging spec, on their channels */
    static const struct {
        enum rpc_method m;
        const char *type;
        enum jchan chan;
    } req[] = {
        {RPC_KC_EXECUTE, "execute_request", JCHAN_SHELL},
        {RPC_KC_COMPLETE, "complete_request", JCHAN_SHELL},
        {RPC_KC_INSPECT, "inspect_request", JCHAN_SHELL},
        {RPC_KC_KERNEL_INFO, "kernel_info_request", JCHAN_SHELL},
        {RPC_KC_HISTORY, "history_request", JCHAN_SHELL},
        {RPC_KC_IS_COMPLETE, "is_complete_request", JCHAN_SHELL},
        {RPC_KC_COMM_INFO, "comm_info_request", JCHAN_SHELL},
        {RPC_KC_INPUT, "input_reply", JCHAN_STDIN},
    };
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
        CHECK_CASE(req[i].type);
        CHECK_STR(rows[req[i].m].msg_type, req[i].type);
        CHECK_INT(rows[req[i].m].chan, req[i].chan);
        CHECK(rows[req[i].m].fn == rows[RPC_KC_KERNEL_INFO].fn || req[i].m == RPC_KC_EXECUTE ||
              req[i].m == RPC_KC_INPUT);
    }
    CHECK_DONE();
}
