/* Kernel operations behind every face (REST, sessions, /channel RPC, MCP, E2B): start,
 * interrupt, restart, shut down, fork, and commands' start and signal, their errors made by
 * the one table of kerr.h (as checkpoints' are, ckpt.h), so the faces answer alike. */
#ifndef KGW_GATEWAY_KOPS_H
#define KGW_GATEWAY_KOPS_H

#include <jansson.h>

#include "gateway/gw.h"
#include "gateway/kerr.h"
#include "kernelmgr/kcmd.h"
#include "kernelmgr/kernel.h"

/* Starts a kernel from a start request {"name", "env", "limits", "workspace"} (all optional;
 * name defaults to --default-kernel) for who's tenant; writes the audit event kernel_start and
 * counts a refusal (quota, kernel limit). 0 with *ret_k "starting" (wait for it with
 * kernel_wait), or -errno with err filled: -EINVAL for a bad request (400, ValueError; not
 * audited), else kmgr_start's codes. */
int kops_start(gw_t *g, const struct gw_caller *who, json_t *req, kernel_t **ret_k,
               struct kerr *err);
/* -EAGAIN: not running (err->status 0). */
int kops_interrupt(gw_t *g, kernel_t *k, struct kerr *err);
/* Pauses (kernel_pause: its processes frozen in place) or resumes the kernel, audited as
 * kernel_pause / kernel_resume for who (NULL: the gateway's own, an E2B sandbox's timeout).
 * -EALREADY: paused already / not paused (409), -EBUSY: not running (409), -ENOTSUP: a fork,
 * or a kernel with forks (409). */
int kops_pause(gw_t *g, const struct gw_caller *who, kernel_t *k, struct kerr *err);
int kops_resume(gw_t *g, const struct gw_caller *who, kernel_t *k, struct kerr *err);
/* Whether a new execution may go to k now: 0, or -EHOSTDOWN (409) while it is paused. */
int kops_executable(gw_t *g, kernel_t *k, struct kerr *err);
/* Tells the kernel's websockets it is restarting; -EBUSY while another restart or shutdown
 * runs (err->status 0). */
int kops_restart(gw_t *g, kernel_t *k, struct kerr *err);
/* 0 also when a shutdown is already in progress. */
int kops_shutdown(gw_t *g, kernel_t *k, struct kerr *err);
/* Forks parent (running; the caller's, found by the caller) now, or from its checkpoint cp
 * (NULL: now), audited as kernel_fork for who. 0 with the new kernel in *ret_k, starting: wait
 * for it (kernel_wait) and, if that fails, take the reason from kops_fork_failed and shut it
 * down. -ENOENT: no such checkpoint, -EBUSY: not running, -ETOOMANYREFS: at the fork limit, or
 * kmgr_fork's refusals (as a start's); err says why. */
int kops_fork(gw_t *g, const struct gw_caller *who, kernel_t *parent, const char *cp,
              kernel_t **ret_k, struct kerr *err);
/* Why the fork k did not become ready: code, kops_waited's (< 0). */
void kops_fork_failed(gw_t *g, kernel_t *k, int code, struct kerr *err);
/* kcmd_start (kernelmgr/kcmd.h) with its refusals in the table: -EHOSTDOWN paused (409),
 * -ESRCH no running process (409), -EAGAIN at --max-commands-per-kernel (429), -E2BIG (413), -EINVAL (400). */
int kops_command_start(gw_t *g, kernel_t *k, const struct kcmd_opts *o, const struct kcmd_cbs *cb,
                       kcmd_t **ret, struct kerr *err);
/* kcmd_signal: -ESRCH when it has ended (404). */
int kops_command_signal(gw_t *g, kcmd_t *c, int sig, struct kerr *err);
/* The end of a face's wait (kernel_wait) for a start or restart of k, from the status its
 * waiter was called with and the kernel's state now (waiters run on a later loop turn than
 * the transition's end: both count): 0 when k is up (running, or restarting again since);
 * -ESHUTDOWN when the drain shut it down; -ECANCELED when it was shut down meanwhile (DELETE,
 * the end of its session, E2B sandbox or MCP session, from any face): a conflict with that
 * shutdown, not a failure of the kernel; -ECHILD when it failed (kernel_last_cause). Every
 * face answers these alike, through kops_waited_error. */
int kops_waited(gw_t *g, kernel_t *k, int status);
/* kops_waited's code < 0 as op's error (KERR_START, KERR_RESTART): 409, 500 with the kernel's
 * last cause, or the drain's 503. */
void kops_waited_error(gw_t *g, kernel_t *k, enum kerr_op op, int code, struct kerr *ret);
/* Subscribes the audit log to kernel events (restarting, started, died, stopped). */
int kops_listen(gw_t *g);

#endif
