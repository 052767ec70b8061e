/* auth: API keys and their tenants (common/keyfile.h), the client's address, failed-login
 * limits per address and the per-tenant request rate. Keys are compared in constant time. */
#include "gateway/auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/gw.h"

#define AUTH_HDR_MAX (KEYFILE_KEY_MAX + 16)

int auth_setup(gw_t *g, const char *single_key, char *err, size_t errsz)
{
    keyfile_t *kf = NULL;
    if (g->cfg.key_file && g->cfg.key_file[0]) {
        int r = keyfile_load(g->cfg.key_file, &kf, err, errsz);
        if (r < 0)
            return r;
        if (single_key && single_key[0]) {
            /* both: the single key is one more key, of the default tenant */
            keyfile_t *one = keyfile_single(AUTH_DEFAULT_TENANT, single_key);
            if (!one) {
                keyfile_free(&kf);
                return -ENOMEM;
            }
            keyfile_t *both = keyfile_merge(kf, one);
            keyfile_free(&kf);
            keyfile_free(&one);
            if (!both)
                return -ENOMEM;
            kf = both;
        }
    } else if (!(kf = keyfile_single(AUTH_DEFAULT_TENANT, single_key))) {
        return -ENOMEM;
    }
    keyfile_free(&g->keys);
    g->keys = kf;
    return 0;
}

void auth_reload(gw_t *g)
{
    char err[300];
    if (!g->cfg.key_file || !g->cfg.key_file[0]) {
        log_info("SIGHUP: no --key-file to reload");
        return;
    }
    size_t before = g->keys ? g->keys->n : 0;
    if (auth_setup(g, g->cfg.api_key, err, sizeof(err)) < 0) {
        log_error("SIGHUP: key file not reloaded, the old keys stay: %s", err);
        audit_event("keys_reload_failed", "s:o", "error", audit_str(err, strlen(err)));
        return;
    }
    log_info("SIGHUP: key file reloaded (%zu keys, were %zu)", g->keys->n, before);
    audit_event("keys_reloaded", "s:I", "keys", (json_int_t)g->keys->n);
}

void auth_peer(gw_t *g, struct lws *wsi, char out[RL_ADDR_MAX])
{
    char peer[RL_ADDR_MAX] = "", xff[1024];
    lws_get_peer_simple(wsi, peer, sizeof(peer));
    if (!strncmp(peer, "::ffff:", 7))
        memmove(peer, peer + 7, strlen(peer + 7) + 1);
    snprintf(out, RL_ADDR_MAX, "%s", peer[0] ? peer : "?");
    if (!g->cfg.trusted_proxies || !g->cfg.trusted_proxies[0])
        return;
    int n = lws_hdr_copy(wsi, xff, sizeof(xff), WSI_TOKEN_X_FORWARDED_FOR);
    if (n > 0)
        rl_forwarded_client(peer, xff, (size_t)n, g->cfg.trusted_proxies, out);
}

/* The key a request presents: Authorization token|bearer, X-API-Key or ?token=. */
static bool presented_key(struct lws *wsi, char *v, size_t vsz, const char **key)
{
    int n;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
        (n = lws_hdr_copy(wsi, v, (int)vsz, WSI_TOKEN_HTTP_AUTHORIZATION)) > 0) {
        const char *p = v;
        if (!strncasecmp(p, "token ", 6))
            p += 6;
        else if (!strncasecmp(p, "bearer ", 7))
            p += 7;
        else
            p = NULL;
        while (p && *p == ' ')
            p++;
        if (p && *p) {
            *key = p;
            return true;
        }
    }
    n = lws_hdr_custom_length(wsi, "x-api-key:", 10);
    if (n > 0 && n < (int)vsz && lws_hdr_custom_copy(wsi, v, (int)vsz, "x-api-key:", 10) > 0) {
        *key = v;
        return true;
    }
    const char *t = lws_get_urlarg_by_name(wsi, "token=", v, (int)vsz);
    if (t && *t) {
        *key = t;
        return true;
    }
    return false;
}

const char *auth_tenant(gw_t *g, struct lws *wsi)
{
    char v[AUTH_HDR_MAX];
    const char *key;
    if (!presented_key(wsi, v, sizeof(v), &key))
        return NULL;
    const char *t = keyfile_lookup(g->keys, key, strlen(key));
    sodium_memzero(v, sizeof(v));
    return t;
}

int auth_request(gw_t *g, struct lws *wsi, struct gw_caller *out, int *retry_after)
{
    char v[AUTH_HDR_MAX];
    const char *key = NULL;
    int64_t now = (int64_t)util_now_ms();
    memset(out, 0, sizeof(*out));
    auth_peer(g, wsi, out->addr);
    if (rl_auth_blocked(g->rl, out->addr, retry_after, now)) {
        log_info("auth: %s is over its failed-login limit (%d s left)", out->addr, *retry_after);
        audit_event("rate_limited", "s:s, s:s, s:i", "addr", out->addr, "limit", "auth_failures",
                    "retry_after", *retry_after);
        g->stats.refused[GW_REFUSED_LOCKOUT]++;
        return 429;
    }
    bool has = presented_key(wsi, v, sizeof(v), &key);
    const char *tenant = has ? keyfile_lookup(g->keys, key, strlen(key)) : NULL;
    if (!tenant) {
        char prefix[8] = "";
        if (has)
            snprintf(prefix, sizeof(prefix), "%.4s", key); /* enough to tell keys apart */
        sodium_memzero(v, sizeof(v));
        bool reached = rl_auth_failed(g->rl, out->addr, now);
        log_info("auth: %s from %s refused", has ? "wrong key" : "no key", out->addr);
        audit_event("auth_failure", "s:s, s:s, s:o", "addr", out->addr, "reason",
                    has ? "wrong key" : "no key", "key_prefix",
                    has ? audit_str(prefix, strlen(prefix)) : json_null());
        if (reached)
            audit_event("rate_limited", "s:s, s:s", "addr", out->addr, "limit",
                        "auth_failures reached");
        g->stats.refused[GW_REFUSED_AUTH]++;
        return 401;
    }
    sodium_memzero(v, sizeof(v));
    snprintf(out->tenant, sizeof(out->tenant), "%s", tenant);
    audit_event("auth_success", "s:s, s:s", "addr", out->addr, "tenant", tenant);
    int wait_ms = 0;
    if (!rl_take(g->rl, tenant, 1, now, &wait_ms)) {
        *retry_after = (wait_ms + 999) / 1000;
        log_info("auth: tenant %s over its request rate", tenant);
        audit_event("rate_limited", "s:s, s:s, s:s", "addr", out->addr, "tenant", tenant,
                    "limit", "request_rate");
        g->stats.refused[GW_REFUSED_RATE_LIMIT]++;
        return 429;
    }
    return 0;
}

void auth_ws_message(gw_t *g, struct lws *wsi, const char *tenant)
{
    int wait_ms = 0;
    if (rl_charge(g->rl, tenant, 1, (int64_t)util_now_ms(), &wait_ms))
        return;
    /* over the tenant's rate: stop reading this websocket until the bucket refills (TCP
     * pushes back on the client); LWS_CALLBACK_TIMER resumes it */
    lws_rx_flow_control(wsi, 0);
    lws_set_timer_usecs(wsi, (lws_usec_t)(wait_ms > 0 ? wait_ms : 1) * 1000);
}
