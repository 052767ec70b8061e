/* Egress policies (see egpol.h). */
#include "common/egpol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An IP literal: IPv6, or IPv4 in any form inet_aton (and so getaddrinfo) takes: 127.1,
 * 2130706442, 0x7f00000a, 0177.0.0.1 are all addresses, never names. */
static bool is_ip(const char *host, unsigned char bin[16], int *ret_af)
{
    unsigned char tmp[16];
    struct in_addr a4;
    if (!bin)
        bin = tmp;
    /* inet_aton ignores what follows a blank: a host never has one */
    if (!strpbrk(host, " \t\n\v\f\r") && inet_aton(host, &a4) == 1) {
        memcpy(bin, &a4, 4);
        if (ret_af)
            *ret_af = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, host, bin) == 1) {
        if (ret_af)
            *ret_af = AF_INET6;
        return true;
    }
    return false;
}

bool egpol_host_normalize(char *host)
{
    size_t n = strlen(host);
    if (n && host[n - 1] == '.')
        host[--n] = '\0';
    if (n == 0 || n > EGPOL_HOST_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (host[i] >= 'A' && host[i] <= 'Z')
            host[i] = (char)(host[i] - 'A' + 'a');
    unsigned char bin[16];
    int af;
    if (is_ip(host, bin, &af)) {
        if (af == AF_INET) /* one spelling of an IPv4 address: dotted quad */
            inet_ntop(AF_INET, bin, host, INET_ADDRSTRLEN);
        return true;
    }
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        char c = host[i];
        if (c == '.') {
            if (label == 0)
                return false;
            label = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return false;
        if (++label > 63)
            return false;
    }
    return label > 0;
}

static int parse_entry(const char *s, size_t len, struct egpol_entry *e, char *err, size_t errsz)
{
    char buf[EGPOL_HOST_MAX + 16];
    memset(e, 0, sizeof(*e));
    if (len && s[0] == '+') {
        e->private_ok = true;
        s++;
        len--;
    }
    if (len >= sizeof(buf))
        return snprintf(err, errsz, "entry too long"), -EINVAL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *host = buf, *colon;
    if (buf[0] == '[') {
        char *close = strchr(buf, ']');
        if (!close || close[1] != ':')
            return snprintf(err, errsz, "expected [IPv6]:PORT"), -EINVAL;
        *close = '\0';
        host = buf + 1;
        colon = close + 1;
    } else {
        colon = strrchr(buf, ':');
        if (!colon)
            return snprintf(err, errsz, "expected HOST:PORT in \"%.64s\"", buf), -EINVAL;
        *colon = '\0';
    }
    const char *port = colon + 1;
    if (!strcmp(port, "*")) {
        e->port = 0;
    } else {
        char *end;
        long p = strtol(port, &end, 10);
        if (!*port || *end || p < 1 || p > 65535 || port[0] == '+' || port[0] == '-')
            /* s is a span of the line, not a string */
            return snprintf(err, errsz, "invalid port in \"%.*s\"", (int)(len < 64 ? len : 64),
                            s),
                   -EINVAL;
        e->port = (int)p;
    }
    if (!strcmp(host, "*")) {
        e->any = true;
        return 0;
    }
    if (!strncmp(host, "*.", 2)) {
        e->wild = true;
        host += 2;
    }
    if (!egpol_host_normalize(host))
        return snprintf(err, errsz, "invalid host in \"%.*s\"", (int)(len < 64 ? len : 64), s),
               -EINVAL;
    e->ip = is_ip(host, NULL, NULL);
    if (e->ip && e->wild)
        return snprintf(err, errsz, "a wildcard cannot be an IP address: \"%.*s\"",
                        (int)(len < 64 ? len : 64), s),
               -EINVAL;
    if (e->ip && buf[0] != '[' && strchr(host, ':'))
        return snprintf(err, errsz, "write IPv6 addresses as [ADDRESS]:PORT"), -EINVAL;
    if (e->ip)
        e->private_ok = true;
    snprintf(e->host, sizeof(e->host), "%s", host);
    return 0;
}

int egpol_parse(const char *s, size_t len, egpol_t *out, char *err, size_t errsz)
{
    out->n = 0;
    if (len > EGPOL_TEXT_MAX)
        return snprintf(err, errsz, "policy longer than %d bytes", EGPOL_TEXT_MAX), -EINVAL;
    size_t i = 0;
    while (i < len) {
        while (i < len && (s[i] == ',' || s[i] == ' ' || s[i] == '\t'))
            i++;
        size_t b = i;
        while (i < len && s[i] != ',' && s[i] != ' ' && s[i] != '\t') {
            if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
                return snprintf(err, errsz, "invalid byte in policy"), -EINVAL;
            i++;
        }
        if (i == b)
            break;
        if (out->n == EGPOL_MAX_ENTRIES)
            return snprintf(err, errsz, "more than %d entries", EGPOL_MAX_ENTRIES), -EINVAL;
        int r = parse_entry(s + b, i - b, &out->v[out->n], err, errsz);
        if (r < 0)
            return r;
        out->n++;
    }
    return 0;
}

static bool suffix_of(const char *host, const char *suffix)
{
    size_t h = strlen(host), s = strlen(suffix);
    return h > s + 1 && host[h - s - 1] == '.' && !strcmp(host + h - s, suffix);
}

static bool same_ip(const char *a, const char *b)
{
    unsigned char x[16], y[16];
    int fx, fy;
    return is_ip(a, x, &fx) && is_ip(b, y, &fy) && fx == fy &&
           !memcmp(x, y, fx == AF_INET ? 4 : 16);
}

const struct egpol_entry *egpol_match(const egpol_t *p, const char *host, int port)
{
    bool ip = is_ip(host, NULL, NULL);
    for (size_t i = 0; i < p->n; i++) {
        const struct egpol_entry *e = &p->v[i];
        if (e->port && e->port != port)
            continue;
        if (ip ? e->ip && same_ip(e->host, host)
               : e->any || (e->wild && suffix_of(host, e->host)) ||
                     (!e->wild && !e->ip && !strcmp(e->host, host)))
            return e;
    }
    return NULL;
}

/* an entry that lets private addresses through (a public IP literal does not need it) */
static bool needs_private(const struct egpol_entry *e)
{
    if (!e->private_ok)
        return false;
    if (!e->ip)
        return true;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    unsigned char bin[16];
    int af = 0;
    if (!is_ip(e->host, bin, &af))
        return true; /* an entry marked ip always holds one */
    if (af == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, bin, 4);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, bin, 16);
    }
    return egpol_addr_refusal((struct sockaddr *)&ss) != NULL;
}

