#include "protocol/e2bwire.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/inotify.h>

#include "common/egpol.h"
#include "common/log.h"
#include "common/util.h"

#define E2BWIRE_BODY_MAX (1u << 20) /* bytes of a JSON body looked at */

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errsz, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* The body as a JSON object (an empty body is {}), or NULL with a message. */
static json_t *load_object(const char *body, size_t len, char *err, size_t errsz)
{
    json_error_t jerr;
    if (len > E2BWIRE_BODY_MAX) {
        fail(err, errsz, "the request body is over %u bytes", E2BWIRE_BODY_MAX);
        return NULL;
    }
    if (len == 0)
        return json_object();
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        fail(err, errsz, "the body is not valid JSON (line %d column %d)", jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        fail(err, errsz, "the body must be a JSON object");
        return NULL;
    }
    return doc;
}

/* One field of a request body (k, v): 0 to go on, or -errno with a message in err. */
typedef int field_fn(void *ctx, const char *k, json_t *v, char *err, size_t errsz);

/* The fields of the body (load_object), each to field in order until one fails: 0, or the
 * first failure. */
static int each_field(const char *body, size_t len, field_fn *field, void *ctx, char *err,
                      size_t errsz)
{
    json_t *doc = load_object(body, len, err, errsz);
    if (!doc)
        return -EINVAL;
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(doc, k, v)
    {
        if ((rc = field(ctx, k, v, err, errsz)) < 0)
            break;
    }
    json_decref(doc);
    return rc;
}

static int unknown_field(const char *k, char *err, size_t errsz)
{
    return fail(err, errsz, "unknown field \"%.64s\"", k);
}

/* A map of strings (envVars, metadata): NULL and null are none; else a bounded
 * object of printable keys and string values. */
static int string_map(json_t *v, const char *field, json_t **ret, char *err, size_t errsz)
{
    const char *k;
    json_t *s;
    *ret = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return fail(err, errsz, "\"%s\" must be an object of strings", field);
    if (json_object_size(v) > E2BWIRE_MAP_MAX)
        return fail(err, errsz, "\"%s\" has more than %d entries", field, E2BWIRE_MAP_MAX);
    json_object_foreach(v, k, s)
    {
        size_t kn = strlen(k);
        if (kn == 0 || kn > E2BWIRE_KEY_MAX || !util_printable(k, kn))
            return fail(err, errsz, "\"%s\": keys are 1 to %d printable ASCII characters", field,
                        E2BWIRE_KEY_MAX);
        if (!json_is_string(s) || json_string_length(s) > E2BWIRE_VALUE_MAX ||
            memchr(json_string_value(s), '\0', json_string_length(s)))
            return fail(err, errsz, "\"%s\": values are strings of at most %d bytes", field,
                        E2BWIRE_VALUE_MAX);
    }
    *ret = json_incref(v);
    return 0;
}

/* A field that must be absent, null, false (on false) or empty: what kgw does
 * not offer. */
static bool offered(json_t *v, bool on)
{
    if (!v || json_is_null(v))
        return true;
    if (json_is_boolean(v))
        return json_is_true(v) == on;
    if (json_is_object(v))
        return json_object_size(v) == 0;
    if (json_is_array(v))
        return json_array_size(v) == 0;
    return false;
}

static int seconds(json_t *v, const char *field, long long *ret, char *err, size_t errsz)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > E2BWIRE_TIMEOUT_MAX)
        return fail(err, errsz, "\"%s\" must be whole seconds, 0 to %d", field,
                    E2BWIRE_TIMEOUT_MAX);
    *ret = (long long)json_integer_value(v);
    return 0;
}

bool e2bwire_env_name_ok(const char *k)
{
    return strlen(k) <= E2BWIRE_KEY_MAX && util_env_name_ok(k);
}

/* One allowOut entry as the host it names, written as egress policies hold hosts
 * (egpol_host_normalize: lowercase, no trailing dot, an IPv4 literal as a dotted quad): a host
 * name, "*." and a domain (its subdomains), or one IP address ("/32", "/128" allowed).
 * -EINVAL for what kgw's allowlist cannot say (a CIDR range) or what is no host. */
static int egress_entry(const char *e, size_t n, char *out, size_t outsz)
{
    const char *slash = memchr(e, '/', n);
    if (slash) {
        size_t rest = n - (size_t)(slash - e);
        if (!(rest == 3 && !memcmp(slash, "/32", 3)) && !(rest == 4 && !memcmp(slash, "/128", 4)))
            return -EINVAL;
        n = (size_t)(slash - e);
    }
    bool wild = n > 2 && e[0] == '*' && e[1] == '.';
    size_t skip = wild ? 2 : 0;
    char host[EGPOL_HOST_MAX + 1];
    if (n - skip == 0 || n - skip > EGPOL_HOST_MAX || memchr(e + skip, '\0', n - skip))
        return -EINVAL;
    memcpy(host, e + skip, n - skip);
    host[n - skip] = '\0';
    if (!egpol_host_normalize(host) || (wild && strchr(host, ':')))
        return -EINVAL;
    int w = snprintf(out, outsz, "%s%s", wild ? "*." : "", host);
    return w < 0 || (size_t)w >= outsz ? -EINVAL : 0;
}

/* The create's "network": allowOut into *allow (kgw entries), whether denyOut denies all
 * traffic. */
