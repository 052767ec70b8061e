/* gateway internals: the server object and what its files share. */
#ifndef KGW_GATEWAY_GW_H
#define KGW_GATEWAY_GW_H

#include <jansson.h>
#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/hist.h"
#include "common/ident.h"
#include "common/egpol.h"
#include "common/keyfile.h"
#include "common/list.h"
#include "gateway/ratelimit.h"
#include "gateway/lwsloop.h"
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
    long long max_connections;
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
    GW_CLOSING,  /* websockets closed (1001), kernels shutting down */
    GW_STOPPED,  /* the loop ends */
};

struct gw_drain {
    enum gw_phase phase;
    evl_timer_t *timer;
    uint64_t started_ms;
    uint64_t deadline_ms; /* draining: --drain-timeout; closing: its bound */
    uint64_t logged_ms;   /* the last progress line */
    size_t execs;         /* executions running at the last look */
    int quiet;            /* looks in a row without executions */
};

typedef struct conns conns_t;

typedef struct gw {
    struct gw_config cfg;
    lwsloop_t loop;
    struct lws_context *ctx;
    kmgr_t *km;
    keyfile_t *keys; /* API keys and their tenants */
    egpol_t egress_ceiling; /* --egress-ceiling, parsed (used when cfg.egress_ceiling is set) */
    rl_t *rl;
    conns_t *conns; /* client connections: per-address counts, the header phase */
    char server_session[40]; /* Jupyter session of gateway-made messages */
    int64_t started_us;
    int64_t last_activity_us;
    int connections;
    struct list sessions; /* /api/sessions: gsess_t.link, newest first (sessions_init) */
    bool stopping;
    char instance_id[GW_INSTANCE_ID_MAX + 1]; /* GET /self_identify, X-KGW-Self-Identify */
    evl_timer_t *tick;                           /* loop responsiveness, for /check_liveness */
    uint64_t tick_us;                            /* when the tick last ran (monotonic) */
    uint64_t loop_lag_ms;                        /* how late it ran then */
    struct fxfer *xfers;                         /* files.c: transfers in progress */
    struct lws_vhost *metrics_vhost;             /* --metrics-port: GET /metrics only, no key */
    struct gw_stats stats;
    struct gw_drain drain;
    struct list ch_conns;  /* chconn.c: the open /channel websockets, newest first */
    /* the faces' subscriptions to kernel events (setup_kernels) */
    struct kmgr_listener ws_listener, ch_listener, sess_listener, audit_listener, xapi_listener;
    struct xapi *xapi; /* xapi.c: the execute API's executions */
    size_t replay_bytes;     /* wschan.c: output held for every detached session together */
    evl_timer_t *trim_timer; /* main.c: gives freed memory back to the system */
    uint64_t trim_due_ms;    /* when it runs next */
} gw_t;

/* per-connection data of every lws protocol: only a pointer to our object (a websocket's
 * is the wsconn_t base of its face's connection, gateway/wsconn.h) */
struct gw_pss {
    struct gw_req *req;
    struct wsconn *wc;
};

/* auth.c */
#define AUTH_DEFAULT_TENANT "default" /* the tenant of --api-key / KGW_API_KEY */

/* Who is calling: the tenant of the key presented and the client's address. */
struct gw_caller {
    char tenant[KEYFILE_TENANT_MAX + 1];
    char addr[RL_ADDR_MAX];
};

/* Loads --key-file (if any) plus the single key (if any). -errno with a reason in err. */
int auth_setup(gw_t *g, const char *single_key, char *err, size_t errsz);
/* SIGHUP: reloads the key file; on error the old keys stay. */
void auth_reload(gw_t *g);
/* The client's address: the socket peer, or X-Forwarded-For from a --trusted-proxies peer. */
void auth_peer(gw_t *g, struct lws *wsi, char out[RL_ADDR_MAX]);
/* Authenticates a request (Authorization: token|bearer, X-API-Key or ?token=): 0 (out filled),
 * 401 (no or wrong key), 429 (address over its failed-login limit, or tenant over its request
 * rate: retry_after seconds). Counts failures, writes log lines and audit events. */
