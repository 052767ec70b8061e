/* Services of the server object that every face uses (gw.h). */
#include "gateway/gw.h"

#include <errno.h>
#include <malloc.h>
#include <string.h>

#include "common/ident.h"
#include "common/shardid.h"
#include "common/util.h"

int gw_refuse(struct gw_refusal *no, int status, int retry_after, const char *message)
{
    no->status = status;
    no->retry_after = retry_after;
    no->message = message;
    return status;
}

int gw_refuse_auth(struct gw_refusal *no, int status, int retry_after)
{
    if (status == 429)
        return gw_refuse(no, 429, retry_after, GW_AUTH_429_MESSAGE);
    return gw_refuse(no, 401, 0, GW_AUTH_401_MESSAGE);
}

bool gw_owns(const kernel_t *k, const char *tenant)
{
    return k && tenant && !strcmp(wspace_tenant(kernel_workspace(k)), tenant);
}

kernel_t *gw_kernel(gw_t *g, const char *id, const char *tenant)
{
    kernel_t *k = kmgr_find(g->km, id);
    return gw_owns(k, tenant) ? k : NULL;
}

int gw_set_instance_id(gw_t *g, const char *id)
{
    if (!id || !id[0]) {
        util_uuid(g->instance_id);
        return 0;
    }
    if (!ident_str_ok(id, IDENT_INSTANCE))
        return -EINVAL;
    memcpy(g->instance_id, id, strlen(id) + 1);
    /* a named instance is a shard: its ids carry its tag, "/s/<id>/..." is its prefix */
    shardid_set_instance(g->instance_id);
    route_set_shard(g->instance_id);
    return 0;
}

/* Memory that bursts of clients needed (header tables, replay buffers, queues) goes back to
 * the system once they are gone, instead of staying in the allocator's free lists. */
#define TRIM_INTERVAL_MS 30000
#define TRIM_SOON_MS     1000

static void on_trim(void *data)
{
    gw_t *g = data;
    malloc_trim(0);
    g->trim_due_ms = util_now_ms() + TRIM_INTERVAL_MS;
    g->loop.evl.timer_arm(&g->loop.evl, g->trim_timer, TRIM_INTERVAL_MS);
}

void gw_trim_soon(gw_t *g)
{
    uint64_t now = util_now_ms();
    if (!g->trim_timer || g->trim_due_ms <= now + TRIM_SOON_MS)
        return; /* due sooner anyway: re-arming would only put it off */
    g->trim_due_ms = now + TRIM_SOON_MS;
    g->loop.evl.timer_arm(&g->loop.evl, g->trim_timer, TRIM_SOON_MS);
}

int gw_trim_start(gw_t *g)
{
    if (!(g->trim_timer = g->loop.evl.timer_new(&g->loop.evl, on_trim, g)))
        return -ENOMEM;
    g->trim_due_ms = util_now_ms() + TRIM_INTERVAL_MS;
    g->loop.evl.timer_arm(&g->loop.evl, g->trim_timer, TRIM_INTERVAL_MS);
    return 0;
}
