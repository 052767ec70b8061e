/* protocol/egsub.c and egreq_parse_origin: placeholders in egress request heads, replaced
 * or refused by the resolver; a head read inside TLS rewritten for one request. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "protocol/egreq.h"
#include "protocol/egsub.h"

#define PH_A "kgw-secret-0123456789abcdef0123456789abcdef"
#define PH_B "kgw-secret-ffffffffffffffffffffffffffffffff"

static int asked;

static int resolve(void *ctx, const char *ph, const char **val, size_t *vlen, const char **why)
{
    (void)ctx;
    asked++;
    if (!memcmp(ph, PH_A, EGSUB_PH_LEN)) {
        *val = "Bearer sk-123";
        *vlen = 13;
        return 0;
    }
    *why = "secret B may not be sent here";
    return -EPERM;
}

static int sub(const char *in, char **out, size_t *olen, const char **why)
{
    CHECK_CASE(in);
    asked = 0;
    return egsub_apply(in, strlen(in), resolve, NULL, out, olen, why);
}

int main(void)
{
    char *out = NULL;
    size_t olen = 0;
    const char *why = NULL;

    CHECK_INT(
        sub("GET /?k=" PH_A " HTTP/1.1\r\nAuthorization: " PH_A "\r\n\r\n", &out, &olen, &why), 2);
    CHECK(out && olen == strlen("GET /?k=Bearer sk-123 HTTP/1.1\r\nAuthorization: Bearer "
                                "sk-123\r\n\r\n"));
    CHECK(out && !memcmp(out, "GET /?k=Bearer sk-123 HTTP/1.1\r\nAuthorization: Bearer sk-123\r\n",
                         olen - 2));
    free(out);
    /* none: nothing made */
    CHECK_INT(sub("GET / HTTP/1.1\r\nX: kgw-secret-short\r\n\r\n", &out, &olen, &why), 0);
    CHECK(out == NULL && olen == 0 && asked == 0);
    /* one refused refuses the whole request */
    CHECK_INT(sub("GET / HTTP/1.1\r\nA: " PH_A "\r\nB: " PH_B "\r\n\r\n", &out, &olen, &why),
              -EPERM);
    CHECK(out == NULL && why && strstr(why, "secret B"));
    /* a placeholder's form: 32 lowercase hex digits exactly after the prefix */
    CHECK_INT(sub("X: kgw-secret-0123456789ABCDEF0123456789abcdef\r\n", &out, &olen, &why), 0);
    CHECK_INT(sub("X: kgw-secret-kgw-secret-0123456789abcdef0123456789abcdef", &out, &olen, &why),
              1);
    CHECK(out && !strncmp(out, "X: kgw-secret-Bearer sk-123", olen));
    free(out);
    /* bounds: more than EGSUB_MAX placeholders */
    char many[(EGSUB_PH_LEN + 1) * (EGSUB_MAX + 2)] = "";
    for (int i = 0; i < EGSUB_MAX + 1; i++)
        strcat(many, PH_A " ");
    CHECK_INT(sub(many, &out, &olen, &why), -EMSGSIZE);
    CHECK(out == NULL);

    /* a head inside TLS */
    char h[EGREQ_OUT_MAX];
    size_t hl = 0, used = 0;
    const char *req = "POST /v1/chat?x=1 HTTP/1.1\r\nHost: api.example.com\r\nConnection: "
                      "keep-alive\r\nProxy-Authorization: x\r\nContent-Length: 2\r\n\r\n{}";
    CHECK_CASE(req);
    CHECK_INT(egreq_parse_origin(req, strlen(req), h, &hl, &used, &why), 1);
    CHECK_INT(used, strlen(req) - 2);
    const char *want = "POST /v1/chat?x=1 HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: "
                       "2\r\nConnection: close\r\n\r\n";
    CHECK(hl == strlen(want) && !memcmp(h, want, hl));
    for (size_t cut = 0; cut < used; cut++) { /* incomplete at any cut */
        CHECK_CASE("cut");
        CHECK_INT(egreq_parse_origin(req, cut, h, &hl, &used, &why), 0);
    }
    CHECK_CASE("absolute");
    CHECK_INT(egreq_parse_origin("GET http://a/ HTTP/1.1\r\n\r\n", 26, h, &hl, &used, &why),
              -ENOTSUP);
    CHECK_CASE("connect");
    CHECK_INT(egreq_parse_origin("CONNECT a:1 HTTP/1.1\r\n\r\n", 25, h, &hl, &used, &why),
              -ENOTSUP);
    CHECK_CASE("ctl");
    CHECK_INT(egreq_parse_origin("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 25, h, &hl, &used, &why),
              -EINVAL);
    char *huge = malloc(EGREQ_HEAD_MAX + 16);
    memset(huge, 'a', EGREQ_HEAD_MAX + 16);
    memcpy(huge, "GET / HTTP/1.1\r\nX: ", 19);
    CHECK_CASE("huge");
    CHECK_INT(egreq_parse_origin(huge, EGREQ_HEAD_MAX + 16, h, &hl, &used, &why), -EMSGSIZE);
    free(huge);
    /* the Host header of a head that carries a secret */
    static const struct {
        const char *head, *host;
        int port, def, want;
    } hc[] = {
        {"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "api.example.com", 443, 443, 0},
        {"GET / HTTP/1.1\r\nhost:  API.example.com:443 \r\n\r\n", "api.example.com", 443, 443, 0},
        {"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "api.example.com", 8443, 443, -EPERM},
        {"GET / HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n", "api.example.com", 8443, 443, 0},
        {"GET / HTTP/1.1\r\nHost: evil.example.com\r\n\r\n", "api.example.com", 443, 443, -EPERM},
        {"GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: evil.example\r\n\r\n",
         "api.example.com", 443, 443, -EPERM},
        {"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", "::1", 80, 80, 0},
        {"GET / HTTP/1.1\r\nHost: ::1\r\n\r\n", "::1", 80, 80, -EPERM},
        {"GET / HTTP/1.1\r\nX-Host: evil\r\n\r\n", "a", 80, 80, 0}, /* none: the address's */
        {"GET / HTTP/1.1\r\n\r\nHost: evil\r\n", "a", 80, 80, 0},    /* after the head */
    };
    for (size_t i = 0; i < sizeof(hc) / sizeof(hc[0]); i++) {
        CHECK_CASE(hc[i].head);
        CHECK_INT(egreq_host_check(hc[i].head, strlen(hc[i].head), hc[i].host, hc[i].port,
                                   hc[i].def),
                  hc[i].want);
    }
    CHECK_DONE();
}
