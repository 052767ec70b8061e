/* kgw: a Jupyter Kernel Gateway-compatible server. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/config.h"
#include "common/egpol.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/auth.h"
#include "gateway/channel.h"
#include "gateway/conns.h"
#include "gateway/e2b.h"
#include "gateway/gsecret.h"
#include "gateway/drain.h"
#include "gateway/faces.h"
#include "gateway/filesapi.h"
#include "gateway/gw.h"
#include "gateway/handover.h"
#include "gateway/http.h"
#include "gateway/metrics.h"
#include "gateway/reqguard.h"
#include "gateway/rest.h"
#include "gateway/route.h"
#include "gateway/routes.h"
#include "gateway/sessions.h"
#include "gateway/wschan.h"
#include "gateway/mcp.h"
#include "gateway/xexec.h"
#include "gateway/sdnotify.h"
#include "gateway/selftest.h"
#include "gateway/setup.h"
#include "gateway/wsconn.h"
#include "protocol/wsmsg.h"

static gw_t G = {.cfg = {.km = {.hb_misses = 3, .dead_linger_s = 60},
                          .sb = {.init_fd = -1, .zygote_fd = -1}}};

#define I(name, field, def, min, max, help) {name, CFG_INT, &G.cfg.field, def, min, max, 0, help}
/* the same for an int field, and for seconds kept as milliseconds */
#define I32(name, field, def, min, max, help)                                                      \
    {name, CFG_INT32, &G.cfg.field, def, min, max, 0, help}
#define MS(name, field, def, min, max, help)                                                       \
    {name, CFG_SECONDS_AS_MS, &G.cfg.field, def, min, max, 0, help}
#define S(name, field, def, help)           {name, CFG_STR, &G.cfg.field, def, 0, 0, 0, help}
#define B(name, field, def, help)           {name, CFG_BOOL, &G.cfg.field, def, 0, 0, 0, help}

