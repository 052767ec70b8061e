/* e2b_int.h: what the two planes of the E2B-compatible API share (e2b.c: the sandboxes and
 * the control plane; e2bsbx.c: the sandbox plane). Internal to those files: e2b__ names. */
#ifndef KGW_GATEWAY_E2B_INT_H
#define KGW_GATEWAY_E2B_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/util.h"
#include "gateway/files.h"
#include "gateway/gw.h"
#include "gateway/http.h"
#include "gateway/xcmd.h"
#include "gateway/xexec.h"
#include "kernelmgr/kcmd.h"
#include "kernelmgr/wspace.h"
#include "protocol/e2bwire.h"
#include "protocol/fpath.h"

#define E2B_ENVD_VERSION    "0.5.6" /* what the SDKs are told envd is (docs/e2b.md) */
#define E2B_CONTEXTS_MAX    8       /* kernels (code contexts) of one sandbox */
#define E2B_CWD_MAX         256     /* bytes of a context's working directory */
#define E2B_SAMPLES         60      /* metrics kept per sandbox (the last 5 minutes) */
#define E2B_SAMPLE_MS       5000    /* between two, as E2B samples */
#define E2B_TOKEN_BYTES     24      /* random bytes of an access token (hex: twice) */
#define E2B_TICK_MS         1000
#define E2B_KEEPALIVE_MS    5000 /* an /execute stream idle this long gets a keepalive line */
#define E2B_BATCH_BYTES     (64 * 1024)
#define E2B_UPLOAD_FILES    64  /* files of one POST /files */
#define E2B_DEFAULT_TIMEOUT 300 /* seconds, when a create names none */
#define E2B_TEMPLATES_MAX   32
/* bytes of a file GET /files answers: it is read whole (on the loop) and held until sent, so
 * far less than --max-download-bytes (kgw's streamed GET /download is not) */
#define E2B_READ_MAX (32 * 1024 * 1024)

struct e2b_template {
    char id[E2BWIRE_TEMPLATE_MAX + 1];
    char kspec[129]; /* "" : --default-kernel */
};

/* One sandbox. */
/* What a sandbox's default kernel used at one time (GET /sandboxes/{id}/metrics). */
struct e2bsample {
    int64_t us; /* wall clock */
    long long cpu_ns, mem_bytes, disk_used, disk_total;
};

struct e2bsbx {
    struct list link;
    char id[UTIL_UUID_LEN + 1];
    char tenant[KEYFILE_TENANT_MAX + 1];
    char template_id[E2BWIRE_TEMPLATE_MAX + 1];
    char kspec[129];
    char ws_id[WSPACE_ID_MAX + 1];
    char kernels[E2B_CONTEXTS_MAX][UTIL_UUID_LEN + 1]; /* [0]: the default context */
    char cwds[E2B_CONTEXTS_MAX][E2B_CWD_MAX + 1];      /* each context's ("": /home/user) */
    size_t nkernels;
    char envd_token[2 * E2B_TOKEN_BYTES + 1];
    char traffic_token[2 * E2B_TOKEN_BYTES + 1];
    json_t *env;      /* envVars (for the contexts' kernels too), or NULL */
    json_t *metadata; /* object */
    int64_t started_us;
    int64_t end_us;   /* wall clock: expiry (while it starts: if it were ready now) */
    long long life_s; /* its lifetime, counted from when it is ready (the create's answer) */
    bool ready;     /* its first kernel answered */
    bool paused;    /* its kernels are paused (POST .../pause, or autoPause at its timeout) */
    bool auto_pause; /* at its timeout: paused, not killed */
    struct e2bsample samples[E2B_SAMPLES]; /* a ring, oldest at samples[first] */
    size_t nsamples, first;
    uint64_t sampled_ms; /* monotonic: the last sample */
};

struct e2bwatches; /* e2bwatch.c: the directory watches */

