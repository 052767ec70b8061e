/* Egress proxy request heads (see egreq.h). */
#include "protocol/egreq.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define METHOD_MAX 16

static int fail(const char **why, const char *reason, int code)
{
    if (why)
        *why = reason;
    return code;
}

/* The end of the head: the index after its empty line, or 0. */
static size_t head_end(const char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 < len && buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* host[:port] or [v6][:port] (need_port: the port is required). 0 or -EINVAL. */
static int parse_authority(const char *a, size_t n, bool need_port, int def_port,
                           struct egreq *ret)
{
    size_t hl;
    const char *h = a, *rest;
    if (n && a[0] == '[') {
        const char *close = memchr(a, ']', n);
        if (!close)
            return -EINVAL;
        h = a + 1;
        hl = (size_t)(close - h);
        rest = close + 1;
    } else {
        const char *colon = memchr(a, ':', n);
        hl = colon ? (size_t)(colon - a) : n;
        rest = a + hl;
    }
    size_t rl = n - (size_t)(rest - a);
    if (hl == 0 || hl > EGREQ_HOST_MAX)
        return -EINVAL;
    for (size_t i = 0; i < hl; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || (a[0] == '[' && c == ':')))
            return -EINVAL;
    }
    int port = def_port;
    if (rl) {
        if (rest[0] != ':' || rl < 2 || rl > 6)
            return -EINVAL;
        port = 0;
        for (size_t i = 1; i < rl; i++) {
            if (rest[i] < '0' || rest[i] > '9')
                return -EINVAL;
            port = port * 10 + (rest[i] - '0');
        }
    } else if (need_port) {
        return -EINVAL;
    }
    if (port < 1 || port > 65535)
        return -EINVAL;
    memcpy(ret->host, h, hl);
    ret->host[hl] = '\0';
    ret->port = port;
    return 0;
}

