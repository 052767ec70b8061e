/* Placeholders in an egress request head (kernelmgr/kegress.c): the head a kernel sends (the
 * rewritten one of a forwarded request, or one read from inside TLS) is untrusted bytes. Every
 * "kgw-secret-" followed by 32 lowercase hex digits is a placeholder; the caller's resolve
 * decides, for each, the bytes that replace it (a secret's value) or that the request is
 * refused. Other bytes are copied as they are. */
#ifndef KGW_PROTOCOL_EGSUB_H
#define KGW_PROTOCOL_EGSUB_H

#include <stddef.h>

#define EGSUB_PREFIX     "kgw-secret-"
#define EGSUB_PREFIX_LEN 11
#define EGSUB_PH_LEN     (EGSUB_PREFIX_LEN + 32)
#define EGSUB_MAX        16          /* placeholders in one head */
#define EGSUB_OUT_MAX    (64 * 1024) /* bytes of a head after substitution */

/* ph: EGSUB_PH_LEN bytes (not NUL-terminated). 0 with *val, *vlen set; or -EPERM with *why
 * (a reason the kernel may read: names a secret, never a value). */
typedef int (*egsub_resolve_fn)(
    void *ctx, const char *ph, const char **val, size_t *vlen, const char **why);

/* Writes head (len bytes) with its placeholders replaced into a new buffer (*ret, *ret_len;
 * NULL, 0 when it has none: use the head as it is). Returns how many were replaced (>= 0), or
 * -EPERM (resolve refused one; why set), -EMSGSIZE (more than EGSUB_MAX placeholders or the
 * result over EGSUB_OUT_MAX bytes), -ENOMEM. The caller frees *ret (it holds values: wipe). */
int egsub_apply(const char *head,
                size_t len,
                egsub_resolve_fn resolve,
                void *ctx,
                char **ret,
                size_t *ret_len,
                const char **why);

#endif
