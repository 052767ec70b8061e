/* kernelmgr internals shared by its files.
 *
 * Floors: kernel.c (with klaunch.c, kexec.c, kinstance.c, kcall.c, kzsock.c) is the bottom;
 * it reports to its owner through struct kernel_owner_ops. kconn.c, kpool.c, kzygote.c,
 * wspace.c and kmgr.c sit above it; kmgr.c provides the owner ops. */
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
#include "kernelmgr/wspace.h"
#include "protocol/jmsg.h"
#include "protocol/jsign.h"

#define KGW_MS_NOSYMFOLLOW 256 /* MS_NOSYMFOLLOW, Linux 5.10 */
#define KZ_MAX_FRAMES (JMSG_MAX_IDS + 6 + JMSG_MAX_BUFFERS)
/* Messages and bytes a socket reads per loop turn before it yields to the others: with several
 * kernels flooding output, a quiet kernel's message waits for one turn of all of them. */
#define KZ_DRAIN_BATCH 64
#define KZ_DRAIN_BYTES (64 * 1024)
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
    /* the warm pool (kpool.c): started kernels nobody owns yet, outside v */
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
    struct kmgr_stats stats;
};

/* A watched ZeroMQ socket. ZMQ_FD is edge-triggered: after every send on the socket the
 * owner re-checks ZMQ_EVENTS (kz_after_send) so no arrival is missed.
 *
 * With a message limit (maxmsg > 0) libzmq refuses a frame over it from its header, before
 * allocating it, and drops the connection for good (a protocol error: libzmq 4.3 does not
 * reconnect then). A monitor tells that drop from a peer that went away (which libzmq retries
 * at once): a disconnect with no retry within KZ_OVERSIZE_CONFIRM_MS is an oversize message;
 * the socket is then opened again and on_oversize runs. */
#define KZ_OVERSIZE_CONFIRM_MS 1000
typedef struct kzsock {
    void *s;
    int fd; /* dup of ZMQ_FD, owned */
    evl_io_t *io;
    evl_timer_t *again; /* re-drain on the next turn */
    evl_t *evl;
    void (*on_msg)(void *data, struct kzsock *z, zmq_msg_t *frames, size_t n);
    void *data;
    /* to open it again, and the oversize watch (maxmsg > 0) */
    void *zctx;
    int type;
    char *identity, *endpoint;
    long long maxmsg;
    void (*on_oversize)(void *data, struct kzsock *z);
    void *mon;      /* PAIR socket reading the socket's monitor events */
    evl_io_t *mon_io; /* on its ZMQ_FD */
    evl_timer_t *quiet; /* a disconnect not followed by a retry: oversize */
} kzsock_t;

/* maxmsg: bytes per frame from the peer (0: libzmq's default, none); on_oversize runs once
 * the socket was reset for a frame over it (NULL: no watch, and the connection stays
 * dropped). A watch costs three descriptors. */
int kz_open(kzsock_t *z, evl_t *evl, void *zctx, int type, const char *identity,
            const char *endpoint, void (*on_msg)(void *, kzsock_t *, zmq_msg_t *, size_t),
            void *data, long long maxmsg, void (*on_oversize)(void *, kzsock_t *));
void kz_close(kzsock_t *z);
/* Sends frames (MORE on all but the last); -EAGAIN when the queue is full. */
int kz_send(kzsock_t *z, const jspan_t *frames, size_t n);
/* Sends a signed Jupyter message. */
int kz_send_jmsg(kzsock_t *z, jsign_t *sign, const jmsg_t *m);
/* Handles what has arrived now, outside the loop's order (a callback that must see the
 * kernel's iopub up to date). */
void kz_drain_now(kzsock_t *z);

/* kcall.c: a kernel's callback socket, <dir>/callback (SBX_RUNTIME_PATH/callback inside),
 * and the calls in progress on it. Frames: protocol/kcallmsg.h. */
#define KCALL_SOCKET_NAME "callback"
typedef struct kcall kcall_t;
kcall_t *kcall__new(kernel_t *k);
void kcall__destroy(kcall_t **kc);
/* (Re)creates the listening socket before a kernel process starts; drops every connection.
 * owner: uid (and gid) of the socket file and of the peers accepted (-1: the gateway's). */
int kcall__listen(kcall_t *kc, uid_t owner);
/* Drops every connection and call in progress (the kernel process is gone). */
void kcall__reset(kcall_t *kc);
/* The gateway's view of the execution in progress changed (iopub busy/idle). */
void kcall__exec_changed(kcall_t *kc);
int kcall__reply(kcall_t *kc, uint64_t call_id, json_t *value, const char *err_type,
                 const char *err_message);

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

