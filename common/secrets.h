/* Secrets kernels use but never see (docs/security.md, "Secrets"): an operator's file of
 * --secrets-file lines, one secret a line:
 *
 *   TENANT NAME HOST:PORT[,HOST:PORT...] VALUE
 *
 * NAME is the environment variable a kernel of TENANT sees (holding a placeholder, never the
 * value); HOST:PORT entries (common/egpol.h syntax, no "*" for any host) are where the egress
 * proxy may put the value in place of the placeholder; VALUE runs to the end of the line
 * (printable ASCII, it goes into request heads). Blank lines and lines starting with '#' are
 * ignored. The file must not be readable or writable by group or others. Values are kept in
 * memory only here and wiped when the table is freed; nothing in this file logs them. */
#ifndef KGW_COMMON_SECRETS_H
#define KGW_COMMON_SECRETS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/egpol.h"
#include "common/ident.h"

#define SECRETS_NAME_MAX   64
#define SECRETS_VALUE_MAX  4096
#define SECRETS_LINE_MAX   (SECRETS_VALUE_MAX + 1024)
#define SECRETS_MAX        1000 /* lines of a file */
#define SECRETS_PER_KERNEL 32   /* placeholders a kernel holds */
/* A placeholder: the prefix and 32 lowercase hex digits (128 random bits, per kernel). */
#define SECRETS_PH_PREFIX  "kgw-secret-"
#define SECRETS_PH_PREFLEN 11
#define SECRETS_PH_LEN     (SECRETS_PH_PREFLEN + 32)

struct secrets_entry {
    char tenant[IDENT_TENANT_MAX + 1];
    char name[SECRETS_NAME_MAX + 1];
    egpol_t *hosts; /* owned */
    char *value;    /* owned, NUL-terminated */
    size_t vlen;
};

typedef struct secrets {
    struct secrets_entry *v;
    size_t n;
} secrets_t;

/* Parses one line (without its newline). 1: an entry (out filled; its hosts and value are
 * new allocations, released by secrets_entry_fini); 0: a blank or comment line; -EINVAL with
 * a reason in err (the reason never quotes the value); -ENOMEM. */
int secrets_parse_line(
    const char *line, size_t len, struct secrets_entry *out, char *err, size_t errsz);
void secrets_entry_fini(struct secrets_entry *e);
/* Loads a file (refused when group or others may read or write it, or it is not a regular
 * file); -errno with "path[:line]: reason" in err. An empty file is an empty table. */
int secrets_load(const char *path, secrets_t **ret, char *err, size_t errsz);
void secrets_free(secrets_t **s);
/* The secret NAME of tenant, or NULL. */
const struct secrets_entry *secrets_find(const secrets_t *s, const char *tenant, const char *name);
/* True when name is a valid secret name: [A-Z_][A-Z0-9_]*, at most SECRETS_NAME_MAX bytes,
 * and not one the gateway sets or a process depends on (PATH, HOME, LD_*, PYTHON*, *_PROXY,
 * KERNEL_*, KGW_*, SSL_*, ...). */
bool secrets_name_ok(const char *s, size_t n);
/* A new random placeholder (SECRETS_PH_LEN + 1 bytes). */
void secrets_placeholder(char out[SECRETS_PH_LEN + 1]);

#endif
