/* Requests of the execute API (untrusted): the JSON bodies of POST /api/kernels/{id}/execute
 * and POST /api/execute, the Accept header that picks the stream's format, and the `since` /
 * Last-Event-ID sequence number of a replay. Pure: no gateway state. */
#ifndef KGW_PROTOCOL_XREQ_H
#define KGW_PROTOCOL_XREQ_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/fpath.h"

/* How an execution's events are sent. */
enum xreq_format {
    XREQ_NDJSON, /* application/x-ndjson: one JSON event per line (the default) */
    XREQ_SSE,    /* text/event-stream: id = seq, event = type, data = the JSON event */
    XREQ_JSON,   /* application/json: one document {execution, events} once it is done */
};

#define XREQ_TIMEOUT_MAX    604800 /* seconds */
#define XREQ_FILES_MAX      256    /* files of a one-shot execution */
#define XREQ_USER_EXPR_MAX  64     /* user_expressions entries */
#define XREQ_ACCEPT_MAX     4096   /* bytes of an Accept header looked at */
#define XREQ_SINCE_MAX      20     /* digits of a sequence number */

struct xreq_file {
    char path[FPATH_MAX + 1]; /* checked by fpath_normalize */
    unsigned char *data;      /* decoded content (malloc'd) */
    size_t len;
};

struct xreq {
    char *code;              /* malloc'd */
    double timeout;          /* seconds; 0: none */
    bool store_history;      /* default true */
    bool silent;             /* default false */
    json_t *user_expressions; /* an object of strings (new reference), or NULL */
    /* POST /api/kernels/{id}/execute only: a checkpoint right before the code runs (kept),
     * and a rollback to a checkpoint taken then when the execution fails (without checkpoint,
     * that one is dropped once the execution is over) */
    bool checkpoint;
    bool rollback_on_error;
    /* POST /api/execute only */
    char kernel_name[129];   /* "" : the default kernelspec */
    bool keep;
    struct xreq_file *files;
    size_t nfiles;
};

/* Parses and checks a request body (len bytes): a JSON object whose fields are those above
 * (oneshot: the one-shot fields allowed too), each of the right type and within bounds; any
 * other field is refused. files' contents are decoded ("utf-8" as is, "base64" with
 * libsodium), at most max_file_bytes each. 0 with out filled (release with xreq_fini), or
 * -EINVAL with a one-line message in err. */
int xreq_parse(const char *body, size_t len, bool oneshot, size_t max_file_bytes,
               struct xreq *out, char *err, size_t errsz);
void xreq_fini(struct xreq *x);

/* A sequence number: 1 to XREQ_SINCE_MAX decimal digits, at most INT64_MAX. 0 or -EINVAL. */
int xreq_since(const char *s, size_t n, uint64_t *ret);

/* The format an Accept header (n bytes; NULL or empty: the default) asks for: the first of
 * text/event-stream, application/json and application/x-ndjson (or application/jsonl) it
 * names with a q above 0; NDJSON when it names none of them (e.g. wildcards). */
enum xreq_format xreq_accept(const char *s, size_t n);

const char *xreq_format_ctype(enum xreq_format f);

#endif