static const struct cfg_option options[] = {
    S("ip", ip, "127.0.0.1", "address to listen on"),
    I("port", port, "8888", 1, 65535, "TCP port to listen on"),
    {"api-key", CFG_STR, &G.cfg.api_key, NULL, 0, 0, CFG_SECRET,
     "API key clients must present, tenant 'default' (generated and printed once when neither "
     "it nor --key-file is set)"},
    S("key-file", key_file, "",
      "file of 'TENANT HASH [egress=HOST:PORT,...]' lines (kgw keygen); reloaded on SIGHUP"),
    I32("auth-fail-limit", rl.auth_fail_limit, "10", 0, 1000000,
      "failed logins per client address per window, then 429 (0 = no limit)"),
    I32("auth-fail-window", rl.auth_fail_window_s, "3600", 1, 604800,
      "seconds of the failed-login window"),
    {"rate-limit", CFG_INT_AS_DOUBLE, &G.cfg.rl.rate, "200", 0, 1000000, 0,
     "requests, websocket messages and RPC calls per second per tenant (0 = no limit)"},
    {"rate-burst", CFG_INT_AS_DOUBLE, &G.cfg.rl.burst, "1000", 1, 100000000, 0,
     "burst allowed above --rate-limit"},
    S("trusted-proxies", trusted_proxies, "",
      "comma-separated proxy addresses or networks (ADDR/BITS) whose X-Forwarded-For is "
      "believed"),
    S("audit-log", audit_log, "", "audit events as JSON lines: a file, or - for stderr "
                                  "('' = off)"),
    S("certfile", certfile, "", "TLS certificate (PEM): serve HTTPS and WSS"),
    S("keyfile", keyfile, "", "TLS private key (PEM) of --certfile"),
    I("header-timeout", header_timeout, "10", 1, 3600,
      "seconds a connection has to send its request headers (a websocket handshake's too), "
      "then 408 and close; a kept-alive connection's next request alike, closed unanswered"),
    I("http-timeout", http_timeout, "30", 1, 3600,
      "seconds a request body may stall, and an idle keep-alive connection is kept"),
    I32("max-connections-per-address", rl.conns_per_addr, "256", 1, 1000000,
      "open connections per client address (the socket peer)"),
    I32("max-header-connections-per-address", rl.hdr_conns_per_addr, "32", 1,
      1000000, "connections per client address (the socket peer) still sending their request "
               "headers; more are refused at accept"),
    S("default-kernel", default_kernel, "python3", "kernelspec used when a request names none"),
    S("log-level", log_level, "info", "error, warn, info or debug"),
    S("allow-origin", allow_origin, "", "CORS origin allowed to call the API ('' = none)"),
    S("runtime-dir", km.runtime_dir, "",
      "directory for kernels' private runtime directories "
      "(default: $XDG_RUNTIME_DIR/kgw, /run/kgw as root, else /tmp)"),
    I32("max-kernels", km.max_kernels, "64", 1, 100000, "most kernels at once"),
    I32("cull-idle-timeout", km.cull_idle_timeout_s, "0", 0, 31536000,
      "shut down kernels idle this many seconds (0 = never)"),
    I32("cull-interval", km.cull_interval_s, "300", 1, 86400, "seconds between idle checks"),
    B("cull-connected", km.cull_connected, "false", "also cull idle kernels with open websockets"),
    B("autorestart", km.autorestart, "true", "restart kernels that die unexpectedly"),
    I32("max-restarts", km.max_restarts, "5", 0, 1000, "automatic restarts in a row before 'dead'"),
    MS("start-timeout", km.start_timeout_ms, "60", 1, 3600,
       "seconds a kernel has to answer at start"),
    I32("shutdown-grace-ms", km.shutdown_grace_ms, "5000", 0, 600000,
      "wait after shutdown_request (a kernel is ended at its shutdown_reply) before SIGTERM"),
    I32("hb-interval-ms", km.hb_interval_ms, "3000", 0, 600000,
      "heartbeat period (0 = off); 3 missed beats mean the kernel hung"),
    I("max-body-bytes", max_body_bytes, "1048576", 1024, 1073741824, "largest REST request body"),
    I("max-upload-bytes", max_upload_bytes, "1073741824", 0, 1099511627776LL,
      "largest upload (POST /upload, PUT /upload/{path}); it is streamed to the workspace"),
    I("max-download-bytes", max_download_bytes, "1073741824", 0, 1099511627776LL,
      "largest file GET /download serves (larger: check_file says too_large)"),
    S("instance-id", instance_id, "",
      "this instance's identity in GET /self_identify and the X-KGW-Self-Identify header of "
      "every response, [A-Za-z0-9._:-]{1,128} (default: a random UUID); when set, also a "
      "shard's name: ids carry its tag, /s/NAME/ is its path prefix (docs/scale-out.md)"),
    I("max-ws-message-bytes", max_ws_message_bytes, "67108864", 1024, 1073741824,
      "largest websocket message from a client (larger: close 1009)"),
    I("max-ws-queue-bytes", max_ws_queue_bytes, "268435456", 65536, 17179869184LL,
      "bytes queued to one websocket before the client is disconnected as too slow"),
    I("session-linger", session_linger, "60", 0, 86400,
      "seconds a client session's sockets outlive its websocket (for reconnects)"),
    I("output-buffer-bytes", output_buffer_bytes, "0", 0, 1099511627776LL,
      "kernel output the gateway holds for clients, all kernels together (client queues); a "
      "kernel over its share (this / kernels holding output) has its stream, display and comm "
      "output dropped with a notice (0: 1/64 of the memory, 32..128 MiB)"),
    I("max-replay-bytes", max_replay_bytes, "67108864", 0, 17179869184LL,
      "output kept for all disconnected sessions together, replayed when they reconnect (one "
      "tenant's sessions: a quarter of it)"),
    I("max-connections", max_connections, "4096", 16, 1000000,
      "client connections; also the most websockets open at once (more: 503)"),
    I("sched-slice-us", sched_slice_us, "100", 0, 100000,
      "the gateway's CPU slice on Linux 6.12+ (0: the kernel's default): short, so that its "
      "wake-ups run ahead of busy kernels (its CPU share is unchanged; kernels get the default)"),
    B("sandbox", sandbox, "true",
      "run every kernel in a sandbox (--no-sandbox: unsandboxed, for development only)"),
    S("sandbox-init", sandbox_init, "",
      "path of kgw-sandbox-init (default: " KGW_LIBEXECDIR "/kgw-sandbox-init, or next to kgw "
      "in its build tree)"),
    {"sandbox-uid-base", CFG_UINT32, &G.cfg.sb.uid_base, "200000", 1000, 4000000000LL, 0,
     "first host uid of sandboxes (two per workspace: its kernels share them)"},
    I("mem-limit", sb.lim.mem_bytes, "2147483648", 67108864, 1099511627776LL,
      "memory per kernel in bytes, tmpfs files included (cgroup)"),
    I("cpu-limit", sb.lim.cpu_millis, "1000", 10, 1024000,
      "CPU per kernel in thousandths of a core"),
    I("pids-limit", sb.lim.pids, "512", 16, 1000000, "processes and threads per kernel"),
    I("workspace-size", sb.lim.workspace_bytes, "1073741824", 1048576, 1099511627776LL,
      "size of a new workspace (a kernel's /mnt/data) in bytes"),
    I32("max-workspaces", km.max_workspaces, "0", 0, 100000,
      "workspaces, with or without kernels (0: twice --max-kernels)"),
    I32("tenant-max-kernels", km.tenant_max_kernels, "0", 0, 100000,
      "kernels per tenant (0 = only --max-kernels)"),
    I32("tenant-max-workspaces", km.tenant_max_workspaces, "0", 0, 100000,
      "workspaces per tenant, with or without kernels (0 = no quota)"),
    I("tenant-max-bytes", km.tenant_max_bytes, "0", 0, 1125899906842624LL,
      "bytes a tenant's workspaces may hold together (sum of their sizes; 0 = no quota)"),
    I32("workspace-grace", km.workspace_grace_s, "600", 0, 604800,
      "seconds a workspace outlives its last kernel, for downloads"),
    I("tmp-size", sb.lim.tmp_bytes, "268435456", 1048576, 1099511627776LL,
      "size of a kernel's /tmp and of its home, each, in bytes"),
    I("fsize-limit", sb.lim.fsize_bytes, "1073741824", 1048576, 1099511627776LL,
      "largest file a kernel may write (RLIMIT_FSIZE), bytes"),
    I("nofile-limit", sb.lim.nofile, "1024", 64, 1048576, "open files per kernel process"),
    MS("exec-timeout", km.exec_timeout_ms, "3600", 0, 604800,
      "wall-time seconds per execution: then interrupt, and restart if ignored (0 = none)"),
    I("output-cap", km.output_cap, "134217728", 0, 1099511627776LL,
      "iopub output bytes per execution; beyond it output is cut with a notice (0 = none)"),
    I("max-kernel-message-bytes", km.max_kernel_msg, "67108864", 1048576, 1099511627776LL,
      "largest frame of a kernel's message the gateway accepts; a kernel that sends a larger "
      "one is restarted (output_limit)"),
    S("callbacks", km.callbacks, KMGR_CALLBACKS_DEFAULT,
      "callbacks code in a kernel may make to its client, comma-separated ('' = none)"),
    I("callback-max-bytes", km.callback_max_bytes, "4194304", 1024, 1073741824,
      "largest callback request from a kernel, and reply to it, in JSON bytes"),
    MS("callback-timeout", km.callback_timeout_ms, "60", 1, 86400,
      "seconds a client has to answer a kernel's callback (then TimeoutError in the kernel)"),
    S("secrets-file", secrets_file, "",
      "file of 'TENANT NAME HOST:PORT[,HOST:PORT...] VALUE' lines, mode 600: secrets kernels get "
      "as placeholders, their egress proxy puts the values in (docs/security.md); reloaded on "
      "SIGHUP"),
    S("egress-ca", egress_ca, "",
      "PEM file (mode 600) of the CA certificate and key the egress proxy signs certificates "
      "of secrets' hosts with ('' = a CA made at start, its key only in memory)"),
    S("egress-ca-file", egress_ca_file, "",
      "PEM file of the CAs the egress proxy verifies secrets' hosts with ('' = the system's)"),
    S("egress-ceiling", egress_ceiling, "",
      "the most any tenant's egress policy may allow: HOST:PORT entries, *.wildcards, '+' for "
      "private addresses (docs/security.md; '' = the key file's policies as they are)"),
    I32("egress-max-connections", km.egress.max_conns, "16", 1, 100000,
      "egress proxy connections open at once per kernel (more: 429)"),
    I("egress-max-bytes", km.egress.max_bytes, "1073741824", 0, 1099511627776LL,
      "bytes a kernel's egress proxy relays, both ways, per kernel process (0 = no cap)"),
    MS("egress-idle-timeout", km.egress.idle_ms, "60", 1, 86400,
       "seconds an egress connection (or its request head) may be idle, then closed"),
    MS("egress-connect-timeout", km.egress.connect_timeout_ms, "10", 1, 600,
       "seconds for an egress connection's name lookup and connect together"),
    S("python-path", python_path, "",
      "directory of kgw_tools.py, importable in every kernel (default: " KGW_DATADIR "/python, "
      "or python/ next to kgw in its build tree)"),
    {"pool", CFG_STR, &G.cfg.pool, "python3=2", 0, 0, CFG_REPEAT,
     "warm pool: NAME=N keeps N started kernels of kernelspec NAME ready (repeatable or "
     "comma-separated; NAME=0 or '' = none; grows to 2N under demand)"},
    I("pool-min-available", km.pool_min_available, "536870912", 0, 1099511627776LL,
      "the warm pool refills only while the host's MemAvailable is above this (bytes)"),
    B("fork-server", fork_server, "true",
      "start ipykernel kernels (of --default-kernel) by forking a pre-loaded Python "
      "(kgw-zygote) into the same sandbox instead of exec (--no-fork-server: always exec)"),
    S("fork-server-preload", sb.zygote_preload, "",
      "extra modules the fork server imports once, comma-separated (e.g. numpy,pandas)"),
    I("drain-timeout", drain_timeout, "30", 0, 86400,
      "on SIGTERM, seconds the executions running may take to finish before websockets are "
      "closed and kernels shut down (0 = no wait; a second SIGTERM stops waiting)"),
    S("metrics-ip", metrics_ip, "", "address of the --metrics-port listener ('' = --ip)"),
    I("metrics-port", metrics_port, "0", 0, 65535,
      "serve GET /metrics (Prometheus) without the API key on this port, and nothing else, "
      "for scrapers (0 = off; GET /metrics on --port needs the key)"),
    I("execution-retention", execution_retention, "600", 0, 604800,
      "seconds a finished execution of the execute API is kept (its events, for replays and "
      "Idempotency-Key retries)"),
    I("execution-budget-bytes", execution_budget_bytes, "268435456", 65536, 1099511627776LL,
      "event bytes the execute API holds per tenant; beyond it the oldest finished executions, "
      "then the oldest events, are dropped"),
    I("mcp-idle-timeout", mcp_idle_timeout, "3600", 10, 604800,
      "seconds an MCP session (/mcp) is kept without requests; then it ends and its kernel is "
      "shut down"),
    I("mcp-named-kernels", mcp_named_kernels, "16", 0, 1000,
      "named kernels (/mcp's Kgw-Kernel-Name header) one tenant may have at once, kept across "
      "MCP sessions until unused for --mcp-idle-timeout (0 = the header is refused)"),
    I("max-executions", max_executions, "100000", 1, 100000000,
      "executions of the execute API held at once, all tenants (queued, running, or finished "
      "within --execution-retention); when full, the tenant holding the most drops its oldest "
      "finished one without an Idempotency-Key"),
    I("max-executions-per-tenant", max_executions_per_tenant, "10000", 1, 100000000,
      "executions of the execute API one tenant holds at once; beyond it its own oldest "
      "finished one without an Idempotency-Key is dropped, or the request is refused (429)"),
    I("max-queued-executions", max_queued_executions, "16", 1, 100000,
      "executions of the execute API per kernel, queued or running (more: 429)"),
    S("e2b-templates", e2b_templates, "base=,code-interpreter-v1=",
      "E2B template ids the E2B-compatible API (/e2b) offers, each mapped to a kernelspec: "
      "TEMPLATE=KERNELSPEC, comma-separated (an empty KERNELSPEC = --default-kernel)"),
    I("e2b-max-watch-dirs", e2b_watch_dirs, "4096", 1, 1000000,
      "directories the watches of one E2B sandbox (files.watchDir) hold at once, each an "
      "inotify watch; a recursive watch holds every directory below it (more: "
      "resource_exhausted)"),
    I("e2b-tenant-max-watch-dirs", e2b_tenant_watch_dirs, "16384", 1, 10000000,
      "the same, all of one tenant's E2B sandboxes together"),
    I32("max-commands-per-kernel", km.max_commands, "16", 1, 64,
        "shell commands running at once in one kernel's sandbox (more: 429; docs/commands.md)"),
    I("stall-timeout", stall_timeout, "60", 1, 86400,
      "seconds a reader of a streamed answer (the execute API's events or document, an MCP "
      "answer, a file download) may take nothing while it has bytes to take; then it is "
      "closed (an execution goes on: GET /api/executions/{id}/events?since=N resumes it)"),
    I("max-checkpoints", max_checkpoints, "8", 0, 1000,
      "checkpoints one kernel holds at once (POST /api/kernels/{id}/checkpoints, the execute "
      "API's \"checkpoint\"); past it a new one is refused with 409 until one is dropped "
      "(0 = checkpoints refused)"),
    S("fork-server-exe", fork_server_exe, "",
      "path of kgw-zygote, the fork server (default: " KGW_LIBEXECDIR "/kgw-zygote, or next to "
      "kgw in its build tree)"),
};

