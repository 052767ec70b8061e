/* gateway/route.c: untrusted request paths to routes and arguments. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/ident.h"
#include "gateway/route.h"

#define KID "4f1c8c3e-9d2a-4b7e-8f00-1234567890ab"
#define SID "0b7ad8d4-3f57-4bd5-a2c9-5e0f3c7d9a11"

static const struct {
    const char *path;
    enum route_id id;
    unsigned methods;
    const char *arg0, *arg1;
} good[] = {
    {"/api", ROUTE_API, HTTP_M_GET, "", ""},
    {"/api/status", ROUTE_STATUS, HTTP_M_GET, "", ""},
    {"/api/kernelspecs", ROUTE_KSPECS, HTTP_M_GET, "", ""},
    {"/api/kernelspecs/python3", ROUTE_KSPEC, HTTP_M_GET, "python3", ""},
    {"/api/kernelspecs/ir-4.2_x", ROUTE_KSPEC, HTTP_M_GET, "ir-4.2_x", ""},
    {"/kernelspecs/python3/logo-64x64.png", ROUTE_KSPEC_RESOURCE, HTTP_M_GET, "python3",
     "logo-64x64.png"},
    {"/kernelspecs/Python3/kernel.js", ROUTE_KSPEC_RESOURCE, HTTP_M_GET, "Python3", "kernel.js"},
    {"/api/kernels", ROUTE_KERNELS, HTTP_M_GET | HTTP_M_POST, "", ""},
    {"/api/kernels/" KID, ROUTE_KERNEL, HTTP_M_GET | HTTP_M_DELETE, KID, ""},
    {"/api/kernels/" KID "/interrupt", ROUTE_KERNEL_INTERRUPT, HTTP_M_POST, KID, ""},
    {"/api/kernels/" KID "/restart", ROUTE_KERNEL_RESTART, HTTP_M_POST, KID, ""},
    {"/api/kernels/" KID "/channels", ROUTE_KERNEL_CHANNELS, HTTP_M_GET, KID, ""},
    {"/api/sessions", ROUTE_SESSIONS, HTTP_M_GET | HTTP_M_POST, "", ""},
    {"/api/sessions/" SID, ROUTE_SESSION, HTTP_M_GET | HTTP_M_PATCH | HTTP_M_DELETE, SID, ""},
    /* jupyter_server's id shape is \w+-\w+-\w+-\w+-\w+, not strictly a UUID */
    {"/api/kernels/a-b-c-d-e", ROUTE_KERNEL, HTTP_M_GET | HTTP_M_DELETE, "a-b-c-d-e", ""},
    {"/api/kernels/A_1-b-C-d-9/channels", ROUTE_KERNEL_CHANNELS, HTTP_M_GET, "A_1-b-C-d-9", ""},
    {"/channel", ROUTE_CHANNEL, HTTP_M_GET, "", ""},
    {"/upload", ROUTE_UPLOAD, HTTP_M_POST, "", ""},
    {"/files", ROUTE_FILES, HTTP_M_GET, "", ""},
    {"/self_identify", ROUTE_SELF_IDENTIFY, HTTP_M_GET, "", ""},
    {"/check_liveness", ROUTE_LIVENESS, HTTP_M_GET, "", ""},
    {"/check_ready", ROUTE_READY, HTTP_M_GET, "", ""},
    {"/openapi.json", ROUTE_OPENAPI, HTTP_M_GET, "", ""},
    {"/metrics", ROUTE_METRICS, HTTP_M_GET, "", ""},
    {"/playground/app.js", ROUTE_PLAYGROUND_ASSET, HTTP_M_GET, "app.js", ""},
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
            CHECK_INT(route_match(path, strlen(path), &r), 0);
            CHECK_INT(r.id, good[i].id);
            CHECK_INT(r.methods, good[i].methods);
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
    CHECK_INT(route_match("/", 1, &r), 0);
    CHECK_INT(r.id, ROUTE_PLAYGROUND);
    CHECK_INT(r.methods, HTTP_M_GET);
    CHECK(r.flags & ROUTE_F_PUBLIC);
    CHECK_INT(route_match("/playground/app.js", 18, &r), 0);
    CHECK(r.flags & ROUTE_F_PUBLIC);
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
        CHECK_INT(route_match(bad[i], strlen(bad[i]), &r), -ENOENT);
        CHECK_INT(r.id, ROUTE_NONE);
        CHECK_INT(r.methods, 0);
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
        CHECK_INT(route_match(bad[i], strlen(bad[i]), &r), -ENOENT);
    }
    CHECK_CASE("dots inside a name are fine");
    CHECK_INT(route_match("/kernelspecs/py.3/logo..png", 27, &r), 0);
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
    CHECK_INT(route_match(nul1, sizeof(nul1) - 1, &r), -ENOENT);
    CHECK_INT(route_match(nul2, sizeof(nul2) - 1, &r), -ENOENT);
    CHECK_INT(route_match(nul3, sizeof(nul3) - 1, &r), -ENOENT);
    CHECK_INT(route_match("\0", 1, &r), -ENOENT);

    CHECK_CASE("length-delimited, not NUL-terminated");
    CHECK_INT(route_match("/api/status", 4, &r), 0);
    CHECK_INT(r.id, ROUTE_API);
    CHECK_INT(route_match("/api/statusGARBAGE", 11, &r), 0);
    CHECK_INT(r.id, ROUTE_STATUS);

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
    CHECK_INT(route_match(p, ROUTE_MAX_PATH, &r), -ENOENT);
    CHECK_INT(route_match(p, ROUTE_MAX_PATH + 1, &r), -ENOENT);
    CHECK_INT(route_match(p, big, &r), -ENOENT);
    /* a kernelspec name that is too long for a name (129) and for an argument (300) */
    for (size_t n = 127; n <= 300; n++) {
        char name[400];
        memset(name, 'k', n);
        name[n] = '\0';
        int len = snprintf(p, big, "/api/kernelspecs/%s", name);
        int rc = route_match(p, (size_t)len, &r);
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
        int rc = route_match(p, (size_t)len, &r);
        CHECK_INT(rc, n <= 128 ? 0 : -ENOENT);
    }
    /* a whole path longer than ROUTE_MAX_PATH that would otherwise match */
    memset(p, 'x', big);
    int len = snprintf(p, big, "/api/kernels/%s", KID);
    p[len] = 'x';
    CHECK_INT(route_match(p, (size_t)len, &r), 0);
    CHECK_INT(route_match(p, ROUTE_MAX_PATH + 1, &r), -ENOENT);
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
        CHECK_INT(route_match(path, strlen(path), &r), 0);
        CHECK_STR(r.arg[0], ok[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        CHECK(!ident_ok(bad[i], strlen(bad[i]), IDENT_UUIDISH));
        snprintf(path, sizeof(path), "/api/kernels/%s", bad[i]);
        CHECK_INT(route_match(path, strlen(path), &r), -ENOENT);
        snprintf(path, sizeof(path), "/api/kernels/%s/channels", bad[i]);
        CHECK_INT(route_match(path, strlen(path), &r), -ENOENT);
        snprintf(path, sizeof(path), "/api/sessions/%s", bad[i]);
        CHECK_INT(route_match(path, strlen(path), &r), -ENOENT);
    }
}

