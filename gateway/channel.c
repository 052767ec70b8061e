/* channel: the /channel RPC face (docs/rpc.md): its upgrade check and its registration with
 * the kernel manager. A connection is chconn.c, a kernel client chclient.c, what each method
 * does chrpc.c's table. */
#include "gateway/channel.h"

#include "common/log.h"
#include "gateway/chclient.h"
#include "gateway/chconn.h"
#include "gateway/chrpc.h"
#include "gateway/route.h"
#include "gateway/wsconn.h"

void channel_init(gw_t *g)
{
    list_init(&g->ch_conns);
}

int channel_confirm(gw_t *g, struct lws *wsi, const struct route *rt, struct gw_refusal *no)
{
    struct gw_caller who;
    return wsconn_confirm(g, wsi, "channel", &who, no);
}

static const struct chconn_handlers handlers = {.dispatch = chrpc_dispatch,
                                                 .client_free = chclient_free};

int channel_open(gw_t *g, struct lws *wsi, struct gw_pss *pss)
{
    return chconn_open(g, wsi, pss, &handlers);
}

void channel_close_all(gw_t *g, int code, const char *reason)
{
    chconn_close_all(g, code, reason);
}

int channel_listen(gw_t *g)
{
    kmgr_on_call(g->km, chclient_kernel_call, g);
    return kmgr_listen(g->km, &g->ch_listener, &chclient_listener_ops, g);
}