#define POOL_SPECS_MAX 32

/* "python3=2,ir=1" -> pools. 0, or -EINVAL with a message. */
static int parse_pools(const char *s, struct kmgr_pool_size *out, size_t *ret_n, char *why,
                       size_t whysz)
{
    static char names[POOL_SPECS_MAX][128];
    size_t n = 0;
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *eq = memchr(s, '=', len);
        char num[16];
        if (len > 0) {
            size_t nl = eq ? (size_t)(eq - s) : 0, vl = eq ? len - nl - 1 : 0;
            char *e;
            if (!eq || nl == 0 || nl >= sizeof(names[0]) || vl == 0 || vl >= sizeof(num)) {
                snprintf(why, whysz, "--pool: '%.*s' is not NAME=N", (int)(len > 64 ? 64 : len), s);
                return -EINVAL;
            }
            if (n == POOL_SPECS_MAX) {
                snprintf(why, whysz, "--pool: at most %d kernelspecs", POOL_SPECS_MAX);
                return -EINVAL;
            }
            memcpy(names[n], s, nl);
            names[n][nl] = '\0';
            memcpy(num, eq + 1, vl);
            num[vl] = '\0';
            long v = strtol(num, &e, 10);
            if (*e || v < 0 || v > 1000 || !ident_str_ok(names[n], IDENT_KSPEC)) {
                snprintf(why, whysz, "--pool: '%.*s' is not NAME=N with N in 0..1000",
                         (int)(len > 64 ? 64 : len), s);
                return -EINVAL;
            }
            out[n].spec_name = names[n];
            out[n].size = (int)v;
            n++;
        }
        s = end ? end + 1 : NULL;
    }
    *ret_n = n;
    return 0;
}

