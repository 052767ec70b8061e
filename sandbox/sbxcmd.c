/* The command wire between the gateway and kgw-sandbox-init (sbxcmd.h). libc only: it is
 * linked into init too. */
#include "sandbox/sbxcmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sbxcmd_parse(char *buf, size_t n, char **vec, size_t vecmax, struct sbxcmd_req *ret)
{
    struct sbxcmd_head h;
    if (n < sizeof(h) || n > SBXCMD_MSG_MAX)
        return -EBADMSG;
    memcpy(&h, buf, sizeof(h));
    buf[n] = '\0';
    if (h.magic != SBXCMD_MAGIC)
        return -EBADMSG;
    if (h.op == SBXCMD_SIGNAL) {
        if (n != sizeof(h) || h.sig < 1 || h.sig > 64 || h.nargv || h.nenv)
            return -EBADMSG;
        *ret = (struct sbxcmd_req){.h = h};
        return 0;
    }
    if (h.op != SBXCMD_SPAWN || h.sig != 0 || h.nargv < 1 || h.nargv > SBXCMD_STR_MAX ||
        h.nenv > SBXCMD_STR_MAX || (h.flags & ~SBXCMD_F_STDIN))
        return -EBADMSG;
    if ((size_t)h.nargv + h.nenv + 2 > vecmax)
        return -E2BIG;
    char *q = buf + sizeof(h), *end = buf + n;
    const char *cwd = NULL;
    size_t v = 0;
    for (size_t i = 0; i < 1 + (size_t)h.nargv + h.nenv; i++) {
        char *z = q < end ? memchr(q, '\0', (size_t)(end - q)) : NULL;
        if (!z)
            return -EBADMSG;
        if (i == 0)
            cwd = q;
        else
            vec[v++] = q;
        if (i == h.nargv) /* the last argv string */
            vec[v++] = NULL;
        q = z + 1;
    }
    vec[v] = NULL;
    if (q != end || cwd[0] != '/' || !vec[0][0])
        return -EBADMSG;
    *ret = (struct sbxcmd_req){.h = h, .cwd = cwd, .argv = vec, .env = vec + h.nargv + 1};
    return 0;
}

int sbxcmd_encode_spawn(uint32_t id, uint32_t flags, const char *cwd, const char *const *argv,
                        const char *const *env, char **ret, size_t *ret_len)
{
    struct sbxcmd_head h = {.magic = SBXCMD_MAGIC, .op = SBXCMD_SPAWN, .id = id, .flags = flags};
    size_t len = sizeof(h) + strlen(cwd) + 1;
    if (!argv || !argv[0] || !argv[0][0] || cwd[0] != '/')
        return -EINVAL;
    for (; argv[h.nargv]; h.nargv++)
        len += strlen(argv[h.nargv]) + 1;
    for (; env && env[h.nenv]; h.nenv++)
        len += strlen(env[h.nenv]) + 1;
    if (len > SBXCMD_MSG_MAX || h.nargv > SBXCMD_STR_MAX || h.nenv > SBXCMD_STR_MAX)
        return -E2BIG;
    char *m = malloc(len), *o;
    if (!m)
        return -ENOMEM;
    memcpy(m, &h, sizeof(h));
    o = stpcpy(m + sizeof(h), cwd) + 1;
    for (uint32_t i = 0; i < h.nargv; i++)
        o = stpcpy(o, argv[i]) + 1;
    for (uint32_t i = 0; i < h.nenv; i++)
        o = stpcpy(o, env[i]) + 1;
    *ret = m;
    *ret_len = len;
    return 0;
}
