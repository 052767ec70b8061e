/* --secrets-file (common/secrets.h): loaded at start and on SIGHUP (after the key file, whose
 * egress policies each secret's hosts must be within, as within --egress-ceiling), and the
 * secrets a new kernel gets. Values are never logged nor audited: only names and counts. */
#ifndef KGW_GATEWAY_GSECRET_H
#define KGW_GATEWAY_GSECRET_H

#include <jansson.h>
#include <stddef.h>

#include "common/secrets.h"
#include "gateway/gw.h"

/* Loads the file (if set) into g->secrets. -errno with a reason in err. */
int gsecret_setup(gw_t *g, char *err, size_t errsz);
/* With a secrets file: the egress CA (--egress-ca, or made now) that HTTPS to secrets' hosts is
 * read with, and the bundle kernels trust (the system's CAs and it), into g->cfg.km. -errno
 * with a reason in err. */
int gsecret_tls_setup(gw_t *g, char *err, size_t errsz);
void gsecret_tls_fini(gw_t *g);
/* SIGHUP: loads the file again; on error the old secrets stay (logged, audited). */
void gsecret_reload(gw_t *g);
/* The names of the secrets a kernel of tenant gets (into names, at most SECRETS_PER_KERNEL,
 * pointing into g->secrets: use them before returning to the loop): the request's "secrets"
 * (a list of names) or, without one, all the tenant's. 0; -EINVAL (400: not a list of names,
 * or too many); -EPERM (403: a name the tenant lacks, named in why). */
int gsecret_pick(gw_t *g,
                 const char *tenant,
                 json_t *ask,
                 const char **names,
                 size_t *ret_n,
                 char *why,
                 size_t whysz);

#endif
