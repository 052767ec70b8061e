/* API key files (see keyfile.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/keyfile.h"

#include "common/egpol.h"
#include "common/ident.h"
#include "common/util.h"

#define B2_PREFIX "blake2b:"

static void hash_key(unsigned char out[32], const char *key, size_t len)
{
    crypto_generichash(out, 32, (const unsigned char *)key, len, NULL, 0);
}

int keyfile_parse_line(const char *line, size_t len, struct keyfile_entry *out, char *err,
                       size_t errsz)
{
    size_t i = 0, t0, t1, h0, h1;
    if (len > KEYFILE_LINE_MAX)
        return snprintf(err, errsz, "line longer than %d bytes", KEYFILE_LINE_MAX), -EINVAL;
    if (memchr(line, '\0', len))
        return snprintf(err, errsz, "NUL byte in line"), -EINVAL;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len || line[i] == '#')
        return 0;
    t0 = i;
    while (i < len && line[i] != ' ' && line[i] != '\t')
        i++;
    t1 = i;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    h0 = i;
    while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
        i++;
    h1 = i;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
        i++;
    size_t e0 = i, e1;
    while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
        i++;
    e1 = i;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
        i++;
    if (i != len || h0 == h1)
        return snprintf(err, errsz, "expected \"TENANT HASH [egress=HOST:PORT,...]\""),
               -EINVAL;
    if (e1 > e0 && (e1 - e0 < 7 || strncmp(line + e0, "egress=", 7)))
        return snprintf(err, errsz, "expected egress=HOST:PORT,... after the hash"), -EINVAL;
    if (!ident_ok(line + t0, t1 - t0, IDENT_TENANT))
        return snprintf(err, errsz, "invalid tenant name (1-%d of [A-Za-z0-9._-])",
                        KEYFILE_TENANT_MAX),
               -EINVAL;
    memset(out, 0, sizeof(*out));
    memcpy(out->tenant, line + t0, t1 - t0);
    if (e1 > e0) {
        egpol_t pol;
        char why[128];
        if (egpol_parse(line + e0 + 7, e1 - e0 - 7, &pol, why, sizeof(why)) < 0)
            return snprintf(err, errsz, "egress: %s", why), -EINVAL;
        memcpy(out->egress, line + e0 + 7, e1 - e0 - 7); /* < KEYFILE_LINE_MAX */
    }
    size_t hl = h1 - h0;
    const char *h = line + h0;
    if (hl == strlen(B2_PREFIX) + 64 && !strncmp(h, B2_PREFIX, strlen(B2_PREFIX))) {
        size_t bin_len;
        if (sodium_hex2bin(out->hash, sizeof(out->hash), h + strlen(B2_PREFIX), 64, NULL,
                           &bin_len, NULL) != 0 ||
            bin_len != 32)
            return snprintf(err, errsz, "invalid blake2b hash (64 hex digits)"), -EINVAL;
        return 1;
    }
    if (hl < sizeof(out->pwhash) && hl > 10 && !strncmp(h, "$argon2", 7)) {
        out->pw = true;
        memcpy(out->pwhash, h, hl);
        return 1;
    }
    return snprintf(err, errsz, "the hash must be blake2b:HEX or a libsodium password hash "
                                "($argon2id$...); never the key itself"),
           -EINVAL;
}

int keyfile_load(const char *path, keyfile_t **ret, char *err, size_t errsz)
{
    char line[KEYFILE_LINE_MAX + 2], why[160];
    int r = 0;
    FILE *f = fopen(path, "re");
    if (!f) {
        r = -errno;
        snprintf(err, errsz, "%s: %s", path, strerror(errno));
        return r;
    }
    keyfile_t *kf = calloc(1, sizeof(*kf));
    size_t cap = 0;
    if (!kf) {
        fclose(f);
        return -ENOMEM;
    }
    struct util_file_pos pos = {path, 0};
    size_t n;
    while ((r = util_read_line(f, line, KEYFILE_LINE_MAX, &pos, &n, err, errsz)) > 0) {
        struct keyfile_entry e;
        int pr = keyfile_parse_line(line, n, &e, why, sizeof(why));
        if (pr < 0) {
            snprintf(err, errsz, "%s:%d: %s", path, pos.lineno, why);
            r = pr;
            break;
        }
        if (pr == 0)
            continue;
        if (kf->n == KEYFILE_MAX_KEYS) {
            snprintf(err, errsz, "%s: more than %d keys", path, KEYFILE_MAX_KEYS);
            r = -E2BIG;
            break;
        }
        if (kf->n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            struct keyfile_entry *v = realloc(kf->v, nc * sizeof(*v));
            if (!v) {
                r = -ENOMEM;
                break;
            }
            kf->v = v;
            cap = nc;
        }
        kf->v[kf->n++] = e;
    }
    fclose(f);
    if (r == 0 && kf->n == 0) {
        snprintf(err, errsz, "%s: no keys", path);
        r = -ENOENT;
    }
    if (r < 0) {
        keyfile_free(&kf);
        return r;
    }
    *ret = kf;
    return 0;
}

