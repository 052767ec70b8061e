#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void env_name(char *out, size_t outsz, const char *name)
{
    size_t o = (size_t)snprintf(out, outsz, "KGW_");
    for (const char *p = name; *p && o + 1 < outsz; p++)
        out[o++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[o] = '\0';
}

static int parse_bool(const char *v, bool *ret)
{
    if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
        !strcasecmp(v, "on")) {
        *ret = true;
        return 0;
    }
    if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
        !strcasecmp(v, "off")) {
        *ret = false;
        return 0;
    }
    return -EINVAL;
}

bool cfg_type_is_int(enum cfg_type t)
{
    return t != CFG_STR && t != CFG_BOOL;
}

/* x (in the option's range) into the option's field, converted to its unit and width. */
static int store_int(const struct cfg_option *o, long long x, const char *origin, char *err,
                     size_t errsz)
{
    switch (o->type) {
    case CFG_INT:
        *(long long *)o->target = x;
        return 0;
    case CFG_INT32:
        if (x < INT_MIN || x > INT_MAX)
            break;
        *(int *)o->target = (int)x;
        return 0;
    case CFG_UINT32:
        if (x < 0 || (unsigned long long)x > UINT_MAX)
            break;
        *(unsigned *)o->target = (unsigned)x;
        return 0;
    case CFG_SECONDS_AS_MS:
        if (x < INT_MIN / 1000 || x > INT_MAX / 1000)
            break;
        *(int *)o->target = (int)x * 1000;
        return 0;
    case CFG_INT_AS_DOUBLE:
        *(double *)o->target = (double)x;
        return 0;
    default:
        break;
    }
    snprintf(err, errsz, "%s: %lld does not fit the setting's field", origin, x);
    return -EINVAL;
}

static int apply(const struct cfg_option *o, const char *v, const char *origin, char *err,
                 size_t errsz)
{
    switch (o->type) {
    case CFG_STR:
        *(const char **)o->target = v;
        return 0;
    case CFG_BOOL:
        if (parse_bool(v, (bool *)o->target) < 0) {
            snprintf(err, errsz, "%s: '%.64s' is not a boolean", origin, v);
            return -EINVAL;
        }
        return 0;
    case CFG_INT:
    case CFG_INT32:
    case CFG_UINT32:
    case CFG_SECONDS_AS_MS:
    case CFG_INT_AS_DOUBLE: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) {
            snprintf(err, errsz, "%s: '%.64s' is not an integer", origin, v);
            return -EINVAL;
        }
        if (x < o->min || x > o->max) {
            snprintf(err, errsz, "%s: %lld is outside [%lld, %lld]", origin, x, o->min, o->max);
            return -EINVAL;
        }
        return store_int(o, x, origin, err, errsz);
    }
    }
    return -EINVAL;
}

static const struct cfg_option *find(const struct cfg_option *opts, size_t n, const char *name,
                                     size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
            return &opts[i];
    return NULL;
}

/* A CFG_REPEAT flag given again: "previous,value". prev_ours: the previous value is a join
 * of ours (grown in place), else argv's. */
static int append(const struct cfg_option *o, const char *v, bool prev_ours, char *err,
                  size_t errsz)
{
    const char *prev = *(const char **)o->target;
    size_t np = strlen(prev);
    char *joined = prev_ours ? realloc((char *)prev, np + strlen(v) + 2)
                             : malloc(np + strlen(v) + 2);
    if (!joined) {
        snprintf(err, errsz, "--%s: out of memory", o->name);
        return -ENOMEM;
    }
    if (!prev_ours)
        memcpy(joined, prev, np);
    joined[np] = ',';
    strcpy(joined + np + 1, v);
    *(const char **)o->target = joined; /* lives as long as the program */
    return 0;
}

