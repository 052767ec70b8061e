/* The gateway's server object, gw_t, and the few types every gateway file shares. Each
 * module's API is in its own header (auth.h, http.h, rest.h, wschan.h, ...). */
#ifndef KGW_GATEWAY_GW_H
#define KGW_GATEWAY_GW_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/hist.h"
#include "common/ident.h"
#include "common/egpol.h"
#include "common/keyfile.h"
#include "common/secrets.h"
#include "common/list.h"
#include "common/obudget.h"
#include "gateway/ratelimit.h"
#include "gateway/lwsloop.h"
#include "gateway/route.h"
#include "kernelmgr/kmgr.h"

#define GW_INSTANCE_ID_MAX IDENT_INSTANCE_MAX /* an IDENT_INSTANCE name */

/* The settings, written by main.c's option table: the gateway's own, and the kernel manager's,
 * the sandbox's and the rate limiter's in the structs those take (each setting once). */
struct gw_config {
    const char *ip;
    long long port;
    const char *api_key;
    const char *key_file;
    const char *egress_ceiling; /* "": none */
    const char *secrets_file;   /* "": none */
    const char *egress_ca;      /* the egress CA's certificate and key (PEM; "": made at start) */
    const char *egress_ca_file; /* CAs the proxy verifies hosts with ("": the system's) */
    const char *trusted_proxies;
    const char *audit_log;
    const char *certfile;
    const char *keyfile;
    long long http_timeout;
    long long header_timeout;
    const char *default_kernel;
    const char *log_level;
    const char *allow_origin;
    long long max_body_bytes;
    long long max_upload_bytes;
    long long max_download_bytes;
    const char *instance_id;
    long long max_ws_message_bytes;
    long long max_ws_queue_bytes;
    long long session_linger;
    long long max_replay_bytes;
    long long output_buffer_bytes; /* 0: obudget_default_limit() */
    long long max_connections;
    long long sched_slice_us;
    bool sandbox;
    const char *sandbox_init;
    const char *python_path;
    const char *pool;
    bool fork_server;
    long long drain_timeout;
    const char *metrics_ip;
    long long metrics_port;
    const char *fork_server_exe;
    long long execution_retention;    /* xapi.c: seconds a finished execution is kept */
    long long execution_budget_bytes; /* xapi.c: event bytes held per tenant */
    long long max_queued_executions;  /* xapi.c: per kernel, queued or running */
    long long max_executions;         /* xexec.c: executions held, all tenants */
    long long max_executions_per_tenant; /* xexec.c: executions held per tenant */
    long long mcp_idle_timeout;       /* mcp.c: seconds an idle MCP session is kept */
    long long mcp_named_kernels;      /* mcp.c: named kernels per tenant (0: none) */
    long long stall_timeout; /* xapi.c, mcp.c, files.c: seconds a reader may take nothing */
    long long max_checkpoints;        /* ckpt.c: per kernel */
    const char *e2b_templates;        /* e2b.c: E2B template ids to kernelspecs */
    long long e2b_watch_dirs;         /* e2bwatch.c: directories watched per E2B sandbox */
    long long e2b_tenant_watch_dirs;  /* e2bwatch.c: the same, all of a tenant's sandboxes */
    struct kmgr_opts km;    /* its sandbox, python_dir and pool are set by main.c */
    struct kmgr_sandbox sb; /* km.sandbox unless --no-sandbox; the helpers' fds set by main.c */
    struct rl_opts rl;
};

/* Why the gateway refused a request (kgw_requests_refused_total). */
enum gw_refused {
    GW_REFUSED_AUTH,           /* no or a wrong API key (401) */
    GW_REFUSED_LOCKOUT,        /* the address is over its failed-login limit (429) */
    GW_REFUSED_RATE_LIMIT,     /* the tenant is over its request rate (429) */
    GW_REFUSED_QUOTA,          /* a tenant quota (403) */
    GW_REFUSED_CONNECTION_CAP, /* connections per address, or websockets at once (503) */
    GW_REFUSED_BAD_INPUT,      /* malformed or oversized (400, 411, 413, ...); refused RPC calls */
    GW_REFUSED_KERNEL_LIMIT,   /* --max-kernels or --max-workspaces (503) */
    GW_REFUSED_N
};
/* The two websocket faces: /api/kernels/{id}/channels and /channel. */
enum gw_face { GW_FACE_CHANNELS, GW_FACE_CHANNEL, GW_FACE_N };

/* What the gateway counts itself; metrics.c writes it out with the kernel manager's. */
struct gw_stats {
    uint64_t refused[GW_REFUSED_N];
    int websockets[GW_FACE_N]; /* open now */
    hist_t loop_lag;           /* seconds the loop's 1 s tick ran late */
};

/* drain.c: where a graceful shutdown is */
enum gw_phase {
    GW_SERVING,
    GW_DRAINING, /* SIGTERM: no new kernels; the executions running finish */
    GW_CLOSING,  /* websockets closed (1001; 1012 for a restart), kernels shutting down */
    GW_STOPPED,  /* the loop ends */
};

struct gw;
struct gw_drain {
    enum gw_phase phase;
    evl_timer_t *timer;
    uint64_t started_ms;
    uint64_t deadline_ms; /* draining: --drain-timeout; closing: its bound */
    uint64_t logged_ms;   /* the last progress line */
    size_t execs;         /* executions running at the last look */
    int quiet;            /* looks in a row without executions */
    bool restart;         /* SIGUSR2: the close is a restart in place (gateway/handover.h) */
    /* faces_close (drain_init): every face's websockets closed */
    void (*close_websockets)(struct gw *g, int code, const char *reason);
    /* faces_keeps (drain_init): whether the faces let a kernel go over a restart in place */
    bool (*keeps)(struct gw *g, kernel_t *k);
};