/* A client that offers only subprotocols kgw does not speak is answered, as jupyter_server
 * does, with none selected, and speaks the legacy JSON protocol. libwebsockets accepts an
 * upgrade only when it knows one of the offered names and names its pick in the 101: the
 * fallback protocol entry is named after the client's first offer while lws picks, and blanked
 * before the 101 is written (FILTER_PROTOCOL_CONNECTION), so the 101 selects none. */
#define SUBPROTOCOL_LIST_MAX 127 /* what lws reads of Sec-WebSocket-Protocol */
static char fallback_name[64];   /* lws's longest subprotocol name, NUL included */

/* 0 with the fallback set up when needed, or the 400 refusal of an offer lws cannot read. */
static int choose_subprotocol(struct lws *wsi, struct gw_refusal *no)
{
    char list[SUBPROTOCOL_LIST_MAX + 1], name[sizeof(fallback_name)], first[sizeof(name)] = "";
    struct lws_tokenize ts;
    lws_tokenize_elem e;
    fallback_name[0] = '\0';
    if (lws_hdr_total_length(wsi, WSI_TOKEN_PROTOCOL) <= 0)
        return 0;
    int n = lws_hdr_copy(wsi, list, sizeof(list), WSI_TOKEN_PROTOCOL);
    if (n < 0)
        return gw_refuse(no, 400, 0, "Sec-WebSocket-Protocol is too long");
    /* the tokenizer libwebsockets selects with, and its flags */
    lws_tokenize_init(&ts, list, LWS_TOKENIZE_F_COMMA_SEP_LIST | LWS_TOKENIZE_F_MINUS_NONTERM |
                                     LWS_TOKENIZE_F_DOT_NONTERM | LWS_TOKENIZE_F_RFC7230_DELIMS);
    ts.len = (size_t)n;
    do {
        e = lws_tokenize(&ts);
        if (e == LWS_TOKZE_TOKEN) {
            if (lws_tokenize_cstr(&ts, name, sizeof(name)))
                return gw_refuse(no, 400, 0, "a Sec-WebSocket-Protocol name is too long");
            if (!strcmp(name, WSMSG_V1_NAME) || !strcmp(name, WSCHAN_LEGACY_NAME))
                return 0; /* lws picks a protocol it knows */
            if (!first[0])
                memcpy(first, name, sizeof(first));
        } else if (e != LWS_TOKZE_DELIMITER && e != LWS_TOKZE_ENDED) {
            return gw_refuse(no, 400, 0, "malformed Sec-WebSocket-Protocol");
        }
    } while (e > 0);
    memcpy(fallback_name, first, sizeof(fallback_name));
    return 0;
}

/* Every websocket upgrade comes here first: the route is matched once, its row checks the
 * upgrade, and the match is kept with the connection for LWS_CALLBACK_ESTABLISHED. Every
 * refusal, of every websocket route, is answered by http_refuse_upgrade. */
static int confirm_upgrade(struct lws *wsi)
{
    char uri[ROUTE_MAX_PATH + 1];
    struct route rt;
    struct gw_refusal no = {0};
    int rc, st, n = lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI);
    if (G.metrics_vhost && lws_get_vhost(wsi) == G.metrics_vhost) /* GET /metrics only */
        st = gw_refuse(&no, 404, 0, "not found");
    else if (n > 0 && !http_uri_decodable(wsi, uri, (size_t)n))
        st = gw_refuse(&no, 400, 0, HTTP_UNDECODABLE_MESSAGE);
    else if (n <= 0 || route_match(G.routes, G.nroutes, uri, (size_t)n, &rt) < 0)
        st = gw_refuse(&no, 404, 0, "not found");
    else if (!(rt.def->flags & ROUTE_F_WEBSOCKET) || !rt.def->ops.ws_confirm)
        st = gw_refuse(&no, 400, 0, "this endpoint does not accept a websocket upgrade");
    else
        st = rt.def->ops.ws_confirm(&G, wsi, &rt, &no);
    if (!st && drain_closing(&G))
        st = gw_refuse(&no, 503, DRAIN_RETRY_AFTER_S, DRAIN_CLOSE_REASON);
    if (!st && G.connections >= G.cfg.max_connections) { /* the descriptor budget's share */
        st = gw_refuse(&no, 503, 5, "too many websocket connections; retry later");
        G.stats.refused[GW_REFUSED_CONNECTION_CAP]++;
    }
    if (!st)
        st = choose_subprotocol(wsi, &no);
    if (!st && (rc = conns_set_route(G.conns, wsi, &rt)) < 0) /* kept for ESTABLISHED */
        st = rc == -ENOMEM ? gw_refuse(&no, 503, 5, "out of memory; retry later")
                           : gw_refuse(&no, 500, 0, "the connection is not known");
    if (st) {
        char q[96];
        log_info("ws: upgrade of %s refused: %d %s", log_quote(q, sizeof(q), uri, n > 0 ? n : 0),
                 no.status, no.message);
        return http_refuse_upgrade(&G, wsi, &no);
    }
    return 0;
}

