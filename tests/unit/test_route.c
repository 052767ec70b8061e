/* gateway/route.c against gateway/routes.c's table: untrusted request paths to routes and
 * arguments; and the matcher itself on small tables of its own. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/ident.h"
#include "gateway/route.h"
#include "gateway/routes.h"

#define KID "4f1c8c3e-9d2a-4b7e-8f00-1234567890ab"
#define SID "0b7ad8d4-3f57-4bd5-a2c9-5e0f3c7d9a11"

#define GET    HTTP_M_GET
#define POST   HTTP_M_POST
#define PUT    HTTP_M_PUT
#define PATCH  HTTP_M_PATCH
#define DELETE HTTP_M_DELETE

/* the gateway's table (main) */
static const struct route_def *table;
static size_t ntable;

static int match(const char *path, size_t len, struct route *r)
{
    return route_match(table, ntable, path, len, r);
}

static const char *pattern_of(const struct route *r)
{
    return r->def ? r->def->pattern : "";
}

static unsigned methods_of(const struct route *r)
{
    return r->def ? r->def->methods : 0;
}

static unsigned flags_of(const struct route *r)
{
    return r->def ? r->def->flags : 0;
}

/* paths, the pattern of the row each one matches, its methods and arguments */
static const struct {
    const char *path;
    const char *pattern;
    unsigned methods;
    const char *arg0, *arg1;
} good[] = {
    {"/api", "/api", GET, "", ""},
    {"/api/status", "/api/status", GET, "", ""},
    {"/api/kernelspecs", "/api/kernelspecs", GET, "", ""},
    {"/api/kernelspecs/python3", "/api/kernelspecs/{name}", GET, "python3", ""},
    {"/api/kernelspecs/ir-4.2_x", "/api/kernelspecs/{name}", GET, "ir-4.2_x", ""},
    {"/kernelspecs/python3/logo-64x64.png", "/kernelspecs/{name}/{name}", GET, "python3",
     "logo-64x64.png"},
    {"/kernelspecs/Python3/kernel.js", "/kernelspecs/{name}/{name}", GET, "Python3",
     "kernel.js"},
    {"/api/kernels", "/api/kernels", GET | POST, "", ""},
    {"/api/kernels/" KID, "/api/kernels/{id}", GET | DELETE, KID, ""},
    {"/api/kernels/" KID "/interrupt", "/api/kernels/{id}/interrupt", POST, KID, ""},
    {"/api/kernels/" KID "/restart", "/api/kernels/{id}/restart", POST, KID, ""},
    {"/api/kernels/" KID "/fork", "/api/kernels/{id}/fork", POST, KID, ""},
    {"/api/kernels/" KID "/execute", "/api/kernels/{id}/execute", POST, KID, ""},
    {"/api/kernels/" KID "/channels", "/api/kernels/{id}/channels", GET, KID, ""},
    {"/api/kernels/" KID "/checkpoints", "/api/kernels/{id}/checkpoints", GET | POST, KID, ""},
    {"/api/kernels/" KID "/checkpoints/" SID, "/api/kernels/{id}/checkpoints/{id}",
     GET | DELETE, KID, SID},
    {"/api/kernels/" KID "/rollback", "/api/kernels/{id}/rollback", POST, KID, ""},
    {"/api/kernels/" KID "/commands", "/api/kernels/{id}/commands", POST, KID, ""},
    {"/api/kernels/" KID "/commands/" SID, "/api/kernels/{id}/commands/{id}", DELETE, KID,
     SID},
    {"/api/execute", "/api/execute", POST, "", ""},
    {"/api/executions/" SID, "/api/executions/{id}", GET | DELETE, SID, ""},
    {"/api/executions/" SID "/events", "/api/executions/{id}/events", GET, SID, ""},
    {"/mcp", "/mcp", POST | DELETE, "", ""},
    {"/api/sessions", "/api/sessions", GET | POST, "", ""},
    {"/api/sessions/" SID, "/api/sessions/{id}", GET | PATCH | DELETE, SID, ""},
    /* jupyter_server's id shape is \w+-\w+-\w+-\w+-\w+, not strictly a UUID */
    {"/api/kernels/a-b-c-d-e", "/api/kernels/{id}", GET | DELETE, "a-b-c-d-e", ""},
    {"/api/kernels/A_1-b-C-d-9/channels", "/api/kernels/{id}/channels", GET, "A_1-b-C-d-9", ""},
    {"/channel", "/channel", GET, "", ""},
    {"/upload", "/upload", POST, "", ""},
    {"/files", "/files", GET, "", ""},
    {"/self_identify", "/self_identify", GET, "", ""},
    {"/check_liveness", "/check_liveness", GET, "", ""},
    {"/check_ready", "/check_ready", GET, "", ""},
    {"/openapi.json", "/openapi.json", GET, "", ""},
    {"/metrics", "/metrics", GET, "", ""},
    {"/playground/app.js", "/playground/{name}", GET, "app.js", ""},
    /* the E2B-compatible API: its control plane's own routes before the rest of /e2b/api */
    {"/e2b/api/sandboxes", "/e2b/api/sandboxes", GET | POST, "", ""},
    {"/e2b/api/v2/sandboxes", "/e2b/api/v2/sandboxes", GET | POST, "", ""},
    {"/e2b/api/sandboxes/" KID, "/e2b/api/sandboxes/{id}", GET | DELETE, KID, ""},
    {"/e2b/api/sandboxes/" KID "/timeout", "/e2b/api/sandboxes/{id}/timeout", POST, KID, ""},
    {"/e2b/api/sandboxes/" KID "/connect", "/e2b/api/sandboxes/{id}/connect", POST, KID, ""},
    {"/e2b/api/v2/sandboxes/" KID "/connect", "/e2b/api/v2/sandboxes/{id}/connect", POST, KID,
     ""},
    {"/e2b/api/sandboxes/" KID "/metrics", "/e2b/api/{path}",
     GET | POST | DELETE | PUT | PATCH, "", ""},
    {"/e2b/api/v2/sandboxes/" KID "/pause", "/e2b/api/{path}",
     GET | POST | DELETE | PUT | PATCH, "", ""},
    {"/e2b/api/sandboxes/not-an-id", "/e2b/api/{path}", GET | POST | DELETE | PUT | PATCH, "",
     ""},
    {"/e2b/api/templates", "/e2b/api/{path}", GET | POST | DELETE | PUT | PATCH, "", ""},
    {"/e2b/sbx/health", "/e2b/sbx/{path}", GET | POST | DELETE, "", ""},
    {"/e2b/sbx/process.Process/Start", "/e2b/sbx/{path}", GET | POST | DELETE, "", ""},
};

