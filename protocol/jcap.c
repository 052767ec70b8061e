#include "protocol/jcap.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/jstr.h"

bool jcap_is_output(const char *msg_type)
{
    return !strcmp(msg_type, "stream") || !strcmp(msg_type, "display_data") ||
           !strcmp(msg_type, "update_display_data") || !strcmp(msg_type, "execute_result");
}

static int cut_stream(json_t *c, size_t room, const char *notice)
{
    json_t *t = json_object_get(c, "text");
    if (!json_is_string(t))
        return -EBADMSG;
    const char *s = json_string_value(t);
    size_t keep = jstr_utf8_cut(s, json_string_length(t), room) /* (jansson keeps UTF-8) */, nl = strlen(notice);
    bool eol = keep == 0 || s[keep - 1] == '\n';
    char *out = malloc(keep + nl + 3);
    if (!out)
        return -ENOMEM;
    memcpy(out, s, keep);
    size_t len = keep;
    if (!eol)
        out[len++] = '\n';
    memcpy(out + len, notice, nl);
    len += nl;
    out[len++] = '\n';
    int r = json_object_set_new(c, "text", json_stringn(out, len)) < 0 ? -ENOMEM : 0;
    free(out);
    return r;
}

static int cut_rich(json_t *c, const char *notice)
{
    if (json_object_set_new(c, "data", json_pack("{s:s}", "text/plain", notice)) < 0 ||
        json_object_set_new(c, "metadata", json_object()) < 0)
        return -ENOMEM;
    return 0;
}

int jcap_cut(const char *msg_type, jspan_t content, size_t room, long long cap, char **ret_content)
{
    char notice[JCAP_NOTICE_MAX];
    int r;
    if (!jcap_is_output(msg_type))
        return -EINVAL;
    json_t *c = json_loadb(content.p, content.n, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(c)) {
        json_decref(c);
        return -EBADMSG;
    }
    snprintf(notice, sizeof(notice), JCAP_NOTICE_FMT, cap);
    r = !strcmp(msg_type, "stream") ? cut_stream(c, room, notice) : cut_rich(c, notice);
    char *out = r == 0 ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    if (r == 0 && !out)
        r = -ENOMEM;
    if (r == 0)
        *ret_content = out;
    return r;
}
