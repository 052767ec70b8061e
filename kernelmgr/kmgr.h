/* The kernel manager: every kernel of the gateway, their limits and their culling. */
#ifndef KGW_KERNELMGR_KMGR_H
#define KGW_KERNELMGR_KMGR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/egpol.h"
#include "common/evl.h"
#include "common/hist.h"
#include "common/list.h"
#include "common/obudget.h"
#include "kernelmgr/kegress.h"
#include "kernelmgr/kernel.h"
#include "kernelmgr/kspec.h"
#include "kernelmgr/wspace.h"
#include "protocol/jmsg.h"
#include "sandbox/sbx.h"

typedef struct kmgr kmgr_t;

/* How kernels are sandboxed (see sandbox/sbx.h). */
struct kmgr_sandbox {
    struct sbx_limits lim;
    int init_fd;        /* kgw-sandbox-init, executable fd */
    unsigned uid_base;  /* outside uids: uid_base + 2*slot (inside root), + 1 (inside user) */
    int zygote_fd;      /* kgw-zygote, executable fd (-1: no fork server) */
    const char *zygote_spec;    /* the kernelspec it runs (NULL: python3) */
    const char *zygote_preload; /* extra modules it imports, comma-separated */
};

/* A warm pool for one kernelspec: this many fully started, sandboxed, idle kernels wait for
 * requests (0: none). */
struct kmgr_pool_size {
    const char *spec_name;
    int size;
};

struct kmgr_opts {
    const char *runtime_dir;      /* base directory for per-kernel private directories */
    /* a restart in place: kmgr_hand_over's record from the image before (NULL: a fresh
     * start); kmgr_new takes its runtime directory and kernels */
    const json_t *handover;
    const char *kernel_cwd;       /* working directory of kernels (NULL: the gateway's) */
    int max_kernels;
    int start_timeout_ms;
    int shutdown_grace_ms;        /* after shutdown_request, before SIGTERM */
    bool autorestart;
    int max_restarts;             /* consecutive automatic restarts before "dead" */
    int hb_interval_ms;           /* 0: no heartbeat */
    int hb_misses;                /* missed heartbeats that mean "hung" */
    int cull_idle_timeout_s;      /* 0: no culling */
    int cull_interval_s;
    bool cull_connected;
    int dead_linger_s;            /* how long a dead kernel stays listed */
    const struct kmgr_sandbox *sandbox; /* NULL: kernels run unsandboxed (development only) */
    int exec_timeout_ms;          /* wall time per execution (0: none) */
    int max_commands;             /* commands running at once per kernel (kcmd.c; 0: 16) */
    long long output_cap;         /* iopub output bytes per execution (0: none) */
    long long max_kernel_msg;     /* bytes per frame of a kernel's message (0: no limit); a
                                     kernel that sends more is restarted (output_limit) */
    /* output held for clients, all kernels together (common/obudget.h; NULL: not bounded):
     * the owner's, it outlives the manager and every buffer charged to it */
    obudget_t *out_budget;
    int max_workspaces;           /* with or without kernels (0: 2 x max_kernels, or 1024) */
    int workspace_grace_s;        /* a workspace outlives its last kernel this long */
    int tenant_max_kernels;       /* per tenant (0: only max_kernels) */
    int tenant_max_workspaces;    /* per tenant, with or without kernels (0: no quota) */
    long long tenant_max_bytes;   /* sum of the sizes of a tenant's workspaces (0: no quota) */
    /* kernel -> client callbacks (kernelmgr/kcall.c); 0 / NULL: the defaults */
    const char *callbacks;        /* allowed names, comma-separated (KMGR_CALLBACKS_DEFAULT) */
    long long callback_max_bytes; /* JSON bytes of a request, and of a reply (4 MiB) */
    int callback_timeout_ms;      /* per call (60000) */
    int callback_max_calls;       /* calls in progress per kernel (4) */
    const char *python_dir;       /* directory of kgw_tools.py: on every kernel's PYTHONPATH,
                                     read-only at SBX_PYTHON_PATH in sandboxes (NULL: none) */
    const struct kmgr_pool_size *pool; /* warm pools (see kpool.c for the rules) */
    size_t npool;
    long long pool_min_available; /* refill only while the host's MemAvailable is above */
    struct kegress_limits egress; /* per kernel, for kernels with an egress policy */
    /* the gateway's current secrets table (common/secrets.h; it swaps *secrets on a reload,
     * the proxies read it at each request); NULL: no secrets */
    secrets_t *const *secrets;
    ktls_t *tls; /* HTTPS to secrets' hosts is read with it (kernelmgr/ktls.h); NULL: tunneled */
    const char *ca_bundle; /* PEM kernels with secrets trust (the system's CAs and the egress
                              CA), read-only at KMGR_CA_BUNDLE inside sandboxes; NULL: none */
    /* descriptors (kcapacity.c): a start is refused (-EMFILE) unless the open-file limit
     * leaves KMGR_KERNEL_FDS + fd_per_client for it beyond fd_reserve */
    int fd_per_client; /* what a kernel's clients cost the owner (one websocket) */
    int fd_reserve;    /* kept for everything else: connections, transfers, logs */
};

