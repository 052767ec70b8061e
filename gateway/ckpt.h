/* Checkpoints and rollbacks of kernels (docs/checkpoints.md): the records the gateway keeps of
 * each kernel's checkpoints and the operations the faces use (the REST routes: ckptapi.h; the
 * execute API, MCP). The kernel side is kernelmgr/kckpt.h's. */
#ifndef KGW_GATEWAY_CKPT_H
#define KGW_GATEWAY_CKPT_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway/gw.h"
#include "kernelmgr/kernel.h"

#define CKPT_ID_MAX 40

/* Subscribes to kernel events: a kernel's checkpoints end with its process. */
int ckpt_listen(gw_t *g);

/* k's checkpoints' records as GET .../checkpoints lists them (a new array; a record: see
 * ckpt_done_cb). */
json_t *ckpt_list(gw_t *g, kernel_t *k);
/* The record of k's checkpoint cp (new reference), or NULL when k has none of that id. */
json_t *ckpt_model(gw_t *g, kernel_t *k, const char *cp);

/* An operation's end. status 0: ok (rec: the checkpoint's record, {"id", "kernel_id",
 * "created", "execution_count", "files", "files_bytes", "pss_bytes"}, borrowed). Otherwise
 * -errno, with the HTTP status the REST face answers (http) and a one-line message: among them
 * -ENOTSUP (501: the kernel's ipykernel lacks an internal its checkpoints rely on, "unsupported
 * ipykernel X.Y: ...") and -EMLINK (409: a rollback or revival past the generation limit, the
 * message advising a restart), as kernelmgr/kckpt.h tells them apart. */
typedef struct ckpt_op ckpt_op_t;
typedef void (*ckpt_done_cb)(void *data, int status, int http, const char *message, json_t *rec);
/* Takes a checkpoint of k (files: with its workspace), as POST .../checkpoints does (audited
 * for who). 0 (done runs later, from the loop, unless cancelled), or -errno with http and msg
 * filled (done never runs): -ENOSPC at --max-checkpoints (409), -EBUSY when k is not running
 * (409). */
int ckpt_take(gw_t *g,
              kernel_t *k,
              const struct gw_caller *who,
              bool files,
              ckpt_done_cb done,
              void *data,
              ckpt_op_t **ret,
              int *http,
              char *msg,
              size_t msgsz);
/* Rolls k back to its checkpoint cp (with the files when the checkpoint has them); clients
 * are told on iopub. As ckpt_take; -ENOENT: no such checkpoint (404). cause: why (the notice
 * and the audit event say it; NULL: a client asked). */
int ckpt_rollback(gw_t *g,
                  kernel_t *k,
                  const struct gw_caller *who,
                  const char *cp,
                  const char *cause,
                  ckpt_done_cb done,
                  void *data,
                  ckpt_op_t **ret,
                  int *http,
                  char *msg,
                  size_t msgsz);
/* When k's live interpreter died and k is coming back from its checkpoint cp (its newest,
 * docs/checkpoints.md "A kernel that dies"), done runs once it is back (status 0, as for a
 * rollback) or could not come back, and *ret is set (ckpt_op_cancel); -ENOENT otherwise (no
 * such revival, or one with a caller already). For an execution that asked for
 * "rollback_on_error" and whose death this is. */
int ckpt_revival_join(
    gw_t *g, kernel_t *k, const char *cp, ckpt_done_cb done, void *data, ckpt_op_t **ret);
/* Whether k has the checkpoint cp (gateway/gfork.c: a fork from it). */
bool ckpt_exists(gw_t *g, kernel_t *k, const char *cp);
/* Drops k's checkpoint cp (its record at once; done with status 0 and http 204 once the
 * kernel answered, even when the checkpoint's process was gone). As ckpt_take; -ENOENT: no such
 * checkpoint (404). */
int ckpt_drop(gw_t *g,
              kernel_t *k,
              const struct gw_caller *who,
              const char *cp,
              ckpt_done_cb done,
              void *data,
              ckpt_op_t **ret,
              int *http,
              char *msg,
              size_t msgsz);
/* done never runs; what was sent to the kernel goes on. NULL is fine. */
void ckpt_op_cancel(ckpt_op_t **op);

#endif
