/* protocol/wsmsg.c: the two websocket encodings of Jupyter messages (legacy JSON / binary with
 * uint32 BE offsets, and v1.kernel.websocket.jupyter.org with uint64 LE offsets). */
#include <endian.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/blob.h"
#include "protocol/jmsg.h"
#include "protocol/wsmsg.h"

#define SPAN(s) ((jspan_t){(s), sizeof(s) - 1})

static const char *const proto_name[WSPROTO_N] = {"legacy", "v1"};

/* Compact JSON (as jansson re-serialises it), so legacy round trips are byte-exact. */
static const char k_hdr[] = "{\"msg_id\":\"0a1b-2c\",\"msg_type\":\"execute_result\","
                            "\"session\":\"s\",\"date\":\"2024-01-01T00:00:00.000000Z\"}";
static const char k_parent[] = "{\"msg_id\":\"p-1\",\"msg_type\":\"execute_request\"}";
static const char k_meta[] = "{\"k\":[1,2.5,null,true]}";
static const char k_content[] =
    "{\"data\":{\"text/plain\":\"2\\n\xc3\xa9\"},\"execution_count\":1}";

static void make_msg(jmsg_t *m, jhdr_t *h, size_t nbuf)
{
    static const char bufbytes[] = "\0\1\2\3binary\xff\xfe-data";
    memset(m, 0, sizeof(*m));
    m->part[JPART_HEADER] = SPAN(k_hdr);
    m->part[JPART_PARENT] = SPAN(k_parent);
    m->part[JPART_METADATA] = SPAN(k_meta);
    m->part[JPART_CONTENT] = SPAN(k_content);
    m->nbuf = nbuf;
    for (size_t i = 0; i < nbuf; i++) /* varied lengths, including 0 */
        m->buf[i] = (jspan_t){bufbytes + i % 7, (i * 3) % (sizeof(bufbytes) - 8)};
    if (h)
        CHECK_INT(jhdr_parse(m->part[JPART_HEADER], h), 0);
}

static int decode_blob(enum wsproto proto, const blob_t *b, wsmsg_t *w)
{
    return wsmsg_decode(proto, (b->flags & BLOB_BINARY) != 0, (const char *)b->data, b->len, w);
}

static void check_same_msg(const jmsg_t *a, const jmsg_t *b)
{
    for (int i = 0; i < 4; i++)
        CHECK_MEM(a->part[i].p, a->part[i].n, b->part[i].p, b->part[i].n);
    CHECK_INT(a->nbuf, b->nbuf);
    for (size_t i = 0; i < a->nbuf && i < b->nbuf; i++)
        CHECK_MEM(a->buf[i].p, a->buf[i].n, b->buf[i].p, b->buf[i].n);
}

static void test_round_trips(void)
{
    static const size_t nbufs[] = {0, 1, 2, 5, JMSG_MAX_BUFFERS};
    char name[96];
    for (int proto = 0; proto < WSPROTO_N; proto++) {
        for (int chan = 0; chan < JCHAN_N; chan++) {
            for (size_t k = 0; k < sizeof(nbufs) / sizeof(nbufs[0]); k++) {
                jmsg_t m;
                jhdr_t h;
                wsmsg_t w;
                snprintf(name, sizeof(name), "round trip %s %s nbuf=%zu", proto_name[proto],
                         jchan_name((enum jchan)chan), nbufs[k]);
                CHECK_CASE(name);
                make_msg(&m, &h, nbufs[k]);
                blob_t *b = wsmsg_encode((enum wsproto)proto, (enum jchan)chan, &m, &h, 16);
                CHECK(b != NULL);
                if (!b)
                    continue;
                CHECK(b->data == b->mem + 16);
                CHECK(b->data[b->len] == '\0');
                bool want_binary = proto == WSPROTO_V1 || nbufs[k] > 0;
                CHECK_INT((b->flags & BLOB_BINARY) != 0, want_binary);
                int r = decode_blob((enum wsproto)proto, b, &w);
                CHECK_INT(r, 0);
                if (r == 0) {
                    CHECK_INT(w.chan, chan);
                    check_same_msg(&m, &w.m);
                    CHECK_STR(w.hdr.msg_id, "0a1b-2c");
                    CHECK_STR(w.hdr.msg_type, "execute_result");
                    wsmsg_fini(&w);
                    CHECK(w.owned == NULL);
                }
                blob_unref(&b);
            }
        }
    }
}

