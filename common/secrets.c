/* The secrets file (see secrets.h). */
#include "common/secrets.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

bool secrets_name_ok(const char *s, size_t n)
{
    /* names the gateway sets, or that change how a process or its TLS behaves */
    static const char *const exact[] = {"PATH",           "HOME",       "LANG",
                                        "USER",           "SHELL",      "TERM",
                                        "TMPDIR",         "NO_PROXY",   "REQUESTS_CA_BUNDLE",
                                        "CURL_CA_BUNDLE", "PIP_CERT",   "NODE_EXTRA_CA_CERTS",
                                        "JPY_PARENT_PID", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR"};
    static const char *const prefix[] = {"LD_", "PYTHON",   "KERNEL_", "KGW_",   "SSL_",
                                         "LC_", "JUPYTER_", "GLIBC_",  "MALLOC_"};
    if (n == 0 || n > SECRETS_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (strlen(exact[i]) == n && !memcmp(s, exact[i], n))
            return false;
    for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
        if (n >= strlen(prefix[i]) && !memcmp(s, prefix[i], strlen(prefix[i])))
            return false;
    if (n >= 6 && !memcmp(s + n - 6, "_PROXY", 6))
        return false;
    return true;
}

void secrets_entry_fini(struct secrets_entry *e)
{
    if (!e)
        return;
    free(e->hosts);
    if (e->value) {
        sodium_memzero(e->value, e->vlen);
        free(e->value);
    }
    e->hosts = NULL;
    e->value = NULL;
    e->vlen = 0;
}

int secrets_parse_line(
    const char *line, size_t len, struct secrets_entry *out, char *err, size_t errsz)
{
    size_t i = 0, f[3][2];
    if (len > SECRETS_LINE_MAX)
        return snprintf(err, errsz, "line longer than %d bytes", SECRETS_LINE_MAX), -EINVAL;
    if (memchr(line, '\0', len))
        return snprintf(err, errsz, "NUL byte in line"), -EINVAL;
    while (i < len && blank(line[i]))
        i++;
    if (i == len || line[i] == '#' || (line[i] == '\r' && i + 1 == len))
        return 0;
    for (int k = 0; k < 3; k++) {
        f[k][0] = i;
        while (i < len && !blank(line[i]))
            i++;
        f[k][1] = i;
        while (i < len && blank(line[i]))
            i++;
    }
    size_t v0 = i, v1 = len;
    if (v1 > v0 && line[v1 - 1] == '\r')
        v1--;
    if (f[2][1] == f[2][0] || v1 == v0)
        return snprintf(err, errsz, "expected \"TENANT NAME HOST:PORT[,HOST:PORT...] VALUE\""),
               -EINVAL;
    if (!ident_ok(line + f[0][0], f[0][1] - f[0][0], IDENT_TENANT))
        return snprintf(err, errsz, "invalid tenant name (1-%d of [A-Za-z0-9._-])",
                        IDENT_TENANT_MAX),
               -EINVAL;
    if (!secrets_name_ok(line + f[1][0], f[1][1] - f[1][0]))
        return snprintf(err, errsz,
                        "invalid secret name (1-%d of [A-Z0-9_], not a digit first, not one "
                        "the gateway or the kernel's runtime uses)",
                        SECRETS_NAME_MAX),
               -EINVAL;
    if (v1 - v0 > SECRETS_VALUE_MAX)
        return snprintf(err, errsz, "value longer than %d bytes", SECRETS_VALUE_MAX), -EINVAL;
    /* the value goes into request heads: printable ASCII only (no CR, LF or control bytes),
     * and never a placeholder itself */
    if (!util_printable(line + v0, v1 - v0))
        return snprintf(err, errsz, "the value must be printable ASCII"), -EINVAL;
    if (memmem(line + v0, v1 - v0, SECRETS_PH_PREFIX, SECRETS_PH_PREFLEN))
        return snprintf(err, errsz, "the value must not contain \"%s\"", SECRETS_PH_PREFIX),
               -EINVAL;
    egpol_t *hosts = malloc(sizeof(*hosts));
    char why[160];
    if (!hosts)
        return -ENOMEM;
    /* the reason is not quoted: on a line whose fields are out of order the value sits here */
    if (egpol_parse(line + f[2][0], f[2][1] - f[2][0], hosts, why, sizeof(why)) < 0) {
        free(hosts);
        return snprintf(err, errsz, "hosts: not a list of HOST:PORT (the third field)"), -EINVAL;
    }
    /* a wildcard would send the value to any name under it, one the kernel's owner may hold */
    for (size_t k = 0; k < hosts->n; k++)
        if (hosts->v[k].any || hosts->v[k].wild) {
            free(hosts);
            return snprintf(err, errsz,
                            "hosts: a wildcard (\"*\" or \"*.NAME\") is not allowed for a secret"),
                   -EINVAL;
        }
    if (hosts->n == 0) {
        free(hosts);
        return snprintf(err, errsz, "hosts: at least one HOST:PORT"), -EINVAL;
    }
    char *value = malloc(v1 - v0 + 1);
    if (!value) {
        free(hosts);
        return -ENOMEM;
    }
    memcpy(value, line + v0, v1 - v0);
    value[v1 - v0] = '\0';
    memset(out, 0, sizeof(*out));
    memcpy(out->tenant, line + f[0][0], f[0][1] - f[0][0]);
    memcpy(out->name, line + f[1][0], f[1][1] - f[1][0]);
    out->hosts = hosts;
    out->value = value;
    out->vlen = v1 - v0;
    return 1;
}

void secrets_free(secrets_t **ps)
{
    secrets_t *s = *ps;
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        secrets_entry_fini(&s->v[i]);
    free(s->v);
    free(s);
    *ps = NULL;
}

const struct secrets_entry *secrets_find(const secrets_t *s, const char *tenant, const char *name)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (!strcmp(s->v[i].name, name) && !strcmp(s->v[i].tenant, tenant))
            return &s->v[i];
    return NULL;
}

void secrets_placeholder(char out[SECRETS_PH_LEN + 1])
{
    memcpy(out, SECRETS_PH_PREFIX, SECRETS_PH_PREFLEN);
    util_random_hex(out + SECRETS_PH_PREFLEN, 16);
}

/* One line at a time from a file opened and checked by secrets_load. */
static int load_lines(FILE *f, const char *path, secrets_t *s, char *err, size_t errsz)
{
    size_t cap = 0, n;
    int r;
    struct util_file_pos pos = {path, 0};
    char *line = malloc(SECRETS_LINE_MAX + 2), why[200];
    if (!line)
        return -ENOMEM;
    while ((r = util_read_line(f, line, SECRETS_LINE_MAX, &pos, &n, err, errsz)) > 0) {
        struct secrets_entry e;
        int pr = secrets_parse_line(line, n, &e, why, sizeof(why));
        if (pr < 0) {
            snprintf(err, errsz, "%s:%d: %s", path, pos.lineno,
                     pr == -ENOMEM ? "out of memory" : why);
            r = pr;
            break;
        }
        if (pr == 0)
            continue;
        if (secrets_find(s, e.tenant, e.name)) {
            snprintf(err, errsz, "%s:%d: tenant %s has secret %s twice", path, pos.lineno,
                     e.tenant, e.name);
            secrets_entry_fini(&e);
            r = -EINVAL;
            break;
        }
        if (s->n == SECRETS_MAX) {
            snprintf(err, errsz, "%s: more than %d secrets", path, SECRETS_MAX);
            secrets_entry_fini(&e);
            r = -E2BIG;
            break;
        }
        if (s->n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            struct secrets_entry *v = realloc(s->v, nc * sizeof(*v));
            if (!v) {
                secrets_entry_fini(&e);
                r = -ENOMEM;
                break;
            }
            s->v = v;
            cap = nc;
        }
        s->v[s->n++] = e;
    }
    sodium_memzero(line, SECRETS_LINE_MAX + 2);
    free(line);
    return r;
}

int secrets_load(const char *path, secrets_t **ret, char *err, size_t errsz)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int r = -errno;
        snprintf(err, errsz, "%s: %s", path, strerror(errno));
        return r;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errsz, "%s: not a regular file", path);
        return -EINVAL;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        close(fd);
        snprintf(err, errsz, "%s: group or others may access it (mode %03o): chmod 600 it", path,
                 (unsigned)(st.st_mode & 0777));
        return -EPERM;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        int r = -errno;
        close(fd);
        return r;
    }
    setvbuf(f, NULL, _IONBF, 0); /* no stdio buffer keeps a copy of the values */
    secrets_t *s = calloc(1, sizeof(*s));
    int r = s ? load_lines(f, path, s, err, errsz) : -ENOMEM;
    fclose(f);
    if (r < 0) {
        secrets_free(&s);
        return r;
    }
    *ret = s;
    return 0;
}