/* Routes ending in {path} carry the rest of the path, '/' included, unchecked (the handler
 * checks it with fpath_normalize). */
static void test_file_paths(void)
{
    static const struct {
        const char *path;
        enum route_id id;
        unsigned methods;
        const char *rest;
    } files[] = {
        {"/upload/a.txt", ROUTE_UPLOAD_PATH, HTTP_M_PUT, "a.txt"},
        {"/download/dir/sub/f.csv", ROUTE_DOWNLOAD, HTTP_M_GET, "dir/sub/f.csv"},
        {"/check_file/x", ROUTE_CHECK_FILE, HTTP_M_GET, "x"},
        {"/files/a/b/", ROUTE_FILE, HTTP_M_DELETE, "a/b/"},
        {"/download//etc", ROUTE_DOWNLOAD, HTTP_M_GET, "/etc"},
        {"/download/../x", ROUTE_DOWNLOAD, HTTP_M_GET, "../x"},
        {"/download/a b%;?", ROUTE_DOWNLOAD, HTTP_M_GET, "a b%;?"},
    };
    struct route r;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        size_t n = strlen(files[i].path);
        CHECK_CASE(files[i].path);
        CHECK_INT(route_match(files[i].path, n, &r), 0);
        CHECK_INT(r.id, files[i].id);
        CHECK_INT(r.methods, files[i].methods);
        CHECK_MEM(files[i].path + r.rest_off, r.rest_len, files[i].rest, strlen(files[i].rest));
        CHECK_INT(r.rest_off + r.rest_len, n);
    }
    static const char *const bad[] = {"/download", "/download/", "/downloadx/a", "/check_file",
                                      "/check_file/", "/upload/", "/Upload/a", "/file/a"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        int rc = route_match(bad[i], strlen(bad[i]), &r);
        /* "/upload/" is POST /upload with a trailing slash */
        if (!strcmp(bad[i], "/upload/")) {
            CHECK_INT(rc, 0);
            CHECK_INT(r.id, ROUTE_UPLOAD);
        } else {
            CHECK_INT(rc, -ENOENT);
        }
        CHECK_INT(r.rest_len, 0);
    }
    CHECK_CASE("no rest on other routes");
    CHECK_INT(route_match("/api/kernels", 12, &r), 0);
    CHECK_INT(r.rest_off + r.rest_len, 0);
    CHECK_CASE("flags");
    CHECK_INT(route_match("/check_liveness", 15, &r), 0);
    CHECK(r.flags & ROUTE_F_PUBLIC);
    CHECK_INT(route_match("/check_ready", 12, &r), 0);
    CHECK(r.flags & ROUTE_F_PUBLIC);
    CHECK_INT(route_match("/api", 4, &r), 0);
    CHECK(r.flags & ROUTE_F_PUBLIC);
    CHECK_INT(route_match("/self_identify", 14, &r), 0);
    CHECK(!(r.flags & ROUTE_F_PUBLIC));
    CHECK_INT(route_match("/upload/x", 9, &r), 0);
    CHECK(r.flags & ROUTE_F_UPLOAD);
}