int auth_request(gw_t *g, struct lws *wsi, struct gw_caller *out, int *retry_after);
/* Counts a websocket message against the tenant's rate; over it, reading that websocket pauses
 * until the bucket refills (main.c resumes it on LWS_CALLBACK_TIMER). */
void auth_ws_message(gw_t *g, struct lws *wsi, const char *tenant);
/* The tenant of the key a request presents, or NULL; no side effects. */
const char *auth_tenant(gw_t *g, struct lws *wsi);

/* http.c */
int http_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason, struct gw_pss *pss,
                  void *in, size_t len);
/* Writes a complete response now (only inside this wsi's callback). Returns what the lws
 * callback should return. */
int http_write_now(gw_t *g, struct lws *wsi, int status, const char *ctype, const void *body,
                   size_t len, const char *location);
int http_write_error(gw_t *g, struct lws *wsi, int status, const char *message);
/* An error with Retry-After (429, 503). */
int http_write_error_retry(gw_t *g, struct lws *wsi, int status, const char *message,
                           int retry_after);
/* Answers a refused authentication (auth_request's 401 or 429). */
int http_write_auth_error(gw_t *g, struct lws *wsi, int status, int retry_after);

/* Why a websocket upgrade is refused: the HTTP status (401 no or wrong key, 429 locked out or
 * over the rate, 403 origin, 404 unknown route or kernel, 400 bad request, 503 over a cap), its
 * message and, for 429/503, Retry-After seconds (0: none). */
struct gw_refusal {
    int status;
    int retry_after;
    const char *message;
};
/* Fills a refusal; returns status, so a confirm function can `return gw_refuse(...)`. */
int gw_refuse(struct gw_refusal *no, int status, int retry_after, const char *message);
/* The refusal of an auth_request() status (401 or 429). */
int gw_refuse_auth(struct gw_refusal *no, int status, int retry_after);
/* Answers a refused websocket upgrade inside LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: an HTTP/1.1
 * response with the status, a JSON body {"reason", "message"}, Content-Length and
 * Connection: close. Returns 1, what that callback returns for "answered, do not upgrade". */
int http_refuse_upgrade(gw_t *g, struct lws *wsi, const struct gw_refusal *no);
/* A complete HTTP/1.1 error response (JSON body, Content-Length, Connection: close, the
 * security headers) for writing outside lws: its length, 0 when it does not fit in outsz. */
size_t http_format_error(gw_t *g, int status, const char *message, char *out, size_t outsz);
int http_add_common_headers(gw_t *g, struct lws *wsi, unsigned char **p, unsigned char *end);
/* False when the decoded path (len bytes) or query holds a control byte: a DEL where
 * gateway/reqguard.c marked an escape that cannot be decoded (%00, '%' without two hex
 * digits), or a control character, never valid in a URI. Such requests are answered 400. */
bool http_uri_decodable(struct lws *wsi, const char *path, size_t len);
#define HTTP_UNDECODABLE_MESSAGE                                                                 \
    "undecodable request path or query: a '%' not followed by two hex digits, %00 or a "      \
    "control character (write a literal '%' as %25)"

/* The kernel with this id if it belongs to tenant; NULL for a missing kernel and for another
 * tenant's alike, so ids cannot be probed. */
kernel_t *gw_kernel(gw_t *g, const char *id, const char *tenant);
bool gw_owns(const kernel_t *k, const char *tenant);

/* http.c: the instance's identity; 0, or -EINVAL when id is not an IDENT_INSTANCE name (1 to
 * GW_INSTANCE_ID_MAX bytes of [A-Za-z0-9._:-]: it goes into a response header). Empty: a
 * random UUID. */
int http_set_instance_id(gw_t *g, const char *id);
/* Starts the loop tick that /check_liveness and /check_ready watch. */
int http_start_tick(gw_t *g);
void http_stop_tick(gw_t *g);