/* A websocket is open: its route's row opens the face's connection. */
static int ws_open(struct lws *wsi, struct gw_pss *pss)
{
    if (!pss || conns_take_route(G.conns, wsi, &pss->route) < 0)
        return -1; /* not upgraded through confirm_upgrade */
    const struct route_ops *ops = &pss->route.def->ops;
    return ops->ws_open ? ops->ws_open(&G, wsi, pss) : -1;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
    struct gw_pss *pss = user;
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        return G.conns ? conns_accept(G.conns, user) : 0;
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
        if (G.conns)
            conns_started(G.conns, wsi);
        return 0;
    case LWS_CALLBACK_WSI_DESTROY:
        if (G.conns)
            conns_closed(G.conns, wsi);
        return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        if (G.conns)
            conns_headers_done(G.conns, wsi);
        return confirm_upgrade(wsi);
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: { /* lws has picked; the 101 comes next */
        const struct lws_protocols *p = lws_get_protocol(wsi);
        if (p && p->name == fallback_name)
            fallback_name[0] = '\0';
        return 0;
    }
    case LWS_CALLBACK_ADD_HEADERS: { /* the 101 of a websocket upgrade */
        struct lws_process_html_args *a = in;
        unsigned char *p = (unsigned char *)a->p;
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)"x-kgw-self-identify:",
                                        (const unsigned char *)G.instance_id,
                                        (int)strlen(G.instance_id), &p, p + a->max_len))
            return 1;
        a->p = (char *)p;
        return 0;
    }
    case LWS_CALLBACK_HTTP:
        if (G.conns)
            conns_headers_done(G.conns, wsi);
        return http_callback(&G, wsi, reason, pss, in, len);
    case LWS_CALLBACK_HTTP_BODY:
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
    case LWS_CALLBACK_HTTP_WRITEABLE:
    case LWS_CALLBACK_CLOSED_HTTP:
        return http_callback(&G, wsi, reason, pss, in, len);
    case LWS_CALLBACK_TIMER: /* a websocket paused by the rate limit resumes */
        lws_rx_flow_control(wsi, 1);
        return 0;
    case LWS_CALLBACK_ESTABLISHED:
        return ws_open(wsi, pss);
    case LWS_CALLBACK_RECEIVE:
    case LWS_CALLBACK_SERVER_WRITEABLE:
    case LWS_CALLBACK_CLOSED: /* the face's connection, through its base */
        return pss ? wsconn_callback(&pss->wc, reason, in, len) : -1;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

/* libwebsockets sets TCP_NODELAY on accepted sockets itself (Nagle's algorithm would add
 * tens of milliseconds to every small websocket message). */
static const struct lws_protocols protocols[] = {
    /* index 0 serves HTTP and websockets that asked for no subprotocol (legacy) */
    {WSCHAN_LEGACY_NAME, callback, sizeof(struct gw_pss), 65536, 0, NULL, 0},
    {WSMSG_V1_NAME, callback, sizeof(struct gw_pss), 65536, 0, NULL, 0},
    /* websockets that offered only subprotocols kgw does not speak: legacy, none selected */
    {fallback_name, callback, sizeof(struct gw_pss), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* The --metrics-port listener: HTTP only (http.c answers GET /metrics and 404 otherwise). Its
 * buffer size is also what lws sends at once (else 4 KiB: an answer would take a loop turn per
 * 4 KiB). */
static const struct lws_protocols metrics_protocols[] = {
    {"kgw-metrics", callback, sizeof(struct gw_pss), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void on_signal(void *data)
{
    int fd = (int)(intptr_t)data;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGCHLD && G.km) {
            kmgr_reap(G.km);
        } else if (si.ssi_signo == SIGHUP) {
            auth_reload(&G);
            gsecret_reload(&G);
        } else if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM) {
            if (!drain_active(&G))
                sdnotify_stopping();
            drain_signal(&G, (int)si.ssi_signo);
        } else if (si.ssi_signo == SIGUSR2) {
            if (drain_active(&G))
                log_warn("SIGUSR2: the gateway is draining; not restarting");
            else if (handover_check() == 0)
                drain_restart(&G);
        }
    }
}

static const char *default_runtime_dir(char *buf, size_t sz)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    if (x && x[0])
        snprintf(buf, sz, "%s/kgw", x);
    else if (geteuid() == 0)
        snprintf(buf, sz, "/run/kgw");
    else
        snprintf(buf, sz, "/tmp/kgw-%u", (unsigned)geteuid());
    return buf;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: kgw [--option VALUE ...]\n\n"
                 "A Jupyter Kernel Gateway-compatible server: REST and websocket API for\n"
                 "Jupyter kernels. Every option can also be set in the environment variable\n"
                 "shown below it (flags win).\n\nOptions:\n");
    cfg_help(out, options, UTIL_ARRAY_SIZE(options));
    fprintf(out, "  %-28s %s\n  %-28s %s\n", "--help", "show this text", "--version",
            "print the version");
    fprintf(out, "\nCommands:\n  %-28s %s\n  %-28s %s\n", "keygen --tenant NAME",
            "a new API key and its key-file line",
            "selftest [--json] [OPTIONS]", "check this host's sandbox from inside a kernel "
                                           "started with OPTIONS; exit 1 on a failure");
}

/* kgw(1), from the option table --help prints (kgw --help-man, run by the build). Written as
 * roff: "\\-" is a hyphen that copies as '-' (every option name and path needs it). */
