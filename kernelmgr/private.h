/* kernelmgr internals shared by its files: the structures, and the contract between a kernel
 * and its owner (struct kernel_owner_ops). Each file's internal functions are declared in its
 * own <file>_int.h, included by the files that call it.
 *
 * Floors (a file calls only files on lower floors, or earlier on its own; what it tells or
 * asks a higher one goes through an ops struct or callback the higher one hands it):
 *   1  kzsock, kspec, kstderr, ksecret, kegress, kcapacity, wspace (-> kmgr: wspace_ops),
 *      kwire, kzygote (-> kmgr: the on_ready callback), kcmd (-> its client: kcmd_cbs)
 *   2  kexec (-> kernel: kexec_ops), kout (-> owner: kernel_owner_ops), kcall (asks kexec which
 *      execution runs), klaunch (-> owner: kernel_owner_ops, its outcome returned)
 *   3  kenv (returns whether the kernel is ready), kwatchdog (only signals the process), kckpt
 *   4  kernel (-> owner: kernel_owner_ops)
 *   5  kconn (-> its client: kconn_ops)
 *   6  kinstance
 *   7  kpool (-> kmgr: kpool_ops), kfork (a kernel forked from another: kinstance, kckpt,
 *      kernel, klaunch), khandover (a restart in place: kinstance, wspace; -> kmgr:
 *      khandover_ops)
 *   8  kmgr: provides every ops struct above
 * A kernel's subsystems keep their state behind one pointer each in struct kernel, the type
 * defined in the subsystem's own file (k->exec, k->out, k->err, k->cmds, k->env, k->wd, k->ckpt),
 * allocated when the subsystem first has work unless every kernel needs it, freed with the
 * kernel: an idle kernel holds only what it uses.
 * docs/architecture.md tells the story. */
#ifndef KGW_KERNELMGR_PRIVATE_H
#define KGW_KERNELMGR_PRIVATE_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>
#include <zmq.h>

#include "common/evl.h"
#include "common/list.h"
#include "kernelmgr/kconn.h"
#include "kernelmgr/kegress.h"
#include "kernelmgr/kernel.h"
#include "kernelmgr/kmgr.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/wspace.h"
#include "protocol/jmsg.h"
#include "protocol/jsign.h"

#define KGW_MS_NOSYMFOLLOW 256 /* MS_NOSYMFOLLOW, Linux 5.10 */
#define KERNEL_SENT_MAX 32 /* execute_requests in flight tracked per kernel */

/* ZeroMQ ports as used in the ipc:// transport: <dir>/k-<port>. */
enum { KPORT_SHELL = 1, KPORT_IOPUB, KPORT_STDIN, KPORT_CONTROL, KPORT_HB };

/* The fork server (kzygote.c). */
struct kzygote {
    const kspec_t *spec; /* the kernelspec it runs (NULL: no fork server) */
    pid_t pid;
    int fd;              /* our end of its socket */
    evl_io_t *io;
    bool ready;
    int forks, fails;
    int starts;          /* processes started (the first, then restarts) */
    uint64_t started_ms;
    evl_timer_t *respawn;
    sbx_cgroup_t *next_cg; /* the cgroup it moved into for the next kernel (kzygote__adopt) */
    unsigned serial;
    void (*on_ready)(kmgr_t *m); /* it became ready: kernels can start through it */
};

struct kmgr {
    evl_t *evl;
    struct kmgr_opts o;
    struct list listeners; /* struct kmgr_listener.link, in the order added */
    unsigned slots_used;   /* listener slots taken (bits) */
    kmgr_call_fn call_fn;
    void *call_user;
    kspecs_t *specs;
    void *zctx;
    char rundir[PATH_MAX]; /* private directory of this gateway instance */
    int lockfd;            /* flock held on <rundir>/.lock while this instance lives */
    kernel_t **v;
    size_t n, cap;
    wspace_t **ws; /* workspaces, with or without kernels */
    size_t nws, capws;
    evl_timer_t *cull;
    evl_timer_t *hb_sweep; /* every running kernel's heartbeat (kwatchdog__beat) */
    evl_timer_t *trim;     /* the heap's free pages back to the system (kmgr.c: trim_soon) */
    bool trim_armed;
    /* the warm pool (kpool.c): started kernels nobody owns yet, outside v */
    struct list forks;   /* forks being made (kfork.c: struct kfork.link) */
    struct kpool *pools; /* one per configured kernelspec */
    const struct kpool_ops *pool_ops;
    size_t npools;
    kernel_t **pv;
    size_t pn, pcap;
    evl_timer_t *refill, *adapt;
    bool refill_armed;
    struct kzygote zyg;
    sbx_cgroups_t *cgroups;
    unsigned char *slots; /* sandbox uid slots in use */
    size_t nslots;
    char sandbox_mode[64];
    char sandbox_error[256];
    char **callbacks;      /* the callback allowlist, NULL-terminated */
    uint64_t next_call_id; /* callback ids are unique in the gateway */
    char pydir[PATH_MAX];  /* kgw_tools for kernels ("": none); sandboxed: a copy in rundir */
    bool draining;         /* kmgr_drain: no new kernels, no warm pool */
    bool handed_over;      /* kmgr_hand_over: kmgr_destroy leaves the instance as it is */
    struct kmgr_stats stats;
};

