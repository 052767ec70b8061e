/* shardid: ids that name the shard that minted them.
 *
 * With an instance id (--instance-id, the shard's name), every id kgw mints for a path
 * (kernels, workspaces, sessions; executions alike) is still a random version-4 UUID, but the
 * first four hex digits of its last group are the shard's tag: the first four hex digits of
 * SHA-256(instance id). A stock router extracts them from the path with a fixed pattern and
 * looks the tag up in a map generated with the same derivation (deploy/haproxy/render.py):
 *
 *     xxxxxxxx-xxxx-4xxx-Vxxx-TTTTxxxxxxxx   T: tag, 4: version, V: variant (8-b)
 *
 * 106 bits stay random. Without an instance id ids are plain random UUIDs. */
#ifndef KGW_COMMON_SHARDID_H
#define KGW_COMMON_SHARDID_H

#include "common/util.h"

#define SHARDID_TAG_LEN 4
#define SHARDID_TAG_AT  24 /* offset of the tag in the 36-character id */

/* The tag of an instance id (ret_tag: 4 lowercase hex digits and a NUL). */
void shardid_tag(const char *instance_id, char ret_tag[SHARDID_TAG_LEN + 1]);
/* Sets the process's shard (at start-up, before any id is minted); NULL or "": none. */
void shardid_set_instance(const char *instance_id);
/* The process's tag, "" without a shard. */
const char *shardid_current_tag(void);
/* A new id: a random v4 UUID carrying the process's tag when it has one. */
void shardid_mint(char out[UTIL_UUID_LEN + 1]);

#endif