/* Descriptors one kernel costs the kernel manager: measured 10 once it runs idle
 * (docs/operations.md "Capacity" has the table), more while it starts (its shell socket, its
 * set-up report, the lent cgroup directories) */
#define KMGR_KERNEL_FDS 20

#define KMGR_TENANT_MAX 64
/* The CA bundle of kernels with secrets (kmgr_options.ca_bundle), beside kgw_tools. */
#define KMGR_CA_BUNDLE_NAME "kgw-ca-bundle.pem"
#define KMGR_CA_BUNDLE      SBX_PYTHON_PATH "/" KMGR_CA_BUNDLE_NAME
/* A kernel's CPU weight (cgroup v1 cpu.shares), shared by its tenant's kernels. */
#define KMGR_CPU_SHARES 1024u

/* What a kernel is started with. */
struct kmgr_start {
    const char *spec_name;
    json_t *env;                   /* the request's variables (only KERNEL_* names apply) */
    const struct kmgr_limits *lim; /* NULL: the gateway's */
    const char *workspace;         /* share this workspace of the same tenant; NULL: a new one */
    const char *tenant;            /* owner ("" or NULL: the default tenant) */
    /* the hosts its egress proxy may reach (NULL or empty: no network; sandboxed kernels
     * only; such a kernel never comes from the warm pool). The caller checked it against the
     * tenant's policy and the gateway's ceiling. */
    const egpol_t *egress;
    /* the tenant's secrets it gets, by name (kernelmgr/ksecret.h; at most SECRETS_PER_KERNEL;
     * the caller checked the tenant has them): each a variable holding a placeholder. Only
     * for a kernel with an egress policy (its proxy puts the values in). */
    const char *const *secrets;
    size_t nsecrets;
};

#define KMGR_CALLBACKS_DEFAULT                                                                     \
    "display_dataframe_to_user,display_chart_to_user,display_matplotlib_image_to_user"
#define KMGR_CALLBACK_MAX_BYTES  (4LL * 1024 * 1024)
#define KMGR_CALLBACK_TIMEOUT_MS 60000
#define KMGR_CALLBACK_MAX_CALLS  4

/* Per-kernel limits asked for at creation; 0 keeps the gateway's value. Each must be at most
 * the gateway's (its configured value is the cap). */
struct kmgr_limits {
    long long mem_bytes, cpu_millis, pids, workspace_bytes;
    long long exec_timeout_ms, output_cap;
};

enum kernel_event {
    KERNEL_EV_RESTARTING, /* died (or hung) and is being restarted automatically */
    KERNEL_EV_STARTED,    /* a (re)started kernel process answered kernel_info */
    KERNEL_EV_DIED,       /* dead for good (restart failed or disabled) */
    KERNEL_EV_GONE,       /* shut down; the kernel is freed after this returns */
    KERNEL_EV_RESTART,    /* a client asked for a restart (kernel_restart): it is under way */
    KERNEL_EV_N
};

/* A subscriber to the kernels' events: each face of the gateway (the Jupyter websocket relay,
 * /channel, sessions, the execute API, metrics) registers one with kmgr_listen, as PipeWire's
 * emitters keep listener lists. Any op may be NULL; listeners run in the order they were added.
 * A kernel is heard of only once a client has it (never while it waits in the warm pool). */
