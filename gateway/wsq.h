/* The outbound side of a websocket: a bounded queue of shared encoded messages (blobs with
 * LWS_PRE headroom), written in fragments when lws says the socket is writeable, and an
 * orderly close. A client that lets more than the limit pile up is disconnected (1008). */
#ifndef KGW_GATEWAY_WSQ_H
#define KGW_GATEWAY_WSQ_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/blob.h"
#include "common/ring.h"

typedef struct wsq {
    struct lws *wsi;
    size_t limit;   /* bytes queued before the client counts as too slow */
    const char *who; /* for log lines */
    ring_t q;      /* of blob_t *, each a reference */
    size_t qbytes; /* their bytes */
    size_t off;    /* bytes of the oldest already written */
    unsigned char *scratch;
    bool closing, flush_first;
    int close_code;
    char close_reason[100];
} wsq_t;

void wsq_init(wsq_t *q, struct lws *wsi, size_t limit, const char *who);
void wsq_fini(wsq_t *q);
/* Queues a reference to b; false when closing or the client was disconnected for being slow. */
bool wsq_push(wsq_t *q, blob_t *b);
/* Queues a copy of a text message. */
bool wsq_push_text(wsq_t *q, const char *text, size_t len);
/* Takes the oldest queued message back (the caller owns the reference), or NULL. A partly
 * written message is handed back whole. */
blob_t *wsq_pop(wsq_t *q);
void wsq_clear(wsq_t *q);
/* Closes with code and reason, after what is queued when flush_first. */
void wsq_close(wsq_t *q, int code, const char *reason, bool flush_first);
/* LWS_CALLBACK_SERVER_WRITEABLE: returns what the callback should return. */
int wsq_writeable(wsq_t *q);

#endif
