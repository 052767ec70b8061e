/* docs/openapi.json, embedded at build time (scripts/embed.c): what GET /openapi.json serves. */
#ifndef KGW_GATEWAY_OPENAPI_H
#define KGW_GATEWAY_OPENAPI_H

#include <stddef.h>

extern const unsigned char kgw_openapi_json[];
extern const size_t kgw_openapi_json_len;

#endif
