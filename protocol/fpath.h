/* Workspace-relative file paths from clients (untrusted): the only shape the file endpoints
 * accept, checked before any file system call. */
#ifndef KGW_PROTOCOL_FPATH_H
#define KGW_PROTOCOL_FPATH_H

#include <stdbool.h>
#include <stddef.h>

#define FPATH_MAX       1024 /* bytes of a whole path */
#define FPATH_NAME_MAX  255  /* bytes of one component (NAME_MAX) */
#define FPATH_DEPTH_MAX 32   /* components */

/* Checks a relative path and writes its normal form (NUL-terminated) into out. A valid path is
 * 1 to FPATH_MAX bytes of UTF-8 (shortest form, no surrogates, at most U+10FFFF) without
 * control bytes (0x00-0x1f, 0x7f), made of 1 to FPATH_DEPTH_MAX components of 1 to
 * FPATH_NAME_MAX bytes separated by single '/'; no leading or trailing '/', no "." or ".."
 * component. Nothing is rewritten, so the normal form is the input itself: a path that is not
 * already normal is refused rather than guessed at. Returns its length; -EINVAL (bad shape or
 * byte), -ENAMETOOLONG (a limit), -ENOBUFS (outsz too small). */
int fpath_normalize(const char *in, size_t len, char *out, size_t outsz);

/* True when name (len bytes) is one valid component: what a directory listing may show. */
bool fpath_name_ok(const char *name, size_t len);

/* The last component of a normal path. */
const char *fpath_basename(const char *path);

/* RFC 5987 / 8187 value of a file name for Content-Disposition's filename*: every byte but
 * ALPHA / DIGIT / "!#$&+-.^_`|~" percent-encoded (uppercase hex). Returns the length written
 * (NUL-terminated) or -ENOBUFS. */
int fpath_attr_encode(const char *name, char *out, size_t outsz);

#endif
