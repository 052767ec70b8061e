#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int log__level = LOG_LVL_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_level(int level)
{
    log__level = level;
}

int log_level_parse(const char *s)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return (int)i;
    if (strcasecmp(s, "warning") == 0)
        return LOG_LVL_WARN;
    if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0')
        return s[0] - '0';
    return -EINVAL;
}

void log__printf(int level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}

char *log_quote(char *out, size_t outsz, const char *s, size_t len)
{
    size_t o = 0;

    if (outsz < 3) {
        if (outsz)
            out[0] = '\0';
        return out;
    }
    out[o++] = '"';
    for (size_t i = 0; s && i < len && o + 5 < outsz; i++) {
        unsigned char c = (unsigned char)s[i];
        out[o++] = (c < 0x20 || c == 0x7f || c == '"' || c == '\\') ? '?' : (char)c;
    }
    if (s && len > 0 && o + 5 >= outsz) {
        out[o++] = '.';
        out[o++] = '.';
        out[o++] = '.';
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}
