/* API keys and their tenants, from a key file: one key per line, "TENANT HASH [egress=LIST]",
 * where LIST is the tenant's egress policy (common/egpol.h, entries separated by commas; the
 * first line of a tenant that has one counts) and HASH is
 * "blake2b:" and 64 hex digits (libsodium's generic hash of the key: what `kgw keygen` writes,
 * right for random keys) or a libsodium password hash string ("$argon2id$...", for keys people
 * choose). Blank lines and lines starting with '#' are ignored. The key itself is never
 * stored. Lookups compare in constant time. */
#ifndef KGW_COMMON_KEYFILE_H
#define KGW_COMMON_KEYFILE_H

#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/ident.h"

#define KEYFILE_TENANT_MAX IDENT_TENANT_MAX /* tenants are IDENT_TENANT names */
#define KEYFILE_LINE_MAX   512
#define KEYFILE_MAX_KEYS   10000
#define KEYFILE_KEY_MAX    256    /* bytes of a key a client presents */
#define KEYFILE_GEN_BYTES  32     /* random bytes of a generated key */

struct keyfile_entry {
    char tenant[KEYFILE_TENANT_MAX + 1];
    bool pw;                              /* a password hash (else blake2b) */
    unsigned char hash[32];               /* blake2b; for pw entries: of the last key verified */
    bool verified;                        /* pw: hash holds a key that verified */
    char pwhash[crypto_pwhash_STRBYTES];
    char egress[KEYFILE_LINE_MAX];        /* the tenant's egress policy text ("": none) */
};

typedef struct keyfile {
    struct keyfile_entry *v;
    size_t n;
} keyfile_t;

/* Parses one line (without its newline). Returns 1 for an entry (out filled), 0 for a blank or
 * comment line, -EINVAL with a reason in err. */
int keyfile_parse_line(const char *line, size_t len, struct keyfile_entry *out, char *err,
                       size_t errsz);
/* Loads a whole file; -errno with "path:line: reason" in err. */
int keyfile_load(const char *path, keyfile_t **ret, char *err, size_t errsz);
/* A key file of one entry (the single --api-key / KGW_API_KEY case). */
keyfile_t *keyfile_single(const char *tenant, const char *key);
/* A new key file with the entries of both. */
keyfile_t *keyfile_merge(const keyfile_t *a, const keyfile_t *b);
void keyfile_free(keyfile_t **kf);
/* The tenant of key, or NULL. */
const char *keyfile_lookup(keyfile_t *kf, const char *key, size_t len);
/* The egress policy text of tenant ("" when none of its lines has one). */
const char *keyfile_egress(const keyfile_t *kf, const char *tenant);
/* A new random key (hex, NUL-terminated, 2*KEYFILE_GEN_BYTES+1 bytes) and its key-file line. */
int keyfile_generate(const char *tenant, char *key, size_t keysz, char *line, size_t linesz);

#endif
