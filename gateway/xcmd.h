/* xcmd.c: commands in a kernel's sandbox (kernelmgr/kcmd.h) for clients (docs/commands.md):
 * POST /api/kernels/{id}/commands streams a command's events (NDJSON or SSE, as the execute
 * API), DELETE /api/kernels/{id}/commands/{command_id} cancels it; and a run that collects a
 * command's output for MCP's run_command. */
#ifndef KGW_GATEWAY_XCMD_H
#define KGW_GATEWAY_XCMD_H

#include <jansson.h>

#include "common/buf.h"
#include "gateway/gw.h"
#include "gateway/http.h"

#define XCMD_COMMAND_MAX (64 * 1024) /* bytes of "command" */
#define XCMD_STDIN_MAX   (1 << 20)   /* bytes of "stdin" */
#define XCMD_ENV_MAX     256         /* entries of "env" */

/* A command as a client asks for it: {"command": "..."} (run by /bin/bash -l -c) or
 * {"argv": [...]}, and "cwd", "env" {NAME: VALUE}, "timeout" (seconds), "stdin". */
struct xcmd_spec {
    char **argv; /* NULL-terminated */
    char *cwd;   /* NULL: the workspace */
    char **env;  /* "NAME=VALUE", NULL-terminated; NULL: none */
    double timeout;
    char *stdin_data; /* NULL: no stdin (/dev/null) */
    size_t stdin_len;
};
/* 0, or -EINVAL with a message in err. allowed: the names of the fields the face takes
 * (NULL-terminated): others are refused. */
int xcmd_spec_parse(json_t *body, const char *const *allowed, struct xcmd_spec *ret, char *err,
                    size_t errsz);
void xcmd_spec_fini(struct xcmd_spec *s);

void xcmd_post(struct gw_req *r);
void xcmd_delete(struct gw_req *r);
int xcmd_write(struct gw_req *r);
void xcmd_req_fini(struct gw_req *r);

/* A command whose output is collected (MCP): stdout and stderr up to max bytes together (the
 * rest is counted, not kept), then done(ud) once it ended. */
typedef struct xcmd_run xcmd_run_t;
/* NULL with *ret_err (-errno of kcmd_start) and a message in err. */
xcmd_run_t *xcmd_run_start(gw_t *g, kernel_t *k, const struct xcmd_spec *s, size_t max,
                           void (*done)(void *ud), void *ud, char *err, size_t errsz);
/* Its text (valid UTF-8) of fd 1 or 2. */
const buf_t *xcmd_run_text(const xcmd_run_t *run, int fd);
/* {"status", "exit_code", "signal", "duration_ms", "message", "truncated"}: new reference. */
json_t *xcmd_run_end(const xcmd_run_t *run);
/* Cancels it (SIGKILL to its process group; done comes with status cancelled). */
void xcmd_run_cancel(gw_t *g, xcmd_run_t *run);
/* A command still running is killed. */
void xcmd_run_free(xcmd_run_t **run);

#endif
