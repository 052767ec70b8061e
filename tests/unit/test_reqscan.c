/* protocol/reqscan.c: request targets marked where libwebsockets cannot decode them, framing
 * followed across requests, bodies and reads split anywhere. */
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "protocol/reqscan.h"

/* Feeds in as one stream in reads of `step` bytes, carrying unsettled bytes over as
 * gateway/reqguard.c does. With answer set, a request found pipelined is answered at once (its
 * predecessor's answer) and scanning goes on; else scanning stops there. Returns the bytes
 * handed on, NUL-terminated (caller frees); *ret_blocked: where the first pipelined request
 * began (or -1). */
static char *run(const char *in, size_t len, size_t step, bool answer, long *ret_blocked)
{
    reqscan_t s;
    uint8_t *out = calloc(1, len + 1), *buf = malloc(len + 3);
    size_t olen = 0, held = 0, pos = 0;
    reqscan_init(&s);
    *ret_blocked = -1;
    for (;;) {
        size_t n = len - pos < step ? len - pos : step;
        memcpy(buf + held, in + pos, n);
        pos += n;
        bool eof = pos == len;
        size_t total = held + n, ok = reqscan_feed(&s, buf, total, eof);
        CHECK(ok <= total);
        memcpy(out + olen, buf, ok);
        olen += ok;
        held = total - ok;
        memmove(buf, buf + ok, held);
        if (reqscan_blocked(&s)) {
            if (*ret_blocked < 0)
                *ret_blocked = (long)olen;
            if (!answer)
                break;
            reqscan_answered(&s);
            if (eof) { /* present the rest again */
                pos -= held;
                held = 0;
            }
            continue;
        }
        CHECK(held <= 2);
        CHECK(!(eof && held)); /* at the end, everything is settled */
        if (eof)
            break;
    }
    free(buf);
    return (char *)out;
}

static void expect(const char *name, const char *in, const char *want)
{
    size_t len = strlen(in);
    for (size_t step = 1; step <= len; step++) {
        long blocked;
        char *got = run(in, len, step, true, &blocked);
        CHECK_CASE(name);
        CHECK(memcmp(got, want, len) == 0);
        if (memcmp(got, want, len) != 0)
            fprintf(stderr, "  step %zu: got \"%s\"\n", step, got);
        free(got);
    }
}

static void test_targets(void)
{
    expect("plain", "GET /api HTTP/1.1\r\nHost: a\r\n\r\n", "GET /api HTTP/1.1\r\nHost: a\r\n\r\n");
    expect("good escapes", "GET /a%20b%2F%7e?x=%41 HTTP/1.1\r\n\r\n",
           "GET /a%20b%2F%7e?x=%41 HTTP/1.1\r\n\r\n");
    expect("nul", "GET /download/x%00.txt HTTP/1.1\r\n\r\n",
           "GET /download/x\x7f" "00.txt HTTP/1.1\r\n\r\n");
    expect("nul after slash", "GET /%00 HTTP/1.1\r\n\r\n", "GET /\x7f" "00 HTTP/1.1\r\n\r\n");
    expect("nul in query", "GET /api?token=%00 HTTP/1.1\r\n\r\n",
           "GET /api?token=\x7f" "00 HTTP/1.1\r\n\r\n");
    expect("not hex", "GET /a%zz HTTP/1.1\r\n\r\n", "GET /a\x7fzz HTTP/1.1\r\n\r\n");
    expect("one hex", "GET /a%4 HTTP/1.1\r\n\r\n", "GET /a\x7f" "4 HTTP/1.1\r\n\r\n");
    expect("percent at end", "GET /a% HTTP/1.1\r\n\r\n", "GET /a\x7f HTTP/1.1\r\n\r\n");
    expect("double percent", "GET /%%41 HTTP/1.1\r\n\r\n", "GET /\x7f%41 HTTP/1.1\r\n\r\n");
    expect("escapes in headers are not ours", "GET / HTTP/1.1\r\nX: %00\r\n\r\n",
           "GET / HTTP/1.1\r\nX: %00\r\n\r\n");
}

