/* mcpnamed.c: MCP named kernels (docs/mcp.md "Named kernels"): a kernel a tenant's MCP sessions
 * share by name (the Kgw-Kernel-Name header), so clients that open an MCP session per tool call
 * keep their variables. A name is bound to at most one kernel of one tenant; the same name of
 * another tenant is another entry. Entries are counted per tenant and swept: a kernel unused
 * for the idle time is shut down; an entry no session holds whose kernel is gone is freed once
 * unused for the idle time too (at once when its tenant needs the room). */
#ifndef KGW_GATEWAY_MCPNAMED_H
#define KGW_GATEWAY_MCPNAMED_H

#include <stdbool.h>
#include <stdint.h>

#include "common/ident.h"
#include "common/keyfile.h"
#include "common/list.h"
#include "gateway/gw.h"
#include "kernelmgr/wspace.h"

typedef struct mcpnamed mcpnamed_t;

/* One name of one tenant. Sessions hold it (mcpnamed_acquire) and read or set kernel_id; the
 * registry frees it only when no session holds it. */
struct mcpnamed_entry {
    struct list link;
    char tenant[KEYFILE_TENANT_MAX + 1];
    char name[IDENT_KNAME_MAX + 1];
    char kernel_id[40];                /* "" until its first kernel is started */
    char workspace[WSPACE_ID_MAX + 1]; /* the last kernel's, for the next one ("" none) */
    unsigned starts;                   /* kernels started for it */
    size_t sessions;                   /* sessions holding it */
    uint64_t last_ms;                  /* its last use (a tool call began or ended) */
};

mcpnamed_t *mcpnamed_new(gw_t *g);
/* Whether an entry names the kernel with this id. */
bool mcpnamed_holds(const mcpnamed_t *n, const char *kernel_id);
/* Frees every entry (their kernels are left to the gateway's shutdown). */
void mcpnamed_destroy(mcpnamed_t **pn);
/* The tenant's entry of that name (name: checked by the caller, IDENT_KNAME), made when the
 * tenant has fewer than max entries; held by the caller until mcpnamed_release. -EDQUOT: the
 * tenant has max entries (after those no session holds and whose kernel is gone were freed),
 * -ENOMEM. */
int mcpnamed_acquire(mcpnamed_t *n,
                     const char *tenant,
                     const char *name,
                     long long max,
                     struct mcpnamed_entry **ret_e);
/* As mcpnamed_acquire, for a kernel made elsewhere (MCP's fork tool) to become the name's:
 * -EEXIST when the name has a kernel (running or starting); the caller sets the kernel
 * (mcpnamed_set_kernel) and releases the entry. */
int mcpnamed_claim(mcpnamed_t *n,
                   const char *tenant,
                   const char *name,
                   long long max,
                   struct mcpnamed_entry **ret_e);
void mcpnamed_release(mcpnamed_t *n, struct mcpnamed_entry *e);
/* Marks a use now (a tool call began or ended). */
void mcpnamed_touch(struct mcpnamed_entry *e);
/* The entry's kernel is k (just started for it). */
void mcpnamed_set_kernel(struct mcpnamed_entry *e, kernel_t *k);
/* Shuts down the kernels unused for idle_ms (none of their executions queued or running),
 * frees the entries no session holds whose kernel is gone and that were unused for idle_ms. */
void mcpnamed_sweep(mcpnamed_t *n, uint64_t idle_ms);
/* Entries of the tenant. */
size_t mcpnamed_count(const mcpnamed_t *n, const char *tenant);

#endif
