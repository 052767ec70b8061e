/* The gateway's faces in one table: each row names a face, the step that starts it (it
 * subscribes to kernel events with kmgr_listen, in the table's order: the audit line of an
 * event is written before clients hear of it) and the one that ends it (run in reverse order
 * at exit). A new face is its own file plus a row here and its routes' rows (route.c,
 * routes.c). */
#ifndef KGW_GATEWAY_FACES_H
#define KGW_GATEWAY_FACES_H

#include <stddef.h>

#include "gateway/gw.h"

struct faces_row {
    const char *name;
    int (*init)(gw_t *g);  /* 0 or -errno */
    void (*fini)(gw_t *g); /* NULL: nothing to end; runs also after a failed init */
    /* NULL: no websockets; else closes them all (code, reason) after what is queued */
    void (*close)(gw_t *g, int code, const char *reason);
};

extern const struct faces_row faces_table[];
extern const size_t faces_n;

/* Starts every face in order; -errno (logged, naming the face) at the first that fails. */
int faces_init(gw_t *g);
/* Ends every face, last first. */
void faces_fini(gw_t *g);
/* Closes every face's websockets, in the table's order (a drain's close, gateway/drain.c). */
void faces_close(gw_t *g, int code, const char *reason);
/* Whether k can go over a restart in place as the faces see it: no E2B sandbox, MCP session
 * or named kernel uses it (their state is not carried). */
bool faces_keeps(gw_t *g, kernel_t *k);

#endif