struct kmgr_listener_ops {
    /* One call per iopub message (signature verified), before any client sees it. */
    void (*iopub)(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h);
    void (*event)(void *user, kernel_t *k, enum kernel_event ev, const char *detail);
    /* A notice for the clients of an execution (output cut, wall time exceeded): parent is
     * the header of the execute_request it concerns. */
    void (*notice)(void *user, kernel_t *k, jspan_t parent, const char *text);
    /* k's clients hold more of its output than its share's ceiling (common/obudget.h): end
     * each client of k (a websocket, a detached session's replay, a /channel connection)
     * that holds more than min bytes of it, releasing them; returns how many were ended. */
    unsigned (*overflow)(void *user, kernel_t *k, size_t min);
    /* An execution sent through a kconn is over, once per execute_request: when its iopub
     * idle came, or when the kernel process ended first (then the listeners' iopub has had a
     * gateway-made "error" and "status: idle" under its header, and its kconn an
     * execute_reply with status "error", the outcome's ename and the cause as evalue). */
    void (*exec_end)(void *user, kernel_t *k, const struct kernel_exec_end *e);
};

#define KMGR_LISTENERS_MAX 8

struct kmgr_listener {
    const struct kmgr_listener_ops *ops;
    void *user;
    int slot;         /* the listener's own per-kernel pointer: kernel_data(k, slot) */
    struct list link; /* on the manager's list */
};

/* Code in the kernel called an allowed callback (kgw_tools.call_function). args (a list) and
 * kwargs (an object) are borrowed for the duration of the call. exec_msg_id is the msg_id of
 * the execute_request the kernel is running as the gateway's own iopub tracking sees it (""
 * when none): the kernel's word is never taken for it. Answer with kernel_call_reply(), inside
 * the handler or later; a call that is not answered within callback_timeout_ms fails in the
 * kernel with TimeoutError. After KERNEL_EV_GONE the kernel is freed: forget its call ids. */
typedef void (*kmgr_call_fn)(void *user, kernel_t *k, uint64_t call_id, const char *name,
                             json_t *args, json_t *kwargs, const char *exec_msg_id);

/* NULL + errno. With a sandbox configured, a complete dry run checks the host can create one;
 * if it cannot, kernels are refused (-EPERM) and kmgr_sandbox_error() says why. */
kmgr_t *kmgr_new(evl_t *evl, const struct kmgr_opts *o);
/* Kills every kernel (shutdown_request is not awaited) and frees. */
void kmgr_destroy(kmgr_t **m);
/* Adds a listener (l is the caller's until kmgr_unlisten or kmgr_destroy). 0, or -ENOSPC past
 * KMGR_LISTENERS_MAX. */
int kmgr_listen(kmgr_t *m, struct kmgr_listener *l, const struct kmgr_listener_ops *ops,
                void *user);
void kmgr_unlisten(kmgr_t *m, struct kmgr_listener *l);
/* The one handler of callbacks (NULL: every call fails in the kernel with "no client is
 * connected to receive callbacks"). */
void kmgr_on_call(kmgr_t *m, kmgr_call_fn fn, void *user);

const kspecs_t *kmgr_kspecs(const kmgr_t *m);
/* This instance's name: its private directory under runtime_dir, and the name of its cgroups
 * ("gw-XXXXXX"). */
const char *kmgr_instance(const kmgr_t *m);
/* "disabled", "enabled (cgroup v1)", ...; and why sandboxed kernels cannot start (or NULL). */
const char *kmgr_sandbox_mode(const kmgr_t *m);
const char *kmgr_sandbox_error(const kmgr_t *m);
/* Creates and spawns a kernel, or takes one from the warm pool when the request allows (no
 * shared workspace; no sandbox limit other than the gateway's); it is "starting" until it
 * answers. -ENOENT unknown spec,
 * -ESRCH unknown workspace (or another tenant's), -EAGAIN at max-kernels or max-workspaces,
 * -EINVAL bad env, -ERANGE a limit above the gateway's, -EPERM when the sandbox is
 * unavailable, -ESHUTDOWN once kmgr_drain was called, or a spawn error. */
int kmgr_start(kmgr_t *m, const struct kmgr_start *req, kernel_t **ret);
/* A new kernel forked from parent (docs/checkpoints.md "Fork"): same tenant, kernelspec,
 * workspace, limits and egress policy; a new id, key and connection; the state of parent now
 * or of its checkpoint (NULL: now). "starting" as after kmgr_start (wait with kernel_wait; a
 * failed fork ends dead, kernel_last_cause says why). -EBUSY parent not running, else as
 * kmgr_start. */
int kmgr_fork(kmgr_t *m, kernel_t *parent, const char *checkpoint, kernel_t **ret);
/* Forks living at once in one kernel's sandbox (its own and its forks' forks): past it
 * kmgr_fork answers -ETOOMANYREFS. */