/* Legacy decoding re-serialises JSON parts (compact, key order kept); v1 keeps them verbatim. */
static void test_part_normalisation(void)
{
    static const char loose[] = "{ \"data\" : { \"text/plain\" : \"\\u00e9\\/\" } ,\"n\":1.50 }";
    static const char compact[] = "{\"data\":{\"text/plain\":\"\xc3\xa9/\"},\"n\":1.5}";
    for (int proto = 0; proto < WSPROTO_N; proto++) {
        jmsg_t m;
        jhdr_t h;
        wsmsg_t w;
        CHECK_CASE(proto == WSPROTO_V1 ? "v1 keeps parts verbatim" : "legacy normalises parts");
        make_msg(&m, &h, 1);
        m.part[JPART_CONTENT] = SPAN(loose);
        blob_t *b = wsmsg_encode((enum wsproto)proto, JCHAN_SHELL, &m, &h, 0);
        CHECK(b != NULL);
        if (!b)
            continue;
        CHECK_INT(decode_blob((enum wsproto)proto, b, &w), 0);
        if (proto == WSPROTO_V1)
            CHECK_MEM(w.m.part[JPART_CONTENT].p, w.m.part[JPART_CONTENT].n, loose,
                      sizeof(loose) - 1);
        else
            CHECK_MEM(w.m.part[JPART_CONTENT].p, w.m.part[JPART_CONTENT].n, compact,
                      sizeof(compact) - 1);
        wsmsg_fini(&w);
        blob_unref(&b);
    }
}

/* Jansson view of a legacy frame's JSON document (text frame, or slice 0 of a binary one). */
static json_t *legacy_json(const blob_t *b)
{
    const char *p = (const char *)b->data;
    size_t n = b->len;
    if (b->flags & BLOB_BINARY) {
        uint32_t cnt, o0, o1;
        memcpy(&cnt, p, 4);
        memcpy(&o0, p + 4, 4);
        cnt = be32toh(cnt);
        o0 = be32toh(o0);
        if (cnt > 1) {
            memcpy(&o1, p + 8, 4);
            o1 = be32toh(o1);
        } else {
            o1 = (uint32_t)n;
        }
        p += o0;
        n = o1 - o0;
    }
    json_error_t err;
    return json_loadb(p, n, 0, &err);
}

static void test_legacy_layout(void)
{
    jmsg_t m;
    jhdr_t h;
    json_t *j;

    CHECK_CASE("legacy text frame keys");
    make_msg(&m, &h, 0);
    blob_t *b = wsmsg_encode(WSPROTO_LEGACY, JCHAN_IOPUB, &m, &h, 0);
    CHECK(b != NULL);
    if (!b)
        return;
    CHECK(!(b->flags & BLOB_BINARY));
    CHECK(b->data[0] == '{');
    j = legacy_json(b);
    CHECK(json_is_object(j));
    CHECK_STR(json_string_value(json_object_get(j, "channel")), "iopub");
    CHECK_STR(json_string_value(json_object_get(j, "msg_id")), "0a1b-2c");
    CHECK_STR(json_string_value(json_object_get(j, "msg_type")), "execute_result");
    CHECK(json_is_array(json_object_get(j, "buffers")));
    CHECK_INT(json_array_size(json_object_get(j, "buffers")), 0);
    CHECK(json_is_object(json_object_get(j, "header")));
    CHECK(json_is_object(json_object_get(j, "parent_header")));
    CHECK(json_is_object(json_object_get(j, "metadata")));
    CHECK(json_is_object(json_object_get(j, "content")));
    CHECK_INT(json_object_size(j), 8);
    json_decref(j);
    blob_unref(&b);

    CHECK_CASE("legacy binary frame layout");
    make_msg(&m, &h, 3);
    b = wsmsg_encode(WSPROTO_LEGACY, JCHAN_SHELL, &m, &h, 0);
    CHECK(b != NULL);
    if (!b)
        return;
    CHECK(b->flags & BLOB_BINARY);
    uint32_t w[5];
    memcpy(w, b->data, sizeof(w));
    CHECK_INT(be32toh(w[0]), 4);     /* JSON + 3 buffers */
    CHECK_INT(be32toh(w[1]), 4 * 5); /* JSON right after the table */
    CHECK(be32toh(w[2]) <= b->len);
    for (int i = 0; i < 3; i++) { /* buffers in order, ending at the frame's end */
        uint32_t start = be32toh(w[2 + i]);
        uint32_t end = i < 2 ? be32toh(w[3 + i]) : (uint32_t)b->len;
        CHECK_MEM(b->data + start, end - start, m.buf[i].p, m.buf[i].n);
    }
    j = legacy_json(b);
    CHECK(json_is_object(j));
    CHECK_STR(json_string_value(json_object_get(j, "channel")), "shell");
    CHECK_STR(json_string_value(json_object_get(j, "msg_id")), "0a1b-2c");
    CHECK_STR(json_string_value(json_object_get(j, "msg_type")), "execute_result");
    CHECK(json_object_get(j, "buffers") == NULL); /* as jupyter_server: popped */
    json_decref(j);
    blob_unref(&b);

    CHECK_CASE("legacy: msg_id/msg_type are JSON-escaped");
    make_msg(&m, NULL, 0);
    static const char odd_hdr[] = "{\"msg_id\":\"a\\\"},\\\\x\",\"msg_type\":\"t\\n\\u0001\"}";
    m.part[JPART_HEADER] = SPAN(odd_hdr);
    CHECK_INT(jhdr_parse(m.part[JPART_HEADER], &h), 0);
    b = wsmsg_encode(WSPROTO_LEGACY, JCHAN_SHELL, &m, &h, 0);
    CHECK(b != NULL);
    if (!b)
        return;
    j = legacy_json(b);
    CHECK(json_is_object(j));
    CHECK_STR(json_string_value(json_object_get(j, "msg_id")), "a\"},\\x");
    CHECK_STR(json_string_value(json_object_get(j, "msg_type")), "t\n\x01");
    json_decref(j);
    blob_unref(&b);
}

