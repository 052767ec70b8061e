/* gateway internals: the server object and what its files share. */
#ifndef KGW_GATEWAY_GW_H
#define KGW_GATEWAY_GW_H

#include <jansson.h>
#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "gateway/lwsloop.h"
#include "kernelmgr/kmgr.h"

struct gw_config {
    const char *ip;
    long long port;
    const char *api_key;
    const char *default_kernel;
    const char *log_level;
    const char *allow_origin;
    const char *runtime_dir;
    long long max_kernels;
    long long cull_idle_timeout;
    long long cull_interval;
    bool cull_connected;
    bool autorestart;
    long long max_restarts;
    long long start_timeout;
    long long shutdown_grace_ms;
    long long hb_interval_ms;
    long long max_body_bytes;
    long long max_ws_message_bytes;
    long long max_ws_queue_bytes;
    long long session_linger;
    long long max_connections;
    bool sandbox;
    const char *sandbox_init;
    long long sandbox_uid_base;
    long long mem_limit;
    long long cpu_limit;
    long long pids_limit;
    long long workspace_size;
    long long max_workspaces;
    long long workspace_grace;
    long long tmp_size;
    long long fsize_limit;
    long long nofile_limit;
    long long exec_timeout;
    long long output_cap;
    const char *pool;
    long long pool_min_available;
    bool fork_server;
    const char *fork_server_preload;
};

typedef struct gw {
    struct gw_config cfg;
    lwsloop_t loop;
    struct lws_context *ctx;
    kmgr_t *km;
    unsigned char key_hash[32];
    char server_session[40]; /* Jupyter session of gateway-made messages */
    int64_t started_us;
    int64_t last_activity_us;
    int connections;
    struct gsess *sessions; /* /api/sessions */
    bool stopping;
} gw_t;

/* per-connection data of every lws protocol: only a pointer to our object */
struct gw_pss {
    struct gw_req *req;
    struct wsconn *ws;
    struct chconn *ch;
};

/* auth.c */
void auth_init(gw_t *g, const char *key);
/* Checks Authorization (token|bearer), X-API-Key and ?token=. */
bool auth_check(gw_t *g, struct lws *wsi);

/* http.c */
int http_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason, struct gw_pss *pss,
                  void *in, size_t len);
/* Writes a complete response now (only inside this wsi's callback). Returns what the lws
 * callback should return. */
int http_write_now(gw_t *g, struct lws *wsi, int status, const char *ctype, const void *body,
                   size_t len, const char *location);
int http_write_error(gw_t *g, struct lws *wsi, int status, const char *message);
int http_add_common_headers(gw_t *g, struct lws *wsi, unsigned char **p, unsigned char *end);

/* wschan.c */
#define WSCHAN_LEGACY_NAME "kgw" /* lws protocol 0: HTTP, and websockets offering no subprotocol */
int wschan_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason,
                    struct gw_pss *pss, void *in, size_t len);
/* Answers the upgrade request: 0 proceed, >0 rejected with an HTTP response. */
int wschan_confirm(gw_t *g, struct lws *wsi);
void wschan_iopub(void *user, kernel_t *k, const jmsg_t *m, const jhdr_t *h);
void wschan_event(void *user, kernel_t *k, enum kernel_event ev, const char *detail);
/* A gateway notice to an execution's clients: an iopub stream (stderr) under its parent. */
void wschan_notice(void *user, kernel_t *k, jspan_t parent, const char *text);
/* Tells the kernel's clients a requested restart began (status "starting"). */
void wschan_kernel_restarting(gw_t *g, kernel_t *k);
/* Browsers send Origin: only the server's own or --allow-origin may open a websocket. */
bool wschan_origin_ok(gw_t *g, struct lws *wsi);

/* channel.c: the /channel RPC websocket */
bool channel_is_channel(struct lws *wsi);
int channel_confirm(gw_t *g, struct lws *wsi);
int channel_callback(gw_t *g, struct lws *wsi, enum lws_callback_reasons reason,
                     struct gw_pss *pss, void *in, size_t len);
void channel_iopub(gw_t *g, kernel_t *k, const jmsg_t *m, const jhdr_t *h);
void channel_kernel_gone(gw_t *g, kernel_t *k);

/* sessions.c */
int sessions_handle(gw_t *g, struct gw_req *r);
void sessions_kernel_gone(gw_t *g, const char *kernel_id);
void sessions_free_all(gw_t *g);

#endif
