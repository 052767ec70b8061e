/* The playground page and its assets (gateway/playground/, embedded by scripts/embed.py), served
 * with the page's own Content-Security-Policy (playground.h); everything else as any answer. */
#include "gateway/playground.h"

#include <string.h>

#include "common/util.h"
#include "gateway/playground_assets.h"

static const struct {
    const char *name;
    const char *ctype;
    const unsigned char *data;
    const size_t *len;
} assets[] = {
    {"app.js", "text/javascript; charset=utf-8", kgw_playground_js, &kgw_playground_js_len},
    {"app.css", "text/css; charset=utf-8", kgw_playground_css, &kgw_playground_css_len},
};

static void serve(struct gw_req *r, const char *ctype, const unsigned char *data, size_t len)
{
    r->csp = PLAYGROUND_CSP;
    req_reply_copy(r, ctype, data, len);
}

void playground_page(struct gw_req *r)
{
    serve(r, "text/html; charset=utf-8", kgw_playground_html, kgw_playground_html_len);
}

void playground_asset(struct gw_req *r)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(assets); i++)
        if (!strcmp(r->route.arg[0], assets[i].name))
            return serve(r, assets[i].ctype, assets[i].data, *assets[i].len);
    req_error(r, 404, "not found");
}