/* kexec.c: requests in flight and the outcome of executions. */
#define KCONN_PENDING_MAX 256         /* requests in flight remembered per session */
#define KCONN_PENDING_HEADER_MAX 4096 /* a longer header is remembered by its ids */
struct kpending;
/* A client request went to the kernel, or an answer came back (h: the answer's header). */
void kexec__sent(kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h);
void kexec__answered(kconn_t *c, const jmsg_t *m, const jhdr_t *h);
/* The session is going: its requests are forgotten. */
void kexec__forget(kconn_t *c);
/* The kernel process ended (or is being let go) with requests in flight: each gets its
 * terminal answer in the kernel's name (an execution: iopub error and idle, then an
 * execute_reply with status "error"; others: an error reply), and listeners hear each
 * execution's end. What the kernel had sent already is handled first. */
void kexec__fail_all(kernel_t *k, enum kernel_outcome o, const char *cause);

/* What a kernel tells its owner, and asks of it (kmgr.c provides these for every kernel, pooled
 * or not: the owner knows which is which). Every member is set. */
struct kernel_owner_ops {
    /* listeners' events (the owner does not tell them of a pooled kernel's) */
    void (*event)(kernel_t *k, enum kernel_event ev, const char *detail);
    void (*iopub)(kernel_t *k, const jmsg_t *msg, const jhdr_t *h);
    /* an iopub message from the kernel for its clients (counted, then as iopub) */
    void (*relay)(kernel_t *k, const jmsg_t *msg, const jhdr_t *h);
    void (*notice)(kernel_t *k, jspan_t parent, const char *text);
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
    struct list link; /* on k->waiters */
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

    char dir[PATH_MAX];  /* private runtime directory */
    char conn_file[PATH_MAX];
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
    /* the execution in progress (from iopub status busy/idle of an execute_request) */
    char exec_id[JMSG_MSG_ID_MAX];
    char exec_last[JMSG_MSG_ID_MAX]; /* the execution that ended last */
    char *exec_parent;       /* its header, for notices */
    long long exec_bytes;
    bool exec_capped;
    bool exec_cap_stopped;      /* interrupted for printing on past its output cap */
    int exec_stage;          /* 0 running, 1 interrupted for exceeding its wall time */
    int64_t exec_start_us;
    bool exec_error;         /* an error message came */
    char exec_sha[65];       /* sha256 of its code (hex), for the audit log */
    /* execute_requests clients sent whose iopub status "idle" has not come yet (the drain
     * waits for them); beyond KERNEL_SENT_MAX only the one running is known */
    char sent_exec[KERNEL_SENT_MAX][JMSG_MSG_ID_MAX];
    size_t nsent;
    evl_timer_t *exec_timer;
    const struct kexec_ops *exec_ops; /* set by kernel__watch */
    wspace_t *ws;        /* bound at /mnt/data; its uid slot is the kernel's */
    char root_dir[PATH_MAX];
    bool dir_mounted;
    pid_t pid;           /* 0: no process (sandboxed: the proxy outside the sandbox) */
    int pidfd;
    evl_io_t *pid_io;
    sbx_pending_t *pending; /* an exec'd start whose proxy the gateway has not let go yet */
    evl_io_t *pending_io;
    int setup_fd;        /* the sandbox's set-up report (-1: none) */
    int err_fd;          /* the read end of the process's stderr (kstderr.c; -1: none) */
    evl_io_t *err_io;    /* NULL while paused (err_pause armed) */
    evl_timer_t *err_pause;
    uint64_t err_window_ms; /* the pacing window: since when, bytes read in it */
    size_t err_window_bytes;
    struct tailbuf *err_tail; /* its newest bytes (NULL until the first) */
    char last_cause[512]; /* why the process ended unasked, for clients (kernel_last_cause) */
    uint64_t spawn_us;
    char setup_why[256]; /* why the sandbox's set-up failed */
    bool forked;         /* this process came from the fork server */
    int exit_status;
    bool hb_killed;      /* exit_status -ETIMEDOUT: for missed heartbeats, not the start's */
    long long oom_seen, pids_seen; /* the cgroup's events at the last exit (deaths' causes) */
    uint64_t req_us;     /* a client's start in progress (kmgr_start): since when (0: none) */
    bool req_pool;       /* ... with a kernel from the warm pool */

