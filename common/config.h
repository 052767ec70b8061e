/* Table-driven configuration: one static table per program gives every setting's name, type,
 * default, bounds and help. Values come from defaults, then KGW_* environment variables, then
 * --flags; the same table prints --help and the man page's OPTIONS. */
#ifndef KGW_COMMON_CONFIG_H
#define KGW_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Integer types differ in the field they write (the option reads an integer in the table's
 * range either way): CFG_INT a long long, CFG_INT32 an int, CFG_UINT32 an unsigned,
 * CFG_SECONDS_AS_MS an int holding the value given (seconds) times 1000, CFG_INT_AS_DOUBLE a
 * double. A value that does not fit its field is refused like one outside the range. */
enum cfg_type {
    CFG_STR,
    CFG_INT,
    CFG_BOOL,
    CFG_INT32,
    CFG_UINT32,
    CFG_SECONDS_AS_MS,
    CFG_INT_AS_DOUBLE,
};

enum {
    CFG_SECRET = 1 << 0,
    CFG_REPEAT = 1 << 1, /* CFG_STR: repeated flags join as "a,b" (the first replaces the
                            default and the environment) */
};

struct cfg_option {
    const char *name; /* "max-kernels": flag --max-kernels, env KGW_MAX_KERNELS */
    enum cfg_type type;
    void *target; /* const char **, bool *, or the integer type's field */
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
/* True for the integer types (they take N and have a range). */
bool cfg_type_is_int(enum cfg_type t);
void cfg_help(FILE *out, const struct cfg_option *opts, size_t n);
/* The same table as roff (man(7)) for a man page's OPTIONS section: one .TP entry per option
 * with its help, environment variable, default and range. */
void cfg_man(FILE *out, const struct cfg_option *opts, size_t n);
/* s as roff text: backslashes and hyphens escaped (an option name must copy as an ASCII '-'),
 * a leading '.' or '\'' kept from reading as a request, a break point after each comma. */
void cfg_roff(FILE *out, const char *s);

#endif
