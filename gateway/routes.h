/* routes.c: what serves each route of gateway/route.c's table (struct route_ops, http.h). */
#ifndef KGW_GATEWAY_ROUTES_H
#define KGW_GATEWAY_ROUTES_H

#include "gateway/http.h"

/* ROUTE_N rows, by enum route_id; main.c sets g->routes to it before serving. */
const struct route_ops *routes_table(void);

#endif
