/* shardpath: the "/s/<shard>" prefix of request paths (untrusted).
 *
 * A client pinned to one shard (a Jupyter front end: --GatewayClient.url=http://router/s/kgw-1)
 * sends every path under "/s/<shard>"; the router picks the shard from it and kgw strips it. */
#ifndef KGW_PROTOCOL_SHARDPATH_H
#define KGW_PROTOCOL_SHARDPATH_H

#include <stddef.h>

#define SHARDPATH_NAME_MAX 128 /* the longest instance id (common/ident.h) */

/* path: len bytes, not NUL-terminated; self: this shard's name (NULL or "": none). Returns 0
 * and *ret_off = 0 when the path has no "/s/" prefix (or kgw has no shard name); 1 and
 * *ret_off = strlen("/s/<self>") when it is under self's prefix ("/s/<self>" followed by '/'
 * or the end); -ENOENT when it names another shard, an empty or over-long one, or "/s" alone. */
int shardpath_split(const char *path, size_t len, const char *self, size_t *ret_off);

#endif
