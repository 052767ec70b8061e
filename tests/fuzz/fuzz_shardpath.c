/* shardpath_split on arbitrary request paths (the first line of the input is the shard's name,
 * the rest the path). Invariants: a match strips exactly "/s/<self>" and leaves the end or a
 * '/'; nothing is read past the path's length; without a name nothing is stripped. */
#include "fuzz.h"
#include <errno.h>
#include <string.h>

#include "protocol/shardpath.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char self[SHARDPATH_NAME_MAX + 8];
    const uint8_t *nl = memchr(data, '\n', size);
    size_t sl = nl ? (size_t)(nl - data) : 0;
    if (sl >= sizeof(self))
        sl = sizeof(self) - 1;
    memcpy(self, data, sl);
    self[sl] = '\0';
    size_t off = nl ? (size_t)(nl - data) + 1 : 0;
    size_t n = size - off;
    char *path = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    if (!path)
        return 0;
    memcpy(path, data + off, n);
    size_t cut = 12345;
    int rc = shardpath_split(path, n, self, &cut);
    FUZZ_CHECK(rc == 0 || rc == 1 || rc == -ENOENT);
    if (rc == 0)
        FUZZ_CHECK(cut == 0);
    if (rc == 1) {
        size_t k = strlen(self);
        FUZZ_CHECK(k > 0 && cut == 3 + k && cut <= n);
        FUZZ_CHECK(!memcmp(path, "/s/", 3) && !memcmp(path + 3, self, k));
        FUZZ_CHECK(cut == n || path[cut] == '/');
    }
    FUZZ_CHECK(shardpath_split(path, n, "", &cut) == 0 && cut == 0);
    free(path);
    return 0;
}