static void test_good_routes(void)
{
    char path[512];
    struct route r;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        for (int slash = 0; slash < 2; slash++) {
            snprintf(path, sizeof(path), "%s%s", good[i].path, slash ? "/" : "");
            CHECK_CASE(path);
            memset(&r, 0x5a, sizeof(r));
            CHECK_INT(match(path, strlen(path), &r), 0);
            CHECK_STR(pattern_of(&r), good[i].pattern);
            CHECK_INT(methods_of(&r), good[i].methods);
            CHECK_STR(r.arg[0], good[i].arg0);
            CHECK_STR(r.arg[1], good[i].arg1);
        }
    }
}

/* The playground's page is "/" alone. */
static void test_root(void)
{
    struct route r;
    CHECK_CASE("/");
    CHECK_INT(match("/", 1, &r), 0);
    CHECK_STR(pattern_of(&r), "/");
    CHECK_INT(methods_of(&r), HTTP_M_GET);
    CHECK(flags_of(&r) & ROUTE_F_PUBLIC);
    CHECK_INT(match("/playground/app.js", 18, &r), 0);
    CHECK(flags_of(&r) & ROUTE_F_PUBLIC);
}

static void test_bad_shapes(void)
{
    static const char *const bad[] = {
        "",
        "//",
        "///",
        "/playground",
        "/playground/",
        "/playground/a/b",
        "/playground/../app.js",
        "api",
        "api/status",
        "/API",
        "/Api/status",
        "/apix",
        "/ap",
        "/api//",
        "//api",
        "/api/status//",
        "/api/status/x",
        "/api/kernel",
        "/api/kernelsx",
        "/api/kernels//",
        "/api/kernels//" KID,
        "/api/kernels/" KID "//",
        "/api/kernels/" KID "/interrupt/x",
        "/api/kernels/" KID "/foo",
        "/api/kernels/" KID "/Interrupt",
        "/api/kernels/" KID "/channels/x",
        "/api/kernels/" KID "/channels?session_id=x",
        "/api/kernels?x=1",
        "/api/kernels/" KID "?",
        "/api/kernels#frag",
        "/api/kernelspecs/python3/x",
        "/api/kernelspecs//",
        "/kernelspecs",
        "/kernelspecs/",
        "/kernelspecs/python3",
        "/kernelspecs/python3/",
        "/kernelspecs/python3//",
        "/kernelspecs//logo.png",
        "/kernelspecs/python3/a/b",
        "/api/sessions/" SID "/x",
        "/api/sessions//",
        "/api/kernels/" KID "/interrupt\r\n",
        " /api",
        "/api ",
        "\\api",
        "/api\\status",
    };
    struct route r;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        CHECK_INT(match(bad[i], strlen(bad[i]), &r), -ENOENT);
        CHECK_STR(pattern_of(&r), "");
        CHECK_INT(methods_of(&r), 0);
        CHECK_STR(r.arg[0], "");
        CHECK_STR(r.arg[1], "");
    }
}