keyfile_t *keyfile_single(const char *tenant, const char *key)
{
    keyfile_t *kf = calloc(1, sizeof(*kf));
    if (!kf || !(kf->v = calloc(1, sizeof(*kf->v)))) {
        free(kf);
        return NULL;
    }
    kf->n = 1;
    snprintf(kf->v[0].tenant, sizeof(kf->v[0].tenant), "%s", tenant);
    hash_key(kf->v[0].hash, key, strlen(key));
    return kf;
}

keyfile_t *keyfile_merge(const keyfile_t *a, const keyfile_t *b)
{
    keyfile_t *kf = calloc(1, sizeof(*kf));
    if (!kf || !(kf->v = calloc(a->n + b->n, sizeof(*kf->v)))) {
        free(kf);
        return NULL;
    }
    memcpy(kf->v, a->v, a->n * sizeof(*kf->v));
    memcpy(kf->v + a->n, b->v, b->n * sizeof(*kf->v));
    kf->n = a->n + b->n;
    return kf;
}

void keyfile_free(keyfile_t **pkf)
{
    keyfile_t *kf = *pkf;
    if (!kf)
        return;
    sodium_memzero(kf->v, kf->n * sizeof(*kf->v));
    free(kf->v);
    free(kf);
    *pkf = NULL;
}

const char *keyfile_lookup(keyfile_t *kf, const char *key, size_t len)
{
    unsigned char h[32];
    const char *found = NULL;
    if (!kf || len == 0 || len > KEYFILE_KEY_MAX)
        return NULL;
    hash_key(h, key, len);
    /* every entry is compared, whatever matched, so the time does not depend on the match */
    for (size_t i = 0; i < kf->n; i++) {
        struct keyfile_entry *e = &kf->v[i];
        bool usable = !e->pw || e->verified;
        if (sodium_memcmp(h, e->hash, sizeof(h)) == 0 && usable && !found)
            found = e->tenant;
    }
    if (found)
        return found;
    /* password hashes are slow on purpose; a key that verifies is remembered by its blake2b */
    char k[KEYFILE_KEY_MAX + 1];
    memcpy(k, key, len);
    k[len] = '\0';
    for (size_t i = 0; i < kf->n && !found; i++) {
        struct keyfile_entry *e = &kf->v[i];
        if (e->pw && crypto_pwhash_str_verify(e->pwhash, k, len) == 0) {
            memcpy(e->hash, h, sizeof(h));
            e->verified = true;
            found = e->tenant;
        }
    }
    sodium_memzero(k, sizeof(k));
    return found;
}

const char *keyfile_egress(const keyfile_t *kf, const char *tenant)
{
    for (size_t i = 0; kf && i < kf->n; i++)
        if (kf->v[i].egress[0] && !strcmp(kf->v[i].tenant, tenant))
            return kf->v[i].egress;
    return "";
}

int keyfile_generate(const char *tenant, char *key, size_t keysz, char *line, size_t linesz)
{
    unsigned char raw[KEYFILE_GEN_BYTES], h[32];
    char hex[65];
    if (!ident_str_ok(tenant, IDENT_TENANT))
        return -EINVAL;
    if (keysz < 2 * KEYFILE_GEN_BYTES + 1)
        return -ENOSPC;
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(key, keysz, raw, sizeof(raw));
    sodium_memzero(raw, sizeof(raw));
    hash_key(h, key, strlen(key));
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    if ((size_t)snprintf(line, linesz, "%s %s%s", tenant, B2_PREFIX, hex) >= linesz)
        return -ENOSPC;
    return 0;
}
