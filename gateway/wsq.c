/* Outbound websocket queues: see wsq.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "gateway/wsq.h"
#include "protocol/wsmsg.h"

#define WSQ_CHUNK (256 * 1024) /* bytes per lws_write: big messages go out as fragments */

void wsq_init(wsq_t *q, struct lws *wsi, size_t limit, const char *who)
{
    memset(q, 0, sizeof(*q));
    q->wsi = wsi;
    q->limit = limit;
    q->who = who;
}

void wsq_clear(wsq_t *q)
{
    blob_t *b;
    while ((b = ring_pop(&q->q)))
        blob_unref(&b);
    q->qbytes = 0;
    q->off = 0;
}

void wsq_fini(wsq_t *q)
{
    wsq_clear(q);
    ring_fini(&q->q);
    free(q->scratch);
    q->scratch = NULL;
}

void wsq_close(wsq_t *q, int code, const char *reason, bool flush_first)
{
    if (q->closing)
        return;
    q->closing = true;
    q->flush_first = flush_first;
    q->close_code = code;
    snprintf(q->close_reason, sizeof(q->close_reason), "%s", reason);
    if (q->wsi)
        lws_callback_on_writable(q->wsi);
}

bool wsq_push(wsq_t *q, blob_t *b)
{
    if (q->closing || !b)
        return false;
    if (q->qbytes + b->len > q->limit) {
        log_warn("ws: %s is not reading fast enough (%zu bytes queued); disconnecting",
                 q->who ? q->who : "client", q->qbytes);
        wsq_clear(q);
        wsq_close(q, 1008, "client too slow: outbound queue limit exceeded", false);
        return false;
    }
    if (ring_push(&q->q, b) < 0) {
        wsq_close(q, 1011, "out of memory", false);
        return false;
    }
    blob_ref(b); /* the queue's reference */
    q->qbytes += b->len;
    if (q->q.len == 1)
        lws_callback_on_writable(q->wsi);
    return true;
}

bool wsq_push_text(wsq_t *q, const char *text, size_t len)
{
    blob_t *b = blob_new(LWS_PRE, len);
    if (!b) {
        wsq_close(q, 1011, "out of memory", false);
        return false;
    }
    memcpy(b->data, text, len);
    bool ok = wsq_push(q, b);
    blob_unref(&b);
    return ok;
}

blob_t *wsq_pop(wsq_t *q)
{
    blob_t *b = ring_pop(&q->q);
    if (!b)
        return NULL;
    q->qbytes -= b->len;
    q->off = 0;
    return b;
}

int wsq_writeable(wsq_t *q)
{
    if (q->closing && (!q->flush_first || q->q.len == 0)) {
        lws_close_reason(q->wsi, (enum lws_close_status)q->close_code,
                         (unsigned char *)q->close_reason, strlen(q->close_reason));
        /* lws starts the closing handshake now (the close frame goes on the next writeable
         * turn; no callback of ours runs meanwhile) rather than on a return of -1: Debian's
         * lws 4.1.6 is built with _DEBUG, which on the libuv loop repeats a close asked by a
         * callback's -1 at once, and the repeat drops the connection before its close frame
         * (service.c, "uv repeat test"): the client saw 1006 */
        lws_set_timeout(q->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_SYNC);
        return 0;
    }
    blob_t *b;
    while ((b = ring_peek(&q->q)) && !lws_send_pipe_choked(q->wsi)) {
        size_t n = b->len - q->off;
        unsigned char *p;
        if (n > WSQ_CHUNK)
            n = WSQ_CHUNK;
        if (q->off == 0) {
            p = b->data; /* the blob's headroom takes the frame header */
        } else {
            if (!q->scratch && !(q->scratch = malloc(LWS_PRE + WSQ_CHUNK)))
                return -1;
            p = q->scratch + LWS_PRE;
            memcpy(p, b->data + q->off, n);
        }
        int flags = lws_write_ws_flags((b->flags & BLOB_BINARY) ? LWS_WRITE_BINARY : LWS_WRITE_TEXT,
                                       q->off == 0, q->off + n == b->len);
        if (lws_write(q->wsi, p, n, (enum lws_write_protocol)flags) < (int)n)
            return -1;
        q->off += n;
        if (q->off == b->len) {
            q->qbytes -= b->len;
            q->off = 0;
            b = ring_pop(&q->q);
            blob_unref(&b);
        }
    }
    if (q->q.len > 0 || q->closing) {
        lws_callback_on_writable(q->wsi);
    } else if (q->scratch) {
        free(q->scratch);
        q->scratch = NULL;
    }
    return 0;
}
