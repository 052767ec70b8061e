/* docs/openapi.json (as embedded in the gateway) against the route table: every route and
 * every method it allows is described, websockets and public routes are marked as such, and the
 * document describes nothing the gateway does not route. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#include "gateway/openapi.h"
#include "gateway/route.h"
#include "gateway/routes.h"

static const struct route_def *table; /* gateway/routes.c's (main) */
static size_t ntable;

static const struct {
    unsigned bit;
    const char *name;
} methods[] = {
    {HTTP_M_GET, "get"},         {HTTP_M_POST, "post"},     {HTTP_M_PUT, "put"},
    {HTTP_M_PATCH, "patch"},     {HTTP_M_DELETE, "delete"}, {HTTP_M_HEAD, "head"},
    {HTTP_M_OPTIONS, "options"},
};

/* "/api/kernels/{id}/channels" -> "/api/kernels/{}/channels": parameter names may differ. */
static void shape(const char *tmpl, char *out, size_t outsz)
{
    size_t o = 0;
    for (const char *p = tmpl; *p && o + 3 < outsz; p++) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (!close)
                break;
            out[o++] = '{';
            out[o++] = '}';
            p = close;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static const struct route_def *route_of_shape(const char *sh)
{
    char rs[ROUTE_MAX_PATH];
    for (size_t i = 0; i < ntable; i++) {
        shape(table[i].pattern, rs, sizeof(rs));
        if (!strcmp(rs, sh))
            return &table[i];
    }
    return NULL;
}

static json_t *doc_path(json_t *paths, const char *sh)
{
    const char *key;
    json_t *v;
    char ds[ROUTE_MAX_PATH];
    json_object_foreach(paths, key, v)
    {
        shape(key, ds, sizeof(ds));
        if (!strcmp(ds, sh))
            return v;
    }
    return NULL;
}

static bool is_public(json_t *op)
{
    json_t *sec = json_object_get(op, "security");
    return json_is_array(sec) && json_array_size(sec) == 0;
}

int main(void)
{
    json_error_t err;
    table = routes_table(&ntable);
    json_t *doc = json_loadb((const char *)kgw_openapi_json, kgw_openapi_json_len, 0, &err);
    CHECK_CASE("document");
    CHECK(doc != NULL);
    if (!doc) {
        fprintf(stderr, "docs/openapi.json: line %d: %s\n", err.line, err.text);
        CHECK_DONE();
    }
    CHECK(kgw_openapi_json[kgw_openapi_json_len] == '\0');
    const char *version = json_string_value(json_object_get(doc, "openapi"));
    CHECK(version && !strncmp(version, "3.", 2));
    json_t *paths = json_object_get(doc, "paths");
    CHECK(json_is_object(paths));
    CHECK(json_is_object(json_object_get(json_object_get(doc, "components"), "securitySchemes")));
    CHECK(json_array_size(json_object_get(doc, "security")) > 0);

    /* every route, every method */
    for (size_t i = 0; i < ntable; i++) {
        const struct route_def *rd = &table[i];
        char sh[ROUTE_MAX_PATH];
        shape(rd->pattern, sh, sizeof(sh));
        CHECK_CASE(rd->pattern);
        json_t *item = doc_path(paths, sh);
        CHECK(item != NULL);
        if (!item)
            continue;
        for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
            json_t *op = json_object_get(item, methods[m].name);
            if (!(rd->methods & methods[m].bit)) {
                CHECK(op == NULL);
                continue;
            }
            CHECK(json_is_object(op));
            CHECK(json_is_object(json_object_get(op, "responses")));
            CHECK(is_public(op) == !!(rd->flags & ROUTE_F_PUBLIC));
            CHECK(!json_object_get(op, "x-kgw-websocket") == !(rd->flags & ROUTE_F_WEBSOCKET));
            if (!(rd->flags & ROUTE_F_PUBLIC))
                CHECK(json_object_get(json_object_get(op, "responses"), "401") != NULL);
        }
        /* path parameters: one per {…}, each declared */
        size_t want = 0;
        for (const char *p = rd->pattern; (p = strchr(p, '{')); p++)
            want++;
        json_t *op = json_object_get(item, rd->methods & HTTP_M_GET      ? "get"
                                           : rd->methods & HTTP_M_POST   ? "post"
                                           : rd->methods & HTTP_M_PUT    ? "put"
                                           : rd->methods & HTTP_M_DELETE ? "delete"
                                                                         : "patch");
        size_t got = 0, k;
        json_t *prm;
        json_array_foreach(json_object_get(op, "parameters"), k, prm)
        {
            if (!strcmp(json_string_value(json_object_get(prm, "in")) ?: "", "path"))
                got++;
        }
        CHECK_INT(got, want);
    }

    /* nothing the table lacks */
    const char *key;
    json_t *item;
    json_object_foreach(paths, key, item)
    {
        char sh[ROUTE_MAX_PATH];
        shape(key, sh, sizeof(sh));
        CHECK_CASE(key);
        const struct route_def *rd = route_of_shape(sh);
        CHECK(rd != NULL);
        if (!rd)
            continue;
        const char *mname;
        json_t *op;
        json_object_foreach(item, mname, op)
        {
            bool known = false;
            for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++)
                if (!strcmp(mname, methods[m].name)) {
                    known = true;
                    CHECK_CASE(mname);
                    CHECK(rd->methods & methods[m].bit);
                }
            if (!known)
                CHECK(!strcmp(mname, "parameters") || !strcmp(mname, "summary") ||
                      !strcmp(mname, "description"));
        }
    }

    /* the table itself: each pattern once (test_route.c checks that each matches its row) */
    for (size_t i = 0; i < ntable; i++) {
        CHECK_CASE(table[i].pattern);
        CHECK(table[i].methods != 0);
        for (size_t j = i + 1; j < ntable; j++)
            CHECK(strcmp(table[i].pattern, table[j].pattern) != 0);
    }
    json_decref(doc);
    CHECK_DONE();
}