static void man_page(FILE *out)
{
    fprintf(out, ".TH KGW 1 \"\" \"kgw %s\" \"User Commands\"\n", KGW_VERSION);
    fputs(".\\\" generated by kgw --help-man from its option table (gateway/main.c)\n"
          ".ad l\n" /* long paths and option names: no stretched lines, no hyphenated paths */
          ".nh\n"
          ".SH NAME\n"
          "kgw \\- Jupyter kernel gateway: sandboxed kernels over HTTP and websockets\n"
          ".SH SYNOPSIS\n"
          ".B kgw\n"
          "[\\fIOPTION\\fR...]\n"
          ".br\n"
          ".B kgw keygen \\-\\-tenant\n"
          ".I NAME\n"
          ".br\n"
          ".B kgw selftest\n"
          "[\\fB\\-\\-json\\fR] [\\fIOPTION\\fR...]\n"
          ".br\n"
          ".B kgw \\-\\-help\n"
          "|\n"
          ".B \\-\\-version\n"
          ".SH DESCRIPTION\n"
          "\\fBkgw\\fR starts Jupyter kernels on demand and relays their ZeroMQ messages to "
          "clients over HTTP and websockets.\n"
          "It speaks the Jupyter Kernel Gateway REST and websocket API, so JupyterLab and "
          "Notebook (through \\fBjupyter server \\-\\-gateway\\-url\\fR) and plain websocket "
          "clients work with it unchanged, and serves a code-interpreter RPC on \\fB/channel\\fR "
          "and workspace files.\n"
          ".PP\n"
          "Every kernel runs in a sandbox: its own user, pid, mount, network, IPC, UTS and "
          "cgroup namespaces, a read-only minimal root, seccomp, and cgroup limits on memory, "
          "processes and CPU.\n"
          "kgw needs root (or equivalent delegated rights) to build it; if the host cannot, kgw "
          "refuses to start kernels and says why.\n"
          ".PP\n"
          "Every request except \\fBGET /api\\fR and \\fBGET /check_liveness\\fR needs an API "
          "key, given as \\fBAuthorization: token\\fR \\fIKEY\\fR.\n"
          "Keys belong to tenants (\\fB\\-\\-key\\-file\\fR); when neither "
          "\\fB\\-\\-api\\-key\\fR nor \\fB\\-\\-key\\-file\\fR is set, kgw generates a key and "
          "prints it once.\n"
          ".SH OPTIONS\n"
          "Every option is also read from the environment variable named with it; a flag on the "
          "command line wins over the environment.\n"
          "A boolean option takes no value (\\fB\\-\\-no\\-\\fR\\fINAME\\fR turns it off); its "
          "variable takes true, false, yes, no, on, off, 1 or 0.\n"
          "Values may also be given as \\fB\\-\\-\\fR\\fINAME\\fR\\fB=\\fR\\fIVALUE\\fR.\n",
          out);
    cfg_man(out, options, UTIL_ARRAY_SIZE(options));
    fputs(".TP\n"
          "\\fB\\-\\-help\\fR, \\fB\\-h\\fR\n"
          "Print the options with their variables, defaults and ranges, and exit.\n"
          ".TP\n"
          "\\fB\\-\\-version\\fR\n"
          "Print the version and exit.\n"
          ".SH COMMANDS\n"
          ".TP\n"
          "\\fBkgw keygen \\-\\-tenant\\fR \\fINAME\\fR\n"
          "Print a new API key on the first line and, on the second, the line to add to the "
          "\\fB\\-\\-key\\-file\\fR for it (\\fINAME\\fR and a hash of the key; the file never "
          "holds a key).\n"
          "Give the key to the tenant's clients, add the line to the file and send "
          "\\fBSIGHUP\\fR.\n"
          ".TP\n"
          "\\fBkgw selftest\\fR [\\fB\\-\\-json\\fR] [\\fIOPTION\\fR...]\n"
          "Start a sandboxed kernel with the options kgw would run with (on a free loopback "
          "port, without a warm pool) and check from inside it what the sandbox promises: "
          "namespaces, read-only root, no host files, no network, seccomp, capabilities, "
          "identity, cgroup limits, rlimits, environment.\n"
          "Prints a table (\\fB\\-\\-json\\fR: JSON), removes what it made, and exits 1 "
          "if a check failed.\n"
          ".SH SIGNALS\n"
          ".TP\n"
          ".B SIGHUP\n"
          "Reload the \\fB\\-\\-key\\-file\\fR.\n"
          "Open connections stay; a file that cannot be read or parsed keeps the old keys "
          "(logged).\n"
          ".TP\n"
          ".B SIGTERM\n"
          "Drain: kgw starts no new kernels (503 with Retry-After; /check_ready says so), lets the "
          "executions running finish for up to \\fB\\-\\-drain\\-timeout\\fR seconds while "
          "clients keep their websockets, then closes them (1001), shuts its kernels down, removes "
          "their cgroups and directories and exits with status 0.\n"
          "A second SIGTERM stops waiting.\n"
          ".TP\n"
          ".B SIGINT\n"
          "The same without waiting for executions.\n"
          ".TP\n"
          ".B SIGUSR2\n"
          "Restart in place (an upgrade): kgw closes every websocket (1012, service restart) "
          "and execs the path it was started from with the same arguments and pid, keeping its "
          "listening sockets (no connection is refused meanwhile), a generated API key, and its "
          "running kernels with their processes, workspaces, limits, egress policies and "
          "sessions. Paused kernels, forks, kernels with checkpoints or secrets, and E2B and MCP "
          "kernels are shut down first, as SIGINT does. Ignored while draining.\n"
          ".SH ENVIRONMENT\n"
          ".TP\n"
          ".B KGW_*\n"
          "Every option, as listed under OPTIONS.\n"
          ".TP\n"
          ".B NOTIFY_SOCKET\n"
          "Set by systemd for a \\fBType=notify\\fR service: kgw reports \\fBREADY=1\\fR once it "
          "listens and its warm pool is filling, and \\fBSTOPPING=1\\fR when it begins to stop "
          "(when built with libsystemd).\n"
          ".TP\n"
          ".B XDG_RUNTIME_DIR\n"
          "The default runtime directory is \\fI$XDG_RUNTIME_DIR/kgw\\fR when it is set.\n"
          ".TP\n"
          ".B JUPYTER_PATH\n"
          "Kernelspecs are also looked for in its directories' \\fIkernels/\\fR.\n"
          ".SH EXIT STATUS\n"
          "0 after a stop by signal; 1 when kgw cannot start (listen, runtime directory, "
          "sandbox helpers); 2 for an invalid option, value or key file.\n"
          ".SH FILES\n",
          out);
    static const char *const files[][2] = {
        {KGW_LIBEXECDIR "/kgw-sandbox-init", "pid 1 of every sandbox (--sandbox-init)"},
        {KGW_LIBEXECDIR "/kgw-zygote", "the fork server (--fork-server-exe)"},
        {KGW_DATADIR "/python/kgw_tools.py",
         "the module kernels import to call their clients (--python-path)"},
        {"/etc/default/kgw", "the KGW_* settings of the kgw systemd service"},
        {"/etc/kgw/keys", "the service's key file (KGW_KEY_FILE), 'TENANT HASH' lines"},
        {"/run/kgw", "the runtime directory when run as root (--runtime-dir)"},
        {"/usr/share/jupyter/kernels", "kernelspecs, with /usr/local/share/jupyter/kernels, "
                                       "~/.local/share/jupyter/kernels and $JUPYTER_PATH"},
    };
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(files); i++) {
        fputs(".TP\n.I ", out);
        cfg_roff(out, files[i][0]);
        fputc('\n', out);
        cfg_roff(out, files[i][1]);
        fputs(".\n", out);
    }
    fputs(".SH SEE ALSO\n"
          ".BR systemctl (1),\n"
          ".BR systemd.exec (5),\n"
          ".BR namespaces (7),\n"
          ".BR user_namespaces (7),\n"
          ".BR cgroups (7),\n"
          ".BR seccomp (2)\n"
          ".PP\n"
          "The README and \\fIdocs/\\fR of the source (\\fI/usr/share/doc/kgw/\\fR when "
          "packaged): the API, the security model and operations.\n",
          out);
}

