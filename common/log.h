/* Leveled logging. The level is checked before the arguments are evaluated. */
#ifndef KGW_COMMON_LOG_H
#define KGW_COMMON_LOG_H

#include <stddef.h>

enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

extern int log__level;

void log__printf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses "error|warn|info|debug" (also numeric 0-3). Returns the level or -EINVAL. */
int log_level_parse(const char *s);
void log_set_level(int level);

/* Writes a quoted, length-capped copy of untrusted bytes into out, with control characters
 * (CR, LF, ...) replaced by '?'. Always NUL-terminates; returns out. */
char *log_quote(char *out, size_t outsz, const char *s, size_t len);

#define log_at(lvl, ...)                                                                           \
    do {                                                                                           \
        if (log__level >= (lvl))                                                                   \
            log__printf((lvl), __VA_ARGS__);                                                       \
    } while (0)
#define log_error(...) log_at(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_at(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...)  log_at(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
