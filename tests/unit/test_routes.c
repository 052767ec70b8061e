/* gateway/routes.c: every row of the route table can serve its route (a websocket route a
 * check and callbacks, an upload its streaming calls, any other a handler), and nothing else. */
#include <stdbool.h>
#include <stdio.h>

#include "check.h"

#include "gateway/route.h"
#include "gateway/routes.h"

int main(void)
{
    size_t n = 0;
    const struct route_def *t = routes_table(&n);
    CHECK_CASE("the table");
    CHECK(t != NULL && n > 0);
    for (size_t i = 0; i < n; i++) {
        const struct route_def *d = &t[i];
        const struct route_ops *o = &d->ops;
        CHECK_CASE(d->pattern);
        if (d->flags & ROUTE_F_WEBSOCKET) {
            CHECK(o->ws_confirm && o->ws_open);
            CHECK(!o->handle && !o->upload_start);
            CHECK(d->methods == HTTP_M_GET);
        } else if (d->flags & ROUTE_F_UPLOAD) {
            CHECK(o->upload_start && o->upload_body && o->upload_done && o->fini);
            CHECK(!o->ws_confirm && !o->handle);
        } else {
            CHECK(o->handle);
            CHECK(!o->ws_confirm && !o->ws_open && !o->upload_start && !o->upload_body &&
                  !o->upload_done);
        }
        CHECK(!o->write || o->fini); /* a streamed answer's state is freed with the request */
    }
    CHECK_DONE();
}
