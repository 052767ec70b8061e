/* kernelmgr internal (floor 2): requests in flight and the execution watch (kexec.c). It asks
 * the kernel through struct kexec_ops. */
#ifndef KGW_KERNELMGR_KEXEC_INT_H
#define KGW_KERNELMGR_KEXEC_INT_H

#include "kernelmgr/private.h"

#define KCONN_PENDING_MAX 256         /* requests in flight remembered per session */
#define KCONN_PENDING_HEADER_MAX 4096 /* a longer header is remembered by its ids */
struct kpending;
/* A client request went to the kernel, or an answer came back (h: the answer's header): true
 * when it answers a request of the session in flight. */
void kexec__sent(kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h);
bool kexec__answered(kconn_t *c, const jmsg_t *m, const jhdr_t *h);
/* The session is going: its requests are forgotten. */
void kexec__forget(kconn_t *c);
/* The kernel process ended (or is being let go) with requests in flight: each gets its
 * terminal answer in the kernel's name (an execution: iopub error and idle, then an
 * execute_reply with status "error"; others: an error reply), and listeners hear each
 * execution's end. What the kernel had sent already is handled first. */
void kexec__fail_all(kernel_t *k, enum kernel_outcome o, const char *cause);

/* What the execution watch asks of the kernel (kernel.c hands it, k->exec_ops): an interrupt
 * (kernel_interrupt) and a restart without event or statistics, 0 or -errno; and what it tells
 * it: the execution in progress changed (iopub busy/idle: callbacks waiting for iopub to reach
 * theirs, kcall.c). */
struct kexec_ops {
    int (*interrupt)(kernel_t *k);
    int (*restart)(kernel_t *k);
    void (*changed)(kernel_t *k);
};
/* k's requests in flight and execution watch (k->exec, kexec.c): allocated by the first
 * request a client sends or execution seen (an idle kernel nobody used holds none), kept until
 * the kernel is freed (kexec__free, after its sessions). */
struct kexec;
void kexec__free(kernel_t *k);
/* The execution in progress ("": none) and the one that ended last ("": none yet). */
const char *kexec__running(const kernel_t *k);
const char *kexec__last(const kernel_t *k);
/* Why the process is being stopped: what requests in flight are told when it ends. */
void kexec__stop_why(kernel_t *k, enum kernel_outcome o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The kernel was paused (on) or resumed: the execution's wall time and the wait for its idle
 * stand still meanwhile (its duration leaves the pause out). */
void kexec__pause(kernel_t *k, bool on);
/* A client's execute_request was sent to the kernel (kconn_send). */
void kexec__track_sent(kernel_t *k, const char *msg_id);
/* Forgets every execute_request tracked (the process that was sent them ended, or none is
 * left), and frees their memory. */
void kexec__forget_sent(kernel_t *k);
/* iopub: a status message (own_id: the msg_id of the gateway's own execution in the kernel,
 * a pooled kernel's environment (kenv.c), not counted as a client's; "": none); another
 * message (error, execute_input); what the execution's output cap makes of an output message:
 * relayed as it is, dropped (the cap was reached before), or relayed with *ret_content (to
 * free()) instead of its content and buffers (the message that crosses the cap, cut to it:
 * protocol/jcap.h). */
enum kexec_cap { KEXEC_CAP_PASS, KEXEC_CAP_DROP, KEXEC_CAP_CUT };
void kexec__status(kernel_t *k, const jmsg_t *m, const char *own_id);
void kexec__track(kernel_t *k, const jmsg_t *m, const jhdr_t *h);
enum kexec_cap kexec__over_cap(kernel_t *k, const jmsg_t *m, const jhdr_t *h,
                               char **ret_content);
/* A message from the kernel on chan went over --max-kernel-message-bytes (libzmq refused it and
 * the socket was reset): the requests in flight end with output_limit and the kernel restarts
 * (what it sent meanwhile is lost, so its later messages cannot be trusted to come). */
void kexec__oversize(kernel_t *k, const char *chan);
/* The execution in progress, if any, is over unfinished (its process ended or is being let
 * go): timed out if it was interrupted for its wall time, else aborted. */
void kexec__abort(kernel_t *k);

#endif
