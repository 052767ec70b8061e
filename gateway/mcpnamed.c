/* MCP named kernels (see mcpnamed.h). Few entries per tenant (--mcp-named-kernels), so a list
 * walked per lookup is enough. */
#include "gateway/mcpnamed.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/kops.h"
#include "gateway/xexec.h"
#include "kernelmgr/kcmd.h"
#include "kernelmgr/kernel.h"

struct mcpnamed {
    gw_t *g;
    struct list entries;
};

bool mcpnamed_holds(const mcpnamed_t *n, const char *kernel_id)
{
    const struct mcpnamed_entry *e;
    list_for_each(e, &n->entries, link)
    {
        if (!strcmp(e->kernel_id, kernel_id))
            return true;
    }
    return false;
}

mcpnamed_t *mcpnamed_new(gw_t *g)
{
    mcpnamed_t *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->g = g;
    list_init(&n->entries);
    return n;
}

void mcpnamed_destroy(mcpnamed_t **pn)
{
    mcpnamed_t *n = *pn;
    if (!n)
        return;
    struct mcpnamed_entry *e, *tmp;
    list_for_each_safe(e, tmp, &n->entries, link)
    {
        list_remove(&e->link);
        free(e);
    }
    free(n);
    *pn = NULL;
}

/* The entry's kernel when it is there to be used (not ended or ending), else NULL. */
static kernel_t *live_kernel(mcpnamed_t *n, const struct mcpnamed_entry *e)
{
    kernel_t *k = e->kernel_id[0] ? gw_kernel(n->g, e->kernel_id, e->tenant) : NULL;
    if (k && (kernel_state(k) == KERNEL_TERMINATING || kernel_state(k) == KERNEL_DEAD))
        return NULL;
    return k;
}

static void entry_free(struct mcpnamed_entry *e, const char *why)
{
    log_info("mcp: named kernel '%s' of tenant=%s: forgotten (%s)", e->name, e->tenant, why);
    list_remove(&e->link);
    free(e);
}

size_t mcpnamed_count(const mcpnamed_t *n, const char *tenant)
{
    size_t c = 0;
    const struct mcpnamed_entry *e;
    list_for_each(e, &n->entries, link)
    {
        c += !strcmp(e->tenant, tenant);
    }
    return c;
}

int mcpnamed_acquire(mcpnamed_t *n,
                     const char *tenant,
                     const char *name,
                     long long max,
                     struct mcpnamed_entry **ret_e)
{
    struct mcpnamed_entry *e, *tmp;
    list_for_each(e, &n->entries, link)
    {
        if (!strcmp(e->tenant, tenant) && !strcmp(e->name, name)) {
            e->sessions++;
            e->last_ms = util_now_ms();
            *ret_e = e;
            return 0;
        }
    }
    if ((long long)mcpnamed_count(n, tenant) >= max) {
        /* those nobody holds whose kernel is gone (deleted, culled, died) make room now,
         * not at the next sweep */
        list_for_each_safe(e, tmp, &n->entries, link)
        {
            if (!strcmp(e->tenant, tenant) && e->sessions == 0 && !live_kernel(n, e))
                entry_free(e, "its kernel is gone");
        }
        if ((long long)mcpnamed_count(n, tenant) >= max)
            return -EDQUOT;
    }
    if (!(e = calloc(1, sizeof(*e))))
        return -ENOMEM;
    snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->sessions = 1;
    e->last_ms = util_now_ms();
    list_append(&n->entries, &e->link);
    *ret_e = e;
    return 0;
}

int mcpnamed_claim(mcpnamed_t *n,
                   const char *tenant,
                   const char *name,
                   long long max,
                   struct mcpnamed_entry **ret_e)
{
    struct mcpnamed_entry *e;
    int rc = mcpnamed_acquire(n, tenant, name, max, &e);
    if (rc < 0)
        return rc;
    if (live_kernel(n, e)) {
        mcpnamed_release(n, e);
        return -EEXIST;
    }
    *ret_e = e;
    return 0;
}

void mcpnamed_release(mcpnamed_t *n, struct mcpnamed_entry *e)
{
    (void)n;
    if (e->sessions > 0)
        e->sessions--;
    /* (freed by the sweep: the kernel stays for the next session of the name) */
}

void mcpnamed_touch(struct mcpnamed_entry *e)
{
    e->last_ms = util_now_ms();
}

void mcpnamed_set_kernel(struct mcpnamed_entry *e, kernel_t *k)
{
    snprintf(e->kernel_id, sizeof(e->kernel_id), "%s", kernel_id(k));
    snprintf(e->workspace, sizeof(e->workspace), "%s", wspace_id(kernel_workspace(k)));
    e->starts++;
    e->last_ms = util_now_ms();
}

void mcpnamed_sweep(mcpnamed_t *n, uint64_t idle_ms)
{
    uint64_t now = util_now_ms();
    struct mcpnamed_entry *e, *tmp;
    list_for_each_safe(e, tmp, &n->entries, link)
    {
        kernel_t *k = live_kernel(n, e);
        if (k && xexec_waiting(n->g, k) == 0 && kcmd_running(k) == 0 &&
            e->last_ms + idle_ms <= now) {
            struct kerr err;
            log_info("mcp: named kernel '%s' of tenant=%s kernel=%s: idle, shut down", e->name,
                     e->tenant, e->kernel_id);
            if (audit_enabled())
                audit_event("mcp_named_kernel_end", "s:s, s:s, s:s, s:s", "tenant", e->tenant,
                            "name", e->name, "kernel", e->kernel_id, "reason", "idle");
            kops_shutdown(n->g, k, &err);
            k = NULL;
        }
        /* one whose kernel ended (deleted, culled, died) is kept until the idle time from its
         * last use: its next session is told, and gets the workspace while it is kept */
        if (!k && e->sessions == 0 && (!e->kernel_id[0] || e->last_ms + idle_ms <= now))
            entry_free(e, e->kernel_id[0] ? "its kernel is gone" : "unused");
    }
}