static int network(json_t *v, json_t **allow, bool *deny_all, char *err, size_t errsz)
{
    const char *k;
    json_t *x;
    if (json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return fail(err, errsz, "\"network\" must be an object");
    json_object_foreach(v, k, x)
    {
        bool is_allow = strcmp(k, "allowOut") == 0;
        if (is_allow || strcmp(k, "denyOut") == 0) {
            size_t i;
            json_t *e;
            if (!json_is_array(x) || json_array_size(x) > 64)
                return fail(err, errsz, "\"network.%s\" must be a list of at most 64 strings",
                            k);
            json_array_foreach(x, i, e)
            {
                const char *s = json_string_value(e);
                if (!s)
                    return fail(err, errsz, "\"network.%s\" must be a list of strings", k);
                if (!is_allow) {
                    if (strcmp(s, "0.0.0.0/0") != 0)
                        return fail(err, errsz,
                                    "\"network.denyOut\": only all traffic (0.0.0.0/0) is "
                                    "offered: kgw's egress is an allowlist (name what is "
                                    "allowed in allowOut)");
                    *deny_all = true;
                    continue;
                }
                char entry[300];
                if (egress_entry(s, strlen(s), entry, sizeof(entry)) < 0)
                    return fail(err, errsz,
                                "\"network.allowOut\": %.64s: give a host name or one IP "
                                "address (CIDR ranges are not offered)",
                                s);
                if (!*allow && !(*allow = json_array()))
                    return fail(err, errsz, "out of memory");
                json_array_append_new(*allow, json_string(entry));
            }
        } else if (strcmp(k, "allowPublicTraffic") == 0) {
            if (!json_is_false(x) && !json_is_null(x))
                return fail(err, errsz,
                            "\"network.allowPublicTraffic\": true is not offered: every request "
                            "to a kgw sandbox needs its access token");
        } else {
            return fail(err, errsz, "\"network.%.64s\" is not offered by kgw", k);
        }
    }
    return 0;
}

/* e2bwire_create_parse's fields: what they name beyond out. */
struct create_ctx {
    struct e2bwire_create *out;
    json_t *allow;
    bool deny_all, have_internet;
};

static int create_field(void *ctx, const char *k, json_t *v, char *err, size_t errsz)
{
    struct create_ctx *c = ctx;
    struct e2bwire_create *out = c->out;
    int rc;
    if (strcmp(k, "templateID") == 0) {
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > E2BWIRE_TEMPLATE_MAX ||
            !util_printable(json_string_value(v), json_string_length(v)))
            return fail(err, errsz, "\"templateID\" must be 1 to %d printable characters",
                        E2BWIRE_TEMPLATE_MAX);
        memcpy(out->template_id, json_string_value(v), json_string_length(v) + 1);
    } else if (strcmp(k, "timeout") == 0) {
        return seconds(v, k, &out->timeout, err, errsz);
    } else if (strcmp(k, "envVars") == 0) {
        if ((rc = string_map(v, k, &out->env, err, errsz)) < 0)
            return rc;
        const char *name;
        json_t *val;
        json_object_foreach(out->env, name, val)
        {
            char q[80];
            if (!e2bwire_env_name_ok(name))
                return fail(err, errsz,
                            "\"envVars\": %s is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                            log_quote(q, sizeof(q), name, strlen(name)));
        }
    } else if (strcmp(k, "metadata") == 0) {
        return string_map(v, k, &out->metadata, err, errsz);
    } else if (strcmp(k, "allow_internet_access") == 0) {
        if (!json_is_null(v) && !json_is_boolean(v))
            return fail(err, errsz, "\"allow_internet_access\" must be a boolean");
        c->have_internet = json_is_boolean(v);
        out->internet = json_is_true(v);
    } else if (strcmp(k, "network") == 0) {
        return network(v, &c->allow, &c->deny_all, err, errsz);
    } else if (strcmp(k, "secure") == 0) {
        if (!json_is_null(v) && !json_is_true(v))
            return fail(err, errsz,
                        "\"secure\": false is not offered: every kgw sandbox has "
                        "its own access token");
    } else if (strcmp(k, "autoPause") == 0) { /* paused, not killed, at its timeout */
        if (!json_is_null(v) && !json_is_boolean(v))
            return fail(err, errsz, "\"autoPause\" must be a boolean");
        out->auto_pause = json_is_true(v);
    } else if (strcmp(k, "autoPauseMemory") == 0) { /* kgw's pause always keeps memory */
        if (!offered(v, true))
            return fail(err, errsz,
                        "\"autoPauseMemory\": false (a filesystem-only pause) is not offered: "
                        "kgw's pause keeps the sandbox's memory");
    } else if (strcmp(k, "autoResume") == 0) {
        if (!offered(v, false) &&
            !(json_is_object(v) && offered(json_object_get(v, "enabled"), false) &&
              json_object_size(v) == 1))
            return fail(err, errsz,
                        "\"autoResume\": resuming a sandbox by its traffic is not offered "
                        "(connect resumes it)");
    } else if (strcmp(k, "iam") == 0 || strcmp(k, "mcp") == 0 ||
               strcmp(k, "volumeMounts") == 0) {
        if (!offered(v, false))
            return fail(err, errsz, "\"%s\" is not offered by kgw", k);
    } else {
        return unknown_field(k, err, errsz);
    }
    return 0;
}

int e2bwire_create_parse(
    const char *body, size_t len, struct e2bwire_create *out, char *err, size_t errsz)
{
    memset(out, 0, sizeof(*out));
    out->timeout = -1;
    struct create_ctx c = {.out = out};
    int rc = each_field(body, len, create_field, &c, err, errsz);
    /* E2B: all traffic is allowed unless denied (allow_internet_access false denies all);
     * allowOut wins over denyOut. kgw: an allowlist, of what the tenant may have. */
    if (rc == 0 && (c.deny_all || (c.have_internet && !out->internet)))
        out->egress = c.allow ? json_incref(c.allow) : json_array();
    else if (rc == 0 && c.allow && json_array_size(c.allow))
        rc = fail(err, errsz,
                  "\"network\": allowOut is an exception to denyOut; without denyOut all "
                  "traffic (0.0.0.0/0) the sandbox has its tenant's egress policy: give both, "
                  "or neither");
    json_decref(c.allow);
    if (rc < 0)
        e2bwire_create_fini(out);
    return rc;
}

void e2bwire_create_fini(struct e2bwire_create *c)
{
    json_decref(c->env);
    json_decref(c->metadata);
    json_decref(c->egress);
    c->env = c->metadata = c->egress = NULL;
}

static int pause_field(void *ctx, const char *k, json_t *v, char *err, size_t errsz)
{
    if (strcmp(k, "memory") != 0)
        return unknown_field(k, err, errsz);
    if (!json_is_null(v) && !json_is_boolean(v))
        return fail(err, errsz, "\"memory\" must be a boolean");
    if (json_is_false(v))
        return fail(err, errsz,
                    "\"memory\": false (a filesystem-only pause) is not offered: kgw's pause "
                    "keeps the sandbox's memory");
    return 0;
}

int e2bwire_pause_parse(const char *body, size_t len, char *err, size_t errsz)
{
    return each_field(body, len, pause_field, NULL, err, errsz);
}

static int timeout_field(void *ctx, const char *k, json_t *v, char *err, size_t errsz)
{
    if (strcmp(k, "timeout") == 0)
        return seconds(v, k, ctx, err, errsz);
    if (strcmp(k, "memory") == 0 || strcmp(k, "autoPause") == 0) {
        if (!json_is_null(v) && !json_is_boolean(v))
            return fail(err, errsz, "\"%s\" must be a boolean", k);
        return 0;
    }
    return unknown_field(k, err, errsz);
}

int e2bwire_timeout_parse(
    const char *body, size_t len, bool required, long long *ret_timeout, char *err, size_t errsz)
{
    long long t = -1;
    int rc = each_field(body, len, timeout_field, &t, err, errsz);
    if (rc == 0 && required && t < 0)
        rc = fail(err, errsz, "\"timeout\" (seconds) is required");
    if (rc == 0)
        *ret_timeout = t;
    return rc;
}

static int exec_field(void *ctx, const char *k, json_t *v, char *err, size_t errsz)
{
    struct e2bwire_exec *out = ctx;
    int rc;
    if (strcmp(k, "code") == 0) {
        if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v)))
            return fail(err, errsz, "\"code\" must be a string");
        free(out->code);
        if (!(out->code = strdup(json_string_value(v))))
            return fail(err, errsz, "out of memory");
    } else if (strcmp(k, "context_id") == 0) {
        if (json_is_null(v))
            return 0;
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) >= sizeof(out->context_id) ||
            !util_printable(json_string_value(v), json_string_length(v)))
            return fail(err, errsz, "\"context_id\" must be a context id");
        memcpy(out->context_id, json_string_value(v), json_string_length(v) + 1);
    } else if (strcmp(k, "language") == 0) {
        if (!json_is_null(v) &&
            !(json_is_string(v) &&
              (strcmp(json_string_value(v), "python") == 0 || json_string_length(v) == 0)))
            return fail(err, errsz, "only the language \"python\" is offered");
    } else if (strcmp(k, "env_vars") == 0) {
        json_decref(out->env);
        if ((rc = string_map(v, k, &out->env, err, errsz)) < 0)
            return rc;
        const char *name;
        json_t *val;
        json_object_foreach(out->env, name, val)
        {
            if (!e2bwire_env_name_ok(name))
                return fail(err, errsz, "\"env_vars\": %.64s is not a variable name", name);
        }
    } else {
        return unknown_field(k, err, errsz);
    }
    return 0;
}

