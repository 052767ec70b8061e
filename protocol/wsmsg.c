#include "protocol/wsmsg.h"

#include <endian.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const part_keys[4] = {"header", "parent_header", "metadata", "content"};

void wsmsg_fini(wsmsg_t *w)
{
    free(w->owned);
    w->owned = NULL;
}

/* Legacy JSON: {"channel", "header", "parent_header", "metadata", "content", ...}. Each part is
 * re-serialised compactly into one allocation. */
static int decode_json(const char *data, size_t len, wsmsg_t *out)
{
    json_error_t err;
    char *s[4] = {0};
    int r = -EBADMSG;
    json_t *root = json_loadb(data, len, 0, &err);
    if (!json_is_object(root))
        goto out;
    json_t *ch = json_object_get(root, "channel");
    if (ch) {
        if (!json_is_string(ch))
            goto out;
        int c = jchan_parse(json_string_value(ch), json_string_length(ch));
        if (c < 0) {
            r = -ENOENT;
            goto out;
        }
        out->chan = (enum jchan)c;
    } else {
        out->chan = JCHAN_SHELL; /* as jupyter_server */
    }
    size_t total = 0;
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(root, part_keys[i]);
        if (!v || json_is_null(v)) {
            if (i == JPART_HEADER || i == JPART_CONTENT)
                goto out;
            s[i] = strdup("{}");
        } else {
            if (!json_is_object(v))
                goto out;
            s[i] = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
        }
        if (!s[i]) {
            r = -ENOMEM;
            goto out;
        }
        total += strlen(s[i]);
    }
    out->owned = malloc(total + 1);
    if (!out->owned) {
        r = -ENOMEM;
        goto out;
    }
    char *p = out->owned;
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(s[i]);
        memcpy(p, s[i], n);
        out->m.part[i] = (jspan_t){p, n};
        p += n;
    }
    r = jhdr_parse(out->m.part[JPART_HEADER], &out->hdr);
out:
    for (int i = 0; i < 4; i++)
        free(s[i]);
    json_decref(root);
    if (r < 0)
        wsmsg_fini(out);
    return r;
}