    kzsock_t iopub, shell, control, hb;
    evl_timer_t *nudge, *deadline, *hb_timer, *linger;
    bool got_reply, got_iopub, got_starting; /* the start's proofs (check_ready) */
    bool probing; /* a kernel_info_request of on_nudge may still be answered on iopub */
    int stop_stage; /* 0 running, 1 shutdown_request sent, 2 SIGTERM sent */
    char stop_msg_id[40]; /* the gateway's shutdown_request ("": none awaiting its reply) */
    const char *stop_end; /* the gateway ended the process at once: why (its shutdown_reply
                             came, or it had not finished its start); NULL: not */
    uint64_t stop_us;     /* when it was sent */
    int hb_missed, restarts;
    bool hb_outstanding;

    struct list conns;   /* kconn_t.link, newest first */
    struct list failing; /* kexec__fail_all: requests being answered */
    struct kpending *failing_now;
    long long exec_cpu0;  /* the cgroup's CPU time when the execution began (-1: unknown) */
    long long exec_pids0; /* ... and its forks refused at the pids limit */
    enum kernel_outcome stop_outcome; /* why the process is being stopped (kexec__stop_why) */
    char stop_cause[512];
    struct list waiters; /* kwait_t.link, newest first */
    kcall_t *calls;      /* callbacks */

