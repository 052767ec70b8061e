#include "common/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sched.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

uint64_t util_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t util_now_ms(void)
{
    return util_now_us() / 1000u;
}

int64_t util_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void util_iso_time(char *out, size_t outsz, int64_t unix_us)
{
    time_t secs = (time_t)(unix_us / 1000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, outsz, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)(unix_us % 1000000));
}

void util_uuid(char out[UTIL_UUID_LEN + 1])
{
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
}

bool util_is_uuid(const char *s, size_t len)
{
    if (len != UTIL_UUID_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
        } else if (!isxdigit((unsigned char)s[i])) {
            return false;
        }
    }
    return true;
}

void util_random_hex(char *out, size_t n)
{
    unsigned char raw[64];
    while (n > 0) {
        size_t k = n > sizeof(raw) ? sizeof(raw) : n;
        randombytes_buf(raw, k);
        sodium_bin2hex(out, 2 * k + 1, raw, k);
        out += 2 * k;
        n -= k;
    }
}

bool util_printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

bool util_json_depth_ok(const char *p, size_t n, int max)
{
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max)
                return false;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return true;
}

long util_read_small(const char *path, char *buf, size_t bufsz)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || bufsz == 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    ssize_t n = read(fd, buf, bufsz - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return (long)n;
}

int util_write_small(const char *path, const char *value)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, value, strlen(value));
    int err = n < 0 ? -errno : 0;
    close(fd);
    return err;
}

/* Open descriptors of this process (-1: unknown): the size of /proc/self/fd where the kernel
 * reports it (Linux 6.2), else its entries. */
int util_read_line(FILE *f, char *buf, size_t max, struct util_file_pos *pos, size_t *len,
                   char *err, size_t errsz)
{
    if (!fgets(buf, (int)max + 2, f))
        return 0;
    size_t n = strlen(buf);
    pos->lineno++;
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    else if (!feof(f)) {
        snprintf(err, errsz, "%s:%d: line longer than %zu bytes", pos->path, pos->lineno, max);
        return -EINVAL;
    }
    *len = n;
    return 1;
}

long long util_open_fds(void)
{
    struct stat st;
    if (stat("/proc/self/fd", &st) == 0 && st.st_size > 0)
        return st.st_size;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

int util_sched_slice(uint64_t ns)
{
    struct { /* struct sched_attr, SCHED_ATTR_SIZE_VER0: glibc 2.36 has no wrapper */
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } a = {.size = sizeof(a), .policy = SCHED_OTHER, .runtime = ns};
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0); /* this thread's */
    if (nice == -1 && errno)
        return -errno;
    a.nice = nice;
    return syscall(SYS_sched_setattr, 0, &a, 0) < 0 ? -errno : 0;
}

bool util_env_name_ok(const char *s)
{
    if (!s[0] || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

int util_grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 16;
    void *nv = realloc(*v, c * size);
    if (!nv)
        return -ENOMEM;
    *v = nv;
    *cap = c;
    return 0;
}