struct e2b {
    gw_t *g;
    struct kmgr_listener listener; /* its sandboxes end with their default kernels */
    struct list sbxs;
    struct list runs; /* struct e2breq.link: /execute streams */
    struct list procs; /* struct e2bproc.link: process.Process commands (e2bsbx.c) */
    evl_timer_t *tick;
    struct e2b_template templates[E2B_TEMPLATES_MAX];
    size_t ntemplates;
    struct e2bwatches *watches; /* made at the first watch */
};

/* What a request of this API keeps while it is answered. */
enum e2breq_kind { E2BREQ_RUN, E2BREQ_PUT, E2BREQ_PROC, E2BREQ_WATCH };
struct e2breq {
    enum e2breq_kind kind;
    struct gw_req *r;
    char sbx_id[UTIL_UUID_LEN + 1]; /* RUN, PROC: the sandbox it streams from */
    bool killed; /* that sandbox was killed: the connection is dropped, not ended (the SDKs
                    then ask /health and report the kill, as E2B's do) */
    /* RUN: an /execute stream */
    struct xexec_sub sub;
    struct list link;
    bool headers_sent, keepalive;
    uint64_t last_ms;
    /* PUT: a POST /files being written */
    struct e2bput *up;
    /* PROC: a process.Process/Start or Connect stream: its command (NULL once the gateway
       ends) and its own queue of that command's events */
    struct e2bproc *proc;
    xcmd_tap_t *tap;
    /* WATCH: a filesystem.Filesystem/WatchDir stream (e2bwatch.c) */
    struct e2bwatch *watch;
};

/* A command of process.Process. It outlives its Start stream: with no stream attached it runs
 * on (its output read and dropped) until it ends (its timeout, a SendSignal, its sandbox's
 * end); Connect attaches more streams. Freed once it ended with no stream attached. */
struct e2bproc {
    struct list link; /* e2b.procs */
    gw_t *g;
    xcmd_stream_t *cmd; /* detached from the start: each stream is a tap of it; its stdin
                           ("stdin": true: SendInput's bytes) */
    unsigned handle;    /* the "pid" the clients see (kgw's handle of the command) */
    char sbx_id[UTIL_UUID_LEN + 1];
    uint64_t keepalive_ms; /* the starting client's Keepalive-Ping-Interval */
    json_t *config;        /* process.List's ProcessConfig: {"cmd", "args", "envs", "cwd"} */
    size_t clients;        /* streams attached (struct e2breq.proc) */
    evl_timer_t *reap;     /* it ended with none attached: freed on the loop's next turn */
};

struct e2bput {
    files_put_t *put;
    struct files_item items[E2B_UPLOAD_FILES]; /* their bytes: in the request's body */
    char paths[E2B_UPLOAD_FILES][FPATH_MAX + 1];
    size_t nitems;
    char qpath[FPATH_MAX + 1]; /* ?path= ("" none) */
    bool has_qpath;
};

/* An error as E2B's API answers it ({"code", "message"}), with kgw's "reason"
 * beside. */
__attribute__((format(printf, 3, 4))) void
e2b__api_error(struct gw_req *r, int status, const char *fmt, ...);
/* The sandbox of that id (any tenant's), or NULL. */
struct e2bsbx *e2b__sbx_find(struct e2b *e, const char *id);
/* Whether its default kernel ended or is ending (shut down through another face, culled,
 * dead): the sandbox ends with it. */
bool e2b__sbx_kernel_ended(struct e2b *e, const struct e2bsbx *s);
/* The sandbox one of whose kernels kid is, or NULL. */
struct e2bsbx *e2b__sbx_by_kernel(struct e2b *e, const char *kid);
/* Queues the sandbox's set-up on its kernel k (a silent execution: envVars, the str display,
 * the working directory). 0 or -errno. */
int e2b__sbx_setup(gw_t *g, const struct gw_caller *who, const struct e2bsbx *s, kernel_t *k);
/* Queues one envelope of a process stream (a message, or with E2BWIRE_ENV_END its end). */
void e2b__proc_send(struct e2breq *q, const char *json, uint8_t flags);
/* The gateway ends: every command is killed and freed, its streams forget it. */
void e2b__procs_fini(struct e2b *e);

#endif
