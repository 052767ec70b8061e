/* The audit log (see audit.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"

static int audit_fd = -1;
static bool audit_own_fd;

int audit_open(const char *path)
{
    audit_close();
    if (!path || !path[0])
        return 0;
    if (!strcmp(path, "-")) {
        audit_fd = STDERR_FILENO;
        return 0;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    audit_fd = fd;
    audit_own_fd = true;
    return 0;
}

void audit_close(void)
{
    if (audit_own_fd && audit_fd >= 0)
        close(audit_fd);
    audit_fd = -1;
    audit_own_fd = false;
}

bool audit_enabled(void)
{
    return audit_fd >= 0;
}

json_t *audit_str(const char *s, size_t len)
{
    char buf[AUDIT_STR_MAX + 1];
    if (!s)
        return json_null();
    if (len > AUDIT_STR_MAX)
        len = AUDIT_STR_MAX;
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    /* not UTF-8 (or cut inside a character): keep the ASCII, mark the rest */
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    return json_stringn(buf, len);
}

void audit_event(const char *event, const char *fields, ...)
{
    char ts[40], fmt[256];
    json_error_t err;
    if (audit_fd < 0) {
        /* off: still take the references that "o" fields hand over (audit_str()); events
         * without any cost nothing (auth_success runs for every request) */
        if (fields && strchr(fields, 'o')) {
            va_list ap;
            va_start(ap, fields);
            snprintf(fmt, sizeof(fmt), "{%s}", fields);
            json_decref(json_vpack_ex(&err, 0, fmt, ap));
            va_end(ap);
        }
        return;
    }
    util_iso_time(ts, sizeof(ts), util_wall_us());
    json_t *o = json_object();
    if (!o)
        return;
    json_object_set_new(o, "ts", json_string(ts));
    json_object_set_new(o, "event", json_string(event));
    if (fields) {
        va_list ap;
        va_start(ap, fields);
        snprintf(fmt, sizeof(fmt), "{%s}", fields);
        json_t *rest = json_vpack_ex(&err, 0, fmt, ap);
        va_end(ap);
        if (rest)
            json_object_update(o, rest);
        else
            log_warn("audit: cannot encode event %s: %s", event, err.text);
        json_decref(rest);
    }
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!line)
        return;
    size_t n = strlen(line);
    char *nl = realloc(line, n + 2);
    if (!nl) {
        free(line);
        return;
    }
    nl[n] = '\n';
    if (write(audit_fd, nl, n + 1) < 0)
        log_warn("audit: write failed: %s", strerror(errno));
    free(nl);
}