#define KMGR_FORKS_MAX 6

/* Per-kernel limits from a JSON object {"memory", "cpu", "pids", "workspace", "exec_timeout"
 * (seconds), "output_bytes"}, positive integers. -EINVAL with a message in err. */
int kmgr_limits_parse(json_t *obj, struct kmgr_limits *out, char *err, size_t errsz);
/* The workspace with this id, or NULL. Callers check wspace_tenant() themselves. */
wspace_t *kmgr_workspace(const kmgr_t *m, const char *id);
size_t kmgr_workspace_count(const kmgr_t *m);
wspace_t *kmgr_workspace_at(const kmgr_t *m, size_t i);
/* Call on SIGCHLD: reaps kernels that exited (needed where pidfds are unavailable). */
void kmgr_reap(kmgr_t *m);
kernel_t *kmgr_find(const kmgr_t *m, const char *id);
size_t kmgr_count(const kmgr_t *m);
kernel_t *kmgr_at(const kmgr_t *m, size_t i);
/* True when the host's MemAvailable is below pool_min_available: the warm pool does not
 * refill then. False when the option is 0 or MemAvailable is unknown. */
bool kmgr_memory_short(const kmgr_t *m);

/* Headroom for more kernels, read now. -1: unknown. */
struct kmgr_capacity {
    long long fd_limit, fd_open; /* RLIMIT_NOFILE, descriptors open */
    long long fd_per_kernel;     /* a kernel and its clients */
    long long fd_reserve;        /* kept for other uses */
    long long fd_kernels;        /* more kernels the descriptors fit (-1: no limit) */
    long long kernels_free;      /* more kernels a client may start: --max-kernels and fds */
    long long mem_available;     /* the host's MemAvailable */
    long long mem_per_kernel;    /* a kernel's memory limit (0: none) */
    long long mem_kernels;       /* kernels at their limit MemAvailable fits (overcommit is
                                    allowed: reported, never refused) */
};
void kmgr_capacity(const kmgr_t *m, struct kmgr_capacity *ret);
/* Begins a drain: from now on kmgr_start refuses (-ESHUTDOWN), and the warm pool stops
 * refilling and its kernels are killed at once (they never ran user code). Kernels in use keep
 * running; the caller shuts them down. */
void kmgr_drain(kmgr_t *m);
/* A restart in place (gateway/handover.h, docs/operations.md "Upgrade"). carriable: whether
 * k can go on in the next image as it is (running, not pooled, not a fork, no checkpoint
 * requests, no secrets, not paused, nothing of its start pending). hand_over: a record of
 * the instance (runtime directory, its lock, workspaces, and each carriable kernel that keep
 * does not refuse: keep NULL keeps all), whose descriptors stay open across an exec; from
 * then on, kmgr_destroy lets those kernels, workspaces, cgroups and the runtime directory be
 * (the others end as at any exit). NULL + errno. undo: the exec failed: the kernels of the
 * record are killed and what the instance left removed. */
#define KMGR_HANDOVER_FD_MIN 16 /* the record's descriptors are at or above it */
bool kmgr_carriable(const kernel_t *k);
json_t *kmgr_hand_over(kmgr_t *m, bool (*keep)(kernel_t *k, void *data), void *data);
void kmgr_handover_undo(const json_t *rec, const char *runtime_dir);
bool kmgr_draining(const kmgr_t *m);
/* Executions in progress, summed over every kernel (kernel_executions). */
size_t kmgr_executions(const kmgr_t *m);
/* Warm pool state: {"python3": {"size", "target", "ready", "starting", "handouts",
 * "misses"}, ...}. New reference. */
json_t *kmgr_pool_model(const kmgr_t *m);

/* ---- statistics (for metrics): counted where the events happen, read by the gateway ---- */

