/* Per-kernel cgroups: memory, pids and CPU limits, with a cgroup v1 backend (one hierarchy per
 * controller) and a v2 backend (unified) behind one interface. OOM kills and pid-limit hits are
 * read back for death reports. */
#ifndef KGW_SANDBOX_CGROUP_H
#define KGW_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct sbx_cgroup sbx_cgroup_t;
typedef struct sbx_cgroups sbx_cgroups_t;

/* The gateway's cgroup parent: <own cgroup>/kgw-<instance> under each controller. Sweeps the
 * leftovers of dead instances. NULL + errno (with why) when cgroups cannot be used. */
sbx_cgroups_t *sbx_cgroups_new(const char *instance, char *why, size_t whysz);
void sbx_cgroups_destroy(sbx_cgroups_t **cgs);
/* Unmounts dir (MNT_DETACH) if mounted, and removes it and also (NULL: none), both absolute
 * paths: through the cgroup worker (sandbox/cgroup.c), not waited for (an unmount waits for
 * an RCU grace period, 1-31 ms here); without the worker (cgs NULL, or gone), here. */
void sbx_cgroups_remove_dirs(sbx_cgroups_t *cgs, const char *dir, bool mounted, const char *also);
/* Lets go of cgs for a restart in place (gateway/handover.h): its unused spares are removed
 * and its worker stopped, but its cgroups and the kernels' in them stay for the next image,
 * whose sbx_cgroups_new of the same instance finds them (sbx_cgroup_open). */
void sbx_cgroups_let_go(sbx_cgroups_t **cgs);
/* Removes the cgroups of a gateway instance that is gone (its runtime lock was free). */
void sbx_cgroups_remove_stale(const char *instance);
/* Removes every kgw-<instance> cgroup under this process's cgroups whose instance is not
 * alive (for instances that died under another runtime directory or before their sweep). */
void sbx_cgroups_sweep(bool (*alive)(const char *instance, void *data), void *data);
const char *sbx_cgroups_version(const sbx_cgroups_t *cgs); /* "v1" or "v2" */
/* Whether sbx_cgroup_usage() can report CPU time on this host. */
bool sbx_cgroups_cpu_accounted(const sbx_cgroups_t *cgs);

sbx_cgroup_t *sbx_cgroup_new(sbx_cgroups_t *cgs, const char *name, long long mem_bytes,
                             long long pids, long long cpu_millis);
/* An existing cgroup of cgs by its name (sbx_cgroup_name), as the image before a restart in
 * place left it, its limits as they are. NULL + errno (ENOENT: none). */
sbx_cgroup_t *sbx_cgroup_open(sbx_cgroups_t *cgs, const char *name);
/* Its name below the gateway's cgroup parent. */
const char *sbx_cgroup_name(const sbx_cgroup_t *cg);
/* Frees cg, leaving the cgroup and its processes as they are (a restart in place). */
void sbx_cgroup_forget(sbx_cgroup_t **cg);
/* Moves pid (and so its future children) into the cgroup. */
int sbx_cgroup_attach(sbx_cgroup_t *cg, pid_t pid);
/* Whether pid is in the cgroup (in every hierarchy, v1). */
bool sbx_cgroup_has(const sbx_cgroup_t *cg, pid_t pid);
int sbx_cgroup_set_limits(sbx_cgroup_t *cg, long long mem_bytes, long long pids,
                          long long cpu_millis);
/* Its CPU weight among its siblings, on cgroup v1's scale (cpu.shares: 1024 is the default,
 * 2..262144; v2's cpu.weight gets the same fraction of its default of 100). */
int sbx_cgroup_set_weight(sbx_cgroup_t *cg, unsigned shares);
/* Gives its cgroup.procs files (one per hierarchy) to uid, so a process of that uid can move
 * itself (and only processes of its own uid) into the cgroup; uid 0 takes them back. With
 * dirfds, also opens the cgroup's directories (O_PATH: they grant nothing by themselves, and
 * stay valid across a rename) for such a process to open cgroup.procs in. Returns the number
 * of hierarchies or -errno. (Cgroup v2 also asks for write access to the common ancestor of
 * the source and destination cgroups: where that is missing, the move fails and the caller
 * moves the process itself.) */
