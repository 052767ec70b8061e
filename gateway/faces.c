/* The table of the gateway's faces (gateway/faces.h). */
#include "gateway/faces.h"

#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "gateway/channel.h"
#include "gateway/ckpt.h"
#include "gateway/e2b.h"
#include "gateway/kops.h"
#include "gateway/mcp.h"
#include "gateway/sessions.h"
#include "gateway/wschan.h"
#include "gateway/xexec.h"

const struct faces_row faces_table[] = {
    {"audit", kops_listen, NULL}, /* kernel operations' audit events, first */
    {"jupyter-websocket", wschan_listen, NULL, wschan_close_all},
    {"channel", channel_listen, NULL, channel_close_all},
    {"sessions", sessions_listen, sessions_free_all},
    {"execute", xexec_listen, xexec_fini},
    {"mcp", mcp_listen, mcp_fini},
    {"checkpoints", ckpt_listen, NULL},
    {"e2b", e2b_listen, e2b_fini},
};
const size_t faces_n = UTIL_ARRAY_SIZE(faces_table);

int faces_init(gw_t *g)
{
    for (size_t i = 0; i < faces_n; i++) {
        int rc = faces_table[i].init(g);
        if (rc < 0) {
            log_error("cannot start the %s face: %s", faces_table[i].name, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

void faces_fini(gw_t *g)
{
    for (size_t i = faces_n; i-- > 0;)
        if (faces_table[i].fini)
            faces_table[i].fini(g);
}

bool faces_keeps(gw_t *g, kernel_t *k)
{
    return !e2b_holds(g, k) && !mcp_holds(g, k);
}

void faces_close(gw_t *g, int code, const char *reason)
{
    for (size_t i = 0; i < faces_n; i++)
        if (faces_table[i].close)
            faces_table[i].close(g, code, reason);
}
