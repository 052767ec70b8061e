/* common/shardid.c: ids that carry their shard's tag. */
#include <string.h>

#include "check.h"

#include "common/shardid.h"
#include "common/util.h"

/* The tag is the first 4 hex digits of SHA-256(instance id), as deploy/haproxy/render.py
 * computes it: printf %s kgw-0 | sha256sum. */
static void test_tag(void)
{
    char tag[SHARDID_TAG_LEN + 1];
    CHECK_CASE("tag");
    shardid_tag("kgw-0", tag);
    CHECK(!strcmp(tag, "5aa9"));
    shardid_tag("", tag);
    CHECK(!strcmp(tag, "e3b0")); /* SHA-256 of nothing */
}

static void test_mint(void)
{
    char id[UTIL_UUID_LEN + 1], other[UTIL_UUID_LEN + 1];
    CHECK_CASE("no shard: plain v4 UUIDs");
    shardid_set_instance(NULL);
    CHECK(!strcmp(shardid_current_tag(), ""));
    shardid_mint(id);
    CHECK(util_is_uuid(id, strlen(id)));
    CHECK_INT(id[14], '4');
    CHECK_CASE("shard: the tag at the last group, version and variant kept");
    shardid_set_instance("kgw-0");
    CHECK(!strcmp(shardid_current_tag(), "5aa9"));
    for (int i = 0; i < 100; i++) {
        shardid_mint(id);
        CHECK(util_is_uuid(id, strlen(id)));
        CHECK_INT(id[14], '4');
        CHECK(strchr("89ab", id[19]) != NULL);
        CHECK(!strncmp(id + SHARDID_TAG_AT, "5aa9", SHARDID_TAG_LEN));
    }
    shardid_mint(other);
    CHECK(strcmp(id, other) != 0);
    shardid_set_instance("");
    CHECK(!strcmp(shardid_current_tag(), ""));
}

int main(void)
{
    test_tag();
    test_mint();
    CHECK_DONE();
}
