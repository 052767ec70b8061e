/* cfg_parse / cfg_help: defaults, then KGW_* environment, then --flags. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/config.h"

static const char *o_ip;
static long long o_port;
static long long o_max_kernels;
static bool o_verbose;
static bool o_allow;
static const char *o_token;

static const struct cfg_option opts[] = {
    {"ip", CFG_STR, &o_ip, "127.0.0.1", 0, 0, 0, "listen address"},
    {"port", CFG_INT, &o_port, "8888", 1, 65535, 0, "listen port"},
    {"max-kernels", CFG_INT, &o_max_kernels, "-1", -1, 1000, 0, "kernel limit"},
    {"verbose", CFG_BOOL, &o_verbose, "false", 0, 0, 0, "log more"},
    {"allow-origin", CFG_BOOL, &o_allow, "true", 0, 0, 0, "CORS"},
    {"auth-token", CFG_STR, &o_token, "", 0, 0, CFG_SECRET, "token"},
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static const char *const env_names[] = {"KGW_IP",      "KGW_PORT",         "KGW_MAX_KERNELS",
                                        "KGW_VERBOSE", "KGW_ALLOW_ORIGIN", "KGW_AUTH_TOKEN"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
        unsetenv(env_names[i]);
}

static void reset_targets(void)
{
    o_ip = o_token = NULL;
    o_port = o_max_kernels = 12345678;
    o_verbose = o_allow = false;
}

/* Runs cfg_parse over a NULL-terminated list of flags (argv[0] is added). */
static int parse_argv(char *err, size_t errsz, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"kgw";
    for (; *args && argc < 31; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    err[0] = '\0';
    reset_targets();
    return cfg_parse(opts, NOPTS, argc, argv, err, errsz);
}

#define PARSE(...) parse_argv(err, sizeof(err), (const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void)
{
    char err[256];
    clear_env();
    CHECK_CASE("defaults");
    CHECK_INT(PARSE(NULL), 0);
    CHECK_STR(o_ip, "127.0.0.1");
    CHECK_INT(o_port, 8888);
    CHECK_INT(o_max_kernels, -1);
    CHECK(o_verbose == false);
    CHECK(o_allow == true);
    CHECK_STR(o_token, "");
}

static void test_env_then_flags(void)
{
    char err[256];
    clear_env();
    CHECK_CASE("env overrides default");
    setenv("KGW_PORT", "9000", 1);
    setenv("KGW_MAX_KERNELS", "5", 1); /* dash becomes underscore */
    setenv("KGW_VERBOSE", "yes", 1);
    setenv("KGW_IP", "0.0.0.0", 1);
    CHECK_INT(PARSE(NULL), 0);
    CHECK_INT(o_port, 9000);
    CHECK_INT(o_max_kernels, 5);
    CHECK(o_verbose == true);
    CHECK_STR(o_ip, "0.0.0.0");

    CHECK_CASE("flags override env");
    CHECK_INT(PARSE("--port=9001", "--no-verbose", "--ip", "::1"), 0);
    CHECK_INT(o_port, 9001);
    CHECK(o_verbose == false);
    CHECK_STR(o_ip, "::1");
    CHECK_INT(o_max_kernels, 5); /* env still applies where no flag is given */

    CHECK_CASE("invalid env value is an error naming the variable");
    setenv("KGW_PORT", "http", 1);
    CHECK_INT(PARSE(NULL), -EINVAL);
    CHECK(strstr(err, "KGW_PORT") != NULL);
    CHECK_CASE("invalid env value is an error even if a flag would override it");
    CHECK_INT(PARSE("--port=1"), -EINVAL);
    clear_env();

    CHECK_CASE("lowercase env name is not ours");
    setenv("kgw_port", "9002", 1);
    CHECK_INT(PARSE(NULL), 0);
    CHECK_INT(o_port, 8888);
    unsetenv("kgw_port");
}

static void test_flag_forms(void)
{
    char err[256];
    clear_env();
    CHECK_CASE("--x=v");
    CHECK_INT(PARSE("--port=1234"), 0);
    CHECK_INT(o_port, 1234);
    CHECK_CASE("--x v");
    CHECK_INT(PARSE("--port", "4321"), 0);
    CHECK_INT(o_port, 4321);
    CHECK_CASE("--x v where v starts with dashes");
    CHECK_INT(PARSE("--auth-token", "--secret"), 0);
    CHECK_STR(o_token, "--secret");
    CHECK_CASE("--x=a=b keeps everything after the first '='");
    CHECK_INT(PARSE("--auth-token=a=b"), 0);
    CHECK_STR(o_token, "a=b");
    CHECK_CASE("--x= sets an empty string");
    CHECK_INT(PARSE("--ip="), 0);
    CHECK_STR(o_ip, "");
    CHECK_CASE("last flag wins");
    CHECK_INT(PARSE("--port=1", "--port", "2", "--port=3"), 0);
    CHECK_INT(o_port, 3);
    CHECK_CASE("--x without value at the end");
    CHECK_INT(PARSE("--port"), -EINVAL);
    CHECK(strstr(err, "needs a value") != NULL);
    CHECK_CASE("positional argument");
    CHECK_INT(PARSE("serve"), -EINVAL);
    CHECK(strstr(err, "unexpected argument") != NULL);
    CHECK_CASE("single dash");
    CHECK_INT(PARSE("-port=1"), -EINVAL);
    CHECK_CASE("bare --");
    CHECK_INT(PARSE("--"), -EINVAL);
}

static void test_bools(void)
{
    char err[256];
    static const char *const yes[] = {"1", "true", "TRUE", "True", "yes", "YES", "on", "On"};
    static const char *const no[] = {"0", "false", "FALSE", "no", "No", "off", "OFF"};
    static const char *const bad[] = {"", "2", "y", "n", "truee", "t", "-1", "enable", " true"};
    char flag[64];
    clear_env();

    CHECK_CASE("--flag");
    CHECK_INT(PARSE("--verbose"), 0);
    CHECK(o_verbose == true);
    CHECK_CASE("--no-flag");
    CHECK_INT(PARSE("--no-allow-origin"), 0);
    CHECK(o_allow == false);
    CHECK_CASE("--no-flag then --flag");
    CHECK_INT(PARSE("--no-verbose", "--verbose"), 0);
    CHECK(o_verbose == true);
    CHECK_CASE("--flag does not consume the next argument");
    CHECK_INT(PARSE("--verbose", "false"), -EINVAL);
    CHECK(strstr(err, "unexpected argument") != NULL);
    CHECK_CASE("--no- on a non-bool is unknown");
    CHECK_INT(PARSE("--no-port"), -EINVAL);
    CHECK(strstr(err, "unknown option") != NULL);
    CHECK_CASE("--no-flag=value is unknown");
    CHECK_INT(PARSE("--no-verbose=1"), -EINVAL);
    CHECK(strstr(err, "unknown option") != NULL);
    CHECK_CASE("--no- alone is unknown");
    CHECK_INT(PARSE("--no-"), -EINVAL);

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        snprintf(flag, sizeof(flag), "--verbose=%s", yes[i]);
        CHECK_CASE(flag);
        CHECK_INT(PARSE(flag), 0);
        CHECK(o_verbose == true);
        setenv("KGW_VERBOSE", yes[i], 1);
        CHECK_INT(PARSE(NULL), 0);
        CHECK(o_verbose == true);
        unsetenv("KGW_VERBOSE");
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        snprintf(flag, sizeof(flag), "--allow-origin=%s", no[i]);
        CHECK_CASE(flag);
        CHECK_INT(PARSE(flag), 0);
        CHECK(o_allow == false);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(flag, sizeof(flag), "--verbose=%s", bad[i]);
        CHECK_CASE(flag);
        CHECK_INT(PARSE(flag), -EINVAL);
        CHECK(strstr(err, "not a boolean") != NULL);
    }
}