struct kconn {
    kernel_t *k;
    char session[JMSG_MSG_ID_MAX];
    kzsock_t z[JCHAN_N]; /* iopub unused */
    const struct kconn_ops *ops;
    void *user;
    struct list link;    /* on k->conns */
    struct list pending; /* struct kpending (kexec.c): shell and control requests unanswered */
    int npending;
};

/* What a kernel tells its owner, and asks of it (kmgr.c provides these for every kernel, pooled
 * or not: the owner knows which is which). Every member is set. */
struct kernel_owner_ops {
    /* listeners' events (the owner does not tell them of a pooled kernel's) */
    void (*event)(kernel_t *k, enum kernel_event ev, const char *detail);
    void (*iopub)(kernel_t *k, const jmsg_t *msg, const jhdr_t *h);
    /* an iopub message from the kernel for its clients (counted, then as iopub) */
    void (*relay)(kernel_t *k, const jmsg_t *msg, const jhdr_t *h);
    void (*notice)(kernel_t *k, jspan_t parent, const char *text);
    /* ends k's clients holding more than min bytes of its output (kmgr_listener_ops) */
    unsigned (*overflow)(kernel_t *k, size_t min);
    void (*exec_end)(kernel_t *k, const struct kernel_exec_end *e);
    /* a client's start of k (k->req_us) is over: ready, or failed (why) */
    void (*start_ok)(kernel_t *k);
    void (*start_failed)(kernel_t *k, enum kmgr_start_fail why);
    /* k is ready (after kernel_owner_ops.capacity) */
    void (*ready)(kernel_t *k);
    /* k's process ended (why: how): true if the owner took k (a pooled kernel: freed);
     * false: k goes on by itself (restart, death, removal) */
    bool (*lost)(kernel_t *k, const char *why);
    /* k is going: the owner forgets it and frees it (kinstance__free) */
    void (*gone)(kernel_t *k);
    /* a start in flight ended: capacity may have changed */
    void (*capacity)(kernel_t *k);
    /* the fork server (kzygote.c): its socket for k's kernelspec (-1: none), and the cgroup
     * moves around a start through it (see kzygote__adopt, kzygote__lend) */
    int (*fork_fd)(kernel_t *k);
    bool (*fork_adopt)(kernel_t *k);
    void (*fork_adopted)(kernel_t *k);
    int (*fork_lend)(kernel_t *k, int dirfds[SBX_CGROUP_MAX_DIRS]);
    void (*fork_take_back)(kernel_t *k);
    /* a start went through the fork server, or (ok false) failed because of it */
    void (*forked)(kernel_t *k, bool ok);
};

struct kwait {
    kernel_done_cb cb;
    void *data;
    kernel_t *k;
    int status;       /* once completed: what the callback is told */
    struct list link; /* on k->waiters, then on k->fired */
};

struct kernel {
    kmgr_t *m;                        /* its configuration, loop and contexts (read only) */
    const struct kernel_owner_ops *own; /* how it reports to its owner */
    struct kmgr_stats *stats;         /* the counters it keeps */
    char id[40];
    const kspec_t *spec;
    enum kernel_state state;
    char exec_state[16];
    int64_t last_activity_us;
    int connections;
    void *data[KMGR_LISTENERS_MAX]; /* the listeners' (kernel_data) */

    /* sized to use (an idle kernel's memory, docs/operations.md "Capacity"); NULL until set */
    char *dir;           /* private runtime directory */
    char *conn_file;
    char key[65];
    jsign_t *sign;
    char session[40];    /* the manager's own Jupyter session */
    char **envp;

