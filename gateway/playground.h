/* The playground: GET / serves a page for trying the execute and files APIs from a browser,
 * GET /playground/{name} its script and style sheet (gateway/playground/, compiled in). */
#ifndef KGW_GATEWAY_PLAYGROUND_H
#define KGW_GATEWAY_PLAYGROUND_H

#include "gateway/http.h"

/* The page's Content-Security-Policy: its own script and style sheet, images from data: URLs
 * (outputs), requests to this origin only, HTML outputs in frames from blob: URLs (sandboxed,
 * opaque origin; they inherit this policy), no markup sinks (Trusted Types, no policy), no
 * <base>, no forms, not framed. */
#define PLAYGROUND_CSP                                                                           \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "                  \
    "connect-src 'self'; frame-src blob:; base-uri 'none'; form-action 'none'; "               \
    "frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

/* GET / and GET /playground/{name} (an unknown name: 404). */
void playground_page(struct gw_req *r);
void playground_asset(struct gw_req *r);

#endif
