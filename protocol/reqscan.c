#include "protocol/reqscan.h"

#include <string.h>

/* Framing follows what libwebsockets 4.1 does with a request (lws_http_action): a body of
 * Content-Length bytes; without one, none, except for POST, PUT and PATCH, where lws then
 * reads "a body" until the connection ends: the scanner stops there, as it does for any
 * Transfer-Encoding (lws does not decode chunked request bodies). */

enum {
    S_LINE,    /* before a request line (empty lines are skipped) */
    S_METHOD,
    S_TARGET,
    S_VERSION, /* the rest of the request line */
    S_HEAD,    /* at the start of a header line */
    S_HEAD_CR, /* "\r" at the start of a header line: the head ends */
    S_NAME,
    S_VALUE,
    S_BODY,
    S_DONE,    /* not looking any more */
};

enum { F_NONE, F_LENGTH, F_TE, F_UPGRADE, F_SKIP };

#define METHOD_MAX  16  /* A-Z */
#define VERSION_MAX 32  /* " HTTP/1.1" and what lws would refuse anyway */
#define LENGTH_MAX  (1ULL << 60)

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

void reqscan_init(reqscan_t *s)
{
    memset(s, 0, sizeof(*s));
    s->state = S_LINE;
}

void reqscan_answered(reqscan_t *s)
{
    s->busy = s->blocked = false;
}

bool reqscan_blocked(const reqscan_t *s)
{
    return s->blocked;
}

void reqscan_stop(reqscan_t *s)
{
    s->state = S_DONE;
}

bool reqscan_done(const reqscan_t *s)
{
    return s->state == S_DONE;
}

static void head_begin(reqscan_t *s)
{
    s->chunked = s->upgrade = s->has_length = false;
    s->length = 0;
}

/* The end of a head: what follows it. */
static void head_end(reqscan_t *s)
{
    if (s->upgrade || s->chunked) {
        s->state = S_DONE;
    } else if (s->has_length) {
        s->remain = s->length;
        s->state = s->remain ? S_BODY : S_LINE;
    } else {
        s->state = s->body_method ? S_DONE : S_LINE;
    }
}

static void name_end(reqscan_t *s)
{
    static const struct {
        const char *name;
        uint8_t field;
    } fields[] = {
        {"content-length", F_LENGTH},
        {"transfer-encoding", F_TE},
        {"upgrade", F_UPGRADE},
    };
    s->field = F_NONE;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (s->name_len == strlen(fields[i].name) && !memcmp(s->name, fields[i].name, s->name_len))
            s->field = fields[i].field;
    if (s->field == F_LENGTH) {
        if (s->has_length) { /* a second one: lws takes one of them; do not guess which */
            s->state = S_DONE;
            return;
        }
        s->has_length = true;
        s->length = 0;
        s->line_len = 0; /* digits seen */
    }
    if (s->field == F_TE)
        s->chunked = true; /* any Transfer-Encoding: lws does not follow it */
    if (s->field == F_UPGRADE)
        s->upgrade = true;
    s->state = S_VALUE;
}

static void value_byte(reqscan_t *s, uint8_t c)
{
    if (s->field != F_LENGTH || c == ' ' || c == '\t' || c == '\r')
        return;
    if (c < '0' || c > '9' || s->length > LENGTH_MAX / 10) {
        s->state = S_DONE; /* not a plain length */
        return;
    }
    s->length = s->length * 10 + (uint64_t)(c - '0');
    s->line_len++;
}

size_t reqscan_feed(reqscan_t *s, uint8_t *buf, size_t len, bool eof)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = buf[i];
        switch (s->state) {
        case S_DONE:
            return len;
        case S_LINE:
            if (c == '\r' || c == '\n') {
                i++;
                break;
            }
            if (s->busy || s->blocked) {
                s->blocked = true;
                return i;
            }
            s->busy = true;
            s->state = S_METHOD;
            s->line_len = 0;
            s->name_len = 0;
            /* fall through */
        case S_METHOD:
            if (c == ' ' && s->line_len > 0) {
                s->name[s->name_len] = '\0';
                s->body_method = !strcmp(s->name, "POST") || !strcmp(s->name, "PUT") ||
                                 !strcmp(s->name, "PATCH");
                s->state = S_TARGET;
                s->line_len = 0;
            } else if (c >= 'A' && c <= 'Z' && s->line_len < METHOD_MAX) {
                if (s->name_len < sizeof(s->name) - 1)
                    s->name[s->name_len++] = (char)c;
                s->line_len++;
            } else {
                s->state = S_DONE; /* not a request line lws would take */
            }
            i++;
            break;
        case S_TARGET:
            if (s->line_len == 0 && c != '/') {
                s->state = S_DONE; /* lws answers anything but an origin-form path itself */
                break;
            }
            s->line_len = 1;
            if (c == ' ') {
                s->state = S_VERSION;
                s->line_len = 0;
            } else if (c == '\r' || c == '\n') {
                s->state = S_DONE;
                break;
            } else if (c == '\0') {
                buf[i] = REQSCAN_MARK;
            } else if (c == '%') {
                if (i + 2 >= len && !eof)
                    return i; /* the next bytes decide */
                if (i + 2 >= len || hexval(buf[i + 1]) < 0 || hexval(buf[i + 2]) < 0 ||
                    (buf[i + 1] == '0' && buf[i + 2] == '0')) {
                    buf[i] = REQSCAN_MARK; /* what follows is scanned on its own */
                } else {
                    i += 3;
                    break;
                }
            }
            i++;
            break;
        case S_VERSION:
            if (c == '\n') {
                s->state = S_HEAD;
                head_begin(s);
            } else if (++s->line_len > VERSION_MAX) {
                s->state = S_DONE;
                break;
            }
            i++;
            break;
        case S_HEAD:
            if (c == '\n') {
                head_end(s);
                i++;
                break;
            }
            if (c == '\r') {
                s->state = S_HEAD_CR;
                i++;
                break;
            }
            s->state = S_NAME;
            s->name_len = 0;
            /* fall through */
        case S_NAME:
            if (c == ':') {
                name_end(s);
            } else if (c == '\n') {
                s->state = S_HEAD; /* no colon: not one of ours */
            } else if (s->name_len < sizeof(s->name)) {
                s->name[s->name_len++] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
            } else {
                s->name_len = UINT8_MAX; /* too long to be one we read */
            }
            i++;
            break;
        case S_HEAD_CR:
            if (c != '\n') {
                s->state = S_DONE;
                break;
            }
            head_end(s);
            i++;
            break;
        case S_VALUE:
            if (c == '\n') {
                if (s->field == F_LENGTH && s->line_len == 0)
                    s->state = S_DONE; /* an empty length */
                else
                    s->state = S_HEAD;
            } else {
                value_byte(s, c);
            }
            i++;
            break;
        case S_BODY: {
            uint64_t take = len - i < s->remain ? len - i : s->remain;
            s->remain -= take;
            i += (size_t)take;
            if (s->remain == 0)
                s->state = S_LINE;
            break;
        }
        default:
            s->state = S_DONE;
            break;
        }
    }
    return len;
}