    sbx_cgroup_t *cgroup;
    unsigned cpu_shares; /* its cgroup's weight as last written (0: the default) */
    bool cgroup_used;        /* a process of this kernel was in it */
    bool cgroup_lent;        /* its cgroup.procs is the fork server's uid's (kzygote__lend) */
    struct sbx_limits lim;   /* this kernel's sandbox limits */
    int exec_timeout_ms;
    long long output_cap;
    /* requests in flight and the execution watch (kexec.c; NULL: none yet) */
    struct kexec *exec;
    struct kout *out; /* its share of the output buffer budget (kout.c; NULL: no budget) */
    const struct kexec_ops *exec_ops; /* set by kernel__watch */
    wspace_t *ws;        /* bound at /mnt/data; its uid slot is the kernel's */
    char *root_dir;      /* where its sandbox's root is mounted ("": unsandboxed) */
    bool dir_mounted;
    pid_t pid;           /* 0: no process (sandboxed: the proxy outside the sandbox) */
    int pidfd;
    evl_io_t *pid_io;
    sbx_pending_t *pending; /* an exec'd start whose proxy the gateway has not let go yet */
    evl_io_t *pending_io;
    int setup_fd;        /* the sandbox's set-up report (-1: none) */
    struct kstderr *err; /* its process's stderr (kstderr.c; NULL: no process started yet) */
    char last_cause[512]; /* why the process ended unasked, for clients (kernel_last_cause) */
    uint64_t spawn_us;
    char setup_why[256]; /* why the sandbox's set-up failed */
    bool forked;         /* this process came from the fork server */
    /* a fork of another kernel (kfork.c): its process is not the gateway's child but lives in
     * that kernel's sandbox (adopted), on endpoints in that kernel's runtime directory
     * (ipc_dir; NULL: its own dir). A restart makes it a fresh kernel of its own. */
    bool adopted;
    char *ipc_dir;
    char fork_of[40];    /* the kernel it was forked from ("": none) */
    char fork_cp[65];    /* ... from this checkpoint ("": as it was) */
    bool fork_unknown_cp; /* the fork failed: no such checkpoint */
    bool fork_parent_gone; /* the fork failed: its parent's process ended first */
    int exit_status;
    bool hb_killed;      /* exit_status -ETIMEDOUT: for missed heartbeats, not the start's */
    long long oom_seen, pids_seen; /* the cgroup's events at the last exit (deaths' causes) */
    uint64_t req_us;     /* a client's start in progress (kmgr_start): since when (0: none) */
    bool req_pool;       /* ... with a kernel from the warm pool */

    kzsock_t iopub, shell, control, hb;
    evl_timer_t *nudge, *deadline, *linger;
    evl_timer_t *fire; /* calls the completed waiters (k->fired) on the loop's next turn */
    bool got_reply, got_iopub, got_starting; /* the start's proofs (check_ready) */
    bool probing; /* a kernel_info_request of on_nudge may still be answered on iopub */
    int stop_stage; /* 0 running, 1 shutdown_request sent, 2 SIGTERM sent */
    char stop_msg_id[40]; /* the gateway's shutdown_request ("": none awaiting its reply) */
    const char *stop_end; /* the gateway ended the process at once: why (its shutdown_reply
                             came, or it had not finished its start); NULL: not */
    uint64_t stop_us;     /* when it was sent */
    int restarts;
    struct kwatchdog *wd; /* its heartbeats (kwatchdog.c) */
    bool paused;          /* its processes are frozen in place (kernel_pause) */
    uint64_t paused_us;   /* since when (monotonic) */

    struct list conns;   /* kconn_t.link, newest first */
    enum kernel_outcome stop_outcome; /* why the process is being stopped (kexec__stop_why) */
    char stop_cause[512];
    struct list waiters; /* kwait_t.link, newest first */
    struct list fired;   /* kwait_t.link: completed, their callbacks due (kernel.c complete) */
    struct kcall *calls; /* callbacks (kcall.c) */
    struct kcmds *cmds;  /* commands and their socket (kcmd.c; NULL: none yet) */
    struct kckpt *ckpt;  /* the gateway's checkpoint requests (kckpt.c; NULL: none yet) */

    struct kpool *pool;  /* while it waits in the warm pool (no hooks run): its pool */
    /* the request's KERNEL_* variables, applied to a pooled kernel by a silent execution
     * (kenv.c; NULL: none) */
    struct kenv *env;
    egpol_t *egpol;      /* its egress policy (NULL: no network at all) */
    kegress_t *egress;   /* its egress proxy, while its process runs */
    ksecret_t *secrets;  /* its secrets' placeholders (NULL: none) */
};

/* One kernelspec's warm pool (kpool.c). */
struct kpool {
    const kspec_t *spec;
    int base;            /* configured size */
    int target;          /* current size, base..2*base, following demand */
    int fails;           /* failed starts in a row (backoff) */
    uint64_t retry_at_ms;
    uint64_t last_miss_ms;
    int misses, handouts; /* since the gateway started */
    bool filled;          /* has had its configured size ready once (logged) */
};

struct wspace {
    kmgr_t *m;
    const struct wspace_ops *ops;
    char id[WSPACE_ID_MAX];
    char tenant[KMGR_TENANT_MAX + 1];
    char *path; /* sized to use: a kernel's own workspace is part of an idle kernel's memory */
    bool made, mounted;
    uid_t uid;
    gid_t gid;
    long slot; /* sandbox uid slot, -1: none */
    long long size;
    int kernels, holds;
    bool pooled; /* belongs to a pooled kernel: hidden from lookups and listings */
    int64_t last_used_us;
    evl_timer_t *grace;
};

#endif
