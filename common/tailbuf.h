/* The last bytes of an untrusted stream (a kernel's stderr): a fixed ring that never grows,
 * and the short, printable excerpt of its last lines that an error message may quote. */
#ifndef KGW_COMMON_TAILBUF_H
#define KGW_COMMON_TAILBUF_H

#include <stddef.h>
#include <stdint.h>

#define TAILBUF_SIZE 8192 /* bytes kept: the newest */

typedef struct tailbuf {
    char b[TAILBUF_SIZE];
    size_t head;    /* index of the oldest byte kept */
    size_t len;     /* bytes kept, <= TAILBUF_SIZE */
    uint64_t total; /* bytes ever appended */
} tailbuf_t;

void tailbuf_init(tailbuf_t *t);
/* Appends n bytes; the oldest beyond TAILBUF_SIZE are dropped. */
void tailbuf_append(tailbuf_t *t, const void *p, size_t n);
/* The bytes kept, oldest first, into out (at most outsz, the newest if fewer fit); returns how
 * many were written. Not NUL-terminated. */
size_t tailbuf_copy(const tailbuf_t *t, char *out, size_t outsz);

/* Overwrites every occurrence of secret (sn bytes, sn > 0) in s[0, n) with '*', and every
 * prefix of it that s ends with or suffix that s starts with (a secret the ring cut in two). */
void tailbuf_redact(char *s, size_t n, const char *secret, size_t sn);

/* The last max_lines non-empty lines of s[0, n) (untrusted bytes), joined with " | ", as a
 * NUL-terminated string of printable ASCII: control bytes become ' ', bytes >= 0x80 '?'; when
 * longer than outsz - 1 it keeps the end (where an error's message is), after "...". Returns
 * its length (0: nothing to quote). outsz >= 8. */
size_t tailbuf_excerpt(const char *s, size_t n, size_t max_lines, char *out, size_t outsz);

#endif