static void test_dot_dot(void)
{
    static const char *const bad[] = {
        "/api/kernelspecs/..",
        "/api/kernelspecs/.",
        "/api/kernelspecs/.hidden",
        "/api/kernelspecs/../kernels",
        "/kernelspecs/../etc/passwd",
        "/kernelspecs/python3/..",
        "/kernelspecs/python3/.",
        "/kernelspecs/../kernel.json",
        "/kernelspecs/python3/..%2fkernel.json",
        "/kernelspecs/python3/%2e%2e",
        "/kernelspecs/%2e%2e/kernel.json",
        "/kernelspecs/python3/.kernel.json",
        "/api/kernels/../status",
        "/api/kernels/" KID "/../restart",
        "/api/./status",
        "/api/../api/status",
        "/./api",
    };
    struct route r;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        CHECK_INT(match(bad[i], strlen(bad[i]), &r), -ENOENT);
    }
    CHECK_CASE("dots inside a name are fine");
    CHECK_INT(match("/kernelspecs/py.3/logo..png", 27, &r), 0);
    CHECK_STR(r.arg[0], "py.3");
    CHECK_STR(r.arg[1], "logo..png");
}

static void test_nul_and_length(void)
{
    struct route r;
    static const char nul1[] = "/api\0";
    static const char nul2[] = "/api/kernelspecs/py\0thon3";
    static const char nul3[] = "/kernelspecs/python3/logo.png\0/../../x";
    CHECK_CASE("NUL bytes");
    CHECK_INT(match(nul1, sizeof(nul1) - 1, &r), -ENOENT);
    CHECK_INT(match(nul2, sizeof(nul2) - 1, &r), -ENOENT);
    CHECK_INT(match(nul3, sizeof(nul3) - 1, &r), -ENOENT);
    CHECK_INT(match("\0", 1, &r), -ENOENT);

    CHECK_CASE("length-delimited, not NUL-terminated");
    CHECK_INT(match("/api/status", 4, &r), 0);
    CHECK_STR(pattern_of(&r), "/api");
    CHECK_INT(match("/api/statusGARBAGE", 11, &r), 0);
    CHECK_STR(pattern_of(&r), "/api/status");

    CHECK_CASE("over-long paths");
    size_t big = ROUTE_MAX_PATH + 64;
    char *p = malloc(big + 1);
    CHECK(p != NULL);
    if (!p)
        return;
    /* "/api" followed by slashes: never a match, at any length */
    memcpy(p, "/api", 4);
    memset(p + 4, '/', big - 4);
    p[big] = '\0';
    CHECK_INT(match(p, ROUTE_MAX_PATH, &r), -ENOENT);
    CHECK_INT(match(p, ROUTE_MAX_PATH + 1, &r), -ENOENT);
    CHECK_INT(match(p, big, &r), -ENOENT);
    /* a kernelspec name that is too long for a name (129) and for an argument (300) */
    for (size_t n = 127; n <= 300; n++) {
        char name[400];
        memset(name, 'k', n);
        name[n] = '\0';
        int len = snprintf(p, big, "/api/kernelspecs/%s", name);
        int rc = match(p, (size_t)len, &r);
        if (n <= 128) {
            CHECK_INT(rc, 0);
            CHECK_INT(strlen(r.arg[0]), n);
        } else {
            CHECK_INT(rc, -ENOENT);
        }
    }
    /* an id-shaped segment over 128 characters */
    for (size_t n = 120; n <= 300; n++) {
        char id[400];
        memset(id, 'a', n);
        id[1] = id[3] = id[5] = id[7] = '-';
        id[n] = '\0';
        int len = snprintf(p, big, "/api/kernels/%s/restart", id);
        int rc = match(p, (size_t)len, &r);
        CHECK_INT(rc, n <= 128 ? 0 : -ENOENT);
    }
    /* a whole path longer than ROUTE_MAX_PATH that would otherwise match */
    memset(p, 'x', big);
    int len = snprintf(p, big, "/api/kernels/%s", KID);
    p[len] = 'x';
    CHECK_INT(match(p, (size_t)len, &r), 0);
    CHECK_INT(match(p, ROUTE_MAX_PATH + 1, &r), -ENOENT);
    free(p);
}

