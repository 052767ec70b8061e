/* The kernel sandbox. A sandboxed kernel runs as
 *
 *   gateway ─ proxy (new user ns; outside the kernel's pid ns; waits, forwards signals)
 *               └─ init, pid 1 (our kgw-sandbox-init: reaps, forwards signals, exits with
 *                   └─ kernel, pid 2       the kernel and so takes the namespace down)
 *
 * with its own user, mount, pid, network, IPC, UTS and cgroup namespaces; a tmpfs root with
 * read-only /usr and a handful of /etc files; a size-limited tmpfs workspace, /tmp and home;
 * only a loopback interface; uid 1000 inside (a distinct unprivileged uid outside); no
 * capabilities; no_new_privs; a seccomp filter; rlimits; cgroup limits.
 *
 * sbx_start() works in a process that will exec (fn calls execve) and in one that will not
 * (fn runs the kernel in-process), because fn runs in the final sandboxed process.
 *
 * Files: sbx.c (the gateway's side of a start), stages.c (what runs inside the new
 * namespaces), forksrv.c (the fork-server wire), listen.c (sbx_listen_in). */
#ifndef KGW_SANDBOX_SBX_H
#define KGW_SANDBOX_SBX_H

#include <stdbool.h>
#include <sys/types.h>

#include "sandbox/cgroup.h"

#define SBX_RUNTIME_PATH   "/run/kernel" /* the kernel's private runtime directory, inside */
#define SBX_WORKSPACE_PATH "/mnt/data"
#define SBX_HOME           "/home/sandbox"
#define SBX_E2B_HOME       "/home/user" /* SBX_WORKSPACE_PATH mounted again */
#define SBX_PYTHON_PATH    "/opt/kgw/python" /* the gateway's Python modules (kgw_tools) */
#define SBX_UID            1000 /* inside */

struct sbx_limits {
    long long mem_bytes;       /* cgroup memory limit (includes the tmpfs mounts) */
    long long pids;            /* cgroup pids.max */
    long long cpu_millis;      /* 1000 = one CPU */
    long long workspace_bytes; /* tmpfs size of /mnt/data */
    long long tmp_bytes;       /* tmpfs size of /tmp and of home, each */
    long long fsize_bytes;     /* RLIMIT_FSIZE */
    long long nofile;          /* RLIMIT_NOFILE */
};

typedef struct sbx_profile {
    const char *runtime_dir; /* outside; bound read-write at SBX_RUNTIME_PATH */
    const char *root_dir;    /* outside; an empty directory the new root is mounted on */
    const char *workspace_dir; /* outside; bound read-write at SBX_WORKSPACE_PATH (NULL: a
                                  fresh tmpfs of lim->workspace_bytes) */
    const char *python_dir;  /* outside; bound read-only at SBX_PYTHON_PATH (NULL: none) */
    uid_t uid;               /* outside uid (and gid) of inside uid SBX_UID */
    uid_t root_uid;          /* outside uid (and gid) of inside uid 0 (set-up only) */
    const struct sbx_limits *lim;
    sbx_cgroup_t *cgroup;    /* NULL: no cgroup limits */
    /* sbx_start_forked: the cgroup's directories (O_PATH; its cgroup.procs given to the
     * server's uid), which the proxy moves itself into once the gateway has let it go: the
     * gateway does not move it (nor wait for the move). Otherwise 0. */
    const int *cgroup_dirfds;
    int ncgroup_dirfds;
    int init_fd;             /* executable fd of kgw-sandbox-init */
    char *const *envp;       /* the kernel's whole environment */
    int stderr_fd;           /* -1: /dev/null */
    /* init's end of the command socket (sandbox/sbxcmd.h), a descriptor above 2; 0 or -1:
     * none. Only init keeps it: the proxy closes its copy, the kernel never has it. */
    int ctl_fd;
} sbx_profile_t;

/* How to start a sandboxed kernel: one set of options for every start variant below. */
struct sbx_start_opts {
    const sbx_profile_t *profile;
    /* sbx_start, sbx_start_async, sbx_start_begin: fn(arg) runs in the final sandboxed
     * process and must not return (exec or _exit) */
    void (*fn)(void *arg);
    void *arg;
    /* sbx_start_forked: the fork server's socket (SOCK_SEQPACKET); strings for the server's fn
     * (NULL-terminated); how long to wait for the server's answer (-1: no limit) */
    int server;
    char *const *payload;
    int timeout_ms;
};

/* Runs o->fn(o->arg) in a new sandbox. Returns the proxy's pid (signal it: SIGINT, SIGTERM and
 * SIGKILL reach the kernel) and a pidfd (-1 where the system has none). Failures of any set-up
 * step come back as -errno with a step description. */
int sbx_start(const struct sbx_start_opts *o, pid_t *ret_pid, int *ret_pidfd, char *why,
              size_t whysz);

/* The same without waiting for the set-up inside the sandbox (mounts, exec): only the steps
 * that need the caller (uid maps, cgroup) are done when it returns. ret_setupfd (non-blocking,
 * close-on-exec; the caller closes it) becomes readable when the set-up is over: then
 * sbx_setup_result() says how it went. */