static void test_ints(void)
{
    static const struct {
        const char *arg;
        int ret;
        long long want;
    } cases[] = {
        {"--port=1", 0, 1},
        {"--port=65535", 0, 65535},
        {"--port=0", -EINVAL, 0},
        {"--port=65536", -EINVAL, 0},
        {"--port=-1", -EINVAL, 0},
        {"--port=+80", 0, 80},
        {"--port=080", 0, 80}, /* base 10, not octal */
        {"--port=", -EINVAL, 0},
        {"--port=12abc", -EINVAL, 0},
        {"--port=0x50", -EINVAL, 0},
        {"--port=8 ", -EINVAL, 0},
        {"--port=1e3", -EINVAL, 0},
        {"--port=99999999999999999999", -EINVAL, 0}, /* ERANGE */
        {"--port=-99999999999999999999", -EINVAL, 0},
        {"--max-kernels=-1", 0, -1},
        {"--max-kernels=-2", -EINVAL, 0},
        {"--max-kernels=1000", 0, 1000},
        {"--max-kernels=1001", -EINVAL, 0},
    };
    char err[256];
    clear_env();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_CASE(cases[i].arg);
        int r = PARSE(cases[i].arg);
        CHECK_INT(r, cases[i].ret);
        if (r == 0)
            CHECK_INT(strncmp(cases[i].arg, "--port", 6) == 0 ? o_port : o_max_kernels,
                      cases[i].want);
        else
            CHECK(strstr(err, "is not an integer") || strstr(err, "is outside"));
    }
    CHECK_CASE("bounds message");
    CHECK_INT(PARSE("--port=70000"), -EINVAL);
    CHECK(strstr(err, "70000 is outside [1, 65535]") != NULL);
    CHECK(strstr(err, "--port") != NULL);
}