/* kgw keygen --tenant NAME: a new key (first line) and its key-file line (second line). */
static int keygen(int argc, char **argv)
{
    const char *tenant = NULL;
    char key[2 * KEYFILE_GEN_BYTES + 1], line[KEYFILE_LINE_MAX];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tenant") && i + 1 < argc)
            tenant = argv[++i];
        else if (!strncmp(argv[i], "--tenant=", 9))
            tenant = argv[i] + 9;
        else
            tenant = NULL, i = argc;
    }
    if (!tenant) {
        fprintf(stderr, "usage: kgw keygen --tenant NAME\n"
                        "Prints a new API key on the first line and the line to add to the "
                        "--key-file on the second.\n");
        return 2;
    }
    if (sodium_init() < 0)
        return 1;
    int r = keyfile_generate(tenant, key, sizeof(key), line, sizeof(line));
    if (r < 0) {
        fprintf(stderr, "kgw keygen: invalid tenant name (1-%d of [A-Za-z0-9._-], not starting "
                        "with '.' or '-')\n", KEYFILE_TENANT_MAX);
        return 2;
    }
    printf("%s\n%s\n", key, line);
    sodium_memzero(key, sizeof(key));
    return 0;
}

/* kgw selftest [--json] [OPTIONS]: the options as kgw would run with them, but on a free
 * loopback port, without a warm pool or metrics listener; argv loses "selftest" and "--json".
 * A free port, or -errno. */
static int selftest_args(int *argc, char **argv, bool *ret_json)
{
    int n = 1;
    for (int i = 2; i < *argc; i++) {
        if (!strcmp(argv[i], "--json"))
            *ret_json = true;
        else
            argv[n++] = argv[i];
    }
    *argc = n;
    argv[n] = NULL;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) < 0) {
        int r = -errno;
        close(s);
        return r;
    }
    close(s);
    return ntohs(a.sin_port);
}

static void selftest_config(int port)
{
    G.cfg.ip = "127.0.0.1";
    G.cfg.port = port;
    G.cfg.metrics_port = 0;
    G.cfg.km.npool = 0;
    audit_close(); /* a check, not a client's work */
    if (!strcmp(G.cfg.log_level, "info"))
        log_set_level(LOG_LVL_WARN);
}

/* --help, --version, --help-man: the exit status after printing, or -1 for none of them. */
static int info_flag(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("kgw %s\n", KGW_VERSION);
            return 0;
        }
        if (!strcmp(argv[i], "--help-man")) { /* not in --help: the build makes kgw.1 with it */
            man_page(stdout);
            return 0;
        }
    }
    return -1;
}

static bool key_made; /* configure: kgw made up the API key (a restart carries it) */

/* The options into G.cfg, checked, and what they set up before anything listens: logging,
 * keys, the audit log, the rate limiter. 0, or the exit status (2 for an invalid option, value
 * or key file) with the reason written. ret_generated: the API key was made up. */
static int configure(int argc, char **argv, bool *ret_generated)
{
    /* what G.cfg points to, for as long as the program runs */
    static char err[256], rundir[512], keybuf[65];
    static struct kmgr_pool_size pools[POOL_SPECS_MAX];
    bool generated = false;

    if (cfg_parse(options, UTIL_ARRAY_SIZE(options), argc, argv, err, sizeof(err)) < 0) {
        fprintf(stderr, "kgw: %s\n", err);
        return 2;
    }
    G.cfg.km.pool = pools;
    if (parse_pools(G.cfg.pool, pools, &G.cfg.km.npool, err, sizeof(err)) < 0) {
        fprintf(stderr, "kgw: %s\n", err);
        return 2;
    }
    int lvl = log_level_parse(G.cfg.log_level);
    if (lvl < 0) {
        fprintf(stderr, "kgw: --log-level: unknown level '%.32s'\n", G.cfg.log_level);
        return 2;
    }
    log_set_level(lvl);
    if (sodium_init() < 0) {
        fprintf(stderr, "kgw: libsodium failed to initialise\n");
        return 1;
    }
    int hr = handover_take(&G.handover);
    if (hr < 0)
        log_warn("restart: the hand-over record is unreadable: %s", strerror(-hr));
    G.handed_over = hr > 0;
    const char *made = json_string_value(json_object_get(G.handover, "api_key"));
    snprintf(keybuf, sizeof(keybuf), "%s", made && strlen(made) < sizeof(keybuf) ? made : "");
    json_t *km = json_object_get(G.handover, "km");
    G.cfg.km.handover = json_object_get(km, "rundir") ? km : NULL;
    if ((!G.cfg.api_key || !G.cfg.api_key[0]) && !G.cfg.key_file[0]) {
        if (hr <= 0 || !keybuf[0])
            util_random_hex(keybuf, 32);
        else
            log_info("restart: keeping the API key generated before it");
        G.cfg.api_key = keybuf;
        key_made = true;
        generated = hr <= 0 || !keybuf[0];
    }
    if (auth_setup(&G, G.cfg.api_key, err, sizeof(err)) < 0) {
        fprintf(stderr, "kgw: --key-file: %s\n", err);
        return 2;
    }
    if (egpol_parse(G.cfg.egress_ceiling, strlen(G.cfg.egress_ceiling), &G.egress_ceiling, err,
                    sizeof(err)) < 0) {
        fprintf(stderr, "kgw: --egress-ceiling: %s\n", err);
        return 2;
    }
    if (gsecret_setup(&G, err, sizeof(err)) < 0) {
        fprintf(stderr, "kgw: --secrets-file: %s\n", err);
        return 2;
    }
    G.cfg.km.secrets = &G.secrets;
    if (gsecret_tls_setup(&G, err, sizeof(err)) < 0) {
        fprintf(stderr, "kgw: --egress-ca: %s\n", err);
        return 2;
    }
    if ((G.cfg.certfile[0] != '\0') != (G.cfg.keyfile[0] != '\0')) {
        fprintf(stderr, "kgw: --certfile and --keyfile go together\n");
        return 2;
    }
    if (G.cfg.metrics_port == G.cfg.port) {
        fprintf(stderr, "kgw: --metrics-port must differ from --port\n");
        return 2;
    }
    metrics_init(&G);
    int ar = audit_open(G.cfg.audit_log);
    if (ar < 0) {
        fprintf(stderr, "kgw: --audit-log %s: %s\n", G.cfg.audit_log, strerror(-ar));
        return 2;
    }
    if (!(G.rl = rl_new(&G.cfg.rl))) {
        fprintf(stderr, "kgw: out of memory\n");
        return 1;
    }
    if (gw_set_instance_id(&G, G.cfg.instance_id) < 0) {
        fprintf(stderr, "kgw: --instance-id: 1 to %d characters of [A-Za-z0-9._:-]\n",
                GW_INSTANCE_ID_MAX);
        return 2;
    }
    if (!G.cfg.km.runtime_dir[0])
        G.cfg.km.runtime_dir = default_runtime_dir(rundir, sizeof(rundir));
    util_uuid(G.server_session);
    G.started_us = G.last_activity_us = util_wall_us();
    *ret_generated = generated;
    return 0;
}