    struct kpool *pool;  /* while it waits in the warm pool (no hooks run): its pool */
    /* the request's KERNEL_* variables, applied to a pooled kernel by a silent execution */
    char *env_code;
    egpol_t *egpol;      /* its egress policy (NULL: no network at all) */
    kegress_t *egress;   /* its egress proxy, while its process runs */
    char env_id[JMSG_MSG_ID_MAX]; /* that execution's msg_id */
    bool env_replied, env_idle;
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

/* What a workspace asks of its owner (kmgr.c provides it). */
struct wspace_ops {
    /* w is unused past its grace: the owner forgets it (w frees itself next) */
    void (*gone)(kmgr_t *m, wspace_t *w);
};

struct wspace {
    kmgr_t *m;
    const struct wspace_ops *ops;
    char id[WSPACE_ID_MAX];
    char tenant[KMGR_TENANT_MAX + 1];
    char path[PATH_MAX];
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

/* A new workspace (slot: its sandbox uid slot, owned from now on). NULL + errno. */
wspace_t *wspace__new(kmgr_t *m, const char *tenant, long long size, long slot,
                      const struct wspace_ops *ops);
/* Sandbox uid slots (m->slots): -1 when all are taken. */
long wspace__slot_take(kmgr_t *m);
void wspace__slot_put(kmgr_t *m, long slot);
void wspace__free(wspace_t *w);
/* A kernel starts or stops using it; the last detach starts the grace period. */
void wspace__attach(wspace_t *w);
void wspace__detach(wspace_t *w);

/* kwire.c: the endpoint of the kernel's socket on port (KPORT_*); verifies and splits frames
 * from the kernel (0 or -EBADMSG, logged by the caller); counts a message relayed between
 * clients and k (kmgr_stats.messages); sends a gateway-made message on one of the kernel's
 * manager sockets (0 or -errno; ret_msg_id: its msg_id). */
void kwire__endpoint(const kernel_t *k, int port, char *out, size_t outsz);
int kwire__parse(kernel_t *k, zmq_msg_t *frames, size_t n, jmsg_t *m, jhdr_t *h);
void kwire__count(kernel_t *k, enum kmgr_dir dir, const jmsg_t *m);
int kwire__send_own(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content);
int kwire__send_own_id(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content,
                       char ret_msg_id[40]);

/* kwatchdog.c: the heartbeat socket's callback, and the heartbeat and deadline timers
 * (data: the kernel; armed by kernel.c). */
void kwatchdog__on_hb(void *data, kzsock_t *z, zmq_msg_t *frames, size_t n);
void kwatchdog__on_hb_timer(void *data);
void kwatchdog__on_deadline(void *data);

/* kstderr.c: a kernel process's stderr, its newest TAILBUF_SIZE bytes kept.
 * open: a new pipe for the process about to start (the tail starts empty); ret_wfd is its write
 * end, for the process (the caller closes it once the process has it). drain: what is left,
 * once the process has ended; the pipe is closed. excerpt: its last lines, short and printable,
 * secrets blotted out (tailbuf_excerpt); log: its last lines to the log, as warnings. */
int kstderr__open(kernel_t *k, int *ret_wfd);
void kstderr__drain(kernel_t *k);
void kstderr__free(kernel_t *k);
size_t kstderr__excerpt(const kernel_t *k, char *out, size_t outsz);
void kstderr__log(const kernel_t *k);

/* kinstance.c: a kernel's set-up and teardown.
 * egress: the kernel's egress policy (NULL or empty: none; copied). own: its owner. */
kernel_t *kinstance__new(kmgr_t *m, const kspec_t *spec, json_t *env,
                      const struct kmgr_limits *lim, wspace_t *ws, struct kpool *pool,
                      const egpol_t *egress, const struct kernel_owner_ops *own);
/* Hands a pooled kernel to a request: per-kernel limits that apply after start, and the
 * request's KERNEL_* variables (a silent execution; the kernel is "starting" until it is
 * done). 0 or -errno. */
int kinstance__adopt(kernel_t *k, json_t *env, const struct kmgr_limits *lim);
void kinstance__free(kernel_t *k);

/* kenv.c: a pooled kernel's request environment: the code that applies the request's KERNEL_*
 * variables (NULL: none, errno 0; or NULL + errno), the silent execution that runs it, its
 * answers (replied ok or with an error, or its iopub idle came; true: it is applied, the
 * kernel is ready to run; a failure restarts the kernel cold), and whether m is one of its
 * messages (no client sees those). */
char *kenv__code_new(json_t *req_env);
void kenv__send(kernel_t *k);
bool kenv__step(kernel_t *k, bool replied_ok, bool replied_err, bool idle);
bool kenv__parent(const kernel_t *k, const jmsg_t *m);

/* klaunch.c: the launch. Starts k's process; 0, or -errno and in msg why (k->last_cause too).
 * The caller watches it (kernel__launch). */
int klaunch__start(kernel_t *k, char *msg, size_t msgsz);
/* k's process environment (req_env: the request's, KERNEL_* taken), NULL-terminated. */
char **klaunch__env(const kernel_t *k, json_t *req_env);
void klaunch__free_strv(char **v);
/* Writes k's connection file. 0 or -errno. */
int klaunch__conn_file(kernel_t *k);
/* The sandbox's set-up report is moot (closed); an exec'd start's pending part is dropped. */
void klaunch__setup_end(kernel_t *k);
void klaunch__abandon(kernel_t *k);
/* The process is ready: its egress proxy starts (if it has a policy). */
void klaunch__egress_start(kernel_t *k);
/* Reaps k's process if it has ended (0, *ret_status set) and releases what it held; -EAGAIN
 * if it runs. */
int klaunch__reap(kernel_t *k, int *ret_status);
/* Why it ended (asked: someone stopped it; counted in the statistics) and, in why, how. */
enum kmgr_death klaunch__death(kernel_t *k, int st, bool asked, char *why, size_t whysz);
/* What an unasked death means for requests in flight (cause: one line), or for a start. */
enum kernel_outcome klaunch__death_outcome(kernel_t *k, enum kmgr_death d, int st, char *cause,
                                           size_t sz);
enum kmgr_start_fail klaunch__start_fail(enum kmgr_death d);

/* kernel.c: the state machine, called by its other files. */
int kernel__watch(kernel_t *k);
void kernel__unwatch(kernel_t *k);
/* Starts k's process and watches it (a failure sets k dead); reaps it if it has exited
 * (SIGCHLD path). */
void kernel__launch(kernel_t *k);
void kernel__check_exit(kernel_t *k);

/* kexec.c: the execution watch. What it asks of the kernel (kernel.c hands it, k->exec_ops):
 * an interrupt (kernel_interrupt) and a restart without event or statistics (kernel__restart);
 * 0 or -errno. */
struct kexec_ops {
    int (*interrupt)(kernel_t *k);
    int (*restart)(kernel_t *k);
};
/* Why the process is being stopped: what requests in flight are told when it ends. */
void kexec__stop_why(kernel_t *k, enum kernel_outcome o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A client's execute_request was sent to the kernel
 * (kconn_send). */
void kexec__track_sent(kernel_t *k, const char *msg_id);
/* iopub: a status message; another message (error, execute_input); what the execution's
 * output cap makes of an output message: relayed as it is, dropped (the cap was reached
 * before), or relayed with *ret_content (to free()) instead of its content and buffers (the
 * message that crosses the cap, cut to it: protocol/jcap.h). */
enum kexec_cap { KEXEC_CAP_PASS, KEXEC_CAP_DROP, KEXEC_CAP_CUT };
void kexec__status(kernel_t *k, const jmsg_t *m);
void kexec__track(kernel_t *k, const jmsg_t *m, const jhdr_t *h);
enum kexec_cap kexec__over_cap(kernel_t *k, const jmsg_t *m, const jhdr_t *h,
                               char **ret_content);
/* A message from the kernel on chan went over --max-kernel-message-bytes (libzmq refused it and
 * the socket was reset): the requests in flight end with output_limit and the kernel restarts
 * (what it sent meanwhile is lost, so its later messages cannot be trusted to come). */
void kexec__oversize(kernel_t *k, const char *chan);
/* The execution in progress, if any, is over (how: its status in the statistics). */
void kexec__finish(kernel_t *k, enum kmgr_exec how);
/* The wall-time timer (data: the kernel). */
void kexec__on_timer(void *data);
/* Signals the kernel's process group (its proxy when sandboxed); never pid <= 1. */
void klaunch__signal(kernel_t *k, int sig);

/* The fork server (kzygote.c). */
/* on_ready: each time it is ready (the owner's warm pool may start kernels through it). */
int kzygote__init(kmgr_t *m, void (*on_ready)(kmgr_t *m));
void kzygote__fini(kmgr_t *m);
/* Its socket, when it is ready and runs this kernelspec; else -1. */
int kzygote__fd(kmgr_t *m, const kspec_t *spec);
/* Before a start through it: a kernel whose cgroup never held a process takes the cgroup
 * the server already sits in (with the kernel's limits), so its proxy starts there and the
 * gateway need not move it (on cgroup v1 a move waits for an RCU grace period). */
bool kzygote__adopt(kmgr_t *m, kernel_t *k);
/* After that start (whatever its outcome): the cgroup is the server's no more. */
void kzygote__adopted(kmgr_t *m, kernel_t *k);
/* Before a start through it that could not adopt (a restart: the kernel's cgroup holds its
 * workspace's charges): gives the kernel's cgroup.procs to the server's uid and returns its
 * directories (O_PATH, the caller closes them), so the proxy moves itself in, and the gateway
 * does not wait for the move (cgroup v1; 0 elsewhere: the gateway moves it). Taken back by
 * kzygote__take_back once the kernel is ready or gone. */
int kzygote__lend(kmgr_t *m, kernel_t *k, int dirfds[SBX_CGROUP_MAX_DIRS]);
void kzygote__take_back(kmgr_t *m, kernel_t *k);
/* A start went through it, or (ok false) failed because of it: it is restarted. */
void kzygote__forked(kmgr_t *m, bool ok);
/* Reaps children that are neither kernels nor the fork server (we are a subreaper). */
void kzygote__reap_strays(kmgr_t *m);

/* The warm pool (kpool.c). What it asks of the manager (kmgr.c provides it): the owner ops of
 * the kernels it starts, and workspaces (new_workspace: for_pool true, it never shrinks the
 * pool to make room; ws_idle: the least recently used workspace no kernel uses and no
 * transfer holds, kept for downloads only, or NULL; ws_remove: forgets one, before its free). */
struct kpool_ops {
    const struct kernel_owner_ops *kernel_owner;
    int (*new_workspace)(kmgr_t *m, const char *tenant, long long size, bool for_pool,
                         wspace_t **ret);
    wspace_t *(*ws_idle)(kmgr_t *m);
    void (*ws_remove)(kmgr_t *m, wspace_t *w);
};
int kpool__init(kmgr_t *m, const struct kpool_ops *ops);
void kpool__fini(kmgr_t *m);
/* A pooled kernel for a request (shared_ws: it shares a workspace; lim: its limits, NULL: the
 * gateway's), taken out of the pool (NULL: none fits). */
kernel_t *kpool__take(kmgr_t *m, const kspec_t *spec, bool shared_ws,
                      const struct kmgr_limits *lim);
/* Kills and frees a pooled kernel (in the pool or just taken out) with its workspace. */
void kpool__drop(kmgr_t *m, kernel_t *k);
/* Kills and frees one pooled kernel (with its workspace) to make room; false if none. */
bool kpool__shrink(kmgr_t *m);
/* A pooled kernel is ready, or ended (failed: it never became ready). */
void kpool__ready(kmgr_t *m, kernel_t *k);
void kpool__lost(kmgr_t *m, kernel_t *k, bool failed);
/* Capacity was freed or demand changed: look at the pool again soon. */
void kpool__kick(kmgr_t *m);
void kpool__remove(kmgr_t *m, kernel_t *k);
/* kcapacity.c: MemAvailable in bytes (-1: unknown); descriptors a new kernel costs; the
 * descriptors left for new kernels (LLONG_MAX: no limit). */
long long kmgr__mem_available(void);
long long kmgr__fd_per_kernel(const kmgr_t *m);
long long kmgr__fd_left(const kmgr_t *m);


#endif