/* Overflow is an error even for an option whose range is all of long long. */
static void test_int_extremes(void)
{
    static long long big;
    static const struct cfg_option o[] = {
        {"big", CFG_INT, &big, "0", LLONG_MIN, LLONG_MAX, 0, "anything"},
    };
    static const struct {
        const char *arg;
        int ret;
        long long want;
    } cases[] = {
        {"--big=9223372036854775807", 0, LLONG_MAX},
        {"--big=-9223372036854775808", 0, LLONG_MIN},
        {"--big=9223372036854775808", -EINVAL, 0},
        {"--big=-9223372036854775809", -EINVAL, 0},
        {"--big=99999999999999999999", -EINVAL, 0},
    };
    char err[256];
    unsetenv("KGW_BIG");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[] = {(char *)"kgw", (char *)cases[i].arg, NULL};
        CHECK_CASE(cases[i].arg);
        big = 42;
        CHECK_INT(cfg_parse(o, 1, 2, argv, err, sizeof(err)), cases[i].ret);
        if (cases[i].ret == 0)
            CHECK_INT(big, cases[i].want);
        else
            CHECK(strstr(err, "is not an integer") != NULL);
    }
}

static void test_unknown(void)
{
    char err[256], longopt[400];
    clear_env();
    CHECK_CASE("unknown option");
    CHECK_INT(PARSE("--bogus"), -EINVAL);
    CHECK(strstr(err, "unknown option '--bogus'") != NULL);
    CHECK_CASE("unknown option with value");
    CHECK_INT(PARSE("--bogus=1"), -EINVAL);
    CHECK(strstr(err, "'--bogus'") != NULL);
    CHECK_CASE("prefix of a known option is unknown");
    CHECK_INT(PARSE("--por=1"), -EINVAL);
    CHECK_CASE("known option with a suffix is unknown");
    CHECK_INT(PARSE("--portx=1"), -EINVAL);
    CHECK_CASE("case matters");
    CHECK_INT(PARSE("--PORT=1"), -EINVAL);
    CHECK_CASE("long unknown option: message capped, err terminated");
    memset(longopt, 'z', sizeof(longopt) - 1);
    longopt[0] = longopt[1] = '-';
    longopt[sizeof(longopt) - 1] = '\0';
    CHECK_INT(PARSE(longopt), -EINVAL);
    CHECK(strlen(err) < 120);
    CHECK_CASE("tiny err buffer is still terminated");
    char small[8];
    memset(small, 'x', sizeof(small));
    CHECK_INT(parse_argv(small, sizeof(small), (const char *const[]){"--bogus", NULL}), -EINVAL);
    CHECK(memchr(small, '\0', sizeof(small)) != NULL);
    CHECK_CASE("error stops at the first bad argument");
    CHECK_INT(PARSE("--port=1", "--bogus", "--port=2"), -EINVAL);
    CHECK_INT(o_port, 1);
}

static void test_bad_default(void)
{
    static long long x;
    static const struct cfg_option bad[] = {
        {"limit", CFG_INT, &x, "500", 0, 100, 0, "a limit"},
    };
    char err[256];
    char *argv[] = {(char *)"kgw", NULL};
    unsetenv("KGW_LIMIT");
    CHECK_CASE("out-of-range default is reported");
    CHECK_INT(cfg_parse(bad, 1, 1, argv, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "default of --limit") != NULL);
    CHECK_CASE("no default leaves target alone");
    static long long y = 42;
    static const struct cfg_option nodef[] = {
        {"optional", CFG_INT, &y, NULL, 0, 100, 0, "optional"},
    };
    unsetenv("KGW_OPTIONAL");
    CHECK_INT(cfg_parse(nodef, 1, 1, argv, err, sizeof(err)), 0);
    CHECK_INT(y, 42);
}