static bool entry_covers(const struct egpol_entry *o, const struct egpol_entry *i)
{
    if (o->port && o->port != i->port)
        return false;
    if (needs_private(i) && !o->private_ok)
        return false;
    if (o->any)
        return !i->ip;
    if (o->ip)
        return i->ip && same_ip(o->host, i->host);
    if (i->ip || i->any)
        return false;
    if (o->wild)
        return (i->wild && !strcmp(i->host, o->host)) || suffix_of(i->host, o->host);
    return !i->wild && !strcmp(i->host, o->host);
}

static bool covered(const egpol_t *outer, const struct egpol_entry *e)
{
    for (size_t j = 0; j < outer->n; j++)
        if (entry_covers(&outer->v[j], e))
            return true;
    return false;
}

static int format_entry(const struct egpol_entry *e, char *out, size_t outsz)
{
    char port[8];
    if (e->port)
        snprintf(port, sizeof(port), "%d", e->port);
    else
        snprintf(port, sizeof(port), "*");
    bool v6 = e->ip && strchr(e->host, ':');
    return snprintf(out, outsz, "%s%s%s%s%s:%s", e->private_ok && !e->ip ? "+" : "",
                    e->any ? "*" : e->wild ? "*." : "", v6 ? "[" : "", e->any ? "" : e->host,
                    v6 ? "]" : "", port);
}

bool egpol_covers(const egpol_t *outer, const egpol_t *inner, char *err, size_t errsz)
{
    for (size_t i = 0; i < inner->n; i++)
        if (!covered(outer, &inner->v[i])) {
            char t[EGPOL_HOST_MAX + 16];
            format_entry(&inner->v[i], t, sizeof(t));
            snprintf(err, errsz, "\"%s\" is not allowed", t);
            return false;
        }
    return true;
}

size_t egpol_restrict(egpol_t *p, const egpol_t *outer)
{
    size_t kept = 0, n = p->n;
    for (size_t i = 0; i < n; i++)
        if (covered(outer, &p->v[i]))
            p->v[kept++] = p->v[i];
    p->n = kept;
    return n - kept;
}

int egpol_format(const egpol_t *p, char *out, size_t outsz)
{
    size_t len = 0;
    if (outsz)
        out[0] = '\0';
    for (size_t i = 0; i < p->n; i++) {
        char t[EGPOL_HOST_MAX + 16];
        int n = format_entry(&p->v[i], t, sizeof(t));
        if (len + (i ? 1 : 0) + (size_t)n + 1 > outsz)
            return -ENOSPC;
        len += (size_t)snprintf(out + len, outsz - len, "%s%s", i ? "," : "", t);
    }
    return (int)len;
}

static const char *v4_refusal(uint32_t a)
{
    if ((a >> 24) == 0)
        return "unspecified";
    if ((a >> 24) == 127)
        return "loopback";
    if (a == 0xa9fea9feu) /* 169.254.169.254 */
        return "metadata";
    if ((a >> 16) == 0xa9fe)
        return "link-local";
    if ((a >> 24) == 10 || (a >> 20) == 0xac1 || (a >> 16) == 0xc0a8 || (a >> 22) == 0x191)
        return "private"; /* 10/8, 172.16/12, 192.168/16, 100.64/10 */
    if ((a >> 28) == 0xe)
        return "multicast";
    if ((a >> 28) == 0xf || (a >> 8) == 0xc00000 || (a >> 17) == (0xc612u >> 1) ||
        (a >> 8) == 0xc00002 || (a >> 8) == 0xc63364 || (a >> 8) == 0xcb0071)
        return "reserved"; /* 240/4, 192.0.0/24, 198.18/15, documentation nets */
    return NULL;
}

const char *egpol_addr_refusal(const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        return v4_refusal(ntohl(a->sin_addr.s_addr));
    }
    if (addr->sa_family != AF_INET6)
        return "reserved";
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
    const uint8_t *b = a->sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t zero[16] = {0};
    if (!memcmp(b, mapped, 12) || !memcmp(b, nat64, 12)) {
        uint32_t v4 = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
        return v4_refusal(v4);
    }
    if (!memcmp(b, zero, 16))
        return "unspecified";
    if (!memcmp(b, zero, 15) && b[15] == 1)
        return "loopback";
    if (!memcmp(b, zero, 12))
        return "reserved"; /* IPv4-compatible (deprecated) */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return "link-local";
    if (b[0] == 0xfd && b[1] == 0x00 && b[2] == 0x0e && b[3] == 0xc2)
        return "metadata"; /* fd00:ec2::/32 */
    if ((b[0] & 0xfe) == 0xfc)
        return "private";
    if (b[0] == 0xff)
        return "multicast";
    if ((b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) || b[0] == 0x01 ||
        (b[0] & 0xe0) != 0x20)
        return "reserved"; /* documentation, discard, not global unicast */
    return NULL;
}