int e2bwire_exec_parse(
    const char *body, size_t len, struct e2bwire_exec *out, char *err, size_t errsz)
{
    memset(out, 0, sizeof(*out));
    int rc = each_field(body, len, exec_field, out, err, errsz);
    if (rc == 0 && !out->code)
        rc = fail(err, errsz, "\"code\" is required");
    if (rc < 0)
        e2bwire_exec_fini(out);
    return rc;
}

void e2bwire_exec_fini(struct e2bwire_exec *x)
{
    free(x->code);
    x->code = NULL;
    json_decref(x->env);
    x->env = NULL;
}

int e2bwire_path(const char *in, size_t len, char *out, size_t outsz)
{
    static const char home[] = E2BWIRE_HOME;
    const size_t hn = sizeof(home) - 1;
    if (outsz < FPATH_MAX + 1)
        return -ENOBUFS;
    if (len == 0 || len > 4 * FPATH_MAX || memchr(in, '\0', len))
        return -EINVAL;
    size_t i = 0;
    if (in[0] == '/') {
        if (len < hn || memcmp(in, home, hn) != 0 || (len > hn && in[hn] != '/'))
            return -EACCES;
        i = hn;
    }
    /* the components, "." dropped and ".." taken back, into out */
    size_t o = 0;
    size_t depth = 0;
    while (i < len) {
        while (i < len && in[i] == '/')
            i++;
        size_t s = i;
        while (i < len && in[i] != '/')
            i++;
        size_t n = i - s;
        if (n == 0 || (n == 1 && in[s] == '.'))
            continue;
        if (n == 2 && in[s] == '.' && in[s + 1] == '.') {
            if (depth == 0)
                return -EACCES;
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the '/' before it */
            depth--;
            continue;
        }
        if (o + (o ? 1 : 0) + n > FPATH_MAX)
            return -ENAMETOOLONG;
        if (o)
            out[o++] = '/';
        memcpy(out + o, in + s, n);
        o += n;
        depth++;
    }
    out[o] = '\0';
    if (o == 0)
        return 0;
    char tmp[FPATH_MAX + 1];
    int rc = fpath_normalize(out, o, tmp, sizeof(tmp));
    return rc < 0 ? rc : (int)o;
}

/* A path field of a filesystem request. */
static int fs_path(json_t *v, const char *field, char *out, char *err, size_t errsz)
{
    if (!json_is_string(v))
        return fail(err, errsz, "\"%s\" must be a string", field);
    int rc = e2bwire_path(json_string_value(v), json_string_length(v), out, FPATH_MAX + 1);
    if (rc == -EACCES) {
        snprintf(err, errsz,
                 "\"%s\": only paths under " E2BWIRE_HOME " (the workspace) are "
                 "offered",
                 field);
        return -EACCES;
    }
    if (rc < 0)
        return fail(err, errsz, "\"%s\" is not a valid path", field);
    return 0;
}

/* A request field by its JSON name or its proto name (protobuf JSON takes either). */
static bool field_is(const char *k, const char *json_name, const char *proto_name)
{
    return strcmp(k, json_name) == 0 || strcmp(k, proto_name) == 0;
}

/* A bool field of a request (null: false). */
static int flag(json_t *v, const char *field, bool *ret, char *err, size_t errsz)
{
    if (!json_is_boolean(v) && !json_is_null(v))
        return fail(err, errsz, "\"%s\" must be true or false", field);
    *ret = json_is_true(v);
    return 0;
}

/* e2bwire_fsreq_parse's fields: which call, which paths were given. */
struct fsreq_ctx {
    struct e2bwire_fsreq *out;
    bool move, list, watch, by_id;
    unsigned have; /* 1 path, source or watcher id, 2 destination */
};