static void test_ids(void)
{
    static const char *const ok[] = {
        KID,         "a-b-c-d-e",         "_-_-_-_-_",
        "0-0-0-0-0", "ABC-def-123-x_y-Z", "4F1C8C3E-9D2A-4B7E-8F00-1234567890AB",
    };
    static const char *const bad[] = {
        "abc",
        "-",
        "----",
        "a-b-c-d",
        "a-b-c-d-e-f",
        "-a-b-c-d",
        "a-b-c-d-",
        "a--b-c-d",
        "a-b-c-d-e!",
        "a.b-c-d-e-f",
        "a b-c-d-e",
        "a-b-c-d-e ",
        "a-b-c-d-\xc3\xa9",
        "a/b-c-d-e",
        "a%2db-c-d-e",
        "..-..-..-..-..",
        "4f1c8c3e9d2a4b7e8f001234567890ab",
        "{4f1c8c3e-9d2a-4b7e-8f00-1234567890ab}",
    };
    struct route r;
    char path[512];
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        CHECK_CASE(ok[i]);
        CHECK(ident_ok(ok[i], strlen(ok[i]), IDENT_UUIDISH));
        snprintf(path, sizeof(path), "/api/sessions/%s", ok[i]);
        CHECK_INT(match(path, strlen(path), &r), 0);
        CHECK_STR(r.arg[0], ok[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        CHECK(!ident_ok(bad[i], strlen(bad[i]), IDENT_UUIDISH));
        snprintf(path, sizeof(path), "/api/kernels/%s", bad[i]);
        CHECK_INT(match(path, strlen(path), &r), -ENOENT);
        snprintf(path, sizeof(path), "/api/kernels/%s/channels", bad[i]);
        CHECK_INT(match(path, strlen(path), &r), -ENOENT);
        snprintf(path, sizeof(path), "/api/sessions/%s", bad[i]);
        CHECK_INT(match(path, strlen(path), &r), -ENOENT);
    }
}

/* Routes ending in {path} carry the rest of the path, '/' included, unchecked (the handler
 * checks it with fpath_normalize). */
static void test_file_paths(void)
{
    static const struct {
        const char *path;
        const char *pattern;
        unsigned methods;
        const char *rest;
    } files[] = {
        {"/upload/a.txt", "/upload/{path}", HTTP_M_PUT, "a.txt"},
        {"/download/dir/sub/f.csv", "/download/{path}", HTTP_M_GET, "dir/sub/f.csv"},
        {"/check_file/x", "/check_file/{path}", HTTP_M_GET, "x"},
        {"/files/a/b/", "/files/{path}", HTTP_M_DELETE, "a/b/"},
        {"/download//etc", "/download/{path}", HTTP_M_GET, "/etc"},
        {"/download/../x", "/download/{path}", HTTP_M_GET, "../x"},
        {"/download/a b%;?", "/download/{path}", HTTP_M_GET, "a b%;?"},
    };
    struct route r;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        size_t n = strlen(files[i].path);
        CHECK_CASE(files[i].path);
        CHECK_INT(match(files[i].path, n, &r), 0);
        CHECK_STR(pattern_of(&r), files[i].pattern);
        CHECK_INT(methods_of(&r), files[i].methods);
        CHECK_MEM(files[i].path + r.rest_off, r.rest_len, files[i].rest, strlen(files[i].rest));
        CHECK_INT(r.rest_off + r.rest_len, n);
    }
    static const char *const bad[] = {"/download", "/download/", "/downloadx/a", "/check_file",
                                      "/check_file/", "/upload/", "/Upload/a", "/file/a"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        int rc = match(bad[i], strlen(bad[i]), &r);
        /* "/upload/" is POST /upload with a trailing slash */
        if (!strcmp(bad[i], "/upload/")) {
            CHECK_INT(rc, 0);
            CHECK_STR(pattern_of(&r), "/upload");
        } else {
            CHECK_INT(rc, -ENOENT);
        }
        CHECK_INT(r.rest_len, 0);
    }
    CHECK_CASE("no rest on other routes");
    CHECK_INT(match("/api/kernels", 12, &r), 0);
    CHECK_INT(r.rest_off + r.rest_len, 0);
    CHECK_CASE("flags");
    CHECK_INT(match("/check_liveness", 15, &r), 0);
    CHECK(flags_of(&r) & ROUTE_F_PUBLIC);
    CHECK_INT(match("/check_ready", 12, &r), 0);
    CHECK(flags_of(&r) & ROUTE_F_PUBLIC);
    CHECK_INT(match("/api", 4, &r), 0);
    CHECK(flags_of(&r) & ROUTE_F_PUBLIC);
    CHECK_INT(match("/self_identify", 14, &r), 0);
    CHECK(!(flags_of(&r) & ROUTE_F_PUBLIC));
    CHECK_INT(match("/upload/x", 9, &r), 0);
    CHECK(flags_of(&r) & ROUTE_F_UPLOAD);
}

