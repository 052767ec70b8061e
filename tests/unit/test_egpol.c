/* common/egpol.c: parsing, matching (wildcards, ports, IP literals), coverage (a kernel asks for
 * less, never more), and the addresses refused unless named. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/egpol.h"

static egpol_t *pol(const char *s)
{
    static egpol_t p[4];
    static int i;
    char err[128];
    egpol_t *r = &p[i++ % 4];
    CHECK_CASE(s);
    CHECK_INT(egpol_parse(s, strlen(s), r, err, sizeof(err)), 0);
    return r;
}

static int bad(const char *s)
{
    egpol_t p;
    char err[128] = "";
    CHECK_CASE(s);
    int r = egpol_parse(s, strlen(s), &p, err, sizeof(err));
    CHECK(err[0] != '\0');
    return r;
}

static const char *refusal(const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        CHECK(inet_pton(AF_INET6, ip, &a->sin6_addr) == 1);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        CHECK(inet_pton(AF_INET, ip, &a->sin_addr) == 1);
    }
    const char *r = egpol_addr_refusal((struct sockaddr *)&ss);
    return r ? r : "public";
}

int main(void)
{
    egpol_t *p = pol("pypi.org:443, *.pythonhosted.org:443,api.Example.COM.:*  127.0.0.2:8080,"
                     "[::1]:81 +intra.example:80");
    CHECK_INT(p->n, 6);
    CHECK(egpol_match(p, "pypi.org", 443) != NULL);
    CHECK(egpol_match(p, "pypi.org", 80) == NULL);
    CHECK(egpol_match(p, "evil-pypi.org", 443) == NULL);
    CHECK(egpol_match(p, "files.pythonhosted.org", 443) != NULL);
    CHECK(egpol_match(p, "a.b.pythonhosted.org", 443) != NULL);
    CHECK(egpol_match(p, "pythonhosted.org", 443) == NULL);
    CHECK(egpol_match(p, "xpythonhosted.org", 443) == NULL);
    CHECK(egpol_match(p, "api.example.com", 1234) != NULL);
    CHECK(egpol_match(p, "127.0.0.2", 8080) != NULL);
    CHECK(egpol_match(p, "127.0.0.2", 8081) == NULL);
    CHECK(egpol_match(p, "127.0.0.3", 8080) == NULL);
    CHECK(egpol_match(p, "::1", 81) != NULL);
    CHECK(egpol_match(p, "0:0::1", 81) != NULL);
    CHECK(egpol_match(p, "127.0.0.2", 8080)->private_ok);
    CHECK(!egpol_match(p, "pypi.org", 443)->private_ok);
    CHECK(egpol_match(p, "intra.example", 80)->private_ok);

    /* "*" is any host name, never an IP literal */
    egpol_t *any = pol("*:443");
    CHECK(egpol_match(any, "example.org", 443) != NULL);
    CHECK(egpol_match(any, "93.184.216.34", 443) == NULL);
    /* ... whatever its spelling: what inet_aton takes is an address (getaddrinfo parses it) */
    static const char *const numeric[] = {"2130706442", "0x7f00000a", "127.10", "0177.0.0.012",
                                          "127.0.10", "0X7F.0xA"};
    egpol_t *plus_any = pol("+*:*"), *lit = pol("+127.0.0.10:443"); /* any stays */
    for (size_t i = 0; i < sizeof(numeric) / sizeof(numeric[0]); i++) {
        char h[EGPOL_HOST_MAX + 1];
        snprintf(h, sizeof(h), "%s", numeric[i]);
        CHECK_CASE(numeric[i]);
        CHECK(egpol_host_normalize(h));
        CHECK_STR(h, "127.0.0.10");
        CHECK(egpol_match(any, h, 443) == NULL);
        CHECK(egpol_match(plus_any, h, 443) == NULL);
        CHECK(egpol_match(lit, h, 443) != NULL);
    }
    char h2[EGPOL_HOST_MAX + 1] = "1.2.3.4 x";
    CHECK(!egpol_host_normalize(h2)); /* inet_aton would take it; a host has no blanks */
    CHECK(pol("")->n == 0);
    CHECK(egpol_match(pol(""), "pypi.org", 443) == NULL);

    CHECK_INT(bad("pypi.org"), -EINVAL);
    CHECK_INT(bad("pypi.org:0"), -EINVAL);
    CHECK_INT(bad("pypi.org:65536"), -EINVAL);
    CHECK_INT(bad("pypi.org:-1"), -EINVAL);
    CHECK_INT(bad("pyp i.org:1"), -EINVAL);
    CHECK_INT(bad("py/pi.org:1"), -EINVAL);
    CHECK_INT(bad("*.10.0.0.1:1"), -EINVAL);
    CHECK_INT(bad("::1:80"), -EINVAL);
    CHECK_INT(bad("a..b:80"), -EINVAL);
    CHECK_INT(bad("p\x01.org:80"), -EINVAL);

    /* coverage: a kernel may ask for less than its tenant has */
    char err[128];
    egpol_t tenant_c = *pol("*.example.com:443,pypi.org:443,+intra.example:80,10.0.0.5:22");
    egpol_t *tenant = &tenant_c;
    CHECK(egpol_covers(tenant, pol("a.example.com:443,*.b.example.com:443,pypi.org:443"), err,
                       sizeof(err)));
    CHECK(!egpol_covers(tenant, pol("example.com:443"), err, sizeof(err)));
    CHECK(strstr(err, "example.com:443") != NULL);
    CHECK(!egpol_covers(tenant, pol("pypi.org:*"), err, sizeof(err)));
    CHECK(!egpol_covers(tenant, pol("*:443"), err, sizeof(err)));
    CHECK(!egpol_covers(tenant, pol("+pypi.org:443"), err, sizeof(err)));
    CHECK(egpol_covers(tenant, pol("intra.example:80"), err, sizeof(err)));
    CHECK(egpol_covers(tenant, pol("+intra.example:80"), err, sizeof(err)));
    CHECK(egpol_covers(tenant, pol("10.0.0.5:22"), err, sizeof(err)));
    CHECK(!egpol_covers(tenant, pol("10.0.0.6:22"), err, sizeof(err)));
    /* a ceiling of "*" does not let private addresses through; "+*" does */
    CHECK(egpol_covers(pol("*:*"), pol("pypi.org:443,93.184.216.34:80"), err, sizeof(err)) ==
          false); /* IP literals are named only by IP entries */
    CHECK(!egpol_covers(pol("*:*"), pol("+intra.example:80"), err, sizeof(err)));
    CHECK(egpol_covers(pol("+*:*"), pol("+intra.example:80"), err, sizeof(err)));
    egpol_t r = *pol("a.example.com:443,pypi.org:80,other.org:443");
    CHECK_INT(egpol_restrict(&r, pol("*.example.com:443,pypi.org:*")), 1);
    CHECK_INT(r.n, 2);

    char text[256];
    CHECK(egpol_format(pol("+intra.example:80,*.x.org:*,[::1]:81,*:443"), text, sizeof(text)) >
          0);
    CHECK_STR(text, "+intra.example:80,*.x.org:*,[::1]:81,*:443");
    CHECK_INT(egpol_format(pol("pypi.org:443"), text, 5), -ENOSPC);

    /* addresses refused unless a policy names them */
    CHECK_STR(refusal("93.184.216.34"), "public");
    CHECK_STR(refusal("127.0.0.1"), "loopback");
    CHECK_STR(refusal("127.255.1.2"), "loopback");
    CHECK_STR(refusal("10.1.2.3"), "private");
    CHECK_STR(refusal("172.16.0.1"), "private");
    CHECK_STR(refusal("172.32.0.1"), "public");
    CHECK_STR(refusal("192.168.1.1"), "private");
    CHECK_STR(refusal("100.64.0.1"), "private");
    CHECK_STR(refusal("169.254.169.254"), "metadata");
    CHECK_STR(refusal("169.254.1.1"), "link-local");
    CHECK_STR(refusal("224.0.0.1"), "multicast");
    CHECK_STR(refusal("0.0.0.0"), "unspecified");
    CHECK_STR(refusal("255.255.255.255"), "reserved");
    CHECK_STR(refusal("2606:4700::1111"), "public");
    CHECK_STR(refusal("::1"), "loopback");
    CHECK_STR(refusal("::"), "unspecified");
    CHECK_STR(refusal("::ffff:127.0.0.1"), "loopback");
    CHECK_STR(refusal("::ffff:169.254.169.254"), "metadata");
    CHECK_STR(refusal("64:ff9b::a00:1"), "private");
    CHECK_STR(refusal("fe80::1"), "link-local");
    CHECK_STR(refusal("fd00:ec2::254"), "metadata");
    CHECK_STR(refusal("fc00::1"), "private");
    CHECK_STR(refusal("ff02::1"), "multicast");
    CHECK_DONE();
}
