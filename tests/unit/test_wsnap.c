/* gateway/wsnap.c: listings of a directory and their difference, bounded, never following a
 * link. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"

#include "gateway/wsnap.h"

static char root[64];

static void put(const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", root, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *diff(wsnap_t *a, wsnap_t *b, size_t max)
{
    json_t *d = wsnap_diff(a, b, max);
    char *s = d ? json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(d);
    return s;
}

int main(void)
{
    char p[256];
    snprintf(root, sizeof(root), "/tmp/test_wsnap.XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    snprintf(p, sizeof(p), "%s/sub", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/sub/deep", root);
    mkdir(p, 0755);
    put("keep.txt", "k");
    put("change.txt", "1");
    put("gone.txt", "g");
    put("sub/deep/x", "x");
    snprintf(p, sizeof(p), "%s/link", root);
    CHECK(symlink("/etc", p) == 0); /* listed as an entry, never walked */

    wsnap_t *a = wsnap_take(root, 100, 8);
    CHECK(a != NULL);
    put("change.txt", "22");
    snprintf(p, sizeof(p), "%s/gone.txt", root);
    unlink(p);
    put("sub/new.txt", "n");
    wsnap_t *b = wsnap_take(root, 100, 8);
    CHECK_CASE("diff");
    char *s = diff(a, b, 100);
    CHECK_STR(s, "{\"created\":[\"sub/new.txt\"],\"deleted\":[\"gone.txt\"],\"modified\":"
                 "[\"change.txt\"],\"truncated\":false}");
    free(s);
    CHECK_CASE("lists cut");
    put("a1", "");
    put("a2", "");
    wsnap_t *c = wsnap_take(root, 100, 8);
    s = diff(b, c, 1);
    CHECK_STR(s, "{\"created\":[\"a1\"],\"deleted\":[],\"modified\":[],\"truncated\":true}");
    free(s);
    CHECK_CASE("entries and depth bounded");
    wsnap_t *d = wsnap_take(root, 2, 8), *e = wsnap_take(root, 100, 0);
    s = diff(d, d, 100);
    CHECK_STR(s, "{\"created\":[],\"deleted\":[],\"modified\":[],\"truncated\":true}");
    free(s);
    s = diff(e, c, 100);
    CHECK(s && strstr(s, "\"created\":[\"sub/deep/x\",\"sub/new.txt\"]"));
    free(s);
    CHECK_CASE("not a directory");
    snprintf(p, sizeof(p), "%s/link", root);
    CHECK(wsnap_take(p, 100, 8) == NULL);
    wsnap_destroy(&a);
    wsnap_destroy(&b);
    wsnap_destroy(&c);
    wsnap_destroy(&d);
    wsnap_destroy(&e);
    CHECK(a == NULL);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    CHECK_DONE();
}