static int fsreq_field(void *ctx, const char *k, json_t *v, char *err, size_t errsz)
{
    struct fsreq_ctx *c = ctx;
    bool on = false;
    int rc;
    if (!c->move && !c->by_id && strcmp(k, "path") == 0) {
        c->have |= 1;
        return fs_path(v, k, c->out->path, err, errsz);
    }
    if (c->move && strcmp(k, "source") == 0) {
        c->have |= 1;
        return fs_path(v, k, c->out->path, err, errsz);
    }
    if (c->move && strcmp(k, "destination") == 0) {
        c->have |= 2;
        return fs_path(v, k, c->out->path2, err, errsz);
    }
    if (c->list && strcmp(k, "depth") == 0) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 8)
            return fail(err, errsz, "\"depth\" must be 1 to 8");
        if (json_integer_value(v) > 0)
            c->out->depth = (unsigned)json_integer_value(v);
        return 0;
    }
    if (c->watch && strcmp(k, "recursive") == 0)
        return flag(v, k, &c->out->recursive, err, errsz);
    if (c->watch && field_is(k, "includeEntry", "include_entry")) {
        if ((rc = flag(v, k, &on, err, errsz)) < 0 || !on)
            return rc;
        snprintf(err, errsz, "\"includeEntry\" (envd 0.6.3's entries in watch events) "
                             "is not offered by kgw (docs/e2b.md)");
        return -ENOSYS;
    }
    if (c->watch && field_is(k, "allowNetworkMounts", "allow_network_mounts"))
        return flag(v, k, &on, err, errsz); /* a workspace has no network mounts */
    if (c->by_id && field_is(k, "watcherId", "watcher_id")) {
        const char *id = json_string_value(v);
        size_t n = json_string_length(v);
        if (!id || n == 0 || n > E2BWIRE_WATCHER_MAX ||
            strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != n)
            return fail(err, errsz, "\"%s\" must be a watcher id", k);
        memcpy(c->out->watcher, id, n + 1);
        c->have |= 1;
        return 0;
    }
    return unknown_field(k, err, errsz);
}

int e2bwire_fsreq_parse(const char *method, const char *body, size_t len,
                        struct e2bwire_fsreq *out, char *err, size_t errsz)
{
    memset(out, 0, sizeof(*out));
    out->depth = 1;
    struct fsreq_ctx c = {
        .out = out,
        .move = strcmp(method, "Move") == 0,
        .list = strcmp(method, "ListDir") == 0,
        .watch = strcmp(method, "WatchDir") == 0 || strcmp(method, "CreateWatcher") == 0,
        .by_id = strcmp(method, "GetWatcherEvents") == 0 || strcmp(method, "RemoveWatcher") == 0};
    int rc = each_field(body, len, fsreq_field, &c, err, errsz);
    if (rc == 0 && !(c.have & 1))
        rc = fail(err, errsz, "\"%s\" is required",
                  c.move ? "source" : c.by_id ? "watcherId" : "path");
    if (rc == 0 && c.move && !(c.have & 2))
        rc = fail(err, errsz, "\"destination\" is required");
    return rc;
}

/* Copies s (n bytes, no NUL inside) into the string area at *off; false when full. */
static bool put_str(
    char *area, size_t *off, const char *s, size_t n, const char *s2, size_t n2, const char **ret)
{
    if (n + n2 + 1 > E2BWIRE_ARGV_BYTES - *off)
        return false;
    *ret = area + *off;
    memcpy(area + *off, s, n);
    memcpy(area + *off + n, s2, n2);
    area[*off + n + n2] = '\0';
    *off += n + n2 + 1;
    return true;
}

/* e2bwire_start_parse's top-level fields; the process object is taken (a reference) for
 * after them. */
struct start_ctx {
    struct e2bwire_start *out;
    json_t *proc;
};

static int start_field(void *ctx, const char *k, json_t *v, char *err, size_t errsz)
{
    struct start_ctx *c = ctx;
    if (strcmp(k, "process") == 0) {
        c->proc = json_incref(v);
    } else if (strcmp(k, "pty") == 0) {
        if (!json_is_null(v)) {
            snprintf(err, errsz, "a PTY is not offered by kgw");
            return -ENOSYS;
        }
    } else if (strcmp(k, "stdin") == 0) {
        if (!json_is_boolean(v) && !json_is_null(v))
            return fail(err, errsz, "\"stdin\" must be a boolean");
        c->out->stdin_open = json_is_true(v);
    } else if (strcmp(k, "tag") == 0) {
        if (!json_is_string(v) && !json_is_null(v))
            return fail(err, errsz, "\"tag\" must be a string");
    } else {
        return unknown_field(k, err, errsz);
    }
    return 0;
}

int e2bwire_start_parse(
    const char *body, size_t len, struct e2bwire_start *out, char *err, size_t errsz)
{
    memset(out, 0, sizeof(*out));
    struct start_ctx sc = {.out = out};
    int rc = each_field(body, len, start_field, &sc, err, errsz);
    size_t off = 0, na = 0, ne = 0;
    const char *k;
    json_t *v, *proc = sc.proc;
    if (rc == 0 && !json_is_object(proc))
        rc = fail(err, errsz, "\"process\" (an object with \"cmd\") is required");
    if (rc == 0 && !(out->strs = malloc(E2BWIRE_ARGV_BYTES)))
        rc = fail(err, errsz, "out of memory");
    json_t *cmd = rc == 0 ? json_object_get(proc, "cmd") : NULL;
    if (rc == 0 && (!json_is_string(cmd) || json_string_length(cmd) == 0 ||
                    memchr(json_string_value(cmd), '\0', json_string_length(cmd)) ||
                    !put_str(out->strs, &off, json_string_value(cmd), json_string_length(cmd), "",
                             0, &out->argv[na++])))
        rc = fail(err, errsz, "\"process.cmd\" must be a program's path");
    json_object_foreach(rc == 0 ? proc : NULL, k, v)
    {
        if (strcmp(k, "cmd") == 0)
            continue;
        if (strcmp(k, "args") == 0) {
            size_t i;
            json_t *a;
            if (!json_is_array(v) || json_array_size(v) > E2BWIRE_ARGS_MAX) {
                rc = fail(err, errsz, "\"process.args\" must be at most %d strings",
                          E2BWIRE_ARGS_MAX);
                break;
            }
            json_array_foreach(v, i, a)
            {
                if (!json_is_string(a) ||
                    memchr(json_string_value(a), '\0', json_string_length(a)) ||
                    !put_str(out->strs, &off, json_string_value(a), json_string_length(a), "", 0,
                             &out->argv[na++])) {
                    rc = fail(err, errsz, "\"process.args\": strings of at most %d bytes in all",
                              E2BWIRE_ARGV_BYTES);
                    break;
                }
            }
        } else if (strcmp(k, "envs") == 0) {
            const char *ek;
            json_t *ev;
            if (json_is_null(v))
                continue;
            if (!json_is_object(v) || json_object_size(v) > E2BWIRE_MAP_MAX) {
                rc = fail(err, errsz, "\"process.envs\" must be at most %d strings",
                          E2BWIRE_MAP_MAX);
                break;
            }
            json_object_foreach(v, ek, ev)
            {
                char name[E2BWIRE_KEY_MAX + 2];
                if (!e2bwire_env_name_ok(ek) || !json_is_string(ev) ||
                    json_string_length(ev) > E2BWIRE_VALUE_MAX ||
                    memchr(json_string_value(ev), '\0', json_string_length(ev))) {
                    rc = fail(err, errsz,
                              "\"process.envs\": names of [A-Za-z0-9_] and string "
                              "values of at most %d bytes",
                              E2BWIRE_VALUE_MAX);
                    break;
                }
                int nn = snprintf(name, sizeof(name), "%s=", ek);
                if (!put_str(out->strs, &off, name, (size_t)nn, json_string_value(ev),
                             json_string_length(ev), &out->env[ne++])) {
                    rc = fail(err, errsz, "\"process\": over %d bytes", E2BWIRE_ARGV_BYTES);
                    break;
                }
            }
        } else if (strcmp(k, "cwd") == 0) {
            if (json_is_null(v))
                continue;
            const char *c = json_string_value(v);
            size_t cn = json_string_length(v);
            int pr = c ? e2bwire_path(c, cn, out->cwd, sizeof(out->cwd)) : -EINVAL;
            if (pr == -EACCES && c[0] == '/' && cn <= FPATH_MAX && util_printable(c, cn)) {
                memcpy(out->cwd, c, cn + 1); /* elsewhere in the sandbox's own file system */
                out->cwd_abs = true;
            } else if (pr < 0) {
                snprintf(err, errsz, "\"process.cwd\": not a directory path");
                rc = -EINVAL;
            }
        } else {
            rc = fail(err, errsz, "unknown field \"process.%.64s\"", k);
        }
        if (rc < 0)
            break;
    }
    json_decref(proc);
    if (rc < 0)
        e2bwire_start_fini(out);
    return rc;
}