/* The address on stdout (and the API key when kgw made it up), and readiness to systemd. */
static void announce(bool generated)
{
    char status[128];
    printf("kgw %s listening on http://%s:%lld/ (instance %s)\n", KGW_VERSION, G.cfg.ip,
           G.cfg.port, G.instance_id);
    if (generated)
        printf("API key (generated; pass it as 'Authorization: token KEY'): %s\n", G.cfg.api_key);
    fflush(stdout);
    snprintf(status, sizeof(status), "listening on %.64s port %lld", G.cfg.ip, G.cfg.port);
    sdnotify_ready(status);
}

static bool carried(kernel_t *k, void *data)
{
    return drain_carries(data, k);
}

/* What goes over a restart in place: the API key kgw made up, the kernels (and with them, what
 * the kernel manager's instance keeps) and their sessions. Out of memory: an empty record (the
 * kernels end; the new image starts afresh). */
static json_t *handover_record(void)
{
    json_t *rec = json_object();
    json_t *sess = sessions_export(&G); /* before the kernels leave the manager */
    json_t *km = G.km ? kmgr_hand_over(G.km, carried, &G) : json_object();
    if (!rec || !sess || !km ||
        (key_made && json_object_set_new(rec, "api_key", json_string(G.cfg.api_key)) < 0)) {
        json_decref(rec);
        json_decref(sess);
        if (km && G.km) /* handed over already: ended as if the exec failed */
            kmgr_handover_undo(km, G.cfg.km.runtime_dir);
        json_decref(km);
        log_error("restart: cannot write the hand-over record: out of memory");
        return json_object();
    }
    json_object_set_new(rec, "km", km);
    json_object_set_new(rec, "sessions", sess);
    return rec;
}

/* Undoes what main() set up, whichever step it reached. */
static void teardown(evl_io_t *sig_io, int sfd)
{
    G.stopping = true; /* listeners: the kernels' ends below are the gateway's own */
    if (G.cfg.sb.init_fd >= 0)
        close(G.cfg.sb.init_fd);
    filesapi_shutdown(&G);
    if (G.cfg.sb.zygote_fd >= 0)
        close(G.cfg.sb.zygote_fd);
    kmgr_destroy(&G.km);
    drain_fini(&G);
    rest_stop_tick(&G);
    evl_timer_destroy(&G.loop.evl, &G.trim_timer);
    if (sig_io)
        G.loop.evl.io_del(&G.loop.evl, sig_io);
    /* last first: E2B's streams and MCP's calls before the executions they read; MCP before
     * lws's timers go (its requests, closed below, let go of sessions) */
    faces_fini(&G);
    setup_unlisten(&G);
    conns_destroy(&G.conns); /* lws's closes at its destroy need not be counted */
    lwsloop_fini(&G.loop); /* lws's context with it */
    G.ctx = NULL;
    close(sfd);
    keyfile_free(&G.keys);
    secrets_free(&G.secrets);
    gsecret_tls_fini(&G);
    rl_destroy(&G.rl);
    reqguard_fini();
    audit_close();
}

int main(int argc, char **argv)
{
    bool generated = false, selftest = false, selftest_json = false;
    evl_io_t *sig_io = NULL;
    int rc, selftest_port = 0, held[HANDOVER_LISTEN_MAX] = {-1, -1};
    json_t *rec = NULL;

    G.routes = routes_table(&G.nroutes);
    sessions_init(&G);
    channel_init(&G);
    if (argc > 1 && !strcmp(argv[1], "keygen"))
        return keygen(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "selftest")) {
        selftest = true;
        if ((selftest_port = selftest_args(&argc, argv, &selftest_json)) < 0) {
            fprintf(stderr, "kgw selftest: no free loopback port: %s\n", strerror(-selftest_port));
            return 1;
        }
    }
    if ((rc = info_flag(argc, argv)) >= 0)
        return rc;
    if ((rc = handover_init()) < 0)
        log_warn("cannot read kgw's own path (%s): SIGUSR2 cannot restart it", strerror(-rc));
    if ((rc = configure(argc, argv, &generated)) != 0)
        return rc;
    if (selftest)
        selftest_config(selftest_port);
    size_t fds = setup_nofile(&G);
    setup_sched(&G);
    int sfd = setup_signals();
    if (sfd < 0) {
        log_error("signalfd: %s", strerror(-sfd));
        return 1;
    }
    rc = 1;
    if (reqguard_init(fds) < 0) {
        log_error("out of memory");
        goto out;
    }
    if (setup_listen(&G, protocols, metrics_protocols, fds) < 0)
        goto out;
    sig_io = G.loop.evl.io_add(&G.loop.evl, sfd, on_signal, (void *)(intptr_t)sfd);
    if (!sig_io || rest_start_tick(&G) < 0 || drain_init(&G, faces_close, faces_keeps) < 0 || gw_trim_start(&G) < 0)
        goto out;
    if (!(G.conns = conns_new(&G, fds))) {
        log_error("cannot track client connections: %s", strerror(errno));
        goto out;
    }
    if (setup_kernels(&G) < 0)
        goto out;
    if (G.handover) { /* the kernel manager took its part; the sessions' kernels are back */
        sessions_import(&G, json_object_get(G.handover, "sessions"));
        G.cfg.km.handover = NULL;
        json_decref(G.handover);
        G.handover = NULL;
    }
    if (selftest) {
        if (selftest_start(&G) < 0)
            G.stopping = true;
    } else {
        announce(generated);
    }

    while (!G.stopping)
        lwsloop_turn(&G.loop);
    rc = selftest ? selftest_finish(selftest_json) : 0;
    if (G.drain.restart && !selftest) {
        handover_hold(&G, held);
        rec = handover_record();
    }
out:
    teardown(sig_io, sfd);
    if (rec && handover_exec(held, rec, argv) < 0) {
        /* what it had is gone: the service manager starts it again */
        kmgr_handover_undo(json_object_get(rec, "km"), G.cfg.km.runtime_dir);
        rc = 1;
    }
    json_decref(rec);
    json_decref(G.handover);
    return rc;
}
