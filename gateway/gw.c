/* Services of the server object that every face uses (gw.h). */
#include "gateway/gw.h"

#include <errno.h>
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
