/* protocol/shardpath.c: the "/s/<shard>" prefix of untrusted request paths. */
#include <errno.h>
#include <string.h>

#include "check.h"

#include "protocol/shardpath.h"

static const struct {
    const char *path, *self;
    int rc;
    size_t off;
} cases[] = {
    {"/api/kernels", "kgw-0", 0, 0},
    {"/s/kgw-0/api/kernels", "kgw-0", 1, 8},
    {"/s/kgw-0", "kgw-0", 1, 8},
    {"/s/kgw-0/", "kgw-0", 1, 8},
    {"/s/kgw-1/api/kernels", "kgw-0", -ENOENT, 0},
    {"/s/kgw-00/api", "kgw-0", -ENOENT, 0},
    {"/s/kgw-/api", "kgw-0", -ENOENT, 0},
    {"/s//api", "kgw-0", -ENOENT, 0},
    {"/s/", "kgw-0", -ENOENT, 0},
    {"/s", "kgw-0", -ENOENT, 0},
    {"/sx/kgw-0/api", "kgw-0", 0, 0},
    {"/self_identify", "kgw-0", 0, 0},
    {"/s/kgw-0/api", "", 0, 0},
    {"/s/kgw-0/api", NULL, 0, 0},
    {"s/kgw-0/api", "kgw-0", 0, 0},
    {"", "kgw-0", 0, 0},
};

static void test_cases(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t off = 99;
        CHECK_CASE(cases[i].path);
        int rc = shardpath_split(cases[i].path, strlen(cases[i].path), cases[i].self, &off);
        CHECK_INT(rc, cases[i].rc);
        if (rc >= 0)
            CHECK_INT(off, cases[i].off);
    }
}

/* Only len bytes are read: a prefix cut short by the length is not the shard's. */
static void test_length(void)
{
    size_t off = 0;
    CHECK_CASE("length");
    CHECK_INT(shardpath_split("/s/kgw-0/api", 7, "kgw-0", &off), -ENOENT);
    CHECK_INT(shardpath_split("/s/kgw-0/api", 8, "kgw-0", &off), 1);
    CHECK_INT(off, 8);
    char longname[SHARDPATH_NAME_MAX + 2], path[SHARDPATH_NAME_MAX + 16];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    snprintf(path, sizeof(path), "/s/%s/api", longname);
    CHECK_INT(shardpath_split(path, strlen(path), longname, &off), -ENOENT);
    longname[SHARDPATH_NAME_MAX] = '\0';
    snprintf(path, sizeof(path), "/s/%s/api", longname);
    CHECK_INT(shardpath_split(path, strlen(path), longname, &off), 1);
    CHECK_INT(off, 3 + SHARDPATH_NAME_MAX);
}

int main(void)
{
    test_cases();
    test_length();
    CHECK_DONE();
}