/* main.c: returns freed memory to the system within a second or so (a burst of clients is
 * gone), besides the regular trim. */
void gw_trim_soon(gw_t *g);

/* conns.c: client connections by descriptor. Each counts against its address's open
 * connections (--max-connections-per-address) and, until its request headers are complete,
 * against the address's connections in their header phase (--max-header-connections-per-
 * address); one at either limit is refused at accept. A connection whose headers are not
 * complete within --header-timeout is answered 408 (plain HTTP) and closed. */
/* NULL + errno. slots: the descriptor limit. */
conns_t *conns_new(gw_t *g, size_t slots);
void conns_destroy(conns_t **c);
/* LWS_CALLBACK_FILTER_NETWORK_CONNECTION: 0 accept, 1 refuse. */
int conns_accept(conns_t *c, const struct lws_filter_network_conn_args *a);
/* LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: lws made the accepted connection's wsi. */
void conns_started(conns_t *c, struct lws *wsi);
/* Request headers complete (LWS_CALLBACK_HTTP, a websocket upgrade): the header phase ends. */
void conns_headers_done(conns_t *c, struct lws *wsi);
/* LWS_CALLBACK_WSI_DESTROY (any wsi) */
void conns_closed(conns_t *c, struct lws *wsi);

/* drain.c */
#define DRAIN_RETRY_AFTER_S 5 /* Retry-After of what a drain refuses */
#define DRAIN_MESSAGE                                                                              \
    "the gateway is shutting down (draining): it starts no new kernels; retry on another "      \
    "instance"
#define DRAIN_CLOSE_REASON "the gateway is shutting down"
int drain_init(gw_t *g);
void drain_fini(gw_t *g);
/* SIGTERM: drain (a second one: stop waiting for executions); SIGINT: close without waiting;
 * either while closing: stop now. Sets g->stopping when the loop should end. */
void drain_signal(gw_t *g, int signo);
/* A drain has begun (no new kernels); closing: websockets and kernels are going. */
bool drain_active(const gw_t *g);
bool drain_closing(const gw_t *g);

/* metrics.c: GET /metrics, the Prometheus text format (docs/metrics.md) */
#define METRICS_MAX_BYTES (4 << 20)
void metrics_init(gw_t *g);
/* Appends every metric to out: 0 or -errno (-EMSGSIZE over out's limit). */
int metrics_render(gw_t *g, buf_t *out);

/* files.c: ends every transfer's use of its workspace (before the kernel manager goes). */
void files_shutdown(gw_t *g);

/* wschan.c */
#define WSCHAN_LEGACY_NAME "kgw" /* lws protocol 0: HTTP, and websockets offering no subprotocol */
/* LWS_CALLBACK_ESTABLISHED of a channels websocket: 0, or -1 to close it. */
int wschan_open(gw_t *g, struct lws *wsi, struct gw_pss *pss);
/* Checks a channels upgrade request (route already matched): 0 proceed, else the HTTP status
 * of the refusal described in no. */
int wschan_confirm(gw_t *g, struct lws *wsi, struct gw_refusal *no);
/* Subscribes the relay to kernel events (iopub to the kernels' websockets; notices as iopub
 * stderr streams under their execution; statuses on restarts and deaths). */
int wschan_listen(gw_t *g);
/* Closes every kernel websocket with code and reason, after what is queued for it. */
void wschan_close_all(gw_t *g, int code, const char *reason);

/* xapi.c: the execute API */
/* Subscribes the execute API to kernel events and starts its store. */
int xapi_listen(gw_t *g);
/* Frees every execution (after the kernel manager is gone). */
void xapi_fini(gw_t *g);

/* sessions.c */
void sessions_init(gw_t *g);
int sessions_handle(gw_t *g, struct gw_req *r);
/* Subscribes sessions to kernel events (a session ends with its kernel). */
int sessions_listen(gw_t *g);
void sessions_free_all(gw_t *g);

#endif
