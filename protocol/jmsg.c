#include "protocol/jmsg.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

static const char *const chan_names[JCHAN_N] = {"shell", "iopub", "stdin", "control"};

const char *jchan_name(enum jchan c)
{
    return (unsigned)c < JCHAN_N ? chan_names[c] : "?";
}

int jchan_parse(const char *s, size_t n)
{
    for (int i = 0; i < JCHAN_N; i++)
        if (strlen(chan_names[i]) == n && memcmp(chan_names[i], s, n) == 0)
            return i;
    return -EINVAL;
}

int jmsg_parse_frames(const jspan_t *frames, size_t n, jmsg_t *out)
{
    size_t d;
    for (d = 0; d < n && d <= JMSG_MAX_IDS; d++)
        if (frames[d].n == sizeof(JMSG_DELIM) - 1 &&
            memcmp(frames[d].p, JMSG_DELIM, sizeof(JMSG_DELIM) - 1) == 0)
            break;
    if (d >= n || d > JMSG_MAX_IDS)
        return -EBADMSG;
    if (n - d - 1 < 5 || n - d - 6 > JMSG_MAX_BUFFERS)
        return -EBADMSG;
    out->sig = frames[d + 1];
    for (int i = 0; i < 4; i++)
        out->part[i] = frames[d + 2 + i];
    out->nbuf = n - d - 6;
    for (size_t i = 0; i < out->nbuf; i++)
        out->buf[i] = frames[d + 6 + i];
    if (out->part[JPART_HEADER].n > JMSG_MAX_HEADER)
        return -EBADMSG;
    return 0;
}

static int copy_str(json_t *o, const char *key, char *dst, size_t dstsz)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return -EBADMSG;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n == 0 || n >= dstsz || memchr(s, '\0', n))
        return -EBADMSG;
    memcpy(dst, s, n + 1);
    return 0;
}

int jhdr_parse(jspan_t header, jhdr_t *out)
{
    json_error_t err;
    int r = -EBADMSG;
    if (header.n > JMSG_MAX_HEADER)
        return -EBADMSG;
    json_t *h = json_loadb(header.p, header.n, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(h))
        goto out;
    jhdr_t tmp;
    if (copy_str(h, "msg_type", tmp.msg_type, sizeof(tmp.msg_type)) < 0 ||
        copy_str(h, "msg_id", tmp.msg_id, sizeof(tmp.msg_id)) < 0)
        goto out;
    *out = tmp; /* written only on success */
    r = 0;
out:
    json_decref(h);
    return r;
}

bool jmsg_is_json_object(jspan_t s)
{
    json_error_t err;
    json_t *v = json_loadb(s.p, s.n, 0, &err);
    bool ok = json_is_object(v);
    json_decref(v);
    return ok;
}

static bool braced(jspan_t s)
{
    size_t a = 0, b = s.n;
    while (a < b && (s.p[a] == ' ' || s.p[a] == '\n' || s.p[a] == '\r' || s.p[a] == '\t'))
        a++;
    while (b > a && (s.p[b - 1] == ' ' || s.p[b - 1] == '\n' || s.p[b - 1] == '\r' ||
                     s.p[b - 1] == '\t'))
        b--;
    return b - a >= 2 && s.p[a] == '{' && s.p[b - 1] == '}';
}

bool jmsg_parts_ok(const jmsg_t *m)
{
    for (int i = 0; i < 4; i++) {
        jspan_t s = m->part[i];
        if (s.n <= JMSG_FULL_CHECK_MAX ? !jmsg_is_json_object(s) : !braced(s))
            return false;
    }
    return true;
}

char *jmsg_new_header(const char *msg_type, const char *session, char msg_id_out[37])
{
    char date[40];
    util_uuid(msg_id_out);
    util_iso_time(date, sizeof(date), util_wall_us());
    json_t *h = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id_out, "msg_type",
                          msg_type, "session", session, "username", "kgw", "date", date,
                          "version", "5.3");
    if (!h)
        return NULL;
    char *s = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    return s;
}

void jmsg_own(jmsg_t *m, jhdr_t *h, const char *header, const char *msg_id, const char *msg_type,
              const char *parent, const char *content)
{
    *m = (jmsg_t){.nbuf = 0};
    m->part[JPART_HEADER] = (jspan_t){header, strlen(header)};
    m->part[JPART_PARENT] = parent ? (jspan_t){parent, strlen(parent)} : (jspan_t){"{}", 2};
    m->part[JPART_METADATA] = (jspan_t){"{}", 2};
    m->part[JPART_CONTENT] = (jspan_t){content, strlen(content)};
    if (msg_id != h->msg_id)
        snprintf(h->msg_id, sizeof(h->msg_id), "%s", msg_id);
    snprintf(h->msg_type, sizeof(h->msg_type), "%s", msg_type);
}
