/* auth: the API key, compared in constant time (both sides hashed to a fixed length first). */
#include <sodium.h>
#include <string.h>
#include <strings.h>

#include "gateway/gw.h"

#define KEY_MAX 512

void auth_init(gw_t *g, const char *key)
{
    crypto_generichash(g->key_hash, sizeof(g->key_hash), (const unsigned char *)key, strlen(key),
                       NULL, 0);
}

static bool key_ok(gw_t *g, const char *k, size_t n)
{
    unsigned char h[32];
    if (n == 0)
        return false;
    crypto_generichash(h, sizeof(h), (const unsigned char *)k, n, NULL, 0);
    return sodium_memcmp(h, g->key_hash, sizeof(h)) == 0;
}

bool auth_check(gw_t *g, struct lws *wsi)
{
    char v[KEY_MAX];
    int n;

    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
        (n = lws_hdr_copy(wsi, v, sizeof(v), WSI_TOKEN_HTTP_AUTHORIZATION)) > 0) {
        const char *p = v;
        if (!strncasecmp(p, "token ", 6))
            p += 6;
        else if (!strncasecmp(p, "bearer ", 7))
            p += 7;
        else
            p = NULL;
        while (p && *p == ' ')
            p++;
        if (p && key_ok(g, p, strlen(p)))
            return true;
    }
    n = lws_hdr_custom_length(wsi, "x-api-key:", 10);
    if (n > 0 && n < (int)sizeof(v) && lws_hdr_custom_copy(wsi, v, sizeof(v), "x-api-key:", 10) > 0 &&
        key_ok(g, v, strlen(v)))
        return true;
    const char *t = lws_get_urlarg_by_name(wsi, "token=", v, sizeof(v));
    if (t && key_ok(g, t, strlen(t)))
        return true;
    return false;
}
