/* shardpath: the "/s/<shard>" request path prefix (see shardpath.h). */
#include "protocol/shardpath.h"

#include <errno.h>
#include <string.h>

int shardpath_split(const char *path, size_t len, const char *self, size_t *ret_off)
{
    if (!self || !self[0] || len < 2 || path[0] != '/' || path[1] != 's' ||
        (len > 2 && path[2] != '/')) {
        *ret_off = 0;
        return 0;
    }
    if (len == 2)
        return -ENOENT; /* "/s" */
    const char *name = path + 3;
    size_t rest = len - 3, n = 0;
    while (n < rest && n <= SHARDPATH_NAME_MAX && name[n] != '/')
        n++;
    size_t self_len = strlen(self);
    if (n == 0 || n > SHARDPATH_NAME_MAX || n != self_len || memcmp(name, self, n) != 0)
        return -ENOENT;
    *ret_off = 3 + n;
    return 1;
}
