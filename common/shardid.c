/* shardid: ids that carry their shard's tag (see shardid.h). */
#include "common/shardid.h"

#include <sodium.h>
#include <string.h>

static char shardid__tag[SHARDID_TAG_LEN + 1];

void shardid_tag(const char *instance_id, char ret_tag[SHARDID_TAG_LEN + 1])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    char hex[2 * SHARDID_TAG_LEN + 1];
    crypto_hash_sha256(h, (const unsigned char *)instance_id, strlen(instance_id));
    sodium_bin2hex(hex, sizeof(hex), h, SHARDID_TAG_LEN);
    memcpy(ret_tag, hex, SHARDID_TAG_LEN);
    ret_tag[SHARDID_TAG_LEN] = '\0';
}

void shardid_set_instance(const char *instance_id)
{
    if (instance_id && instance_id[0])
        shardid_tag(instance_id, shardid__tag);
    else
        shardid__tag[0] = '\0';
}

const char *shardid_current_tag(void)
{
    return shardid__tag;
}

void shardid_mint(char out[UTIL_UUID_LEN + 1])
{
    util_uuid(out);
    if (shardid__tag[0])
        memcpy(out + SHARDID_TAG_AT, shardid__tag, SHARDID_TAG_LEN);
}
