/* --secrets-file (see gsecret.h). */
#include "gateway/gsecret.h"

#include <errno.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/audit.h"
#include "common/keyfile.h"
#include "common/log.h"
#include "kernelmgr/ktls.h"

/* Every secret's hosts within its tenant's egress policy (and the ceiling). */
static int check_hosts(gw_t *g, const secrets_t *s, char *err, size_t errsz)
{
    egpol_t *pol = malloc(sizeof(*pol));
    char why[160];
    int r = 0;
    if (!pol)
        return -ENOMEM;
    for (size_t i = 0; i < s->n && r == 0; i++) {
        const struct secrets_entry *e = &s->v[i];
        const char *text = keyfile_egress(g->keys, e->tenant);
        if (egpol_parse(text, strlen(text), pol, why, sizeof(why)) < 0)
            pol->n = 0;
        if (g->cfg.egress_ceiling && g->cfg.egress_ceiling[0])
            egpol_restrict(pol, &g->egress_ceiling);
        if (!egpol_covers(pol, e->hosts, why, sizeof(why))) {
            snprintf(err, errsz, "%s: tenant %s, secret %s: %s of the tenant's egress policy",
                     g->cfg.secrets_file, e->tenant, e->name, why);
            r = -EINVAL;
        }
    }
    free(pol);
    return r;
}

int gsecret_setup(gw_t *g, char *err, size_t errsz)
{
    secrets_t *s = NULL;
    int r;
    if (!g->cfg.secrets_file || !g->cfg.secrets_file[0])
        return 0;
    if ((r = secrets_load(g->cfg.secrets_file, &s, err, errsz)) < 0)
        return r;
    if ((r = check_hosts(g, s, err, errsz)) < 0) {
        secrets_free(&s);
        return r;
    }
    secrets_free(&g->secrets); /* kernels look values up by name at each request */
    g->secrets = s;
    return 0;
}

#define BUNDLE_MAX (4 * 1024 * 1024)

/* The system's CA bundle and the egress CA, as one PEM text. */
static char *bundle_new(const char *ca_pem)
{
    const char *sys = X509_get_default_cert_file();
    char *buf = malloc(BUNDLE_MAX + strlen(ca_pem) + 2);
    size_t n = 0;
    if (!buf)
        return NULL;
    FILE *f = fopen(sys, "re");
    if (f) {
        n = fread(buf, 1, BUNDLE_MAX, f);
        fclose(f);
    } else {
        log_warn("egress CA bundle: no system CAs at %s: kernels with secrets trust only kgw's",
                 sys);
    }
    if (n && buf[n - 1] != '\n')
        buf[n++] = '\n';
    strcpy(buf + n, ca_pem);
    return buf;
}

int gsecret_tls_setup(gw_t *g, char *err, size_t errsz)
{
    if (!g->cfg.secrets_file || !g->cfg.secrets_file[0])
        return 0;
    if (!(g->tls = ktls_new(g->cfg.egress_ca, g->cfg.egress_ca_file, err, errsz)))
        return -errno;
    if (!(g->ca_bundle = bundle_new(ktls_ca_pem(g->tls)))) {
        ktls_destroy(&g->tls);
        snprintf(err, errsz, "out of memory");
        return -ENOMEM;
    }
    g->cfg.km.tls = g->tls;
    g->cfg.km.ca_bundle = g->ca_bundle;
    return 0;
}

void gsecret_tls_fini(gw_t *g)
{
    ktls_destroy(&g->tls);
    free(g->ca_bundle);
    g->ca_bundle = NULL;
}

void gsecret_reload(gw_t *g)
{
    char err[400];
    if (!g->cfg.secrets_file || !g->cfg.secrets_file[0])
        return;
    if (gsecret_setup(g, err, sizeof(err)) < 0) {
        log_error("SIGHUP: secrets file not reloaded, the old secrets stay: %s", err);
        audit_event("secrets_reload_failed", "s:o", "error", audit_str(err, strlen(err)));
        return;
    }
    log_info("SIGHUP: secrets file reloaded (%zu secrets)", g->secrets->n);
    audit_event("secrets_reloaded", "s:I", "secrets", (json_int_t)g->secrets->n);
}

int gsecret_pick(gw_t *g, const char *tenant, json_t *ask, const char **names, size_t *ret_n,
                 char *why, size_t whysz)
{
    size_t n = 0, i;
    json_t *v;
    if (!ask || json_is_null(ask)) {
        for (i = 0; g->secrets && i < g->secrets->n; i++) {
            if (strcmp(g->secrets->v[i].tenant, tenant))
                continue;
            if (n == SECRETS_PER_KERNEL) {
                log_warn("tenant=%s: more than %d secrets; a kernel gets the first %d", tenant,
                         SECRETS_PER_KERNEL, SECRETS_PER_KERNEL);
                break;
            }
            names[n++] = g->secrets->v[i].name;
        }
        *ret_n = n;
        return 0;
    }
    if (!json_is_array(ask))
        return snprintf(why, whysz, "\"secrets\" must be a list of names"), -EINVAL;
    if (json_array_size(ask) > SECRETS_PER_KERNEL)
        return snprintf(why, whysz, "\"secrets\": at most %d", SECRETS_PER_KERNEL), -EINVAL;
    json_array_foreach(ask, i, v)
    {
        if (!json_is_string(v) || !secrets_name_ok(json_string_value(v), json_string_length(v)))
            return snprintf(why, whysz, "\"secrets\" must be a list of secret names"), -EINVAL;
        const struct secrets_entry *e = secrets_find(g->secrets, tenant, json_string_value(v));
        if (!e)
            return snprintf(why, whysz, "\"secrets\": this tenant has no secret %s",
                            json_string_value(v)),
                   -EPERM;
        size_t k;
        for (k = 0; k < n && strcmp(names[k], e->name); k++)
            ;
        if (k == n)
            names[n++] = e->name;
    }
    *ret_n = n;
    return 0;
}