/* A shard's own "/s/<name>" prefix is stripped; other shards' prefixes match nothing. */
static void test_shard_prefix(void)
{
    struct route r;
    CHECK_CASE("no shard: the prefix is an unknown path");
    CHECK_INT(match("/s/kgw-1/api/kernels", 20, &r), -ENOENT);
    route_set_shard("kgw-1");
    CHECK_CASE("own prefix");
    CHECK_INT(match("/s/kgw-1/api/kernels", 20, &r), 0);
    CHECK_STR(pattern_of(&r), "/api/kernels");
    CHECK_INT(r.prefix_len, 8);
    const char *p = "/s/kgw-1/api/kernels/" KID "/channels";
    CHECK_INT(match(p, strlen(p), &r), 0);
    CHECK_STR(pattern_of(&r), "/api/kernels/{id}/channels");
    CHECK(!strcmp(r.arg[0], KID));
    CHECK_CASE("{path} offsets count the prefix");
    p = "/s/kgw-1/download/a/b.txt";
    CHECK_INT(match(p, strlen(p), &r), 0);
    CHECK_STR(pattern_of(&r), "/download/{path}");
    CHECK_INT(r.rest_len, 7);
    CHECK(!strncmp(p + r.rest_off, "a/b.txt", r.rest_len));
    CHECK_CASE("the playground under the prefix: its root, with the slash");
    CHECK_INT(match("/s/kgw-1/", 9, &r), 0);
    CHECK_STR(pattern_of(&r), "/");
    CHECK_INT(r.prefix_len, 8);
    CHECK_INT(match("/s/kgw-1/playground/app.css", 27, &r), 0);
    CHECK_STR(pattern_of(&r), "/playground/{name}");
    CHECK_STR(r.arg[0], "app.css");
    CHECK_INT(match("/s/kgw-1//", 10, &r), -ENOENT);
    CHECK_CASE("unprefixed paths still match");
    CHECK_INT(match("/api/kernels", 12, &r), 0);
    CHECK_INT(r.prefix_len, 0);
    CHECK_CASE("another shard, a bare prefix, a prefix of the name");
    CHECK_INT(match("/s/kgw-2/api/kernels", 20, &r), -ENOENT);
    CHECK_INT(match("/s/kgw-1", 8, &r), -ENOENT);
    CHECK_INT(match("/s/kgw-/api/kernels", 19, &r), -ENOENT);
    CHECK_INT(match("/s/kgw-10/api/kernels", 21, &r), -ENOENT);
    CHECK_INT(match("/s/kgw-1/s/kgw-1/api/kernels", 28, &r), -ENOENT);
    route_set_shard(NULL);
    CHECK_INT(match("/s/kgw-1/api/kernels", 20, &r), -ENOENT);
}