/* An unsigned integer of the offset table: legacy's 4 bytes big-endian, v1's 8 little-endian. */
static uint64_t get_uint(const char *p, size_t width)
{
    if (width == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        return be32toh(v);
    }
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

/* The offset table that starts a binary message: a count n, then n offsets, each width bytes.
 * Checks that n is within [min, max], that the table fits and the first offset is past it, and
 * that the offsets do not decrease nor pass len. Returns n, or -EBADMSG. */
static int read_offsets(const char *data, size_t len, size_t width, uint64_t min, uint64_t max,
                        uint64_t *off)
{
    if (len < width)
        return -EBADMSG;
    uint64_t n = get_uint(data, width);
    if (n < min || n > max || len < width * (n + 1))
        return -EBADMSG;
    for (uint64_t i = 0; i < n; i++)
        off[i] = get_uint(data + width * (i + 1), width);
    if (off[0] < width * (n + 1))
        return -EBADMSG;
    for (uint64_t i = 0; i < n; i++)
        if (off[i] > (i + 1 < n ? off[i + 1] : len))
            return -EBADMSG;
    return (int)n;
}

/* Legacy binary: n offsets (the JSON message, then its buffers), each part up to the next
 * offset, the last up to the end. */
static int decode_legacy_binary(const char *data, size_t len, wsmsg_t *out)
{
    uint64_t off[JMSG_MAX_BUFFERS + 2];
    if (len > UINT32_MAX) /* past what its offsets can say */
        return -EBADMSG;
    int n = read_offsets(data, len, 4, 1, JMSG_MAX_BUFFERS + 1, off);
    if (n < 0)
        return n;
    off[n] = len;
    int r = decode_json(data + off[0], off[1] - off[0], out);
    if (r < 0)
        return r;
    out->m.nbuf = (size_t)n - 1;
    for (int i = 1; i < n; i++)
        out->m.buf[i - 1] = (jspan_t){data + off[i], off[i + 1] - off[i]};
    return 0;
}

/* v1: offsets of the channel, the 4 parts, the buffers and the end. */
static int decode_v1(const char *data, size_t len, wsmsg_t *out)
{
    uint64_t off[JMSG_MAX_BUFFERS + 6];
    int n = read_offsets(data, len, 8, 6, JMSG_MAX_BUFFERS + 6, off);
    if (n < 0)
        return n;
    int c = jchan_parse(data + off[0], off[1] - off[0]);
    if (c < 0)
        return -ENOENT;
    out->chan = (enum jchan)c;
    for (int i = 0; i < 4; i++)
        out->m.part[i] = (jspan_t){data + off[i + 1], off[i + 2] - off[i + 1]};
    out->m.nbuf = n - 6;
    for (uint64_t i = 0; i < out->m.nbuf; i++)
        out->m.buf[i] = (jspan_t){data + off[5 + i], off[6 + i] - off[5 + i]};
    return jhdr_parse(out->m.part[JPART_HEADER], &out->hdr);
}

int wsmsg_decode(enum wsproto proto, bool binary, const char *data, size_t len, wsmsg_t *out)
{
    memset(out, 0, sizeof(*out));
    if (proto == WSPROTO_V1)
        return binary ? decode_v1(data, len, out) : -EBADMSG;
    return binary ? decode_legacy_binary(data, len, out) : decode_json(data, len, out);
}

/* ---- encoding ---- */

static size_t put(char *dst, const char *src, size_t n)
{
    memcpy(dst, src, n);
    return n;
}

/* JSON string literal of s (jansson escapes). Caller frees. */
static char *json_quote(const char *s)
{
    json_t *v = json_string(s);
    char *q = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(v);
    return q;
}

static blob_t *encode_legacy(enum jchan chan, const jmsg_t *m, const jhdr_t *hdr,
                             size_t headroom)
{
    char *qid = json_quote(hdr->msg_id), *qtype = json_quote(hdr->msg_type);
    blob_t *b = NULL;
    if (!qid || !qtype)
        goto out;
    /* The kernel's parts come first; the gateway's keys last, so they win even if a part
     * tried to smuggle its own "channel". */
    const char *chname = jchan_name(chan);
    size_t json_len = strlen("{\"header\":,\"parent_header\":,\"metadata\":,\"content\":,"
                             "\"channel\":\"\",\"msg_id\":,\"msg_type\":}") +
                      strlen(chname) + strlen(qid) + strlen(qtype);
    for (int i = 0; i < 4; i++)
        json_len += m->part[i].n;
    bool binary = m->nbuf > 0;
    if (!binary)
        json_len += strlen(",\"buffers\":[]");
    size_t total = json_len;
    size_t hdr_len = binary ? 4 * (m->nbuf + 2) : 0;
    total += hdr_len;
    for (size_t i = 0; i < m->nbuf; i++)
        total += m->buf[i].n;
    if (total > UINT32_MAX && binary) {
        errno = EMSGSIZE;
        goto out;
    }
    b = blob_new(headroom, total);
    if (!b)
        goto out;
    char *p = (char *)b->data;
    size_t o = hdr_len;
    for (int i = 0; i < 4; i++) {
        static const char *const pre[4] = {"{\"header\":", ",\"parent_header\":",
                                           ",\"metadata\":", ",\"content\":"};
        o += put(p + o, pre[i], strlen(pre[i]));
        o += put(p + o, m->part[i].p, m->part[i].n);
    }
    if (!binary)
        o += put(p + o, ",\"buffers\":[]", strlen(",\"buffers\":[]"));
    o += put(p + o, ",\"channel\":\"", strlen(",\"channel\":\""));
    o += put(p + o, chname, strlen(chname));
    o += put(p + o, "\",\"msg_id\":", strlen("\",\"msg_id\":"));
    o += put(p + o, qid, strlen(qid));
    o += put(p + o, ",\"msg_type\":", strlen(",\"msg_type\":"));
    o += put(p + o, qtype, strlen(qtype));
    o += put(p + o, "}", 1);
    if (binary) {
        uint32_t v = htobe32((uint32_t)(m->nbuf + 1));
        memcpy(p, &v, 4);
        size_t at = hdr_len;
        v = htobe32((uint32_t)at);
        memcpy(p + 4, &v, 4);
        at = o;
        for (size_t i = 0; i < m->nbuf; i++) {
            v = htobe32((uint32_t)at);
            memcpy(p + 8 + 4 * i, &v, 4);
            o += put(p + o, m->buf[i].p, m->buf[i].n);
            at = o;
        }
        b->flags |= BLOB_BINARY;
    }
out:
    free(qid);
    free(qtype);
    return b;
}

static blob_t *encode_v1(enum jchan chan, const jmsg_t *m, size_t headroom)
{
    const char *chname = jchan_name(chan);
    size_t nparts = 1 + 4 + m->nbuf;
    size_t noff = nparts + 1;
    size_t total = 8 * (noff + 1) + strlen(chname);
    for (int i = 0; i < 4; i++)
        total += m->part[i].n;
    for (size_t i = 0; i < m->nbuf; i++)
        total += m->buf[i].n;
    blob_t *b = blob_new(headroom, total);
    if (!b)
        return NULL;
    char *p = (char *)b->data;
    uint64_t v = htole64(noff);
    memcpy(p, &v, 8);
    size_t o = 8 * (noff + 1);
    size_t k = 0;
#define OFFSET()                                                                                   \
    do {                                                                                           \
        v = htole64(o);                                                                            \
        memcpy(p + 8 * (1 + k++), &v, 8);                                                          \
    } while (0)
    OFFSET();
    o += put(p + o, chname, strlen(chname));
    for (int i = 0; i < 4; i++) {
        OFFSET();
        o += put(p + o, m->part[i].p, m->part[i].n);
    }
    for (size_t i = 0; i < m->nbuf; i++) {
        OFFSET();
        o += put(p + o, m->buf[i].p, m->buf[i].n);
    }
    OFFSET();
#undef OFFSET
    b->flags |= BLOB_BINARY;
    return b;
}

blob_t *wsmsg_encode(enum wsproto proto, enum jchan chan, const jmsg_t *m, const jhdr_t *hdr,
                     size_t headroom)
{
    return proto == WSPROTO_V1 ? encode_v1(chan, m, headroom)
                               : encode_legacy(chan, m, hdr, headroom);
}
