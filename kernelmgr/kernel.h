/* One kernel: its process, connection file, ZeroMQ sockets and life cycle. */
#ifndef KGW_KERNELMGR_KERNEL_H
#define KGW_KERNELMGR_KERNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct kernel kernel_t;
typedef struct kwait kwait_t;

enum kernel_state {
    KERNEL_STARTING,    /* process started, not yet answering */
    KERNEL_RUNNING,
    KERNEL_RESTARTING,  /* shutting down or starting again; clients stay attached */
    KERNEL_TERMINATING, /* being shut down for good */
    KERNEL_DEAD,
};

/* How an execution ended: the execute API's "end" status, and for those that are not the
 * kernel's own answer (all but ok and error), the ename of the error the gateway reports in
 * the kernel's name (docs/protocol.md, "Outcomes"). */
enum kernel_outcome {
    KERNEL_OUT_OK,
    KERNEL_OUT_ERROR,         /* the code raised */
    KERNEL_OUT_CANCELLED,     /* a client cancelled it (interrupt, or dequeued) */
    KERNEL_OUT_TIMEOUT,       /* over its wall-time limit */
    KERNEL_OUT_OUTPUT_LIMIT,  /* over its output limit: stopped */
    KERNEL_OUT_OUT_OF_MEMORY, /* the kernel was killed by its memory limit */
    KERNEL_OUT_PIDS_LIMIT,    /* the kernel ended after forks were refused at its pids limit */
    KERNEL_OUT_KILLED,        /* the kernel was killed by a signal */
    KERNEL_OUT_KERNEL_DIED,   /* the kernel exited, or stopped answering */
    KERNEL_OUT_RESTARTED,     /* a client restarted the kernel */
    KERNEL_OUT_SHUTDOWN,      /* the kernel was shut down (a client, culling, the gateway) */
    KERNEL_OUT_N
};
/* "ok", "out_of_memory", ... */
const char *kernel_outcome_status(enum kernel_outcome o);
/* "OutOfMemory", ... (NULL for ok and error). */
const char *kernel_outcome_ename(enum kernel_outcome o);

/* An execution (an execute_request sent through a kconn) is over. */
struct kernel_exec_end {
    const char *msg_id;       /* its execute_request's */
    enum kernel_outcome outcome;
    const char *cause;        /* one line, with the limit ("" for ok and error) */
    int64_t duration_us;      /* busy to idle, or to the end of the process (0: never ran) */
    long long cpu_ns;         /* CPU time of the kernel's cgroup meanwhile (-1: unknown) */
    long long peak_mem_bytes; /* the cgroup's peak memory meanwhile (-1: unknown) */
    /* what its egress proxy let through meanwhile: {"hosts": [{"host", "bytes_out",
     * "bytes_in"}], "more_hosts", "secrets": [names]} (kegress_receipt_take); NULL: no
     * egress policy, or not known for this execution. Borrowed. */
    json_t *egress;
};

/* Completion of the transition in progress (start, restart, shutdown): 0 or -errno. */
typedef void (*kernel_done_cb)(void *data, kernel_t *k, int status);

const char *kernel_id(const kernel_t *k);
const char *kernel_spec_name(const kernel_t *k);
/* Why its process last ended unasked (or could not start), in one line for a client, with a
 * short excerpt of its stderr where that explains it; "" when it never did. */
const char *kernel_last_cause(const kernel_t *k);
/* What its cgroup uses now (-1: not accounted, as unsandboxed) and its limits (0: none). */
struct kernel_usage {
    long long mem_bytes, cpu_ns;
    long long mem_limit, cpu_millis;
};
void kernel_usage(kernel_t *k, struct kernel_usage *ret);
/* Its process (sandboxed: the proxy, whose namespaces and cgroup are the kernel's, but pid);
 * 0 when none. */
pid_t kernel_pid(const kernel_t *k);
enum kernel_state kernel_state(const kernel_t *k);
/* {"id", "name", "last_activity", "execution_state", "connections", "workspace", "paused"}.
 * New reference. */