static void test_framing(void)
{
    /* a body is passed unchanged; the next request's target is scanned again */
    expect("body then request",
           "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\n%00%zGET /b%00 HTTP/1.1\r\n\r\n",
           "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\n%00%zGET /b\x7f" "00 HTTP/1.1\r\n\r\n");
    expect("header names in any case",
           "PUT /a HTTP/1.1\r\ncontent-LENGTH:  3 \r\n\r\n%00GET /%zz HTTP/1.1\r\n\r\n",
           "PUT /a HTTP/1.1\r\ncontent-LENGTH:  3 \r\n\r\n%00GET /\x7fzz HTTP/1.1\r\n\r\n");
    expect("bare LF lines", "GET /a HTTP/1.1\nHost: x\n\nGET /%00 HTTP/1.1\n\n",
           "GET /a HTTP/1.1\nHost: x\n\nGET /\x7f" "00 HTTP/1.1\n\n");
    /* after an upgrade, a chunked body or a POST without a length: no more scanning */
    expect("upgrade", "GET /c HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET /%00 x",
           "GET /c HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET /%00 x");
    expect("chunked", "POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n%00%0\r\n",
           "POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n%00%0\r\n");
    expect("post without length", "POST /u HTTP/1.1\r\n\r\n%00 GET /%00",
           "POST /u HTTP/1.1\r\n\r\n%00 GET /%00");
    expect("two lengths", "POST /u HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nGET /%00",
           "POST /u HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nGET /%00");
    expect("bad length", "POST /u HTTP/1.1\r\nContent-Length: -1\r\n\r\nGET /%00",
           "POST /u HTTP/1.1\r\nContent-Length: -1\r\n\r\nGET /%00");
    expect("absolute form", "GET http://x/%00 HTTP/1.1\r\n\r\n", "GET http://x/%00 HTTP/1.1\r\n\r\n");
    expect("lowercase method", "get /%00 HTTP/1.1\r\n\r\n", "get /%00 HTTP/1.1\r\n\r\n");
}

static void test_pipelining(void)
{
    static const char two[] = "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
    static const char body[] = "POST /a HTTP/1.1\r\nContent-Length: 4\r\n\r\nGET GET /b HTTP/1.1\r\n\r\n";
    long blocked;
    for (size_t step = 1; step <= sizeof(two) - 1; step++) {
        CHECK_CASE("pipelined");
        free(run(two, sizeof(two) - 1, step, false, &blocked));
        CHECK_INT(blocked, strlen("GET /a HTTP/1.1\r\n\r\n"));
        CHECK_CASE("a body is not a request");
        free(run(body, sizeof(body) - 1, step, false, &blocked));
        CHECK_INT(blocked, strlen("POST /a HTTP/1.1\r\nContent-Length: 4\r\n\r\nGET "));
    }
    /* answered before the next one arrives: not pipelined */
    reqscan_t s;
    uint8_t b[sizeof(two)];
    memcpy(b, two, sizeof(two));
    size_t first = strlen("GET /a HTTP/1.1\r\n\r\n");
    reqscan_init(&s);
    CHECK_CASE("answered in between");
    CHECK_INT(reqscan_feed(&s, b, first, false), first);
    reqscan_answered(&s);
    CHECK_INT(reqscan_feed(&s, b + first, sizeof(two) - 1 - first, true), sizeof(two) - 1 - first);
    CHECK(!reqscan_blocked(&s));
}

static void test_unsettled(void)
{
    reqscan_t s;
    uint8_t b[] = "GET /a%0";
    reqscan_init(&s);
    CHECK_CASE("an escape the next bytes decide");
    CHECK_INT(reqscan_feed(&s, b, 8, false), 6);
    CHECK_INT(reqscan_feed(&s, b + 6, 2, true), 2); /* the stream ends: settled, marked */
    CHECK_INT(b[6], REQSCAN_MARK);
    CHECK(!reqscan_done(&s));
    reqscan_stop(&s);
    CHECK(reqscan_done(&s));
}

int main(void)
{
    test_targets();
    test_framing();
    test_pipelining();
    test_unsettled();
    CHECK_DONE();
}
