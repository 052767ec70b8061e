/* The Connect-RPC plumbing of the E2B sandbox plane (e2bconn.h). */
#include "gateway/e2bconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/e2bwire.h"

void e2bconn_error(struct gw_req *r, const char *code, const char *msg)
{
    req_reply(r, e2bwire_code_status(code),
              json_pack("{s:s, s:s, s:s}", "code", code, "message", msg, "reason", code));
}

void e2bconn_stream_error(struct gw_req *r, const char *code, const char *msg)
{
    json_t *end = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
    char *s = end ? json_dumps(end, JSON_COMPACT) : NULL;
    json_decref(end);
    buf_t b;
    buf_init(&b, SIZE_MAX);
    if (!s || e2bwire_envelope_write(&b, E2BWIRE_ENV_END, s, strlen(s)) < 0) {
        free(s);
        buf_fini(&b);
        return req_error(r, 500, "out of memory");
    }
    free(s);
    req_reply_data(r, "application/connect+json", b.data, b.len); /* takes b's data */
}

bool e2bconn_header(struct lws *wsi, const char *name, char *out, size_t outsz)
{
    int nl = (int)strlen(name);
    int n = lws_hdr_custom_length(wsi, name, nl);
    return n > 0 && n < (int)outsz && lws_hdr_custom_copy(wsi, out, (int)outsz, name, nl) >= 0;
}

int e2bconn_chunk(struct lws *wsi, buf_t *b, size_t room, bool last)
{
    char head[24];
    size_t pay = b->len - room;
    int hn = snprintf(head, sizeof(head), "%zx\r\n", pay);
    if (buf_append(b, last ? "\r\n0\r\n\r\n" : "\r\n", last ? 7 : 2) < 0)
        return -1;
    unsigned char *start = (unsigned char *)b->data + room - (size_t)hn;
    memcpy(start, head, (size_t)hn);
    size_t len = (size_t)((unsigned char *)b->data + b->len - start);
    return lws_write(wsi, start, len, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0 ? -1 : 0;
}