/* A pattern the matcher reads as written: "/" alone, or '/'-separated segments that are
 * literals (lowercase letters, digits, '.', '_', '-'), "{id}", "{name}" or, last, "{path}";
 * at most two arguments. */
static bool pattern_ok(const char *pat)
{
    size_t args = 0;
    if (!strcmp(pat, "/"))
        return true;
    for (const char *p = pat; *p;) {
        if (*p++ != '/')
            return false;
        size_t n = strcspn(p, "/");
        if (n == 0)
            return false;
        if (p[0] == '{') {
            if (n == 6 && !strncmp(p, "{path}", 6))
                return p[n] == '\0';
            if (!(n == 4 && !strncmp(p, "{id}", 4)) && !(n == 6 && !strncmp(p, "{name}", 6)))
                return false;
            if (++args > 2)
                return false;
        } else if (strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789._-") < n) {
            return false;
        }
        p += n;
    }
    return true;
}

/* Every row of the table: a pattern of the syntax above, methods, no other row with the same
 * pattern; and a path made from it (ids, names and a rest put in, with and without a trailing
 * slash) matches that row and no earlier one, with its arguments. */
static void test_table_rows(void)
{
    static const char *const ids[] = {KID, SID}, *const names[] = {"python3", "logo.png"};
    CHECK_CASE("the table");
    CHECK(ntable > 40);
    for (size_t i = 0; i < ntable; i++) {
        const struct route_def *d = &table[i];
        char path[512], want[2][ROUTE_ARG_MAX] = {"", ""};
        size_t o = 0, nargs = 0;
        bool rest = false;
        CHECK_CASE(d->pattern);
        CHECK(pattern_ok(d->pattern));
        CHECK(d->methods != 0);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(table[j].pattern, d->pattern) != 0);
        for (const char *p = d->pattern; *p && o + 64 < sizeof(path);) {
            const char *put = NULL;
            if (!strncmp(p, "{id}", 4))
                put = ids[nargs], p += 4;
            else if (!strncmp(p, "{name}", 6))
                put = names[nargs], p += 6;
            else if (!strncmp(p, "{path}", 6))
                put = "a/b.txt", p += 6, rest = true;
            if (!put) {
                path[o++] = *p++;
                continue;
            }
            if (!rest)
                snprintf(want[nargs++], ROUTE_ARG_MAX, "%s", put);
            o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", put);
        }
        path[o] = '\0';
        for (int slash = 0; slash < 2; slash++) {
            struct route r;
            size_t len = o + (size_t)slash;
            if (slash && o > 1)
                path[o] = '/', path[o + 1] = '\0';
            else if (slash)
                break; /* "/" has no trailing slash of its own */
            CHECK_CASE(path);
            CHECK_INT(match(path, len, &r), 0);
            CHECK(r.def == d);
            CHECK_STR(r.arg[0], want[0]);
            CHECK_STR(r.arg[1], want[1]);
            if (rest)
                CHECK_MEM(path + r.rest_off, r.rest_len, slash ? "a/b.txt/" : "a/b.txt",
                          strlen("a/b.txt") + (size_t)slash);
            else
                CHECK_INT(r.rest_len, 0);
        }
    }
}

