/* The REST API's own handlers (rows of gateway/routes.c): the gateway, kernelspecs, kernels. */
#ifndef KGW_GATEWAY_REST_H
#define KGW_GATEWAY_REST_H

#include <jansson.h>

#include "gateway/gw.h"
#include "gateway/http.h"
#include "kernelmgr/kernel.h"

/* GET /api, /api/status, /self_identify, /check_liveness, /check_ready, /openapi.json */
void rest_api(struct gw_req *r);
void rest_status(struct gw_req *r);
void rest_self_identify(struct gw_req *r);
void rest_liveness(struct gw_req *r);
void rest_readiness(struct gw_req *r);
void rest_openapi(struct gw_req *r);
/* Starts the loop tick that /check_liveness and /check_ready watch. */
int rest_start_tick(gw_t *g);
void rest_stop_tick(gw_t *g);

/* GET /api/kernelspecs, /api/kernelspecs/{name}, /kernelspecs/{name}/{file} */
void rest_kspecs(struct gw_req *r);
void rest_kspec(struct gw_req *r);
void rest_kspec_resource(struct gw_req *r);

/* /api/kernels, /api/kernels/{id}, its interrupt and restart */
void rest_kernels(struct gw_req *r);
void rest_kernel(struct gw_req *r);
void rest_kernel_interrupt(struct gw_req *r);
/* POST /api/kernels/{id}/pause, /resume (kernel_pause) */
void rest_kernel_pause(struct gw_req *r);
void rest_kernel_resume(struct gw_req *r);
void rest_kernel_restart(struct gw_req *r);
/* Starts a kernel from a request body {"name", "env"} (kops_start); calls done when its start
 * ended (done asks kops_waited how, and replies with rest_start_failed when it is not up).
 * Replies on errors itself (then -errno). */
int rest_start_kernel(struct gw_req *r, json_t *body,
                      void (*done)(struct gw_req *, kernel_t *, int));
/* The reply to a start that did not leave a running kernel (kops_waited's code < 0: 409 when
 * it was shut down meanwhile, 503 while draining, else 500 with its last cause); shuts the
 * kernel down. */
void rest_start_failed(struct gw_req *r, kernel_t *k, int code);

#endif
