/* Table-driven configuration: one static table per program gives every setting's name, type,
 * default, bounds and help. Values come from defaults, then KGW_* environment variables, then
 * --flags; the same table prints --help and the man page's OPTIONS. */
#ifndef KGW_COMMON_CONFIG_H
#define KGW_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum cfg_type { CFG_STR, CFG_INT, CFG_BOOL };

enum {
    CFG_SECRET = 1 << 0,
    CFG_REPEAT = 1 << 1, /* CFG_STR: repeated flags join as "a,b" (the first replaces the
                            default and the environment) */
};

struct cfg_option {
    const char *name; /* "max-kernels": flag --max-kernels, env KGW_MAX_KERNELS */
    enum cfg_type type;
    void *target; /* const char **, long long *, bool * */
    const char *def;
    long long min, max;
    unsigned flags;
    const char *help;
};

/* Applies defaults, environment and argv. Non-option arguments are an error. On failure
 * writes a message to err and returns -EINVAL (-ENOMEM). Joined CFG_REPEAT values are
 * allocated and live as long as the program. */
int cfg_parse(const struct cfg_option *opts, size_t n, int argc, char **argv, char *err,
              size_t errsz);
void cfg_help(FILE *out, const struct cfg_option *opts, size_t n);
/* The same table as roff (man(7)) for a man page's OPTIONS section: one .TP entry per option
 * with its help, environment variable, default and range. */
void cfg_man(FILE *out, const struct cfg_option *opts, size_t n);
/* s as roff text: backslashes and hyphens escaped (an option name must copy as an ASCII '-'),
 * a leading '.' or '\'' kept from reading as a request, a break point after each comma. */
void cfg_roff(FILE *out, const char *s);

#endif