int cfg_parse(const struct cfg_option *opts, size_t n, int argc, char **argv, char *err,
              size_t errsz)
{
    char ename[96], origin[128];
    int r;
    /* CFG_REPEAT options already given as flags (a bit per option: tables are small) */
    unsigned long long seen = 0, joined = 0;

    for (size_t i = 0; i < n; i++) {
        if (opts[i].def) {
            snprintf(origin, sizeof(origin), "default of --%s", opts[i].name);
            if ((r = apply(&opts[i], opts[i].def, origin, err, errsz)) < 0)
                return r;
        }
        env_name(ename, sizeof(ename), opts[i].name);
        const char *v = getenv(ename);
        if (v) {
            if ((r = apply(&opts[i], v, ename, err, errsz)) < 0)
                return r;
        }
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, errsz, "unexpected argument '%.64s'", arg);
            return -EINVAL;
        }
        arg += 2;
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct cfg_option *o = find(opts, n, arg, len);
        const char *v = eq ? eq + 1 : NULL;
        if (!o && !eq && len > 3 && !strncmp(arg, "no-", 3)) {
            o = find(opts, n, arg + 3, len - 3);
            if (o && o->type == CFG_BOOL) {
                *(bool *)o->target = false;
                continue;
            }
            o = NULL;
        }
        if (!o) {
            snprintf(err, errsz, "unknown option '--%.*s' (see --help)", (int)(len > 64 ? 64 : len),
                     arg);
            return -EINVAL;
        }
        if (!v) {
            if (o->type == CFG_BOOL) {
                *(bool *)o->target = true;
                continue;
            }
            if (a + 1 >= argc) {
                snprintf(err, errsz, "--%s needs a value", o->name);
                return -EINVAL;
            }
            v = argv[++a];
        }
        snprintf(origin, sizeof(origin), "--%s", o->name);
        size_t bit = (size_t)(o - opts);
        if ((o->flags & CFG_REPEAT) && o->type == CFG_STR && bit < 64 && (seen >> bit & 1)) {
            if ((r = append(o, v, joined >> bit & 1, err, errsz)) < 0)
                return r;
            joined |= 1ULL << bit;
            continue;
        }
        if ((r = apply(o, v, origin, err, errsz)) < 0)
            return r;
        if (bit < 64)
            seen |= 1ULL << bit;
    }
    return 0;
}

void cfg_help(FILE *out, const struct cfg_option *opts, size_t n)
{
    char ename[96], flag[64];
    for (size_t i = 0; i < n; i++) {
        const struct cfg_option *o = &opts[i];
        env_name(ename, sizeof(ename), o->name);
        snprintf(flag, sizeof(flag), "--%s%s", o->name,
                 o->type == CFG_BOOL ? "" : cfg_type_is_int(o->type) ? " N" : " VALUE");
        fprintf(out, "  %-28s %s\n", flag, o->help);
        fprintf(out, "  %-28s env %s", "", ename);
        if (o->def && !(o->flags & CFG_SECRET))
            fprintf(out, "; default %s", o->def[0] ? o->def : "(empty)");
        if (cfg_type_is_int(o->type))
            fprintf(out, "; range %lld..%lld", o->min, o->max);
        fputc('\n', out);
    }
}

void cfg_roff(FILE *out, const char *s)
{
    if (*s == '.' || *s == '\'')
        fputs("\\&", out);
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\e", out);
        else if (*s == '-')
            fputs("\\-", out);
        else if (*s == ',')
            fputs(",\\:", out); /* a line may break after it (long comma-separated defaults) */
        else
            fputc(*s, out);
    }
}

void cfg_man(FILE *out, const struct cfg_option *opts, size_t n)
{
    char ename[96];
    for (size_t i = 0; i < n; i++) {
        const struct cfg_option *o = &opts[i];
        env_name(ename, sizeof(ename), o->name);
        fputs(".TP\n\\fB", out);
        cfg_roff(out, "--");
        cfg_roff(out, o->name);
        fputs("\\fR", out);
        if (o->type == CFG_BOOL) {
            fputs(", \\fB", out);
            cfg_roff(out, "--no-");
            cfg_roff(out, o->name);
            fputs("\\fR", out);
        } else {
            fputs(cfg_type_is_int(o->type) ? " \\fIN\\fR" : " \\fIVALUE\\fR", out);
        }
        fputc('\n', out);
        cfg_roff(out, o->help);
        size_t hl = strlen(o->help);
        fputs(hl && o->help[hl - 1] == '.' ? "\n.br\n" : ".\n.br\n", out);
        fputs("Environment: \\fB", out);
        cfg_roff(out, ename);
        fputs("\\fR", out);
        if (o->def && !(o->flags & CFG_SECRET)) {
            fputs("; default: ", out);
            cfg_roff(out, o->def[0] ? o->def : "(empty)");
        }
        if (cfg_type_is_int(o->type)) {
            char range[64];
            snprintf(range, sizeof(range), "; range: %lld..%lld", o->min, o->max);
            cfg_roff(out, range);
        }
        if (o->flags & CFG_REPEAT)
            fputs("; may be given more than once", out);
        fputs(".\n", out);
    }
}
