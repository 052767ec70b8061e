/* protocol/egreq.c: egress proxy request heads (CONNECT, absolute-URI forwarding), partial
 * input, limits, and the head rewritten for the upstream server. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "protocol/egreq.h"

static char out[EGREQ_OUT_MAX];

static int parse(const char *s, struct egreq *r)
{
    const char *why = NULL;
    CHECK_CASE(s);
    int rc = egreq_parse(s, strlen(s), r, out, &why);
    if (rc < 0)
        CHECK(why != NULL);
    return rc;
}

int main(void)
{
    struct egreq r;
    CHECK_INT(parse("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", &r), 1);
    CHECK(r.connect);
    CHECK_STR(r.host, "pypi.org");
    CHECK_INT(r.port, 443);
    CHECK_INT(r.head_len, strlen("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n"));

    const char *tls = "CONNECT [::1]:8443 HTTP/1.0\r\n\r\n\x16\x03\x01";
    CHECK_INT(parse(tls, &r), 1);
    CHECK_STR(r.host, "::1");
    CHECK_INT(r.port, 8443);
    CHECK_INT(r.head_len, strlen(tls) - 3);

    /* incomplete, at any cut */
    const char *full = "GET http://Example.org:8080/a/b?c=d HTTP/1.1\r\nHost: example.org:8080\r\n"
                       "Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\n"
                       "Accept: */*\r\n\r\nBODY";
    for (size_t cut = 0; cut < strlen(full) - 4; cut++) {
        CHECK_CASE("cut");
        CHECK_INT(egreq_parse(full, cut, &r, out, NULL), 0);
    }
    CHECK_INT(parse(full, &r), 1);
    CHECK(!r.connect);
    CHECK_STR(r.host, "Example.org");
    CHECK_INT(r.port, 8080);
    out[r.out_len] = '\0';
    CHECK_STR(out, "GET /a/b?c=d HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\n"
                   "Connection: close\r\n\r\n");

    CHECK_INT(parse("POST http://127.0.0.2 HTTP/1.0\nContent-Length: 3\n\n", &r), 1);
    CHECK_INT(r.port, 80);
    out[r.out_len] = '\0';
    CHECK_STR(out, "POST / HTTP/1.0\r\nContent-Length: 3\r\nHost: 127.0.0.2:80\r\n"
                   "Connection: close\r\n\r\n");
    CHECK_INT(parse("GET http://h?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", &r), 1);
    out[r.out_len] = '\0';
    CHECK_STR(out, "GET /?x=1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");

    /* refused forms */
    CHECK_INT(parse("GET /index.html HTTP/1.1\r\n\r\n", &r), -ENOTSUP);
    CHECK_INT(parse("GET https://pypi.org/ HTTP/1.1\r\n\r\n", &r), -ENOTSUP);
    CHECK_INT(parse("GET http://user:pw@pypi.org/ HTTP/1.1\r\n\r\n", &r), -ENOTSUP);
    CHECK_INT(parse("CONNECT pypi.org HTTP/1.1\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT pypi.org:65536 HTTP/1.1\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT pypi.org:44x HTTP/1.1\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT py%70i.org:443 HTTP/1.1\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT pypi.org:443 HTTP/2.0\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT  pypi.org:443 HTTP/1.1\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("connect pypi.org:443 HTTP/1.1\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT pypi.org:443 HTTP/1.1\r\nBad Header: x\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT pypi.org:443 HTTP/1.1\r\nX: a\x01\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("CONNECT pypi.org:443 HTTP/1.1\r\n : x\r\n\r\n", &r), -EINVAL);
    CHECK_INT(parse("\r\n\r\n", &r), -EINVAL);
    CHECK_INT(egreq_parse("CONNECT a:1 HTTP/1.1\r\n\0\r\n\r\n", 27, &r, out, NULL), -EINVAL);

    /* limits: the head's size, and the number of header lines */
    size_t big = EGREQ_HEAD_MAX + 100;
    char *s = malloc(big + 1);
    memset(s, 'a', big);
    memcpy(s, "CONNECT a:1 HTTP/1.1\r\nX: ", 25);
    s[big] = '\0';
    CHECK_INT(parse(s, &r), -EMSGSIZE);
    CHECK_INT(egreq_parse(s, EGREQ_HEAD_MAX - 1, &r, out, NULL), 0);
    size_t n = 0;
    n += (size_t)sprintf(s, "CONNECT a:1 HTTP/1.1\r\n");
    for (int i = 0; i <= EGREQ_MAX_HEADERS; i++)
        n += (size_t)sprintf(s + n, "X: y\r\n");
    sprintf(s + n, "\r\n");
    CHECK_INT(parse(s, &r), -EMSGSIZE);
    /* a head of bare LF lines at the size limit still fits the rewritten buffer, or is refused */
    n = (size_t)sprintf(s, "GET http://a/ HTTP/1.1\n");
    for (int i = 0; i < EGREQ_MAX_HEADERS; i++)
        n += (size_t)sprintf(s + n, "X: y\n");
    sprintf(s + n, "\n");
    CHECK_INT(parse(s, &r), 1);
    free(s);
    CHECK_DONE();
}