static void test_help(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_CASE("help");
    CHECK(f != NULL);
    if (!f)
        return;
    cfg_help(f, opts, NOPTS);
    fclose(f);
    CHECK(strstr(text, "--port N") != NULL);
    CHECK(strstr(text, "env KGW_PORT; default 8888; range 1..65535") != NULL);
    CHECK(strstr(text, "env KGW_MAX_KERNELS") != NULL);
    CHECK(strstr(text, "--verbose ") != NULL);
    CHECK(strstr(text, "--ip VALUE") != NULL);
    CHECK(strstr(text, "env KGW_AUTH_TOKEN\n") != NULL); /* secret: default not shown */
    free(text);
}

/* The man page's OPTIONS: roff, every '-' escaped, the same facts as --help. */
static void test_man(void)
{
    static const char *o_list;
    static const struct cfg_option mopts[] = {
        {"list", CFG_STR, &o_list, "a,b", 0, 0, CFG_REPEAT, ".leading dot, back\\slash"},
    };
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_CASE("man");
    CHECK(f != NULL);
    if (!f)
        return;
    cfg_man(f, opts, NOPTS);
    cfg_man(f, mopts, 1);
    fclose(f);
    CHECK(strstr(text, ".TP\n\\fB\\-\\-port\\fR \\fIN\\fR\nlisten port.\n.br\n"
                       "Environment: \\fBKGW_PORT\\fR; default: 8888; range: 1..65535.\n") != NULL);
    CHECK(strstr(text, "\\fB\\-\\-verbose\\fR, \\fB\\-\\-no\\-verbose\\fR\n") != NULL);
    CHECK(strstr(text, "\\fB\\-\\-ip\\fR \\fIVALUE\\fR\n") != NULL);
    CHECK(strstr(text, "range: \\-1..1000.") != NULL);
    CHECK(strstr(text, "Environment: \\fBKGW_AUTH_TOKEN\\fR.\n") != NULL); /* secret */
    CHECK(strstr(text, "\n\\&.leading dot,\\: back\\eslash.\n") != NULL);
    CHECK(strstr(text, "default: a,\\:b; may be given more than once.\n") != NULL);
    CHECK(strstr(text, "KGW_MAX\\-KERNELS") == NULL && strstr(text, "KGW_MAX_KERNELS") != NULL);
    free(text);
}

/* CFG_REPEAT: the first flag replaces default and environment; later ones are appended. */
static void test_repeat(void)
{
    static const char *o_pool;
    static const struct cfg_option ropts[] = {
        {"pool", CFG_STR, &o_pool, "python3=2", 0, 0, CFG_REPEAT, "pools"},
    };
    char err[200];
    char *argv1[] = {(char *)"kgw", NULL};
    char *argv2[] = {(char *)"kgw", (char *)"--pool", (char *)"a=1", NULL};
    char *argv3[] = {(char *)"kgw", (char *)"--pool=a=1", (char *)"--pool", (char *)"b=2",
                     (char *)"--pool=c=0", NULL};
    CHECK_CASE("repeat");
    unsetenv("KGW_POOL");
    CHECK_INT(cfg_parse(ropts, 1, 1, argv1, err, sizeof(err)), 0);
    CHECK_STR(o_pool, "python3=2");
    setenv("KGW_POOL", "x=3", 1);
    CHECK_INT(cfg_parse(ropts, 1, 1, argv1, err, sizeof(err)), 0);
    CHECK_STR(o_pool, "x=3");
    CHECK_INT(cfg_parse(ropts, 1, 3, argv2, err, sizeof(err)), 0);
    CHECK_STR(o_pool, "a=1");
    CHECK_INT(cfg_parse(ropts, 1, 5, argv3, err, sizeof(err)), 0);
    CHECK_STR(o_pool, "a=1,b=2,c=0");
    free((char *)o_pool);
    unsetenv("KGW_POOL");
}

/* The integer types that write other fields than a long long: their width and unit. */
static int u_timeout_ms;
static int u_count;
static unsigned u_uid;
static double u_rate;

static const struct cfg_option units[] = {
    {"timeout", CFG_SECONDS_AS_MS, &u_timeout_ms, "60", 0, 604800, 0, "seconds to wait"},
    {"count", CFG_INT32, &u_count, "-5", -10, 100000, 0, "how many"},
    {"uid", CFG_UINT32, &u_uid, "200000", 1000, 4000000000LL, 0, "first uid"},
    {"rate", CFG_INT_AS_DOUBLE, &u_rate, "200", 0, 1000000, 0, "per second"},
    {"wide", CFG_INT32, &u_count, "0", 0, 4000000000LL, 0, "a range wider than its field"},
};

