/* routes.c: the gateway's route table (struct route_def, route.h): each route's pattern,
 * methods, flags and what serves it. */
#ifndef KGW_GATEWAY_ROUTES_H
#define KGW_GATEWAY_ROUTES_H

#include "gateway/http.h"

/* The rows (*ret_n of them), in matching order; main.c sets g->routes to them before serving. */
const struct route_def *routes_table(size_t *ret_n);

#endif
