/* gateway/playground/'s files, embedded at build time (scripts/embed.py): what playground.c
 * serves. */
#ifndef KGW_GATEWAY_PLAYGROUND_ASSETS_H
#define KGW_GATEWAY_PLAYGROUND_ASSETS_H

#include <stddef.h>

extern const unsigned char kgw_playground_html[];
extern const size_t kgw_playground_html_len;
extern const unsigned char kgw_playground_js[];
extern const size_t kgw_playground_js_len;
extern const unsigned char kgw_playground_css[];
extern const size_t kgw_playground_css_len;

#endif
