/* metrics.c: GET /metrics, the Prometheus text format (docs/metrics.md). */
#ifndef KGW_GATEWAY_METRICS_H
#define KGW_GATEWAY_METRICS_H

#include "common/buf.h"
#include "gateway/gw.h"
#include "gateway/http.h"

#define METRICS_MAX_BYTES (4 << 20)
void metrics_init(gw_t *g);
/* Appends every metric to out: 0 or -errno (-EMSGSIZE over out's limit). */
int metrics_render(gw_t *g, buf_t *out);
/* GET /metrics (a row of routes.c): rendered on the loop. */
void metrics_handle(struct gw_req *r);

#endif