void e2bwire_start_fini(struct e2bwire_start *s)
{
    free(s->strs);
    memset(s, 0, sizeof(*s));
}

int e2bwire_signal_parse(
    const char *body, size_t len, unsigned *ret_pid, int *ret_sig, char *err, size_t errsz)
{
    json_t *doc = load_object(body, len, err, errsz);
    if (!doc)
        return -EINVAL;
    json_t *proc = json_object_get(doc, "process"), *sig = json_object_get(doc, "signal");
    json_t *pid = json_object_get(proc, "pid");
    int rc = 0, s = 0;
    if (json_object_size(doc) != (size_t)(!!proc + !!sig) || !json_is_object(proc) ||
        json_object_size(proc) != 1 || !json_is_integer(pid) || json_integer_value(pid) < 0 ||
        json_integer_value(pid) > 0xffffffffLL)
        rc = fail(err, errsz, "{\"process\": {\"pid\": N}, \"signal\"} is expected");
    else if ((json_is_string(sig) && strcmp(json_string_value(sig), "SIGNAL_SIGKILL") == 0) ||
             (json_is_integer(sig) && json_integer_value(sig) == 9))
        s = 9;
    else if ((json_is_string(sig) && strcmp(json_string_value(sig), "SIGNAL_SIGTERM") == 0) ||
             (json_is_integer(sig) && json_integer_value(sig) == 15))
        s = 15;
    else
        rc = fail(err, errsz, "\"signal\" must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
    if (rc == 0) {
        *ret_pid = (unsigned)json_integer_value(pid);
        *ret_sig = s;
    }
    json_decref(doc);
    return rc;
}

int e2bwire_input_parse(const char *body, size_t len, unsigned *ret_pid, uint8_t **ret_data,
                        size_t *ret_n, char *err, size_t errsz)
{
    json_t *doc = load_object(body, len, err, errsz);
    if (!doc)
        return -EINVAL;
    json_t *proc = json_object_get(doc, "process"), *input = json_object_get(doc, "input");
    json_t *pid = json_object_get(proc, "pid");
    json_t *in = json_object_get(input, "stdin");
    int rc = 0;
    bool close = ret_data == NULL; /* CloseStdin: the process alone */
    if (json_object_size(doc) != (size_t)(!!proc + !!input) || (close && input) ||
        !json_is_object(proc) || json_object_size(proc) != 1 || !json_is_integer(pid) ||
        json_integer_value(pid) < 0 || json_integer_value(pid) > 0xffffffffLL)
        rc = fail(err, errsz, close ? "{\"process\": {\"pid\": N}} is expected"
                                    : "{\"process\": {\"pid\": N}, \"input\": {\"stdin\": "
                                      "BASE64}} is expected");
    else if (!close && input && (!json_is_object(input) || json_object_size(input) > 1 ||
                                 (json_object_size(input) == 1 && !json_is_string(in))))
        rc = fail(err, errsz, "\"input\" must be {\"stdin\": BASE64} (a PTY is not offered)");
    if (rc == 0 && !close) {
        const char *b64 = in ? json_string_value(in) : "";
        size_t bn = strlen(b64), n = 0;
        uint8_t *data = malloc(bn / 4 * 3 + 3);
        if (!data)
            rc = fail(err, errsz, "out of memory");
        else if (sodium_base642bin(data, bn / 4 * 3 + 3, b64, bn, NULL, &n, NULL,
                                   sodium_base64_VARIANT_ORIGINAL) != 0 &&
                 sodium_base642bin(data, bn / 4 * 3 + 3, b64, bn, NULL, &n, NULL,
                                   sodium_base64_VARIANT_ORIGINAL_NO_PADDING) != 0) {
            free(data);
            rc = fail(err, errsz, "\"input.stdin\" must be base64");
        } else {
            *ret_data = data;
            *ret_n = n;
        }
    }
    if (rc == 0)
        *ret_pid = (unsigned)json_integer_value(pid);
    json_decref(doc);
    return rc;
}

int e2bwire_envelope_parse(const uint8_t *in, size_t len, size_t max, uint8_t *ret_flags,
                           size_t *ret_off, size_t *ret_n, size_t *ret_used)
{
    if (len < 5)
        return -EAGAIN;
    size_t n = (size_t)in[1] << 24 | (size_t)in[2] << 16 | (size_t)in[3] << 8 | in[4];
    if (n > max)
        return -EMSGSIZE;
    if (in[0] & E2BWIRE_ENV_COMPRESSED)
        return -EPROTO;
    if (len - 5 < n)
        return -EAGAIN;
    *ret_flags = in[0];
    *ret_off = 5;
    *ret_n = n;
    *ret_used = 5 + n;
    return 0;
}

int e2bwire_envelope_write(buf_t *out, uint8_t flags, const void *payload, size_t n)
{
    if (n > UINT32_MAX)
        return -EMSGSIZE;
    uint8_t h[5] = {flags, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    int rc = buf_append(out, h, sizeof(h));
    return rc < 0 ? rc : buf_append(out, payload, n);
}

size_t e2bwire_watch_types(uint32_t mask, const char *ret[E2BWIRE_WATCH_TYPES])
{
    static const struct {
        uint32_t mask;
        const char *name;
    } map[E2BWIRE_WATCH_TYPES] = {
        {IN_CREATE | IN_MOVED_TO, "EVENT_TYPE_CREATE"},
        {IN_MOVED_FROM | IN_MOVE_SELF, "EVENT_TYPE_RENAME"},
        {IN_ATTRIB, "EVENT_TYPE_CHMOD"},
        {IN_MODIFY, "EVENT_TYPE_WRITE"},
        {IN_DELETE | IN_DELETE_SELF, "EVENT_TYPE_REMOVE"},
    };
    size_t n = 0;
    for (size_t i = 0; i < E2BWIRE_WATCH_TYPES; i++)
        if (mask & map[i].mask)
            ret[n++] = map[i].name;
    return n;
}

int e2bwire_inotify_next(const uint8_t *buf, size_t len, size_t *off, int *ret_wd,
                         uint32_t *ret_mask, const char **ret_name, size_t *ret_nlen)
{
    struct inotify_event ev;
    if (*off >= len)
        return 0;
    if (len - *off < sizeof(ev))
        return -EBADMSG;
    memcpy(&ev, buf + *off, sizeof(ev)); /* (buf need not be aligned) */
    if (ev.len > len - *off - sizeof(ev))
        return -EBADMSG;
    const char *name = (const char *)buf + *off + sizeof(ev);
    *ret_wd = ev.wd;
    *ret_mask = ev.mask;
    *ret_name = name;
    *ret_nlen = strnlen(name, ev.len);
    *off += sizeof(ev) + ev.len;
    return 1;
}

void e2bwire_signature(const char *path, const char *op, const char *user, const char *token,
                       const long long *expiration, char out[E2BWIRE_SIGNATURE_LEN + 1])
{
    crypto_hash_sha256_state st;
    unsigned char h[crypto_hash_sha256_BYTES];
    char exp[24];
    const char *parts[] = {path, ":", op, ":", user, ":", token};
    crypto_hash_sha256_init(&st);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        crypto_hash_sha256_update(&st, (const unsigned char *)parts[i], strlen(parts[i]));
    if (expiration) {
        int n = snprintf(exp, sizeof(exp), ":%lld", *expiration);
        crypto_hash_sha256_update(&st, (const unsigned char *)exp, (unsigned long long)n);
    }
    crypto_hash_sha256_final(&st, h);
    memcpy(out, "v1_", 3);
    sodium_bin2base64(out + 3, E2BWIRE_SIGNATURE_LEN + 1 - 3, h, sizeof(h),
                      sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
    sodium_memzero(&st, sizeof(st));
}

int e2bwire_expiration_parse(const char *s, long long *ret)
{
    const char *d = s + (s[0] == '+' || s[0] == '-');
    size_t n = strlen(d);
    if (n == 0 || n > 19 || strspn(d, "0123456789") != n)
        return -EINVAL;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return -EINVAL;
    *ret = v;
    return 0;
}

/* ---- multipart/form-data ---- */

int e2bwire_boundary(const char *ctype, char *out, size_t outsz)
{
    static const char type[] = "multipart/form-data";
    if (strncasecmp(ctype, type, sizeof(type) - 1) != 0)
        return -EINVAL;
    const char *p = ctype + sizeof(type) - 1;
    while (*p) {
        p += strspn(p, " \t");
        if (*p != ';')
            return -EINVAL;
        p++;
        p += strspn(p, " \t");
        size_t kn = strcspn(p, "=;");
        bool is_boundary = kn == 8 && strncasecmp(p, "boundary", 8) == 0;
        p += kn;
        if (*p != '=')
            continue;
        p++;
        size_t vn;
        const char *v = p;
        if (*p == '"') {
            v = ++p;
            vn = strcspn(p, "\"");
            if (p[vn] != '"')
                return -EINVAL;
            p += vn + 1;
        } else {
            vn = strcspn(p, "; \t");
            p += vn;
        }
        if (!is_boundary)
            continue;
        if (vn == 0 || vn > E2BWIRE_BOUNDARY_MAX || vn >= outsz || !util_printable(v, vn))
            return -EINVAL;
        memcpy(out, v, vn);
        out[vn] = '\0';
        return 0;
    }
    return -EINVAL;
}

/* A Content-Disposition parameter's value at *pp (a quoted string, its backslash escapes
 * undone, or a token), up to end, into out: its length; -ENAMETOOLONG when it is longer than
 * outsz - 1 (out holds its start); -EINVAL for a NUL or a quote not closed. *pp is past it
 * (but for -EINVAL). */
static int disp_value(const char **pp, const char *end, char *out, size_t outsz)
{
    const char *p = *pp;
    size_t o = 0;
    bool over = false, nul = false, quoted = p < end && *p == '"';
    for (p += quoted; p < end; p++) {
        if (quoted ? *p == '"' : (*p == ';' || *p == ' ' || *p == '\t'))
            break;
        if (quoted && *p == '\\' && p + 1 < end)
            p++;
        nul |= *p == '\0';
        if (o + 1 < outsz)
            out[o++] = *p;
        else
            over = true;
    }
    if (quoted && p == end)
        return -EINVAL;
    out[o] = '\0';
    *pp = p + quoted;
    return nul ? -EINVAL : over ? -ENAMETOOLONG : (int)o;
}

/* A Content-Disposition header's value (p..end): form-data's name and filename into ret. */
static int disposition(const char *p, const char *end, struct e2bwire_part *ret)
{
    static const char fd[] = "form-data";
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if ((size_t)(end - p) < sizeof(fd) - 1 || strncasecmp(p, fd, sizeof(fd) - 1) != 0)
        return 0; /* not a form field: no name */
    p += sizeof(fd) - 1;
    char name[sizeof(ret->name)], other[2];
    bool has_name = false;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end)
            break;
        if (*p++ != ';')
            return -EINVAL;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *k = p;
        while (p < end && *p != '=' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        size_t kn = (size_t)(p - k);
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end || *p != '=')
            continue; /* a parameter without a value */
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        int rc;
        if (kn == 4 && strncasecmp(k, "name", 4) == 0) {
            rc = disp_value(&p, end, name, sizeof(name));
            has_name = rc >= 0; /* (a longer name is not one kgw takes: the part is ignored) */
            rc = rc == -ENAMETOOLONG ? 0 : rc;
        } else if (kn == 8 && strncasecmp(k, "filename", 8) == 0) {
            rc = disp_value(&p, end, ret->filename, sizeof(ret->filename));
            ret->has_filename = rc >= 0;
        } else { /* another parameter: skipped */
            rc = disp_value(&p, end, other, sizeof(other));
            rc = rc == -ENAMETOOLONG ? 0 : rc;
        }
        if (rc < 0)
            return rc;
    }
    if (has_name)
        memcpy(ret->name, name, sizeof(name));
    return 0;
}

int e2bwire_part_next(const char *body, size_t len, const char *boundary, size_t *off,
                      struct e2bwire_part *ret)
{
    char delim[E2BWIRE_BOUNDARY_MAX + 5] = "\r\n--";
    size_t bl = strlen(boundary);
    if (bl == 0 || bl > E2BWIRE_BOUNDARY_MAX)
        return -EINVAL;
    memcpy(delim + 4, boundary, bl);
    size_t dl = bl + 4;
    if (*off == 0) { /* the first delimiter: at the start, or after a preamble's CRLF */
        const char *d = NULL;
        if (len >= dl - 2 && memcmp(body, delim + 2, dl - 2) == 0)
            *off = dl - 2;
        else if ((d = memmem(body, len, delim, dl)))
            *off = (size_t)(d - body) + dl;
        else
            return -EINVAL;
    }
    if (*off > len)
        return -EINVAL;
    size_t o = *off;
    if (len - o >= 2 && body[o] == '-' && body[o + 1] == '-')
        return 0; /* the closing delimiter */
    while (o < len && (body[o] == ' ' || body[o] == '\t'))
        o++;
    if (len - o < 2 || body[o] != '\r' || body[o + 1] != '\n')
        return -EINVAL;
    o += 2;
    memset(ret, 0, sizeof(*ret));
    size_t head = o;
    for (;;) { /* the headers, up to an empty line */
        const char *eol = memmem(body + o, len - o, "\r\n", 2);
        if (!eol || (size_t)(eol - body) - head > E2BWIRE_PART_HEAD)
            return -EINVAL;
        const char *line = body + o;
        o = (size_t)(eol - body) + 2;
        if (eol == line)
            break;
        static const char cd[] = "content-disposition:";
        if ((size_t)(eol - line) >= sizeof(cd) - 1 && strncasecmp(line, cd, sizeof(cd) - 1) == 0) {
            int rc = disposition(line + sizeof(cd) - 1, eol, ret);
            if (rc < 0)
                return rc;
        }
    }
    const char *end = memmem(body + o, len - o, delim, dl);
    if (!end)
        return -EINVAL;
    ret->data = body + o;
    ret->len = (size_t)(end - body) - o;
    *off = (size_t)(end - body) + dl;
    return 1;
}

const char *e2bwire_code_name(int code)
{
    switch (code) {
    case -ENOENT:
    case -ESRCH:
        return "not_found";
    case -EEXIST:
    case -ENOTEMPTY:
        return "already_exists";
    case -EACCES:
    case -EPERM:
        return "permission_denied";
    case -EINVAL:
    case -ENAMETOOLONG:
    case -ENOTDIR:
    case -EISDIR:
        return "invalid_argument";
    case -ENOSPC:
    case -EDQUOT:
    case -ENOMEM:
    case -EFBIG:
        return "resource_exhausted";
    case -ENOSYS:
        return "unimplemented";
    case -EAGAIN:
        return "unavailable";
    case -EXDEV:
    case -ELOOP:
        return "failed_precondition";
    default:
        return "internal";
    }
}

int e2bwire_code_status(const char *code)
{
    static const struct {
        const char *name;
        int status;
    } map[] = {
        {"canceled", 499},
        {"unknown", 500},
        {"invalid_argument", 400},
        {"deadline_exceeded", 504},
        {"not_found", 404},
        {"already_exists", 409},
        {"permission_denied", 403},
        {"resource_exhausted", 429},
        {"failed_precondition", 400},
        {"aborted", 409},
        {"out_of_range", 400},
        {"unimplemented", 501},
        {"internal", 500},
        {"unavailable", 503},
        {"data_loss", 500},
        {"unauthenticated", 401},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(map[i].name, code) == 0)
            return map[i].status;
    return 500;
}

/* ---- the listing's query ---- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes in (n bytes) into out ('+' is a space, as a form's query has it): its
 * length, or -EINVAL for a bad escape, a NUL or a result over outsz - 1 bytes. */
static int unescape(const char *in, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -EINVAL;
            int h = hexval(in[i + 1]), l = hexval(in[i + 2]);
            if (h < 0 || l < 0)
                return -EINVAL;
            c = (char)(h << 4 | l);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (c == '\0' || o + 1 >= outsz)
            return -EINVAL;
        out[o++] = c;
    }
    out[o] = '\0';
    return (int)o;
}

