/* Kernel callbacks: the frames code in a kernel exchanges with the gateway over the kernel's
 * private callback socket (<runtime dir>/callback, /run/kernel/callback in the sandbox).
 *
 * A frame is a 4-byte big-endian payload length, then that many bytes of one JSON object.
 * The kernel sends {"name": N, "args": [...], "kwargs": {...}, "parent": MSG_ID} ("args",
 * "kwargs" and "parent" optional; "parent" is the kernel's own idea of the execution it is in,
 * a hint for ordering only) and gets back {"value": V} or {"error": {"type": T, "message": M}}.
 * The kernel is untrusted: every quantity here has a limit, and every error message the kernel
 * is told is printable ASCII with untrusted parts quoted. */
#ifndef KGW_PROTOCOL_KCALLMSG_H
#define KGW_PROTOCOL_KCALLMSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ident.h"

#define KCALLMSG_HDR_BYTES   4
#define KCALLMSG_NAME_MAX    IDENT_PYNAME_MAX /* callback names are IDENT_PYNAME names */
#define KCALLMSG_PARENT_MAX  127         /* bytes of "parent", printable ASCII */
#define KCALLMSG_MAX_DEPTH   32          /* nesting of arrays/objects in a request */
#define KCALLMSG_MESSAGE_MAX 1024        /* bytes of an error message sent to the kernel */
#define KCALLMSG_ERROR_MAX   512         /* bytes of an error made here, with the NUL */
#define KCALLMSG_BUF_KEEP    (64 * 1024) /* a receive buffer larger than this is freed after use */

/* ---- the frame decoder: a byte stream in, whole payloads out ---- */

enum kcallmsg_ev {
    KCALLMSG_MORE = 0,  /* every byte given was used; no frame is complete */
    KCALLMSG_FRAME,     /* a payload is complete: kcallmsg_dec_payload() until the next feed */
    KCALLMSG_OVERSIZE,  /* a header announced more than max bytes (kcallmsg_dec_t.len): the
                           payload is discarded as it arrives, the stream stays in sync */
};

typedef struct kcallmsg_dec {
    size_t max;       /* largest payload accepted */
    unsigned char hdr[KCALLMSG_HDR_BYTES];
    size_t hdr_got;   /* header bytes of the next frame */
    bool in_payload;  /* the header is complete, the payload is being collected */
    bool done;        /* the last event was FRAME: start over at the next feed */
    size_t len;       /* payload length announced by the header */
    size_t got;       /* payload bytes collected */
    size_t skip;      /* bytes of an oversize payload still to discard */
    char *buf;        /* grows with the bytes that actually arrive, never beyond len */
    size_t cap;
} kcallmsg_dec_t;

void kcallmsg_dec_init(kcallmsg_dec_t *d, size_t max);
void kcallmsg_dec_fini(kcallmsg_dec_t *d);
/* Uses bytes of p[0..n) up to the first event and returns it (>= 0) with the bytes used in
 * *ret_used; -ENOMEM (nothing used). */
int kcallmsg_dec_feed(kcallmsg_dec_t *d, const void *p, size_t n, size_t *ret_used);
/* The payload of the last FRAME event. */
void kcallmsg_dec_payload(const kcallmsg_dec_t *d, const char **ret_p, size_t *ret_n);
/* True between frames (no header or payload byte pending, nothing to discard). */
bool kcallmsg_dec_idle(const kcallmsg_dec_t *d);
/* Bytes of memory the decoder holds (for per-kernel budgets). */
size_t kcallmsg_dec_mem(const kcallmsg_dec_t *d);

/* ---- requests ---- */

/* An error for the kernel: type is a static Python exception name ("PermissionError", ...),
 * message printable ASCII. */
typedef struct kcallmsg_err {
    const char *type;
    char message[KCALLMSG_ERROR_MAX];
} kcallmsg_err_t;

typedef struct kcallmsg_req {
    char name[KCALLMSG_NAME_MAX + 1];   /* on the allowlist */
    char parent[KCALLMSG_PARENT_MAX + 1]; /* "" when absent; a hint, never trusted */
    json_t *args;                       /* array (empty when absent), owned */
    json_t *kwargs;                     /* object (empty when absent), owned */
} kcallmsg_req_t;

/* Parses one payload. allow: NULL-terminated callback names. 0 and *ret filled (free with
 * kcallmsg_req_fini), -EINVAL with *ret_err filled (what the kernel should raise), or
 * -ENOMEM. Invalid JSON, not an object, nesting over KCALLMSG_MAX_DEPTH, duplicate keys, NUL
 * in strings: ValueError; a missing or non-string name, args not a list, kwargs not an object,
 * an unknown key: TypeError; a name not on the allowlist: PermissionError. */
int kcallmsg_parse(const char *p, size_t n, const char *const *allow, kcallmsg_req_t *ret,
                   kcallmsg_err_t *ret_err);
void kcallmsg_req_fini(kcallmsg_req_t *r);

/* Sets e (type must be a static string); returns -EINVAL. */
int kcallmsg_err_set(kcallmsg_err_t *e, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A comma-separated list of callback names (spaces around names ignored, empty entries
 * skipped; "" allows nothing) as a NULL-terminated array. NULL + errno (EINVAL: a bad name). */
char **kcallmsg_allow_new(const char *csv);
void kcallmsg_allow_destroy(char ***allow);

/* ---- replies: whole frames (header included), malloc'd ---- */

/* {"value": value}; steals value (NULL: null). -EMSGSIZE when the payload would exceed max
 * bytes, -ENOMEM. */
int kcallmsg_encode_value(json_t *value, size_t max, char **ret, size_t *ret_len);
/* {"error": {"type": type, "message": message}}. A type that is not a name becomes
 * "RuntimeError"; the message is cut at KCALLMSG_MESSAGE_MAX bytes, with control characters
 * other than newline and tab and non-ASCII bytes replaced by '?'. -ENOMEM. */
int kcallmsg_encode_error(const char *type, const char *message, char **ret, size_t *ret_len);

#endif
