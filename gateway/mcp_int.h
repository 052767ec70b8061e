/* mcp.c and mcptools.c: what the MCP face's two files share (docs/mcp.md). mcp.c is the
 * transport, the sessions and the methods; mcptools.c the tools and the answers they make. */
#ifndef KGW_GATEWAY_MCP_INT_H
#define KGW_GATEWAY_MCP_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "common/ident.h"
#include "common/list.h"
#include "common/util.h"
#include "gateway/ckpt.h"
#include "gateway/files.h"
#include "gateway/gw.h"
#include "gateway/http.h"
#include "gateway/mcpnamed.h"
#include "gateway/xcmd.h"
#include "gateway/xexec.h"
#include "kernelmgr/kernel.h"
#include "protocol/fpath.h"
#include "protocol/jrpc.h"

#define MCP_SESSIONS_MAX 10000             /* sessions at once, all tenants */
#define MCP_TENANT_MAX   1000              /* sessions at once of one tenant */
#define MCP_SWEEP_MS     5000              /* idle checks */
#define MCP_RESULT_MAX   (8 * 1024 * 1024) /* bytes of output a tool result carries */
#define MCP_READ_MAX     (4 * 1024 * 1024) /* bytes of a file read_file returns */
#define MCP_PROGRESS_MAX (64 * 1024)       /* bytes of output in one progress notification */
#define MCP_WRITE_BYTES  (64 * 1024)       /* bytes of the answer made and written at a time */
#define MCP_SID_LEN      UTIL_UUID_LEN /* a session id: a random UUID naming its shard */
#define MCP_VERSION_MAX  32
#define MCP_HEADER_MAX   1024 /* bytes of an Accept or Content-Type header looked at */

/* JSON-RPC's implementation-defined server errors, as the reference SDK's server uses them:
 * the transport refused the HTTP request (a header), or the session is unknown. */
#define MCP_ERR_TRANSPORT  (-32000)
#define MCP_ERR_NO_SESSION (-32001)

struct mcp {
    gw_t *g;
    struct list sessions;
    size_t count;
    evl_timer_t *sweep;
    mcpnamed_t *named; /* the named kernels (Kgw-Kernel-Name) */
    json_t *tools;     /* the tools' entries (mcp__tools_load) */
};

struct mcp_session {
    struct list link;
    struct list calls; /* mcp_call.slink: tool calls in progress */
    char id[MCP_SID_LEN + 1];
    char tenant[KEYFILE_TENANT_MAX + 1];
    char version[MCP_VERSION_MAX];
    char kernel_id[40]; /* "" until the first tool call */
    struct mcpnamed_entry *named; /* the named kernel it uses instead, or NULL */
    uint64_t last_ms;
};

struct mcp_tool;

struct mcp_call {
    struct list slink; /* mcp_session.calls while a tool runs */
    struct gw_req *r;
    struct mcp_session *s;
    char sid[MCP_SID_LEN + 1]; /* the Mcp-Session-Id header of the answer ("" : none) */
    char kname[IDENT_KNAME_MAX + 1]; /* the Kgw-Kernel-Name header ("": none) */
    json_t *id;                /* of the request */
    json_t *token;             /* its progress token, or NULL */
    json_t *args;
    const struct mcp_tool *tool;
    struct xexec_sub sub; /* execute_code's execution, once subscribed */
    ckpt_op_t *ck;        /* rollback's operation, while it runs */
    json_t *content;      /* the tool result's content (its first items) */
    /* execute_code's output: more content items, their JSON text joined by commas (written
     * as they come: the kernel's output is not parsed into a tree and dumped again), and the
     * last text item's text, JSON-escaped, while output of its kind goes on (text_flush) */
    buf_t items, text;
    const char *text_kind; /* "stdout", "stderr", "result", "error", "note"; NULL: none */
    json_t *structured;
    size_t content_bytes;
    double progress;
    int status; /* HTTP */
    bool is_error, truncated, cancelled, sse, head_sent, done;
    bool no_sse; /* the client's Accept leaves out text/event-stream: no progress */
    /* the answer's bytes not written yet, from out_off; progress notifications are made into
     * it from pcur, the execution's next event they tell of, only as the socket takes them
     * (a client that stops reading holds no copy of the output), and the messages after them
     * (the result) wait in held until they are made */
    buf_t out, held;
    size_t out_off;
    uint64_t pcur;
    bool filling; /* making progress notifications into out */
    /* write_file: the file being written (charged to the kernel) */
    files_put_t *put;
    struct files_item item;
    unsigned char *bin; /* its decoded bytes (base64) */
    char item_path[FPATH_MAX + 1];
    char ws[WSPACE_ID_MAX + 1];
    xcmd_run_t *cmd; /* run_command's command (xcmd.c) */
};

typedef void (*tool_run_fn)(struct mcp_call *c, kernel_t *k);
/* A tool's check of its arguments beyond what its inputSchema can say (they match it), made
 * before the session's kernel is started: false after answering -32602. */
typedef bool (*tool_check_fn)(struct mcp_call *c, const struct mcp_tool *t, json_t *args);

/* A tool of mcptools.c's fixed table. Its title, description and JSON Schemas are its entry
 * in docs/mcp_tools.json (compiled in): what tools/list gives, and what its arguments are
 * checked against (protocol/jschema.c). */
struct mcp_tool {
    const char *name;
    tool_check_fn check; /* NULL: the schema says it all */
    tool_run_fn run;
};

/* The tools' entries of docs/mcp_tools.json, checked against the table: the same tools, each
 * entry with a title, a description, an outputSchema and an inputSchema of type object that
 * jschema_check takes. 0 and *ret_tools (the entries, in tools/list's order); -EINVAL (logged:
 * a mistake in the file) or -ENOMEM. */
int mcp__tools_load(json_t **ret_tools);
/* The tool called name, or NULL; *ret_def its entry in m->tools. */
const struct mcp_tool *mcp__tool_find(const struct mcp *m, const char *name, json_t **ret_def);

/* Answers (mcptools.c): a JSON-RPC result, an error (status: the HTTP status of a refusal
 * before any answer), an empty answer (202 and the like). */
void mcp__reply(struct mcp_call *c, json_t *result);
void mcp__reply_error(struct mcp_call *c, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void mcp__reply_empty(struct mcp_call *c, int status);
/* A tool's failure as its result (isError). */
void mcp__tool_fail(struct mcp_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Progress notifications of execute_code. */
void mcp__progress(struct mcp_call *c, const char *text, size_t len);
bool mcp__progress_caught_up(const struct mcp_call *c);
void mcp__progress_fill(struct mcp_call *c);
void mcp__text_flush(struct mcp_call *c);

#endif