/* metadata=k=v&k2=v2: each key and value decoded twice (the query's layer of the SDK's
 * encoding, then its own encodeURIComponent), as E2B's API reads them. */
static int list_metadata(const char *v, json_t *into, char *err, size_t errsz)
{
    const char *p = v;
    while (*p) {
        const char *end = strchr(p, '&');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (n > 0) {
            char k1[3 * E2BWIRE_KEY_MAX + 1], k2[E2BWIRE_KEY_MAX + 1];
            char v1[3 * E2BWIRE_VALUE_MAX + 1], v2[E2BWIRE_VALUE_MAX + 1];
            size_t kn = eq ? (size_t)(eq - p) : n;
            int klen;
            if (!eq || (klen = unescape(p, kn, k1, sizeof(k1))) <= 0 ||
                (klen = unescape(k1, (size_t)klen, k2, sizeof(k2))) <= 0 ||
                !util_printable(k2, (size_t)klen))
                return fail(err, errsz,
                            "\"metadata\": expected KEY=VALUE pairs joined by '&', each key "
                            "(1 to %d printable characters) and value URL-encoded",
                            E2BWIRE_KEY_MAX);
            int vlen = unescape(eq + 1, n - kn - 1, v1, sizeof(v1));
            if (vlen < 0 || (vlen = unescape(v1, (size_t)vlen, v2, sizeof(v2))) < 0)
                return fail(err, errsz,
                            "\"metadata\": a value is not URL-encoded or is over %d bytes",
                            E2BWIRE_VALUE_MAX);
            if (json_object_size(into) >= E2BWIRE_MAP_MAX)
                return fail(err, errsz, "\"metadata\": more than %d pairs", E2BWIRE_MAP_MAX);
            json_t *s = json_stringn(v2, (size_t)vlen);
            if (!s)
                return fail(err, errsz, "\"metadata\": a value is not UTF-8");
            json_object_set_new(into, k2, s);
        }
        p = end ? end + 1 : p + n;
    }
    return 0;
}

