/* The HTTP route table: request paths (untrusted) to routes and their arguments. */
#ifndef KGW_GATEWAY_ROUTE_H
#define KGW_GATEWAY_ROUTE_H

#include <stddef.h>

enum route_id {
    ROUTE_NONE = 0,
    ROUTE_API,
    ROUTE_STATUS,
    ROUTE_KSPECS,
    ROUTE_KSPEC,
    ROUTE_KSPEC_RESOURCE,
    ROUTE_KERNELS,
    ROUTE_KERNEL,
    ROUTE_KERNEL_INTERRUPT,
    ROUTE_KERNEL_RESTART,
    ROUTE_KERNEL_CHANNELS,
    ROUTE_SESSIONS,
    ROUTE_SESSION,
    ROUTE_CHANNEL,
};

enum {
    HTTP_M_GET = 1 << 0,
    HTTP_M_POST = 1 << 1,
    HTTP_M_DELETE = 1 << 2,
    HTTP_M_PATCH = 1 << 3,
    HTTP_M_PUT = 1 << 4,
    HTTP_M_OPTIONS = 1 << 5,
    HTTP_M_HEAD = 1 << 6,
};

#define ROUTE_MAX_PATH 2048
#define ROUTE_ARG_MAX  256

struct route {
    enum route_id id;
    unsigned methods; /* allowed methods */
    char arg[2][ROUTE_ARG_MAX];
};

/* Matches a path (no query string). 0 on a match; -ENOENT otherwise (including over-long
 * paths and arguments that are not valid ids or names). */
int route_match(const char *path, size_t len, struct route *out);
/* True for jupyter_server's kernel/session id shape: \w+-\w+-\w+-\w+-\w+ (bounded). */
int route_is_id(const char *s, size_t n);

#endif