static bool is_token(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A header the proxy drops when forwarding. */
static bool hop_header(const char *name, size_t n)
{
    static const char *const drop[] = {"connection", "keep-alive", "proxy-connection",
                                       "proxy-authorization", "proxy-authenticate", "te",
                                       "upgrade"};
    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
        if (strlen(drop[i]) == n && !strncasecmp(name, drop[i], n))
            return true;
    return false;
}

static bool put(char *out, size_t *olen, const char *s, size_t n)
{
    if (*olen + n > EGREQ_OUT_MAX)
        return false;
    memcpy(out + *olen, s, n);
    *olen += n;
    return true;
}

/* The request line of a head that ends within buf[0..len): 1 with rl filled, 0 when the head
 * is not complete yet, < 0 (why set) when it is refused. */
struct rline {
    size_t end;              /* the head's length, its empty line included */
    const char *eol;         /* the request line's '\n' */
    const char *m, *t, *v;   /* method, target, version ("HTTP/1.x", 8 bytes) */
    size_t ml, tl, ll;       /* lengths of method, target, line (without CR LF) */
};

static int request_line(const char *buf, size_t len, struct rline *rl, const char **why)
{
    size_t scan = len < EGREQ_HEAD_MAX ? len : EGREQ_HEAD_MAX;
    size_t end = head_end(buf, scan);
    if (!end)
        return len >= EGREQ_HEAD_MAX ? fail(why, "request head too large", -EMSGSIZE) : 0;
    if (memchr(buf, '\0', end))
        return fail(why, "NUL byte in request head", -EINVAL);
    /* METHOD SP TARGET SP HTTP/1.x */
    const char *p = buf, *eol = memchr(buf, '\n', end);
    size_t ll = (size_t)(eol - p);
    if (ll && p[ll - 1] == '\r')
        ll--;
    const char *sp1 = memchr(p, ' ', ll);
    if (!sp1 || sp1 == p || (size_t)(sp1 - p) > METHOD_MAX)
        return fail(why, "malformed request line", -EINVAL);
    size_t ml = (size_t)(sp1 - p);
    for (size_t i = 0; i < ml; i++)
        if (p[i] < 'A' || p[i] > 'Z')
            return fail(why, "malformed method", -EINVAL);
    const char *t = sp1 + 1;
    const char *sp2 = memchr(t, ' ', ll - ml - 1);
    if (!sp2 || sp2 == t)
        return fail(why, "malformed request line", -EINVAL);
    size_t tl = (size_t)(sp2 - t), vl = ll - ml - 1 - tl - 1;
    const char *v = sp2 + 1;
    if (vl != 8 || (memcmp(v, "HTTP/1.1", 8) && memcmp(v, "HTTP/1.0", 8)))
        return fail(why, "not HTTP/1.0 or HTTP/1.1", -EINVAL);
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return fail(why, "malformed request target", -EINVAL);
    *rl = (struct rline){.end = end, .eol = eol, .m = p, .t = t, .v = v,
                         .ml = ml, .tl = tl, .ll = ll};
    return 1;
}

/* The header line at *p (before end): 1 with its start (ret_h), its length without CR LF
 * (ret_hl) and its name's (ret_nl), *p moved past it; 0 at the empty line; < 0 (why set) when
 * it is refused. */
static int header_line(const char **p, const char *end, int *nh, const char **ret_h,
                       size_t *ret_hl, size_t *ret_nl, const char **why)
{
    const char *h = *p, *eol = memchr(h, '\n', (size_t)(end - h));
    size_t hl = (size_t)(eol - h);
    if (hl && h[hl - 1] == '\r')
        hl--;
    if (hl == 0)
        return 0;
    if (++*nh > EGREQ_MAX_HEADERS)
        return fail(why, "too many header lines", -EMSGSIZE);
    const char *colon = memchr(h, ':', hl);
    if (!colon || colon == h)
        return fail(why, "malformed header line", -EINVAL);
    for (const char *c = h; c < colon; c++)
        if (!is_token(*c))
            return fail(why, "malformed header name", -EINVAL);
    for (const char *c = colon + 1; c < h + hl; c++)
        if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
            return fail(why, "control byte in a header value", -EINVAL);
    *ret_h = h;
    *ret_hl = hl;
    *ret_nl = (size_t)(colon - h);
    *p = eol + 1;
    return 1;
}

int egreq_parse(const char *buf, size_t len, struct egreq *ret, char *out, const char **why)
{
    struct rline rl;
    int r = request_line(buf, len, &rl, why);
    if (r <= 0)
        return r;
    const char *p = rl.m, *t = rl.t, *v = rl.v;
    size_t ml = rl.ml, tl = rl.tl, end = rl.end;

    memset(ret, 0, sizeof(*ret));
    ret->head_len = end;
    const char *path = "/";
    size_t pl = 1;
    if (ml == 7 && !memcmp(p, "CONNECT", 7)) {
        ret->connect = true;
        if (parse_authority(t, tl, true, 0, ret) < 0)
            return fail(why, "CONNECT needs host:port", -EINVAL);
    } else {
        if (tl >= 8 && !strncasecmp(t, "https://", 8))
            return fail(why, "https:// needs CONNECT", -ENOTSUP);
        if (tl < 7 || strncasecmp(t, "http://", 7))
            return fail(why, "only absolute http:// targets are proxied", -ENOTSUP);
        const char *a = t + 7;
        size_t al = tl - 7;
        const char *slash = memchr(a, '/', al), *q = memchr(a, '?', al);
        if (q && (!slash || q < slash))
            slash = q;
        size_t an = slash ? (size_t)(slash - a) : al;
        if (memchr(a, '@', an))
            return fail(why, "userinfo in the target", -ENOTSUP);
        if (parse_authority(a, an, false, 80, ret) < 0)
            return fail(why, "malformed host in the target", -EINVAL);
        if (slash) {
            path = slash;
            pl = al - an;
            if (path[0] == '?') { /* "http://h?q" means "/?q" */
                if (!put(out, &ret->out_len, p, ml + 1) || !put(out, &ret->out_len, "/", 1))
                    return fail(why, "request head too large", -EMSGSIZE);
                goto path_done;
            }
        }
        if (!put(out, &ret->out_len, p, ml + 1))
            return fail(why, "request head too large", -EMSGSIZE);
    path_done:
        if (!put(out, &ret->out_len, path, pl) || !put(out, &ret->out_len, " ", 1) ||
            !put(out, &ret->out_len, v, 8) || !put(out, &ret->out_len, "\r\n", 2))
            return fail(why, "request head too large", -EMSGSIZE);
    }

    /* header lines */
    int nh = 0;
    bool host_seen = false;
    const char *h;
    size_t hl, nl;
    for (p = rl.eol + 1; (r = header_line(&p, buf + end, &nh, &h, &hl, &nl, why)) > 0;) {
        if (!ret->connect && !hop_header(h, nl)) {
            if (nl == 4 && !strncasecmp(h, "host", 4))
                host_seen = true;
            if (!put(out, &ret->out_len, h, hl) || !put(out, &ret->out_len, "\r\n", 2))
                return fail(why, "request head too large", -EMSGSIZE);
        }
    }
    if (r < 0)
        return r;
    if (!ret->connect) {
        char hostline[EGREQ_HOST_MAX + 32];
        int n = 0;
        if (!host_seen) {
            bool v6 = strchr(ret->host, ':') != NULL;
            n = snprintf(hostline, sizeof(hostline), "Host: %s%s%s:%d\r\n", v6 ? "[" : "",
                         ret->host, v6 ? "]" : "", ret->port);
        }
        if (!put(out, &ret->out_len, hostline, (size_t)n) ||
            !put(out, &ret->out_len, "Connection: close\r\n\r\n", 21))
            return fail(why, "request head too large", -EMSGSIZE);
    }
    return 1;
}

int egreq_parse_origin(const char *buf, size_t len, char *out, size_t *ret_out_len,
                       size_t *ret_head_len, const char **why)
{
    struct rline rl;
    size_t olen = 0;
    int r = request_line(buf, len, &rl, why);
    if (r <= 0)
        return r;
    if (rl.ml == 7 && !memcmp(rl.m, "CONNECT", 7))
        return fail(why, "CONNECT inside a tunnel", -ENOTSUP);
    if (rl.t[0] != '/' && !(rl.tl == 1 && rl.t[0] == '*'))
        return fail(why, "only origin-form targets inside a tunnel", -ENOTSUP);
    if (!put(out, &olen, rl.m, rl.ll) || !put(out, &olen, "\r\n", 2))
        return fail(why, "request head too large", -EMSGSIZE);
    int nh = 0;
    const char *p, *h;
    size_t hl, nl;
    for (p = rl.eol + 1; (r = header_line(&p, buf + rl.end, &nh, &h, &hl, &nl, why)) > 0;)
        if (!hop_header(h, nl) && (!put(out, &olen, h, hl) || !put(out, &olen, "\r\n", 2)))
            return fail(why, "request head too large", -EMSGSIZE);
    if (r < 0)
        return r;
    if (!put(out, &olen, "Connection: close\r\n\r\n", 21))
        return fail(why, "request head too large", -EMSGSIZE);
    *ret_out_len = olen;
    *ret_head_len = rl.end;
    return 1;
}

int egreq_host_check(const char *head, size_t len, const char *host, int port, int def_port)
{
    char want[EGREQ_HOST_MAX + 16], want_p[EGREQ_HOST_MAX + 16];
    bool v6 = strchr(host, ':') != NULL;
    int nw = snprintf(want, sizeof(want), "%s%s%s", v6 ? "[" : "", host, v6 ? "]" : "");
    int nwp = snprintf(want_p, sizeof(want_p), "%s:%d", want, port);
    int seen = 0;
    const char *end = head + len, *p = memchr(head, '\n', len);
    if (!p || nw <= 0 || nwp <= 0 || (size_t)nwp >= sizeof(want_p))
        return -EPERM;
    for (p++; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t hl = eol ? (size_t)(eol - p) : (size_t)(end - p);
        if (hl && p[hl - 1] == '\r')
            hl--;
        if (hl == 0)
            break;
        if (hl >= 5 && !strncasecmp(p, "host:", 5)) {
            const char *v = p + 5, *ve = p + hl;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            size_t vl = (size_t)(ve - v);
            bool ok = (vl == (size_t)nwp && !strncasecmp(v, want_p, vl)) ||
                      (port == def_port && vl == (size_t)nw && !strncasecmp(v, want, vl));
            if (!ok || ++seen > 1)
                return -EPERM;
        }
        if (!eol)
            break;
        p = eol + 1;
    }
    return 0;
}