/* RFC 3339 (what Date.toISOString and E2B's API write) to microseconds since 1970. */
static int rfc3339(const char *v, long long *ret)
{
    int y, mo, d, h, mi, s, n = 0;
    if (sscanf(v, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &n) != 6 || n != 19 ||
        mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 || y < 1970)
        return -EINVAL;
    const char *p = v + n;
    long long us = 0;
    if (*p == '.') {
        long long scale = 100000;
        p++;
        if (*p < '0' || *p > '9')
            return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++, scale /= 10)
            us += scale > 0 ? (*p - '0') * scale : 0;
    }
    long long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, m = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &m) != 2 || m != 5 || oh > 23 || om > 59)
            return -EINVAL;
        off = (*p == '+' ? 1 : -1) * (oh * 3600LL + om * 60LL);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p)
        return -EINVAL;
    /* days from 1970-01-01 (the civil-from-days inverse) */
    long long yy = y - (mo <= 2);
    long long era = yy / 400, yoe = yy - era * 400;
    long long doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    long long days = era * 146097 + doe - 719468;
    *ret = ((days * 86400 + h * 3600LL + mi * 60LL + s) - off) * 1000000LL + us;
    return 0;
}

void e2bwire_list_token(char *out, size_t outsz, long long started_us, const char *id)
{
    snprintf(out, outsz, "%lld.%s", started_us, id);
}

