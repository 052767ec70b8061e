/* gateway/routes.c against gateway/route.c: every route has one row that can serve it (a
 * websocket route a check and callbacks, an upload its streaming calls, any other a handler),
 * and every row belongs to a route. */
#include <stdbool.h>
#include <stdio.h>

#include "check.h"

#include "gateway/route.h"
#include "gateway/routes.h"

static bool routed(enum route_id id)
{
    for (size_t i = 0; i < route_count(); i++)
        if (route_at(i)->id == id)
            return true;
    return false;
}

int main(void)
{
    const struct route_ops *t = routes_table();
    for (size_t i = 0; i < route_count(); i++) {
        const struct route_def *d = route_at(i);
        const struct route_ops *o = &t[d->id];
        CHECK_CASE(d->pattern);
        CHECK(d->id > ROUTE_NONE && d->id < ROUTE_N);
        if (d->flags & ROUTE_F_WEBSOCKET) {
            CHECK(o->ws_confirm && o->ws_open);
            CHECK(!o->handle && !o->upload_start);
        } else if (d->flags & ROUTE_F_UPLOAD) {
            CHECK(o->upload_start && o->upload_body && o->upload_done && o->fini);
            CHECK(!o->ws_confirm);
        } else {
            CHECK(o->handle);
            CHECK(!o->ws_confirm && !o->upload_start);
        }
        CHECK(!o->write || o->fini); /* a streamed answer's state is freed with the request */
    }
    for (int id = ROUTE_NONE; id < ROUTE_N; id++) {
        const struct route_ops *o = &t[id];
        char name[32];
        snprintf(name, sizeof(name), "route id %d", id);
        CHECK_CASE(name);
        if (!routed((enum route_id)id))
            CHECK(!o->handle && !o->upload_start && !o->ws_confirm && !o->write && !o->fini);
    }
    CHECK_DONE();
}
