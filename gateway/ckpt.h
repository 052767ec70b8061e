/* Checkpoints and rollbacks of kernels (docs/checkpoints.md): the records the gateway keeps of
 * each kernel's checkpoints and the operations the faces use (the REST routes: ckptapi.h; the
 * execute API, MCP). The kernel side is kernelmgr/kckpt.h's. */
#ifndef KGW_GATEWAY_CKPT_H
#define KGW_GATEWAY_CKPT_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway/gw.h"
#include "gateway/kerr.h"
#include "kernelmgr/kernel.h"

#define CKPT_ID_MAX 40

/* Subscribes to kernel events: a kernel's checkpoints end with its process. */
int ckpt_listen(gw_t *g);

/* k's checkpoints' records as GET .../checkpoints lists them (a new array; a record: see
 * ckpt_done_cb). */
json_t *ckpt_list(gw_t *g, kernel_t *k);
/* The record of k's checkpoint cp (new reference), or NULL when k has none of that id. */
json_t *ckpt_model(gw_t *g, kernel_t *k, const char *cp);

/* An operation's end: err NULL when it succeeded (rec: the checkpoint's record, {"id",
 * "kernel_id", "created", "execution_count", "files", "files_bytes", "pss_bytes"}, borrowed;
 * NULL for a drop), else why, from the one table (kerr.h: KERR_CHECKPOINT, KERR_ROLLBACK,
 * KERR_REVIVE, KERR_DROP), e.g. -ENOTSUP (501: the kernel's ipykernel lacks an internal its
 * checkpoints rely on, "unsupported ipykernel X.Y: ...") and -EMLINK (409: a rollback or
 * revival past the generation limit, the message advising a restart), as kernelmgr/kckpt.h
 * tells them apart. */
typedef struct ckpt_op ckpt_op_t;
typedef void (*ckpt_done_cb)(void *data, const struct kerr *err, json_t *rec);

/* Who asks for an operation, why, and who is told of its end. */
struct ckpt_asker {
    const struct gw_caller *who; /* audited as */
    const char *cause; /* a rollback's: why (its notice and audit event say it; NULL: asked) */
    ckpt_done_cb done; /* NULL: nobody (the operation still runs) */
    void *data;
};

/* Each operation returns itself, and done runs later, from the loop (unless cancelled:
 * ckpt_op_cancel); or NULL with err filled (done never runs). */

/* Takes a checkpoint of k (files: with its workspace), as POST .../checkpoints does.
 * -ENOSPC at --max-checkpoints (409), -EBUSY when k is not running (409). */
ckpt_op_t *ckpt_take(
    gw_t *g, kernel_t *k, const struct ckpt_asker *a, bool files, struct kerr *err);
/* Rolls k back to its checkpoint cp (with the files when the checkpoint has them); clients
 * are told on iopub. -ENOENT: no such checkpoint (404), -EBUSY: k is not running (409). */
ckpt_op_t *ckpt_rollback(
    gw_t *g, kernel_t *k, const struct ckpt_asker *a, const char *cp, struct kerr *err);
/* When k's live interpreter died and k is coming back from its checkpoint cp (its newest,
 * docs/checkpoints.md "A kernel that dies"): that revival, whose end a's done is told (as a
 * rollback's); NULL otherwise (no such revival, or one with a caller already). For an
 * execution that asked for "rollback_on_error" and whose death this is. */
ckpt_op_t *ckpt_revival_join(gw_t *g, kernel_t *k, const char *cp, const struct ckpt_asker *a);
/* Whether k has the checkpoint cp (gateway/gfork.c: a fork from it). */
bool ckpt_exists(gw_t *g, kernel_t *k, const char *cp);
/* Drops k's checkpoint cp: its record at once; done once the kernel answered, even when the
 * checkpoint's process was gone. -ENOENT: no such checkpoint (404), -EINPROGRESS: a rollback
 * to it is in progress (409). */
ckpt_op_t *ckpt_drop(
    gw_t *g, kernel_t *k, const struct ckpt_asker *a, const char *cp, struct kerr *err);
/* done never runs; what was sent to the kernel goes on. NULL is fine. */
void ckpt_op_cancel(ckpt_op_t **op);

#endif
