/* Small helpers shared by every layer: clocks, ids, timestamps. */
#ifndef KGW_COMMON_UTIL_H
#define KGW_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define UTIL_UUID_LEN 36

uint64_t util_now_ms(void); /* CLOCK_MONOTONIC */
uint64_t util_now_us(void);
/* Wall clock as jupyter_server formats it: "%Y-%m-%dT%H:%M:%S.%fZ" (out >= 32 bytes). */
void util_iso_time(char *out, size_t outsz, int64_t unix_us);
int64_t util_wall_us(void);
/* Random v4 UUID, 36 chars + NUL. */
void util_uuid(char out[UTIL_UUID_LEN + 1]);
/* True when s is a canonical UUID string (8-4-4-4-12 hex). */
bool util_is_uuid(const char *s, size_t len);
/* Random bytes as lowercase hex (out has 2*n+1 bytes). */
void util_random_hex(char *out, size_t n);

/* True when every byte of s (n bytes) is printable ASCII (0x20..0x7e). */
bool util_printable(const char *s, size_t n);
/* An environment variable's name as kgw takes it on every face: [A-Za-z_][A-Za-z0-9_]*. */
bool util_env_name_ok(const char *s);
/* False when the JSON text p (n bytes) nests arrays/objects deeper than max: checked before a
 * parser builds the tree. Exact for valid JSON; the parser refuses the rest anyway. */
bool util_json_depth_ok(const char *p, size_t n, int max);

/* Reads a small file (a /proc or cgroup value) into buf, NUL-terminated: its length, or -1. */
long util_read_small(const char *path, char *buf, size_t bufsz);

/* Writes value to an existing file (a /proc or cgroup control file) in one write: 0 or -errno. */
int util_write_small(const char *path, const char *value);

/* Open descriptors of this process, or -1 when unknown. */
long long util_open_fds(void);
/* Where a config file is being read (util_read_line's error messages). */
struct util_file_pos {
    const char *path;
    int lineno; /* lines read so far */
};
/* The next line of a config file into buf (at least max + 2 bytes), without its newline, its
 * length in *len: 1, or 0 at the end of the file, or -EINVAL with "PATH:LINE: line longer than
 * MAX bytes" in err. */
int util_read_line(FILE *f, char *buf, size_t max, struct util_file_pos *pos, size_t *len,
                   char *err, size_t errsz);

/* The calling thread's scheduler slice (Linux 6.12+ EEVDF: sched_attr.sched_runtime for a
 * SCHED_OTHER thread; the kernel clamps it to 0.1..100 ms) in nanoseconds, 0 for the kernel's
 * default. Keeps the nice value. Threads and children created later inherit it. 0, or -errno
 * (older kernels take the call and ignore the slice). Async-signal-safe. */
int util_sched_slice(uint64_t ns);

#define UTIL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* The body of a printf-like error setter x_set(e, type, fmt, ...) (<stdarg.h>): e->type = type
 * and e->message (an array) formatted from the arguments after fmt, cut to fit. */
#define UTIL_ERROR_SET(e, t, fmt)                                                                  \
    do {                                                                                           \
        va_list util_ap_;                                                                          \
        (e)->type = (t);                                                                           \
        va_start(util_ap_, fmt);                                                                   \
        vsnprintf((e)->message, sizeof((e)->message), fmt, util_ap_);                              \
        va_end(util_ap_);                                                                          \
    } while (0)
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Room in the array *v (of *cap elements of size bytes) for element n: doubled (from 16)
 * when full. 0 or -ENOMEM (*v and *cap unchanged). */
int util_grow(void **v, size_t *cap, size_t n, size_t size);

#endif
