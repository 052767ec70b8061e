#include "protocol/jsign.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

struct jsign {
    EVP_MAC *mac;
    EVP_MAC_CTX *proto; /* keyed once; duplicated per message */
    bool unsigned_;
};

jsign_t *jsign_new(const char *key, size_t keylen)
{
    jsign_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (keylen == 0) {
        s->unsigned_ = true;
        return s;
    }
    s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!s->mac)
        goto fail;
    s->proto = EVP_MAC_CTX_new(s->mac);
    if (!s->proto)
        goto fail;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (!EVP_MAC_init(s->proto, (const unsigned char *)key, keylen, params))
        goto fail;
    return s;
fail:
    jsign_destroy(&s);
    errno = ENOMEM;
    return NULL;
}

void jsign_destroy(jsign_t **ps)
{
    jsign_t *s = *ps;
    if (!s)
        return;
    EVP_MAC_CTX_free(s->proto);
    EVP_MAC_free(s->mac);
    free(s);
    *ps = NULL;
}

static int mac_parts(jsign_t *s, const jspan_t parts[4], unsigned char out[32])
{
    size_t outl = 0;
    EVP_MAC_CTX *c = EVP_MAC_CTX_dup(s->proto);
    if (!c)
        return -ENOMEM;
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++)
        ok = EVP_MAC_update(c, (const unsigned char *)parts[i].p, parts[i].n);
    ok = ok && EVP_MAC_final(c, out, &outl, 32);
    EVP_MAC_CTX_free(c);
    return ok && outl == 32 ? 0 : -EIO;
}

int jsign_compute(jsign_t *s, const jspan_t parts[4], char out[JSIGN_HEX_LEN + 1])
{
    unsigned char raw[32];
    int r;
    if (s->unsigned_) {
        out[0] = '\0';
        return 0;
    }
    if ((r = mac_parts(s, parts, raw)) < 0)
        return r;
    sodium_bin2hex(out, JSIGN_HEX_LEN + 1, raw, sizeof(raw));
    return 0;
}

bool jsign_verify(jsign_t *s, const jspan_t parts[4], jspan_t sig)
{
    char want[JSIGN_HEX_LEN + 1];
    if (s->unsigned_)
        return true;
    if (sig.n != JSIGN_HEX_LEN || jsign_compute(s, parts, want) < 0)
        return false;
    return sodium_memcmp(want, sig.p, JSIGN_HEX_LEN) == 0;
}