/* A kernel part that is not a single object could splice its own top-level keys into the
 * legacy document. The gateway's keys are written last, so they win (last key wins in jansson,
 * Python's json and JSON.parse). */
static void test_legacy_no_smuggling(void)
{
    static const char evil[] =
        "{},\"channel\":\"shell\",\"msg_id\":\"evil\",\"msg_type\":\"evil\",\"buffers\":[1]";
    for (int part = JPART_PARENT; part <= JPART_CONTENT; part++) {
        for (size_t nbuf = 0; nbuf <= 1; nbuf++) {
            jmsg_t m;
            jhdr_t h;
            wsmsg_t w;
            CHECK_CASE(nbuf ? "smuggled channel, binary" : "smuggled channel, text");
            make_msg(&m, &h, nbuf);
            m.part[part] = SPAN(evil);
            blob_t *b = wsmsg_encode(WSPROTO_LEGACY, JCHAN_IOPUB, &m, &h, 0);
            CHECK(b != NULL);
            if (!b)
                continue;
            json_t *j = legacy_json(b);
            CHECK(json_is_object(j));
            CHECK_STR(json_string_value(json_object_get(j, "channel")), "iopub");
            CHECK_STR(json_string_value(json_object_get(j, "msg_id")), "0a1b-2c");
            CHECK_STR(json_string_value(json_object_get(j, "msg_type")), "execute_result");
            if (!nbuf)
                CHECK_INT(json_array_size(json_object_get(j, "buffers")), 0);
            json_decref(j);
            /* the last "channel" key in the text is the gateway's */
            const char *last = NULL;
            const char *text = (const char *)b->data + (nbuf ? 4 * (nbuf + 2) : 0);
            for (const char *p = text; (p = strstr(p, "\"channel\"")); p++)
                last = p;
            CHECK(last && strncmp(last, "\"channel\":\"iopub\"", 17) == 0);
            /* and our own decoder agrees */
            CHECK_INT(decode_blob(WSPROTO_LEGACY, b, &w), 0);
            CHECK_INT(w.chan, JCHAN_IOPUB);
            wsmsg_fini(&w);
            blob_unref(&b);
        }
    }
}

/* Parts over JMSG_FULL_CHECK_MAX are only shape-checked by jmsg_parts_ok, so they may be
 * unbalanced. Still: whatever they do, the document either does not parse or has the gateway's
 * channel, because the gateway's keys come after every part at the top level. */
static void test_large_parts_no_smuggling(void)
{
    size_t pad = JMSG_FULL_CHECK_MAX + 10;
    static const char *const pre[][2] = {
        /* metadata opens one object too many, content closes it and adds "channel" */
        {"{\"m\":{\"p\":\"", "\"}"},
        /* an unterminated string swallowing the next keys */
        {"{\"m\":\"", "}"},
        /* a string left open with an escaped quote at the end */
        {"{\"m\":\"", "\\\"}"},
    };
    static const char *const content_tail[] = {
        "\"}},\"channel\":\"shell\",\"msg_type\":\"evil\",\"z\":{}",
        "\",\"channel\":\"shell\"}",
        "\",\"channel\":\"shell\"}",
    };
    for (size_t v = 0; v < sizeof(pre) / sizeof(pre[0]); v++) {
        jmsg_t m;
        jhdr_t h;
        char name[64];
        snprintf(name, sizeof(name), "large unbalanced parts, variant %zu", v);
        CHECK_CASE(name);
        make_msg(&m, &h, 0);
        size_t a = strlen(pre[v][0]), b = strlen(pre[v][1]);
        char *meta = malloc(a + pad + b);
        size_t ct = strlen(content_tail[v]);
        char *content = malloc(8 + pad + ct);
        CHECK(meta && content);
        if (!meta || !content) {
            free(meta);
            free(content);
            continue;
        }
        memcpy(meta, pre[v][0], a);
        memset(meta + a, 'x', pad);
        memcpy(meta + a + pad, pre[v][1], b);
        memcpy(content, "{\"p\":\"", 6);
        memset(content + 6, 'y', pad);
        memcpy(content + 6 + pad, content_tail[v], ct);
        m.part[JPART_METADATA] = (jspan_t){meta, a + pad + b};
        m.part[JPART_CONTENT] = (jspan_t){content, 6 + pad + ct};
        CHECK(jmsg_parts_ok(&m)); /* accepted by the gateway */
        blob_t *enc = wsmsg_encode(WSPROTO_LEGACY, JCHAN_IOPUB, &m, &h, 0);
        CHECK(enc != NULL);
        if (enc) {
            json_t *j = legacy_json(enc);
            if (v == 0)
                CHECK(j != NULL); /* this one parses: the interesting case */
            if (j) {
                CHECK_STR(json_string_value(json_object_get(j, "channel")), "iopub");
                CHECK_STR(json_string_value(json_object_get(j, "msg_type")), "execute_result");
            }
            json_decref(j);
            blob_unref(&enc);
        }
        free(meta);
        free(content);
    }
}