/* The matcher on tables of its own: the first row that matches wins, only the n rows given
 * are looked at, arguments are checked by kind. */
static void test_matcher(void)
{
    static const struct route_def mini[] = {
        {"/a/{path}", GET, 0, {.handle = NULL}},
        {"/a/b", POST, ROUTE_F_PUBLIC, {.handle = NULL}},
        {"/k/{id}/{name}", GET, 0, {.handle = NULL}},
        {"/", GET, 0, {.handle = NULL}},
    };
    struct route r;
    const char *ab = "/a/b";
    CHECK_CASE("the first row wins");
    CHECK_INT(route_match(mini, 4, ab, 4, &r), 0);
    CHECK(r.def == &mini[0]);
    CHECK_MEM(ab + r.rest_off, r.rest_len, "b", 1);
    CHECK_INT(route_match(mini + 1, 3, ab, 4, &r), 0);
    CHECK(r.def == &mini[1]);
    CHECK_INT(r.rest_len, 0);
    CHECK_CASE("only the rows given");
    CHECK_INT(route_match(mini, 0, "/", 1, &r), -ENOENT);
    CHECK(r.def == NULL);
    CHECK_INT(route_match(mini, 3, "/", 1, &r), -ENOENT);
    CHECK_INT(route_match(mini, 4, "/", 1, &r), 0);
    CHECK(r.def == &mini[3]);
    CHECK_INT(route_match(mini, 4, "//", 2, &r), -ENOENT);
    CHECK_CASE("arguments by kind");
    const char *p = "/k/" KID "/x.y";
    CHECK_INT(route_match(mini, 4, p, strlen(p), &r), 0);
    CHECK(r.def == &mini[2]);
    CHECK_STR(r.arg[0], KID);
    CHECK_STR(r.arg[1], "x.y");
    p = "/k/x.y/" KID;
    CHECK_INT(route_match(mini, 4, p, strlen(p), &r), -ENOENT);
    CHECK(r.def == NULL);
    CHECK_STR(r.arg[0], "");
    CHECK_CASE("{path} takes at least one byte");
    CHECK_INT(route_match(mini, 4, "/a/", 3, &r), -ENOENT);
    CHECK_INT(route_match(mini, 1, "/a", 2, &r), -ENOENT);
}

int main(void)
{
    table = routes_table(&ntable);
    test_matcher();
    test_table_rows();
    test_good_routes();
    test_root();
    test_bad_shapes();
    test_dot_dot();
    test_nul_and_length();
    test_ids();
    test_file_paths();
    test_shard_prefix();
    CHECK_DONE();
}