static int parse_units(char *err, size_t errsz, const char *const *args, size_t n)
{
    char *argv[8];
    int argc = 0;
    argv[argc++] = (char *)"kgw";
    for (; *args && argc < 7; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    err[0] = '\0';
    u_timeout_ms = u_count = -99;
    u_uid = 99;
    u_rate = -1;
    return cfg_parse(units, n, argc, argv, err, errsz);
}

#define PARSE_UNITS(n, ...)                                                                        \
    parse_units(err, sizeof(err), (const char *const[]){__VA_ARGS__, NULL}, n)

static void test_units(void)
{
    char err[256];
    unsetenv("KGW_TIMEOUT");
    unsetenv("KGW_COUNT");
    unsetenv("KGW_UID");
    unsetenv("KGW_RATE");
    unsetenv("KGW_WIDE");

    CHECK_CASE("defaults land in their fields, seconds as milliseconds");
    CHECK_INT(PARSE_UNITS(4, NULL), 0);
    CHECK_INT(u_timeout_ms, 60000);
    CHECK_INT(u_count, -5);
    CHECK(u_uid == 200000u);
    CHECK(u_rate == 200.0);

    CHECK_CASE("flags and environment alike");
    setenv("KGW_TIMEOUT", "3", 1);
    CHECK_INT(PARSE_UNITS(4, "--count=7", "--uid", "4000000000", "--rate=0"), 0);
    CHECK_INT(u_timeout_ms, 3000);
    CHECK_INT(u_count, 7);
    CHECK(u_uid == 4000000000u);
    CHECK(u_rate == 0.0);
    unsetenv("KGW_TIMEOUT");

    CHECK_CASE("the largest seconds fit as milliseconds");
    CHECK_INT(PARSE_UNITS(4, "--timeout=604800"), 0);
    CHECK_INT(u_timeout_ms, 604800000);
    CHECK_INT(PARSE_UNITS(4, "--timeout=0"), 0);
    CHECK_INT(u_timeout_ms, 0);

    CHECK_CASE("the range is in the unit given (seconds), not the one stored");
    CHECK_INT(PARSE_UNITS(4, "--timeout=604801"), -EINVAL);
    CHECK(strstr(err, "outside [0, 604800]") != NULL);
    CHECK_INT(PARSE_UNITS(4, "--count=-11"), -EINVAL);
    CHECK_INT(PARSE_UNITS(4, "--uid=999"), -EINVAL);
    CHECK_INT(PARSE_UNITS(4, "--rate=x"), -EINVAL);
    CHECK(strstr(err, "not an integer") != NULL);

    CHECK_CASE("a value in range that does not fit the field is refused");
    CHECK_INT(PARSE_UNITS(5, "--wide=3000000000"), -EINVAL);
    CHECK(strstr(err, "--wide") != NULL && strstr(err, "does not fit") != NULL);
    CHECK_INT(u_count, 0); /* its default stays: the refused value is not written */
    CHECK_INT(PARSE_UNITS(5, "--wide=2147483647"), 0);
    CHECK_INT(u_count, 2147483647);

    CHECK_CASE("help and man show them as integers, in the unit given");
    char *buf = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&buf, &sz);
    cfg_help(f, units, 4);
    fclose(f);
    CHECK(strstr(buf, "--timeout N") != NULL);
    CHECK(strstr(buf, "default 60; range 0..604800") != NULL);
    CHECK(strstr(buf, "--uid N") != NULL);
    CHECK(strstr(buf, "range 1000..4000000000") != NULL);
    CHECK(strstr(buf, "--rate N") != NULL);
    free(buf);
    buf = NULL;
    f = open_memstream(&buf, &sz);
    cfg_man(f, units, 4);
    fclose(f);
    CHECK(strstr(buf, "\\fB\\-\\-timeout\\fR \\fIN\\fR") != NULL);
    CHECK(strstr(buf, "range: 0..604800") != NULL);
    free(buf);
}

int main(void)
{
    test_units();
    test_repeat();
    test_defaults();
    test_env_then_flags();
    test_flag_forms();
    test_bools();
    test_ints();
    test_int_extremes();
    test_unknown();
    test_bad_default();
    test_help();
    test_man();
    clear_env();
    CHECK_DONE();
}