/* serialize_msg_to_ws_v1([header, b'{}', b'{}', b'{"data":{}}', b'\x00\x01\x02', b'xyz'],
 * "iopub") from jupyter_server 1.23.3 (jupyter_server/base/zmqhandlers.py). */
static const char v1_hdr[] = "{\"msg_id\":\"m1\",\"msg_type\":\"display_data\"}";
static const char v1_golden[] = "\x08\0\0\0\0\0\0\0" /* 8 offsets */
                                "\x48\0\0\0\0\0\0\0" /* 72: channel */
                                "\x4d\0\0\0\0\0\0\0" /* 77: header */
                                "\x76\0\0\0\0\0\0\0" /* 118: parent_header */
                                "\x78\0\0\0\0\0\0\0" /* 120: metadata */
                                "\x7a\0\0\0\0\0\0\0" /* 122: content */
                                "\x85\0\0\0\0\0\0\0" /* 133: buffer 0 */
                                "\x88\0\0\0\0\0\0\0" /* 136: buffer 1 */
                                "\x8b\0\0\0\0\0\0\0" /* 139: end */
                                "iopub"
                                "{\"msg_id\":\"m1\",\"msg_type\":\"display_data\"}"
                                "{}{}{\"data\":{}}"
                                "\x00\x01\x02"
                                "xyz";

/* serialize_binary_message({"header": {"msg_id": "m2", "msg_type": "comm_msg"},
 * "parent_header": {}, "metadata": {"k": [1, 2]}, "content": {"comm_id": "c", "data": {}},
 * "channel": "shell", "buffers": [b"\x00\xff", b""]}) from jupyter_server 1.23.3. */
static const char legacy_golden[] =
    "\0\0\0\x03" /* JSON + 2 buffers */
    "\0\0\0\x10" /* 16 */
    "\0\0\0\xb1" /* 177 */
    "\0\0\0\xb3" /* 179 = end: an empty last buffer */
    "{\"header\": {\"msg_id\": \"m2\", \"msg_type\": \"comm_msg\"}, \"parent_header\": {}, "
    "\"metadata\": {\"k\": [1, 2]}, \"content\": {\"comm_id\": \"c\", \"data\": {}}, "
    "\"channel\": \"shell\"}"
    "\x00\xff";

static void test_golden(void)
{
    wsmsg_t w;
    jmsg_t m;
    jhdr_t h;

    CHECK_CASE("v1 golden: decode");
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, v1_golden, sizeof(v1_golden) - 1, &w), 0);
    CHECK_INT(w.chan, JCHAN_IOPUB);
    CHECK_STR(w.hdr.msg_id, "m1");
    CHECK_STR(w.hdr.msg_type, "display_data");
    CHECK_MEM(w.m.part[0].p, w.m.part[0].n, v1_hdr, sizeof(v1_hdr) - 1);
    CHECK_MEM(w.m.part[1].p, w.m.part[1].n, "{}", 2);
    CHECK_MEM(w.m.part[2].p, w.m.part[2].n, "{}", 2);
    CHECK_MEM(w.m.part[3].p, w.m.part[3].n, "{\"data\":{}}", 11);
    CHECK_INT(w.m.nbuf, 2);
    CHECK_MEM(w.m.buf[0].p, w.m.buf[0].n, "\0\1\2", 3);
    CHECK_MEM(w.m.buf[1].p, w.m.buf[1].n, "xyz", 3);
    CHECK(w.owned == NULL); /* v1 parts are views into the frame */

    CHECK_CASE("v1 golden: encode is byte-identical to jupyter_server");
    m = w.m;
    CHECK_INT(jhdr_parse(m.part[0], &h), 0);
    blob_t *b = wsmsg_encode(WSPROTO_V1, JCHAN_IOPUB, &m, &h, 0);
    CHECK(b != NULL);
    if (b) {
        CHECK_MEM(b->data, b->len, v1_golden, sizeof(v1_golden) - 1);
        blob_unref(&b);
    }
    wsmsg_fini(&w);

    CHECK_CASE("legacy golden: decode");
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, legacy_golden, sizeof(legacy_golden) - 1, &w), 0);
    CHECK_INT(w.chan, JCHAN_SHELL);
    CHECK_STR(w.hdr.msg_id, "m2");
    CHECK_STR(w.hdr.msg_type, "comm_msg");
    static const char hdr_c[] = "{\"msg_id\":\"m2\",\"msg_type\":\"comm_msg\"}";
    CHECK_MEM(w.m.part[0].p, w.m.part[0].n, hdr_c, sizeof(hdr_c) - 1);
    CHECK_MEM(w.m.part[1].p, w.m.part[1].n, "{}", 2);
    CHECK_MEM(w.m.part[2].p, w.m.part[2].n, "{\"k\":[1,2]}", 11);
    static const char content_c[] = "{\"comm_id\":\"c\",\"data\":{}}";
    CHECK_MEM(w.m.part[3].p, w.m.part[3].n, content_c, sizeof(content_c) - 1);
    CHECK_INT(w.m.nbuf, 2);
    CHECK_MEM(w.m.buf[0].p, w.m.buf[0].n, "\0\xff", 2);
    CHECK_INT(w.m.buf[1].n, 0);
    wsmsg_fini(&w);
}

