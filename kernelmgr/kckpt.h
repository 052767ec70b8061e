/* Checkpoints of a kernel's interpreter, as the gateway asks for them (docs/checkpoints.md):
 * the gateway's own requests to the kernel side (python/kgw_ckpt.py), which no client may send
 * (kconn_send refuses their type). The handlers are installed in the kernel process lazily, by a
 * silent execution before the first request (and again in each new process after a restart;
 * a process revived from a checkpoint installs them itself). Requests to one kernel go one at a
 * time, in order, behind any cell the kernel is running (they are shell requests); no client
 * sees their messages. Nothing here blocks the loop. */
#ifndef KGW_KERNELMGR_KCKPT_H
#define KGW_KERNELMGR_KCKPT_H

#include <jansson.h>
#include <stdint.h>

#include "kernelmgr/kernel.h"

typedef struct kckpt_req kckpt_req_t;

enum kckpt_op {
    KCKPT_CHECKPOINT, /* kgw_checkpoint_request {"id", "files_dir"}: its reply */
    KCKPT_ROLLBACK,   /* kgw_rollback_request {"id", "files"}: done once the new process
                         answers kernel_info and its iopub reaches the gateway (reply NULL) */
    KCKPT_DROP,       /* kgw_ckpt_drop_request {"id"}: its reply */
    KCKPT_FORK,       /* kgw_fork_request {"connection_file", "checkpoint"}: its reply {"pid"}
                         (kfork.c) */
    KCKPT_REVIVE,     /* nothing sent: the live interpreter died and the keeper revives it from
                         the newest checkpoint (kckpt_watch); done as a rollback is, once the
                         new process answers kernel_info and its iopub reaches the gateway.
                         Queued first, ahead of every request waiting. */
};

/* The end of a request. status 0: reply is the kernel's reply content (borrowed; NULL for a
 * rollback). Otherwise -EREMOTEIO: the kernel answered with an error (reply: its content, with
 * "ename" and "evalue"; "ForkError" when it could not fork, at its pids or memory limit);
 * -ETIMEDOUT: no answer in time (a checkpoint taken after that is dropped when its reply
 * comes; a rollback's kernel is left as it is); -ECHILD: the kernel process ended first (or
 * the kernel is being freed); -EPROTO: an answer that is not a JSON object. Two refusals of the
 * kernel side are told apart from -EREMOTEIO (reply as for it, "evalue" saying why):
 * -ENOTSUP ("UnsupportedError": an internal of ipykernel, IPython, pyzmq, asyncio or logging
 * that kgw_ckpt.py relies on is missing, "unsupported ipykernel X.Y: ..."; its install
 * execution, or the request, was refused) and -EMLINK ("GenerationLimitError": a rollback,
 * revival or fork past kgw_ckpt.MAX_GENERATIONS). */
typedef void (*kckpt_cb)(void *data, kernel_t *k, int status, json_t *reply);

/* Queues a request (content: its content, borrowed) that must end within timeout_ms; cb runs
 * once, from the loop, never inside this call. 0 and *ret (for kckpt_cancel; NULL ret: not
 * wanted), -EBUSY when the kernel is not running, -ENOMEM. */
int kckpt_send(kernel_t *k, enum kckpt_op op, json_t *content, int timeout_ms, kckpt_cb cb,
               void *data, kckpt_req_t **ret);
/* The live interpreter of k died (not by a rollback, nor as asked): o and cause (one line)
 * say how, as for a kernel's death. The keeper (python/kgw_ckpt.py) is reviving it from the
 * newest checkpoint; the requests in flight are the callee's to fail (kernel_fail_pending),
 * and a KCKPT_REVIVE to queue. */
typedef void (*kckpt_death_cb)(void *data, kernel_t *k, enum kernel_outcome o, const char *cause);
/* Who hears of k's live interpreter's deaths. Once a rollback made its first process a keeper
 * and the live interpreter another process (the one <runtime dir>/.kgw-live names, found
 * among the kernel's descendants: what the kernel says is not trusted), that process is
 * followed with a pidfd, from the end of each rollback or revival on. 0 or -ENOMEM. */
int kckpt_watch(kernel_t *k, kckpt_death_cb cb, void *data);
/* Its callback never runs; a request already sent goes on without a caller (as on a timeout).
 * NULL is fine; sets *r to NULL. */
void kckpt_cancel(kckpt_req_t **r);
/* The kernel's workspace as its process sees it (for "files_dir"). */
const char *kckpt_files_dir(const kernel_t *k);
/* A gateway-made iopub message (content and metadata borrowed; metadata NULL: {}) that every
 * client of k receives as if the kernel had published it, with an empty parent header (a
 * rollback's status sequence and notice). 0 or -ENOMEM. */
int kckpt_announce(kernel_t *k, const char *msg_type, json_t *content, json_t *metadata);
/* The contents of <runtime dir>/.kgw-live (n bytes, written by code in the kernel: untrusted),
 * the live interpreter's pid in the kernel's namespace: 1 to 7 decimal digits and an optional
 * newline, at most 4194304 (the kernel's PID_MAX_LIMIT). 0 ("0": it ended as asked), the pid,
 * or -EINVAL for anything else. */
long kckpt_live_parse(const char *buf, size_t n);
/* The memory of the process of k whose pid in the kernel's pid namespace is ns_pid (a
 * checkpoint's "pid"), found among the descendants of the kernel's process: its proportional
 * set size (shared pages divided among their users) and its private bytes (pages no other
 * process maps: what it holds alone, copied on write). 0; -ESRCH when there is no such
 * process, or -errno. Reads /proc (no waiting). */
int kckpt_mem(const kernel_t *k, long ns_pid, long long *ret_pss, long long *ret_private);

#endif