#define SBX_CGROUP_MAX_DIRS 3
int sbx_cgroup_delegate(sbx_cgroup_t *cg, uid_t uid, int dirfds[SBX_CGROUP_MAX_DIRS]);
/* A process that removals of cgroups never kill (the fork server, which moves itself into the
 * cgroups of kernels to come: sbx_fork_server_move), 0 for none. */
void sbx_cgroups_keep(sbx_cgroups_t *cgs, pid_t pid);
/* Human-readable reason for a death, from the cgroup's counters ("" when none). */
void sbx_cgroup_explain(sbx_cgroup_t *cg, char *out, size_t outsz);
/* Its limit hits since it was made: OOM kills and forks refused at the pid limit. */
struct sbx_cgroup_events {
    long long oom_kills, pids_max;
};
void sbx_cgroup_events(const sbx_cgroup_t *cg, struct sbx_cgroup_events *ret);
/* What its processes use: memory now, in bytes (v1 memory.usage_in_bytes, v2 memory.current),
 * and CPU time so far, in ns (v1 cpuacct.usage, where the cpu hierarchy has the cpuacct
 * controller too; v2 cpu.stat usage_usec); -1 for what the host does not account. For
 * metrics at scrape time: the two files stay open once read (one pread each next time, under
 * a microsecond), until sbx_cgroup_destroy. */
struct sbx_cgroup_usage {
    long long mem_bytes, cpu_ns;
};
void sbx_cgroup_usage(sbx_cgroup_t *cg, struct sbx_cgroup_usage *ret);
/* The cgroup's peak memory use in bytes (-1: unknown); reset: start measuring again (cgroup
 * v1; on v2 the peak counts from the cgroup's creation, and reset answers -1). */
long long sbx_cgroup_peak(sbx_cgroup_t *cg, bool reset);
/* A tmpfs page is charged to whoever allocates it (cgroup v1 and v2 alike): so that the files
 * the gateway writes into a kernel's workspace count against that kernel's memory, a
 * short-lived child moves into the kernel's cgroup and writes them (or allocates them with
 * fallocate, FALLOC_FL_KEEP_SIZE, for the gateway to write: truncating releases what was not
 * written). Should the cgroup's OOM killer run anyway, the child is its first victim. */
/* Runs fn(arg) in a child that joined cg's memory cgroup (cg NULL: the caller's own), without
 * blocking: the pages it allocates (a tmpfs file it writes) are the cgroup's, and the caller
 * waits on nothing. The child runs fn only, which makes async-signal-safe calls only (the
 * gateway has other threads) and returns 0 or a positive code. need: bytes it will allocate,
 * -ENOMEM at once when the cgroup's limit does not leave them. c->fd becomes readable when
 * the child has ended (a loop watches it); then sbx_cgroup_charge_end. 0 (*ret set) or
 * -errno. */
struct sbx_cgroup_charge {
    pid_t pid;
    int fd;  /* readable once the child ended (its pidfd) */
    int out; /* its outcome */
};
int sbx_cgroup_run_start(sbx_cgroup_t *cg, long long need, int (*fn)(void *arg), void *arg,
                         struct sbx_cgroup_charge *ret);
/* Once c->fd is readable: reaps the child; fn's result (>= 0), -ENOMEM (the cgroup's OOM
 * killer took it), or -errno (it could not join the cgroup). */
int sbx_cgroup_charge_end(struct sbx_cgroup_charge *c);
/* Kills and reaps a child still running (the caller stops waiting for it). */
void sbx_cgroup_charge_abort(struct sbx_cgroup_charge *c);
/* Freezes (on) or thaws every process in the cgroup in place, their memory kept: cgroup v2's
 * cgroup.freeze; v1 (kgw uses no freezer hierarchy) SIGSTOP, or SIGCONT, to every process its
 * cgroup.procs lists (again until a pass finds none new, for the forks made meanwhile). 0 or
 * -errno. */
int sbx_cgroup_freeze(sbx_cgroup_t *cg, bool on);
/* Kills anything left and removes the cgroup. */
void sbx_cgroup_destroy(sbx_cgroup_t **cg);

#endif