/* ---- legacy JSON (text) decoder ---- */

static void test_legacy_text_errors(void)
{
    static const struct {
        const char *json;
        int ret;
        int chan;
    } cases[] = {
        /* what JupyterLab sends */
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"execute_request\"},\"parent_header\":{},"
         "\"metadata\":{},\"content\":{\"code\":\"1\"},\"channel\":\"shell\",\"buffers\":[]}",
         0, JCHAN_SHELL},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":"
         "\"control\"}",
         0, JCHAN_CONTROL},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":\"stdin\"}",
         0, JCHAN_STDIN},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":\"iopub\"}",
         0, JCHAN_IOPUB},
        /* missing channel: shell, as jupyter_server */
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{}}", 0, JCHAN_SHELL},
        /* null parent/metadata are {} */
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"parent_header\":null,"
         "\"metadata\":null,\"content\":{}}",
         0, JCHAN_SHELL},
        /* unknown channel */
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":\"hb\"}",
         -ENOENT, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":\"\"}",
         -ENOENT, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":\"Shell\"}",
         -ENOENT, 0},
        /* channel of the wrong type */
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":1}",
         -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":null}",
         -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":[\"shell\"]"
         "}",
         -EBADMSG, 0},
        /* missing / null header or content */
        {"{\"content\":{},\"channel\":\"shell\"}", -EBADMSG, 0},
        {"{\"header\":null,\"content\":{}}", -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"}}", -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":null}", -EBADMSG, 0},
        /* parts that are not objects */
        {"{\"header\":[],\"content\":{}}", -EBADMSG, 0},
        {"{\"header\":\"{}\",\"content\":{}}", -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"parent_header\":\"x\",\"content\":{}"
         "}",
         -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"metadata\":1,\"content\":{}}",
         -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":[1]}", -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":true}", -EBADMSG, 0},
        /* header without the fields the gateway routes on */
        {"{\"header\":{},\"content\":{}}", -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\"},\"content\":{}}", -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":7},\"content\":{}}", -EBADMSG, 0},
        /* not an object at all / not JSON */
        {"[]", -EBADMSG, 0},
        {"\"shell\"", -EBADMSG, 0},
        {"null", -EBADMSG, 0},
        {"", -EBADMSG, 0},
        {"{", -EBADMSG, 0},
        {"{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{}} trailing", -EBADMSG, 0},
        {"\xff\xfe", -EBADMSG, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        wsmsg_t w;
        CHECK_CASE(cases[i].json);
        int r = wsmsg_decode(WSPROTO_LEGACY, false, cases[i].json, strlen(cases[i].json), &w);
        CHECK_INT(r, cases[i].ret);
        if (r == 0) {
            CHECK_INT(w.chan, cases[i].chan);
            CHECK_INT(w.m.nbuf, 0);
            CHECK_STR(w.hdr.msg_id, "a");
            for (int p = 0; p < 4; p++)
                CHECK(jmsg_is_json_object(w.m.part[p]));
            wsmsg_fini(&w);
        } else {
            CHECK(w.owned == NULL);
        }
    }

    CHECK_CASE("legacy text: null parts become {}");
    static const char nulls[] =
        "{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"parent_header\":null,\"content\":{}}";
    wsmsg_t w;
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, false, nulls, sizeof(nulls) - 1, &w), 0);
    CHECK_MEM(w.m.part[JPART_PARENT].p, w.m.part[JPART_PARENT].n, "{}", 2);
    CHECK_MEM(w.m.part[JPART_METADATA].p, w.m.part[JPART_METADATA].n, "{}", 2);
    wsmsg_fini(&w);

    CHECK_CASE("legacy text: \"buffers\" in a text frame are ignored");
    static const char bufs[] =
        "{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"buffers\":[\"AAAA\"]}";
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, false, bufs, sizeof(bufs) - 1, &w), 0);
    CHECK_INT(w.m.nbuf, 0);
    wsmsg_fini(&w);
}

/* ---- legacy binary decoder ---- */