/* How a kernel a client asked for (kmgr_start) was started. */
enum kmgr_start_path { KMGR_START_POOL, KMGR_START_FORK, KMGR_START_EXEC, KMGR_START_N };
/* Why a kernel a client asked for did not start. */
enum kmgr_start_fail {
    KMGR_FAIL_SANDBOX, /* the sandbox is unavailable, or its set-up failed */
    KMGR_FAIL_TIMEOUT, /* no answer within start_timeout_ms */
    KMGR_FAIL_DIED,    /* the process ended while starting */
    KMGR_FAIL_SPAWN,   /* it could not be made or spawned */
    KMGR_FAIL_LIMIT,   /* max_kernels or max_workspaces */
    KMGR_FAIL_QUOTA,   /* a quota of its tenant */
    KMGR_FAIL_N
};
/* Why a kernel process (a pooled one's too) ended without the manager being asked to end it. */
enum kmgr_death {
    KMGR_DEATH_EXIT,      /* it exited */
    KMGR_DEATH_SIGNAL,    /* a signal that was not the manager's (sandboxed: status 128 + N) */
    KMGR_DEATH_OOM,       /* its cgroup's memory limit: an OOM kill */
    KMGR_DEATH_PIDS,      /* it ended after forks were refused at its cgroup's pid limit */
    KMGR_DEATH_TIMEOUT,   /* killed: no answer within start_timeout_ms */
    KMGR_DEATH_HEARTBEAT, /* killed: hb_misses heartbeats missed */
    KMGR_DEATH_SANDBOX,   /* the sandbox's set-up failed */
    KMGR_DEATH_N
};
/* auto: after a death, or an execution over its wall time; requested: kernel_restart(). */
enum kmgr_restart { KMGR_RESTART_AUTO, KMGR_RESTART_REQUESTED, KMGR_RESTART_N };
/* How an execution (iopub busy for an execute_request to its idle) ended: an error message
 * came; aborted: the process ended, or another execution began, first; timeout: it went over
 * its wall-time limit (interrupted, or the kernel restarted). */
enum kmgr_exec { KMGR_EXEC_OK, KMGR_EXEC_ERROR, KMGR_EXEC_ABORTED, KMGR_EXEC_TIMEOUT, KMGR_EXEC_N };
/* Jupyter messages relayed: to a kernel for a client (kconn_send), from a kernel for clients
 * (iopub handed to the hook, once however many clients watch; replies to a kconn). */
enum kmgr_dir { KMGR_TO_KERNEL, KMGR_TO_CLIENT, KMGR_DIR_N };

#define KMGR_CMD_STATUS_N 8 /* = KCMD_STATUS_N (kcmd.c checks) */

/* Since kmgr_new; every counter only grows. */
struct kmgr_stats {
    uint64_t starts[KMGR_START_N];
    hist_t start_seconds[KMGR_START_N]; /* kmgr_start to ready */
    uint64_t start_failures[KMGR_FAIL_N];
    uint64_t deaths[KMGR_DEATH_N];
    uint64_t restarts[KMGR_RESTART_N];
    uint64_t executions[KMGR_EXEC_N];
    hist_t exec_seconds; /* each execution counted in executions */
    uint64_t messages[KMGR_DIR_N];
    uint64_t message_bytes[KMGR_DIR_N]; /* header, parent header, metadata, content, buffers */
    uint64_t fork_server_restarts;      /* starts of the fork server after its first */
    uint64_t sandbox_setup_failures;    /* kernel processes whose sandbox set-up failed */
    uint64_t commands[KMGR_CMD_STATUS_N]; /* commands ended, by enum kcmd_status (kcmd.h) */
    uint64_t shutdown_forced;           /* shutdown_requests ignored for the grace: SIGTERM */
    uint64_t cpu_ns_gone;               /* CPU time of kernels' cgroups already removed */
    struct kegress_stats egress;        /* kernels' egress proxies: connections, bytes */
    struct ksecret_stats secrets;       /* secrets put into requests, and refused */
};
const struct kmgr_stats *kmgr_stats(const kmgr_t *m);

/* The kernels' cgroups (listed and pooled kernels) together, read now: memory in use (bytes)
 * and CPU time since kmgr_new (ns; kernels gone included). -1 for what is not accounted (no
 * sandbox; CPU on a cgroup v1 host whose cpu hierarchy lacks cpuacct). */
struct kmgr_usage {
    long long mem_bytes, cpu_ns;
};
void kmgr_usage(const kmgr_t *m, struct kmgr_usage *ret);

/* The warm pools: kmgr_pool_at(m, i) for i < kmgr_pool_count(m). */
struct kmgr_pool_info {
    const char *spec_name;
    int target;          /* kernels it aims to hold now (size..2*size) */
    int ready, starting; /* kernels in it: ready to hand out; still starting */
};
size_t kmgr_pool_count(const kmgr_t *m);
void kmgr_pool_at(const kmgr_t *m, size_t i, struct kmgr_pool_info *ret);

#endif