/* A shard's own "/s/<name>" prefix is stripped; other shards' prefixes match nothing. */
static void test_shard_prefix(void)
{
    struct route r;
    CHECK_CASE("no shard: the prefix is an unknown path");
    CHECK_INT(route_match("/s/kgw-1/api/kernels", 20, &r), -ENOENT);
    route_set_shard("kgw-1");
    CHECK_CASE("own prefix");
    CHECK_INT(route_match("/s/kgw-1/api/kernels", 20, &r), 0);
    CHECK_INT(r.id, ROUTE_KERNELS);
    CHECK_INT(r.prefix_len, 8);
    const char *p = "/s/kgw-1/api/kernels/" KID "/channels";
    CHECK_INT(route_match(p, strlen(p), &r), 0);
    CHECK_INT(r.id, ROUTE_KERNEL_CHANNELS);
    CHECK(!strcmp(r.arg[0], KID));
    CHECK_CASE("{path} offsets count the prefix");
    p = "/s/kgw-1/download/a/b.txt";
    CHECK_INT(route_match(p, strlen(p), &r), 0);
    CHECK_INT(r.id, ROUTE_DOWNLOAD);
    CHECK_INT(r.rest_len, 7);
    CHECK(!strncmp(p + r.rest_off, "a/b.txt", r.rest_len));
    CHECK_CASE("the playground under the prefix: its root, with the slash");
    CHECK_INT(route_match("/s/kgw-1/", 9, &r), 0);
    CHECK_INT(r.id, ROUTE_PLAYGROUND);
    CHECK_INT(r.prefix_len, 8);
    CHECK_INT(route_match("/s/kgw-1/playground/app.css", 27, &r), 0);
    CHECK_INT(r.id, ROUTE_PLAYGROUND_ASSET);
    CHECK_STR(r.arg[0], "app.css");
    CHECK_INT(route_match("/s/kgw-1//", 10, &r), -ENOENT);
    CHECK_CASE("unprefixed paths still match");
    CHECK_INT(route_match("/api/kernels", 12, &r), 0);
    CHECK_INT(r.prefix_len, 0);
    CHECK_CASE("another shard, a bare prefix, a prefix of the name");
    CHECK_INT(route_match("/s/kgw-2/api/kernels", 20, &r), -ENOENT);
    CHECK_INT(route_match("/s/kgw-1", 8, &r), -ENOENT);
    CHECK_INT(route_match("/s/kgw-/api/kernels", 19, &r), -ENOENT);
    CHECK_INT(route_match("/s/kgw-10/api/kernels", 21, &r), -ENOENT);
    CHECK_INT(route_match("/s/kgw-1/s/kgw-1/api/kernels", 28, &r), -ENOENT);
    route_set_shard(NULL);
    CHECK_INT(route_match("/s/kgw-1/api/kernels", 20, &r), -ENOENT);
}

int main(void)
{
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