static int list_token(const char *v, struct e2bwire_list *out)
{
    char *end;
    errno = 0;
    long long us = strtoll(v, &end, 10);
    if (errno || end == v || *end != '.' || us < 0 ||
        !util_is_uuid(end + 1, strlen(end + 1)))
        return -EINVAL;
    out->token_us = us;
    snprintf(out->token_id, sizeof(out->token_id), "%s", end + 1);
    out->has_token = true;
    return 0;
}

int e2bwire_list_parse(const char *const *args, size_t n, struct e2bwire_list *out, char *err,
                       size_t errsz)
{
    memset(out, 0, sizeof(*out));
    out->limit = E2BWIRE_LIST_LIMIT_MAX;
    out->started_after_us = -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *a = args[i];
        const char *eq = strchr(a, '=');
        size_t kn = eq ? (size_t)(eq - a) : strlen(a);
        const char *v = eq ? eq + 1 : "";
#define IS(name) (kn == sizeof(name) - 1 && memcmp(a, name, kn) == 0)
        if (IS("metadata")) {
            if (!out->metadata && !(out->metadata = json_object()))
                rc = fail(err, errsz, "out of memory");
            else
                rc = list_metadata(v, out->metadata, err, errsz);
        } else if (IS("state")) {
            const char *p = v;
            while (rc == 0 && *p) {
                size_t sn = strcspn(p, ",");
                if (sn == 7 && memcmp(p, "running", 7) == 0)
                    out->states |= E2BWIRE_STATE_RUNNING;
                else if (sn == 6 && memcmp(p, "paused", 6) == 0)
                    out->states |= E2BWIRE_STATE_PAUSED;
                else
                    rc = fail(err, errsz, "\"state\": expected running or paused, "
                                          "comma-separated");
                p += sn + (p[sn] == ',');
            }
        } else if (IS("limit")) {
            char *end;
            errno = 0;
            long lim = strtol(v, &end, 10);
            if (errno || end == v || *end || lim < 1 || lim > E2BWIRE_LIST_LIMIT_MAX)
                rc = fail(err, errsz, "\"limit\" must be 1 to %d", E2BWIRE_LIST_LIMIT_MAX);
            else
                out->limit = (unsigned)lim;
        } else if (IS("order")) {
            if (strcmp(v, "asc") == 0)
                out->ascending = true;
            else if (strcmp(v, "desc") == 0)
                out->ascending = false;
            else
                rc = fail(err, errsz, "\"order\" must be asc or desc");
        } else if (IS("startedAfter")) {
            if (rfc3339(v, &out->started_after_us) < 0)
                rc = fail(err, errsz, "\"startedAfter\" must be an RFC 3339 time");
        } else if (IS("template")) {
            size_t tn = strlen(v);
            if (tn == 0 || tn > E2BWIRE_TEMPLATE_MAX || !util_printable(v, tn))
                rc = fail(err, errsz, "\"template\" must be 1 to %d printable characters",
                          E2BWIRE_TEMPLATE_MAX);
            else
                memcpy(out->template_id, v, tn + 1);
        } else if (IS("nextToken")) {
            if (list_token(v, out) < 0)
                rc = fail(err, errsz, "\"nextToken\" is not one this listing gave");
        } else {
            char q[80];
            rc = fail(err, errsz, "unknown query parameter %s: kgw filters by metadata, state, "
                                  "template and startedAfter, pages by limit and nextToken",
                      log_quote(q, sizeof(q), a, kn));
        }
#undef IS
    }
    if (!out->states)
        out->states = E2BWIRE_STATE_RUNNING | E2BWIRE_STATE_PAUSED;
    if (rc < 0)
        e2bwire_list_fini(out);
    return rc;
}

void e2bwire_list_fini(struct e2bwire_list *l)
{
    json_decref(l->metadata);
    l->metadata = NULL;
}

bool e2bwire_list_before(const struct e2bwire_list *l, long long started_us, const char *id,
                         long long b_us, const char *b_id)
{
    int c = started_us < b_us ? -1 : started_us > b_us ? 1 : strcmp(id, b_id);
    return l->ascending ? c < 0 : c > 0;
}