/* Builds a legacy binary frame from offsets given explicitly (count = noff). */
static size_t legacy_frame(char *out,
                           size_t outsz,
                           uint32_t count,
                           const uint32_t *offs,
                           size_t noff,
                           const char *body,
                           size_t bodylen)
{
    size_t o = 0;
    uint32_t v = htobe32(count);
    memcpy(out + o, &v, 4);
    o += 4;
    for (size_t i = 0; i < noff; i++) {
        v = htobe32(offs[i]);
        memcpy(out + o, &v, 4);
        o += 4;
    }
    if (o + bodylen > outsz)
        return 0;
    memcpy(out + o, body, bodylen);
    return o + bodylen;
}

static const char small_json[] =
    "{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{}}";
#define SJ (sizeof(small_json) - 1)

static void test_legacy_binary_errors(void)
{
    char f[2048], body[1024];
    wsmsg_t w;
    size_t n;
    memcpy(body, small_json, SJ);
    memcpy(body + SJ, "AABBB", 5);

    CHECK_CASE("legacy bin: well-formed, 2 buffers");
    n = legacy_frame(f, sizeof(f), 3, (uint32_t[]){16, 16 + SJ, 16 + SJ + 2}, 3, body, SJ + 5);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), 0);
    CHECK_INT(w.m.nbuf, 2);
    CHECK_MEM(w.m.buf[0].p, w.m.buf[0].n, "AA", 2);
    CHECK_MEM(w.m.buf[1].p, w.m.buf[1].n, "BBB", 3);
    wsmsg_fini(&w);

    CHECK_CASE("legacy bin: count 1 (JSON only)");
    n = legacy_frame(f, sizeof(f), 1, (uint32_t[]){8}, 1, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), 0);
    CHECK_INT(w.m.nbuf, 0);
    wsmsg_fini(&w);

    CHECK_CASE("legacy bin: empty buffers");
    n = legacy_frame(f, sizeof(f), 3, (uint32_t[]){16, 16 + SJ, 16 + SJ}, 3, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), 0);
    CHECK_INT(w.m.nbuf, 2);
    CHECK_INT(w.m.buf[0].n, 0);
    CHECK_INT(w.m.buf[1].n, 0);
    wsmsg_fini(&w);

    CHECK_CASE("legacy bin: shorter than 8 bytes");
    for (size_t len = 0; len < 8; len++)
        CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, "\0\0\0\1\0\0\0\x08", len, &w), -EBADMSG);
    CHECK_CASE("legacy bin: count 0");
    n = legacy_frame(f, sizeof(f), 0, (uint32_t[]){8}, 1, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);

    CHECK_CASE("legacy bin: too many buffers");
    {
        uint32_t offs[JMSG_MAX_BUFFERS + 2];
        size_t cnt = JMSG_MAX_BUFFERS + 1; /* JSON + 64 buffers: allowed */
        offs[0] = (uint32_t)(4 * (cnt + 1));
        for (size_t i = 1; i < cnt; i++)
            offs[i] = offs[0] + (uint32_t)SJ;
        n = legacy_frame(f, sizeof(f), (uint32_t)cnt, offs, cnt, body, SJ);
        CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), 0);
        CHECK_INT(w.m.nbuf, JMSG_MAX_BUFFERS);
        wsmsg_fini(&w);
        cnt++; /* 65 buffers */
        offs[0] = (uint32_t)(4 * (cnt + 1));
        for (size_t i = 1; i < cnt; i++)
            offs[i] = offs[0] + (uint32_t)SJ;
        n = legacy_frame(f, sizeof(f), (uint32_t)cnt, offs, cnt, body, SJ);
        CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    }
    CHECK_CASE("legacy bin: huge count");
    n = legacy_frame(f, sizeof(f), 0xffffffffu, (uint32_t[]){8}, 1, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    n = legacy_frame(f, sizeof(f), 0x80000000u, (uint32_t[]){8}, 1, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);

    CHECK_CASE("legacy bin: truncated offset table");
    /* count 3 needs 16 bytes of table; give 12 */
    n = legacy_frame(f, sizeof(f), 3, (uint32_t[]){16, 16}, 2, "", 0);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    n = legacy_frame(f, sizeof(f), 3, (uint32_t[]){16, 16, 16}, 3, "", 0);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n - 1, &w), -EBADMSG);

    CHECK_CASE("legacy bin: first offset inside the table");
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){8, 12 + SJ}, 2, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){0, 12 + SJ}, 2, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);

    CHECK_CASE("legacy bin: offsets out of order");
    n = legacy_frame(f, sizeof(f), 3, (uint32_t[]){16, 16 + SJ + 2, 16 + SJ}, 3, body, SJ + 5);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){12, 11}, 2, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);

    CHECK_CASE("legacy bin: offset beyond the end");
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){12, 12 + SJ + 1}, 2, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){12, 0xffffffffu}, 2, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    n = legacy_frame(f, sizeof(f), 1, (uint32_t[]){9 + (uint32_t)SJ}, 1, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    /* valid JSON, but the last buffer starts past the end */
    n = legacy_frame(f, sizeof(f), 3, (uint32_t[]){16, 16 + SJ, 16 + SJ + 6}, 3, body, SJ + 5);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){12, 0xffffffffu}, 2, body, SJ);
    f[n] = 'x'; /* not a NUL that would stop a parser reading past the end */
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);

    CHECK_CASE("legacy bin: JSON slice is cut short");
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){12, 12 + SJ - 1}, 2, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    CHECK_CASE("legacy bin: JSON slice not an object");
    n = legacy_frame(f, sizeof(f), 2, (uint32_t[]){12, 14}, 2, "[]xx", 4);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -EBADMSG);
    CHECK_CASE("legacy bin: unknown channel");
    static const char hb[] =
        "{\"header\":{\"msg_id\":\"a\",\"msg_type\":\"t\"},\"content\":{},\"channel\":\"hb\"}";
    n = legacy_frame(f, sizeof(f), 1, (uint32_t[]){8}, 1, hb, sizeof(hb) - 1);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, true, f, n, &w), -ENOENT);
    CHECK_CASE("legacy bin: a text frame is not parsed as binary");
    n = legacy_frame(f, sizeof(f), 1, (uint32_t[]){8}, 1, body, SJ);
    CHECK_INT(wsmsg_decode(WSPROTO_LEGACY, false, f, n, &w), -EBADMSG);
}

