/* A kernel's secrets (see ksecret.h). */
#include "kernelmgr/ksecret.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/egsub.h"

struct ksecret {
    char tenant[IDENT_TENANT_MAX + 1];
    secrets_t *const *table;
    struct ksecret_stats *stats;
    size_t n;
    struct {
        char name[SECRETS_NAME_MAX + 1];
        char ph[SECRETS_PH_LEN + 1];
    } v[SECRETS_PER_KERNEL];
};

_Static_assert(SECRETS_PH_LEN == EGSUB_PH_LEN, "one placeholder form");

ksecret_t *ksecret_new(const char *tenant,
                       const char *const *names,
                       size_t n,
                       secrets_t *const *table,
                       struct ksecret_stats *stats)
{
    if (n > SECRETS_PER_KERNEL || strlen(tenant) > IDENT_TENANT_MAX) {
        errno = E2BIG;
        return NULL;
    }
    ksecret_t *ks = calloc(1, sizeof(*ks));
    if (!ks)
        return NULL;
    snprintf(ks->tenant, sizeof(ks->tenant), "%s", tenant);
    ks->table = table;
    ks->stats = stats;
    for (size_t i = 0; i < n; i++) {
        if (!secrets_name_ok(names[i], strlen(names[i]))) {
            free(ks);
            errno = EINVAL;
            return NULL;
        }
        snprintf(ks->v[i].name, sizeof(ks->v[i].name), "%s", names[i]);
        secrets_placeholder(ks->v[i].ph);
    }
    ks->n = n;
    return ks;
}

void ksecret_destroy(ksecret_t **pks)
{
    free(*pks);
    *pks = NULL;
}

size_t ksecret_count(const ksecret_t *ks)
{
    return ks ? ks->n : 0;
}

const char *ksecret_name(const ksecret_t *ks, size_t i)
{
    return ks->v[i].name;
}

const char *ksecret_placeholder(const ksecret_t *ks, size_t i)
{
    return ks->v[i].ph;
}

static void count(ksecret_t *ks, const char *name, bool injected)
{
    struct ksecret_stats *s = ks->stats;
    if (!s)
        return;
    size_t i;
    for (i = 0; i < s->n && strcmp(s->v[i].name, name); i++)
        ;
    if (i == s->n) {
        if (s->n == KSECRET_STATS_MAX || !name[0]) {
            if (injected)
                s->other_injected++;
            else
                s->other_refused++;
            return;
        }
        snprintf(s->v[s->n++].name, sizeof(s->v[i].name), "%s", name);
    }
    if (injected)
        s->v[i].injected++;
    else
        s->v[i].refused++;
}

int ksecret_resolve(ksecret_t *ks,
                    const char *ph,
                    const char *host,
                    int port,
                    const char **val,
                    size_t *vlen,
                    int *ret_idx,
                    char *whybuf,
                    size_t whysz)
{
    size_t i;
    for (i = 0; i < ks->n; i++)
        if (sodium_memcmp(ks->v[i].ph, ph, SECRETS_PH_LEN) == 0)
            break;
    if (i == ks->n) {
        *ret_idx = -1;
        snprintf(whybuf, whysz, "a secret placeholder that is not this kernel's");
        count(ks, "", false);
        return -EPERM;
    }
    *ret_idx = (int)i;
    const struct secrets_entry *e =
        secrets_find(ks->table ? *ks->table : NULL, ks->tenant, ks->v[i].name);
    if (!e) {
        snprintf(whybuf, whysz, "secret %s is no longer defined", ks->v[i].name);
        count(ks, ks->v[i].name, false);
        return -EPERM;
    }
    if (!egpol_match(e->hosts, host, port)) {
        snprintf(whybuf, whysz, "secret %s may not be sent to %.128s:%d", ks->v[i].name, host,
                 port);
        count(ks, ks->v[i].name, false);
        return -EPERM;
    }
    count(ks, ks->v[i].name, true);
    *val = e->value;
    *vlen = e->vlen;
    return 0;
}

bool ksecret_wants(const ksecret_t *ks, const char *host, int port)
{
    const secrets_t *tab = ks && ks->table ? *ks->table : NULL;
    for (size_t i = 0; tab && i < ks->n; i++) {
        const struct secrets_entry *e = secrets_find(tab, ks->tenant, ks->v[i].name);
        if (e && egpol_match(e->hosts, host, port))
            return true;
    }
    return false;
}