typedef struct conns conns_t;

typedef struct gw {
    struct gw_config cfg;
    lwsloop_t loop;
    struct lws_context *ctx;
    kmgr_t *km;
    keyfile_t *keys; /* API keys and their tenants */
    secrets_t *secrets; /* --secrets-file (NULL: none); kernels' proxies read it at each request */
    struct ktls *tls;   /* with secrets: reads HTTPS to their hosts (kernelmgr/ktls.h) */
    char *ca_bundle;    /* ... and the CAs kernels trust (PEM) */
    egpol_t egress_ceiling; /* --egress-ceiling, parsed (used when cfg.egress_ceiling is set) */
    rl_t *rl;
    conns_t *conns; /* client connections: per-address counts, the header phase */
    char server_session[40]; /* Jupyter session of gateway-made messages */
    int64_t started_us;
    int64_t last_activity_us;
    int connections;
    struct list sessions; /* /api/sessions: gsess_t.link, newest first (sessions_init) */
    bool stopping;
    bool handed_over; /* started by a restart in place (gateway/handover.h) */
    json_t *handover; /* ... its record, until the kernels and sessions are taken over */
    char instance_id[GW_INSTANCE_ID_MAX + 1]; /* GET /self_identify, X-KGW-Self-Identify */
    evl_timer_t *tick;                           /* loop responsiveness, for /check_liveness */
    uint64_t tick_us;                            /* when the tick last ran (monotonic) */
    uint64_t loop_lag_ms;                        /* how late it ran then */
    struct fxfer *xfers;                         /* files.c: transfers in progress */
    struct lws_vhost *metrics_vhost;             /* --metrics-port: GET /metrics only, no key */
    struct glisten *listener, *metrics_listener; /* setup.c: the sockets the vhosts are fed from */
    struct gw_stats stats;
    struct gw_drain drain;
    struct list ch_conns;  /* chconn.c: the open /channel websockets, newest first */
    /* the faces' subscriptions to kernel events (setup_kernels) */
    struct kmgr_listener ws_listener, ch_listener, sess_listener, audit_listener, xexec_listener,
        ckpt_listener;
    struct xexecs *xexecs; /* xexec.c: the executions (execute API, MCP) */
    struct mcp *mcp;   /* mcp.c: the MCP sessions */
    struct e2b *e2b;   /* e2b.c: the E2B-compatible API's sandboxes */
    const struct route_def *routes; /* routes.c: the route table (set before serving) */
    size_t nroutes;                 /* its rows */
    size_t replay_bytes;     /* wschan.c: output held for every detached session together */
    struct wsconn_share *ws_shares; /* wsconn.c: websockets open per tenant (NULL: none) */
    struct wschan_share *replay_shares; /* wschan.c: replay_bytes per tenant (NULL: none) */
    obudget_t out_budget;    /* --output-buffer-bytes: kernel output held for clients */
    evl_timer_t *trim_timer; /* main.c: gives freed memory back to the system */
    uint64_t trim_due_ms;    /* when it runs next */
} gw_t;

/* per-connection data of every lws protocol: only pointers to our objects (a websocket's is
 * the wsconn_t base of its face's connection, gateway/wsconn.h), and a websocket's route
 * (matched once, at its upgrade: main.c hands it over at LWS_CALLBACK_ESTABLISHED) */
struct gw_pss {
    struct gw_req *req;
    struct wsconn *wc;
    struct route route; /* websockets only; no row (def NULL) otherwise */
};

#define AUTH_DEFAULT_TENANT "default" /* the tenant of --api-key / KGW_API_KEY */

/* Who is calling: the tenant of the key presented and the client's address. */
struct gw_caller {
    char tenant[KEYFILE_TENANT_MAX + 1];
    char addr[RL_ADDR_MAX];
};

/* Why a websocket upgrade is refused: the HTTP status (401 no or wrong key, 429 locked out or
 * over the rate, 403 origin, 404 unknown route or kernel, 400 bad request, 503 over a cap), its
 * message and, for 429/503, Retry-After seconds (0: none). http_refuse_upgrade answers it. */
struct gw_refusal {
    int status;
    int retry_after;
    const char *message;
};
/* what a refused authentication says (auth_request's 429 and 401) */
#define GW_AUTH_429_MESSAGE "too many requests or failed logins; retry later"
#define GW_AUTH_401_MESSAGE "a valid API key is required"

/* gw.c: fills a refusal; returns status, so a confirm function can `return gw_refuse(...)`. */
int gw_refuse(struct gw_refusal *no, int status, int retry_after, const char *message);
/* The refusal of an auth_request() status (401 or 429). */
int gw_refuse_auth(struct gw_refusal *no, int status, int retry_after);

/* gw.c: the kernel with this id if it belongs to tenant; NULL for a missing kernel and for
 * another tenant's alike, so ids cannot be probed. */
kernel_t *gw_kernel(gw_t *g, const char *id, const char *tenant);
bool gw_owns(const kernel_t *k, const char *tenant);

/* gw.c: the instance's identity; 0, or -EINVAL when id is not an IDENT_INSTANCE name (1 to
 * GW_INSTANCE_ID_MAX bytes of [A-Za-z0-9._:-]: it goes into a response header). Empty: a
 * random UUID. */
int gw_set_instance_id(gw_t *g, const char *id);

/* Returns freed memory to the system within a second or so (a burst of clients is
 * gone), besides the regular trim. */
void gw_trim_soon(gw_t *g);
/* Starts the regular trim (every 30 s). */
int gw_trim_start(gw_t *g);

#endif
