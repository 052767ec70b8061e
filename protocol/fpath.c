#include "protocol/fpath.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "protocol/jstr.h"

/* Checks one component; 0, -EINVAL or -ENAMETOOLONG. */
static int check_name(const char *name, size_t len)
{
    const unsigned char *s = (const unsigned char *)name;
    if (len == 0)
        return -EINVAL;
    if (len > FPATH_NAME_MAX)
        return -ENAMETOOLONG;
    if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return -EINVAL;
    for (size_t i = 0; i < len;) {
        if (s[i] < 0x20 || s[i] == 0x7f || s[i] == '/')
            return -EINVAL;
        size_t n = jstr_utf8_seq(s + i, len - i);
        if (n == 0)
            return -EINVAL;
        i += n;
    }
    return 0;
}

bool fpath_name_ok(const char *name, size_t len)
{
    return check_name(name, len) == 0;
}

int fpath_normalize(const char *in, size_t len, char *out, size_t outsz)
{
    size_t depth = 0;
    if (len == 0)
        return -EINVAL;
    if (len > FPATH_MAX)
        return -ENAMETOOLONG;
    for (size_t i = 0; i <= len;) {
        const char *slash = memchr(in + i, '/', len - i);
        size_t end = slash ? (size_t)(slash - in) : len;
        int rc = check_name(in + i, end - i);
        if (rc < 0)
            return rc;
        if (++depth > FPATH_DEPTH_MAX)
            return -ENAMETOOLONG;
        i = end + 1; /* past the '/'; past the end when this was the last component */
    }
    if (outsz < len + 1)
        return -ENOBUFS;
    memcpy(out, in, len);
    out[len] = '\0';
    return (int)len;
}

const char *fpath_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int fpath_attr_encode(const char *name, char *out, size_t outsz)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        unsigned c = *p;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     (c && strchr("!#$&+-.^_`|~", (int)c));
        if (o + (plain ? 1 : 3) >= outsz)
            return -ENOBUFS;
        if (plain) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (o >= outsz)
        return -ENOBUFS;
    out[o] = '\0';
    return (int)o;
}