int sbx_start_async(const struct sbx_start_opts *o, pid_t *ret_pid, int *ret_pidfd,
                    int *ret_setupfd, char *why, size_t whysz);
/* sbx_start_async for an event loop, which need not wait while the proxy creates its user
 * namespace (or moves into its cgroup, an RCU grace period on cgroup v1): returns once the
 * proxy is forked, with its pid, pidfd and set-up report (as sbx_start_async's) and a pending
 * start. When sbx_pending_fd() is readable, sbx_start_continue() writes the proxy's uid maps
 * and lets it go on (the proxy moved itself into its cgroup, or failed: ST_CGROUP in its
 * report); it frees the pending start.
 * -EAGAIN: not yet (the start stays pending). Another failure: the proxy was killed, or
 * failed on its own (-ESRCH, its reason is in the set-up report); the caller reaps it.
 * sbx_pending_free() abandons a start: the proxy exits. */
typedef struct sbx_pending sbx_pending_t;
int sbx_start_begin(const struct sbx_start_opts *o, pid_t *ret_pid, int *ret_pidfd,
                    int *ret_setupfd, sbx_pending_t **ret, char *why, size_t whysz);
int sbx_pending_fd(const sbx_pending_t *pd);
int sbx_start_continue(sbx_pending_t **pd, char *why, size_t whysz);
void sbx_pending_free(sbx_pending_t **pd);
/* 0: the kernel was exec'd; -EINPROGRESS: not yet; -errno with why: a set-up step failed (the
 * proxy exits with status 127). */
int sbx_setup_result(int setupfd, char *why, size_t whysz);

/* ---- the fork server ----
 * A pre-loaded process (kgw-zygote, a child of the gateway) forks kernels into the same
 * sandbox as sbx_start: per kernel it clones the kernel's proxy with CLONE_PARENT, so the
 * proxy is the gateway's child; the proxy arms PR_SET_PDEATHSIG and runs the very stages of
 * sbx_start (user namespace with the uid maps and the cgroup written by the gateway, the other
 * namespaces, init, mounts, pivot_root, rlimits, uid, capabilities, seccomp), fn running in
 * the final sandboxed process. Descriptors there are only marked close-on-exec: an fn that
 * does not exec must close them (close_range). The proxy starts in the server's cgroup; the
 * gateway moves it into the kernel's unless it is there already (sbx_fork_server_move). */

/* Gateway side: sbx_start_async through the fork server o->server, which runs its own fn with
 * o->payload (o->fn is not used). -ETIMEDOUT when the server does not answer within
 * o->timeout_ms, -EPIPE when it is gone: the caller may fall back to sbx_start_begin. */
int sbx_start_forked(const struct sbx_start_opts *o, pid_t *ret_pid, int *ret_pidfd,
                     int *ret_setupfd, char *why, size_t whysz);

/* Gateway side: asks the server (running as uid) to move itself into cg, so the kernels it
 * forks next start in it (sbx_start_forked then leaves their cgroup as it is). The cgroup's
 * cgroup.procs files are given to uid for that (sbx_cgroup_delegate). Returns at once. */
int sbx_fork_server_move(int server, sbx_cgroup_t *cg, uid_t uid);

/* Server side. */
typedef struct sbx_fork_req sbx_fork_req_t;
/* Receives one request (blocking); init_fd: the server's kgw-sandbox-init. -EPIPE at EOF.
 * SBX_FORK_MOVED: the request was sbx_fork_server_move's, and is done; -EPERM: it failed
 * where the server must not go on (it may sit in a kernel's cgroup: exit). */
#define SBX_FORK_MOVED 1
int sbx_fork_req_recv(int server, int init_fd, sbx_fork_req_t **ret);
void sbx_fork_req_free(sbx_fork_req_t **r);
char *const *sbx_fork_req_payload(const sbx_fork_req_t *r);
char *const *sbx_fork_req_env(const sbx_fork_req_t *r);
/* Zeroes the request's strings (env, payload and paths are gone afterwards). */
void sbx_fork_req_wipe(sbx_fork_req_t *r);
/* Forks the kernel's proxy as described above; fn(arg) runs in the final sandboxed process
 * and must not return. Failures reach the gateway through the request's report pipe. */
int sbx_fork_req_spawn(sbx_fork_req_t *r, int server, void (*fn)(void *arg), void *arg);

/* A listening TCP socket (non-blocking, close-on-exec) on 127.0.0.1:port inside the network
 * namespace of the sandbox whose proxy is pid (pidfd: its pidfd, or -1). A socket keeps the
 * namespace it was made in, so the caller accepts on it from its own loop; connections come
 * only from inside the sandbox. Made by a short-lived thread that enters the namespace (the
 * caller's threads stay where they are); needs CAP_SYS_ADMIN over the sandbox's user
 * namespace (the gateway's root). 0 or -errno. */
int sbx_listen_in(pid_t pid, int pidfd, unsigned short port, int *ret_fd);

/* Checks that this host can run sandboxes (a complete dry run). 0, or -errno with why. */
int sbx_probe(const sbx_profile_t *p, char *why, size_t whysz);


#endif