/* ---- v1 decoder ---- */

/* Builds a v1 frame: count, explicit offsets, then body. */
static size_t v1_frame(char *out,
                       size_t outsz,
                       uint64_t count,
                       const uint64_t *offs,
                       size_t noff,
                       const char *body,
                       size_t bodylen)
{
    size_t o = 0;
    uint64_t v = htole64(count);
    memcpy(out + o, &v, 8);
    o += 8;
    for (size_t i = 0; i < noff; i++) {
        v = htole64(offs[i]);
        memcpy(out + o, &v, 8);
        o += 8;
    }
    if (o + bodylen > outsz)
        return 0;
    memcpy(out + o, body, bodylen);
    return o + bodylen;
}

static const char v1_body[] = "shell"
                              "{\"msg_id\":\"a\",\"msg_type\":\"t\"}" /* 29 bytes */
                              "{}{}{}"
                              "BUF";

/* Offsets for v1_body placed after a table of `count` offsets. */
static void v1_offsets(uint64_t *o, size_t count)
{
    uint64_t base = 8 * (count + 1);
    o[0] = base;          /* channel */
    o[1] = base + 5;      /* header */
    o[2] = base + 5 + 29; /* parent */
    o[3] = o[2] + 2;      /* metadata */
    o[4] = o[3] + 2;      /* content */
    o[5] = o[4] + 2;      /* end, or buffer 0 */
    for (size_t i = 6; i < count; i++)
        o[i] = o[5] + (i == count - 1 ? 3 : 0);
}