json_t *kernel_model(const kernel_t *k);
/* Its Jupyter execution_state as the model shows it: "starting", "idle", "busy",
 * "restarting" or "dead". */
const char *kernel_execution_state(const kernel_t *k);
void kernel_touch(kernel_t *k);
/* The kernel a fork was made from ("": not a fork; kmgr_fork), and whether its fork failed
 * for want of the checkpoint asked for, or because the kernel it was forked from (or whose
 * sandbox it shares) ended first (shut down, restarted or died). */
const char *kernel_forked_from(const kernel_t *k);
bool kernel_fork_no_checkpoint(const kernel_t *k);
bool kernel_fork_parent_gone(const kernel_t *k);
/* Its share of the output buffer budget (kmgr_opts.out_budget; NULL: none): whatever holds
 * its output for a client charges the bytes to it (blob_charge). */
struct obudget_share *kernel_out_share(const kernel_t *k);
/* Its workspace (struct wspace, kernelmgr/wspace.h). */
struct wspace *kernel_workspace(const kernel_t *k);
void kernel_connections(kernel_t *k, int delta);
/* Each listener's own pointer on the kernel (struct kmgr_listener.slot); NULL until set. */
void kernel_set_data(kernel_t *k, int slot, void *data);
void *kernel_data(const kernel_t *k, int slot);

/* Waits for the transition in progress; -EALREADY when there is none. The callback never
 * runs if kwait_cancel() is called first. */
int kernel_wait(kernel_t *k, kernel_done_cb cb, void *data, kwait_t **ret);
void kwait_cancel(kwait_t **w);

/* Executions in progress: execute_requests a client sent through a kconn whose iopub status
 * "idle" has not come yet (queued ones included), or the one the kernel's iopub reports busy
 * with. 0 once the kernel process is gone. */
size_t kernel_executions(const kernel_t *k);

/* Answers every request in flight now, in the kernel's name, with this outcome (as when its
 * process ends; see kmgr_listener_ops.exec_end). Answers the kernel sends later for them reach
 * their clients too. */
void kernel_fail_pending(kernel_t *k, enum kernel_outcome o, const char *cause);

/* Freezes every process of the kernel's sandbox in place, its memory kept (its cgroup's
 * freezer on cgroup v2, SIGSTOP on v1 or without a cgroup), in milliseconds; resume thaws it.
 * While paused its heartbeats are not counted, culling passes it by, its execution's wall
 * time stands still, and faces refuse new executions and commands (-EHOSTDOWN from those that
 * check kernel_paused); a shutdown or restart thaws it first. pause: 0, -EBUSY when not
 * running (starting, restarting, stopping, dead), -EALREADY when paused, -ENOTSUP for a fork
 * or a kernel with live forks (they share one sandbox), or the freeze's -errno. resume: 0,
 * -EALREADY when running and not paused, -EBUSY when not running, or -errno. */
int kernel_pause(kernel_t *k);
int kernel_resume(kernel_t *k);
bool kernel_paused(const kernel_t *k);
/* SIGINT to the kernel's process group, or interrupt_request for interrupt_mode "message". */
int kernel_interrupt(kernel_t *k);
/* Shutdown with restart; clients stay attached. -EBUSY while another transition runs. */
int kernel_restart(kernel_t *k);
/* Shutdown for good; the kernel is freed after KERNEL_EV_GONE. cause: what requests still in
 * flight are told (NULL: "the kernel was shut down"). */
int kernel_shutdown(kernel_t *k, const char *cause);

/* Answers a callback (kmgr_call_fn): value on success (the reference is taken; NULL means
 * None), or err_type (a Python exception name such as "RuntimeError"; anything else that is
 * not a name becomes RuntimeError) and err_message on failure (value is then released). 0,
 * -ENOENT when the call is gone (answered, timed out, its connection closed, the kernel
 * restarted or shut down), -EMSGSIZE when value is over the callback size limit (the kernel
 * gets a RuntimeError instead and the call is over), -ENOMEM. */
int kernel_call_reply(kernel_t *k, uint64_t call_id, json_t *value, const char *err_type,
                      const char *err_message);

#endif
