/* xexec.c: executions, the core of the execute API (docs/execute.md) behind its faces: the
 * HTTP one (xapi.c) and MCP (mcp.c). An execution is queued per kernel, sent as an
 * execute_request through the core's own kconn session on that kernel, and its iopub output
 * becomes numbered events in the execution's own store. Subscribers are cursors into that
 * store: wake tells them of new events (and of the end), they read them with xexec_event. */
#ifndef KGW_GATEWAY_XEXEC_H
#define KGW_GATEWAY_XEXEC_H

#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/list.h"
#include "gateway/gw.h"
#include "protocol/jmsg.h"
#include "protocol/xreq.h"

#define XEXEC_KEY_MAX 128 /* bytes of an Idempotency-Key */

typedef struct xexec xexec_t;
struct xexec_sub;

struct xexec_sub_ops {
    /* Events were appended, or the execution ended (the end is its last event). Called inside
     * the core's own callbacks: read events, queue writes; do not free the execution. */
    void (*wake)(struct xexec_sub *s);
};

/* A subscription, embedded in the subscriber's own object. */
struct xexec_sub {
    struct list link;
    xexec_t *x; /* NULL once the execution was freed (the gateway stops) */
    uint64_t cursor; /* the seq of the next event to read */
    const struct xexec_sub_ops *ops;
};

/* Starts the store and subscribes it to kernel events; frees every execution. */
int xexec_listen(gw_t *g);
void xexec_fini(gw_t *g);

/* Room for one more execution of tenant (made by dropping finished executions nobody needs
 * any more, its own first): 0, or -EAGAIN when the tenant is at its share
 * (--max-executions-per-tenant: 429) or -EBUSY when the table is full (--max-executions: 503),
 * with *ret_retry_after the seconds to wait. */
int xexec_admit(gw_t *g, const char *tenant, int *ret_retry_after);
/* A new execution of who's tenant on k, queued nowhere yet, with its start event. NULL with
 * errno EAGAIN (too many held) or ENOMEM. */
xexec_t *xexec_new(gw_t *g, const struct gw_caller *who, kernel_t *k);
/* What it runs (q's contents are taken), and the Idempotency-Key and body hash it answers. */
void xexec_set_request(xexec_t *x, struct xreq *q);
void xexec_set_key(xexec_t *x, const char *key, const unsigned char hash[crypto_hash_sha256_BYTES]);
/* Queues it on its kernel (running). */
void xexec_enqueue(xexec_t *x, kernel_t *k);
/* A one-shot execution: waits for k (starting) to run, writes the request's files into its
 * workspace, queues it; after the end k is deleted unless keep. */
void xexec_oneshot(xexec_t *x, kernel_t *k, bool keep);
/* Cancels it: dropped from its queue, or the kernel interrupted. */
void xexec_cancel(xexec_t *x);

/* Of the tenant (NULL for another's): by id, by Idempotency-Key. */
xexec_t *xexec_find(gw_t *g, const char *id, const char *tenant);
xexec_t *xexec_by_key(gw_t *g, const char *key, const char *tenant);
bool xexec_same_body(const xexec_t *x, const unsigned char hash[crypto_hash_sha256_BYTES]);
/* It was posted to the same route: kernel_id's execute, or (NULL) a one-shot. */
bool xexec_same_route(const xexec_t *x, const char *kernel_id);
/* Executions queued or running on k. */
size_t xexec_waiting(gw_t *g, kernel_t *k);

const char *xexec_id(const xexec_t *x);
bool xexec_done(const xexec_t *x);
/* The events held: seq first_seq .. next_seq - 1 (the first ones may have been dropped for
 * the tenant's budget). */
uint64_t xexec_first_seq(const xexec_t *x);
uint64_t xexec_next_seq(const xexec_t *x);
/* A held event, valid until the next turn of the loop. */
struct xexec_event {
    const char *type; /* a static string */
    const char *json; /* its JSON text (with "seq"), len bytes */
    size_t len;
    /* a stream event's name and text: the JSON string literals (quotes included) in json, to
     * read without parsing the event (jstr_decode); {NULL, 0} for other types */
    jspan_t name, text;
    size_t text_len; /* bytes of text that literal stands for */
};
/* The held event seq (first_seq <= seq < next_seq). */
void xexec_event(const xexec_t *x, uint64_t seq, struct xexec_event *ret);
/* {"id", "kernel_id", "workspace_id", "state", "queued_at", "first_seq", "next_seq", "end"} */
json_t *xexec_model(const xexec_t *x);

/* Subscribes s from event since (a subscription keeps a finished execution held);
 * xexec_unsubscribe takes one that was never subscribed, or whose execution is gone. */
void xexec_subscribe(xexec_t *x, struct xexec_sub *s, uint64_t since,
                     const struct xexec_sub_ops *ops);
void xexec_unsubscribe(struct xexec_sub *s);

#endif