static void test_v1_errors(void)
{
    char f[4096];
    uint64_t o[JMSG_MAX_BUFFERS + 8];
    wsmsg_t w;
    size_t n;
    const size_t B = sizeof(v1_body) - 1;

    CHECK_CASE("v1: well-formed, no buffers");
    v1_offsets(o, 6);
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B - 3);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), 0);
    CHECK_INT(w.chan, JCHAN_SHELL);
    CHECK_INT(w.m.nbuf, 0);
    CHECK_STR(w.hdr.msg_type, "t");
    wsmsg_fini(&w);

    CHECK_CASE("v1: bytes after the last offset are ignored (as jupyter_server)");
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), 0);
    CHECK_INT(w.m.nbuf, 0);
    wsmsg_fini(&w);

    CHECK_CASE("v1: one buffer");
    v1_offsets(o, 7);
    n = v1_frame(f, sizeof(f), 7, o, 7, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), 0);
    CHECK_INT(w.m.nbuf, 1);
    CHECK_MEM(w.m.buf[0].p, w.m.buf[0].n, "BUF", 3);
    wsmsg_fini(&w);

    CHECK_CASE("v1: JMSG_MAX_BUFFERS buffers");
    v1_offsets(o, 6 + JMSG_MAX_BUFFERS);
    n = v1_frame(f, sizeof(f), 6 + JMSG_MAX_BUFFERS, o, 6 + JMSG_MAX_BUFFERS, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), 0);
    CHECK_INT(w.m.nbuf, JMSG_MAX_BUFFERS);
    CHECK_MEM(w.m.buf[JMSG_MAX_BUFFERS - 1].p, w.m.buf[JMSG_MAX_BUFFERS - 1].n, "BUF", 3);
    wsmsg_fini(&w);
    CHECK_CASE("v1: too many buffers");
    v1_offsets(o, 7 + JMSG_MAX_BUFFERS);
    n = v1_frame(f, sizeof(f), 7 + JMSG_MAX_BUFFERS, o, 7 + JMSG_MAX_BUFFERS, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);

    CHECK_CASE("v1: text frame");
    v1_offsets(o, 6);
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B - 3);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, false, f, n, &w), -EBADMSG);

    CHECK_CASE("v1: shorter than 8 bytes");
    for (size_t len = 0; len < 8; len++)
        CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, len, &w), -EBADMSG);

    CHECK_CASE("v1: too few offsets (no content)");
    v1_offsets(o, 6);
    for (uint64_t c = 0; c < 6; c++) {
        n = v1_frame(f, sizeof(f), c, o, 6, v1_body, B);
        CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    }
    CHECK_CASE("v1: huge offset counts");
    static const uint64_t huge[] = {71, 1000, 0x2000000000000000ull, 0x8000000000000000ull,
                                    UINT64_MAX};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        n = v1_frame(f, sizeof(f), huge[i], o, 6, v1_body, B);
        CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    }

    CHECK_CASE("v1: truncated offset table");
    v1_offsets(o, 6);
    n = v1_frame(f, sizeof(f), 6, o, 5, "", 0); /* 48 bytes < 56 */
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    n = v1_frame(f, sizeof(f), 6, o, 6, "", 0); /* table complete, body missing */
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B - 4); /* last part cut short */
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);

    CHECK_CASE("v1: first offset inside the table");
    v1_offsets(o, 6);
    o[0] = 8 * 6;
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    o[0] = 0;
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);

    CHECK_CASE("v1: offsets out of order");
    for (size_t k = 1; k < 6; k++) {
        v1_offsets(o, 6);
        o[k] = o[k - 1] - 1;
        n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B);
        CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    }
    v1_offsets(o, 7);
    o[5] = o[6] + 1; /* buffer start after its end */
    n = v1_frame(f, sizeof(f), 7, o, 7, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);

    CHECK_CASE("v1: offsets beyond the end");
    v1_offsets(o, 7);
    o[6] = o[5] + 4; /* one past */
    n = v1_frame(f, sizeof(f), 7, o, 7, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    o[6] = UINT64_MAX;
    n = v1_frame(f, sizeof(f), 7, o, 7, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    v1_offsets(o, 6);
    for (size_t k = 1; k < 6; k++)
        o[k] = 1ull << 40;
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);

    CHECK_CASE("v1: unknown or empty channel");
    static const char hb_body[] = "hb{\"msg_id\":\"a\",\"msg_type\":\"t\"}{}{}{}";
    uint64_t b0 = 8 * 7;
    uint64_t hbo[6] = {b0, b0 + 2, b0 + 31, b0 + 33, b0 + 35, b0 + 37};
    n = v1_frame(f, sizeof(f), 6, hbo, 6, hb_body, sizeof(hb_body) - 1);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -ENOENT);
    hbo[1] = b0; /* empty channel: header starts at "hb{..." */
    n = v1_frame(f, sizeof(f), 6, hbo, 6, hb_body, sizeof(hb_body) - 1);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -ENOENT);

    CHECK_CASE("v1: missing or bad header");
    v1_offsets(o, 6);
    o[1] = o[2]; /* empty header, channel takes its bytes */
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -ENOENT);
    v1_offsets(o, 6);
    o[2] = o[1]; /* empty header */
    n = v1_frame(f, sizeof(f), 6, o, 6, v1_body, B);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    static const char nohdr[] = "shell[]{}{}{}";
    uint64_t nh[6] = {b0, b0 + 5, b0 + 7, b0 + 9, b0 + 11, b0 + 13};
    n = v1_frame(f, sizeof(f), 6, nh, 6, nohdr, sizeof(nohdr) - 1);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);
    static const char notype[] = "shell{\"msg_id\":\"a\"}{}{}{}";
    uint64_t nt[6] = {b0, b0 + 5, b0 + 19, b0 + 21, b0 + 23, b0 + 25};
    n = v1_frame(f, sizeof(f), 6, nt, 6, notype, sizeof(notype) - 1);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), -EBADMSG);

    CHECK_CASE("v1: other parts are passed through verbatim (as jupyter_server)");
    static const char raw[] = "shell{\"msg_id\":\"a\",\"msg_type\":\"t\"}x{ }[]";
    uint64_t ro[6] = {b0, b0 + 5, b0 + 34, b0 + 35, b0 + 38, b0 + 40};
    n = v1_frame(f, sizeof(f), 6, ro, 6, raw, sizeof(raw) - 1);
    CHECK_INT(wsmsg_decode(WSPROTO_V1, true, f, n, &w), 0);
    CHECK_MEM(w.m.part[1].p, w.m.part[1].n, "x", 1);
    CHECK_MEM(w.m.part[2].p, w.m.part[2].n, "{ }", 3);
    CHECK_MEM(w.m.part[3].p, w.m.part[3].n, "[]", 2);
    wsmsg_fini(&w);
}

int main(void)
{
    test_round_trips();
    test_part_normalisation();
    test_legacy_layout();
    test_legacy_no_smuggling();
    test_large_parts_no_smuggling();
    test_golden();
    test_legacy_text_errors();
    test_legacy_binary_errors();
    test_v1_errors();
    CHECK_DONE();
}
