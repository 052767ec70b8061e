/* A kernel's wire as the gateway speaks it: the ipc endpoints of its sockets, frames from the
 * kernel verified (its key) and split, the relayed messages counted, and messages the gateway
 * makes itself (its own Jupyter session) signed and sent on one of its manager sockets. */
#include "kernelmgr/kwire_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernelmgr/kzsock_int.h"
#include "kernelmgr/private.h"

void kwire__endpoint(const kernel_t *k, int port, char *out, size_t outsz)
{
    snprintf(out, outsz, "ipc://%s/k-%d", k->ipc_dir ? k->ipc_dir : k->dir, port);
}

int kwire__parse(kernel_t *k, zmq_msg_t *frames, size_t n, jmsg_t *m, jhdr_t *h)
{
    jspan_t spans[KZ_MAX_FRAMES];
    for (size_t i = 0; i < n; i++)
        spans[i] = (jspan_t){zmq_msg_data(&frames[i]), zmq_msg_size(&frames[i])};
    if (jmsg_parse_frames(spans, n, m) < 0)
        return -EBADMSG;
    if (!jsign_verify(k->sign, m->part, m->sig)) {
        log_warn("kernel=%s: message with a bad signature dropped", k->id);
        return -EBADMSG;
    }
    if (jhdr_parse(m->part[JPART_HEADER], h) < 0)
        return -EBADMSG;
    return 0;
}

size_t kwire__bytes(const jmsg_t *m)
{
    size_t n = 0;
    for (size_t i = 0; i <= JPART_CONTENT; i++) /* header, parent, metadata, content */
        n += m->part[i].n;
    for (size_t i = 0; i < m->nbuf; i++)
        n += m->buf[i].n;
    return n;
}

void kwire__count(kernel_t *k, enum kmgr_dir dir, const jmsg_t *m)
{
    size_t n = kwire__bytes(m);
    k->stats->messages[dir]++;
    k->stats->message_bytes[dir] += n;
}

int kwire__send_own(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content)
{
    char msg_id[40];
    return kwire__send_own_id(k, z, msg_type, content, msg_id);
}

int kwire__send_own_id(kernel_t *k, kzsock_t *z, const char *msg_type, const char *content,
                       char ret_msg_id[40])
{
    return kwire__send_in(k, z, k->session, false, msg_type, content, ret_msg_id);
}

int kwire__send_in(kernel_t *k,
                   kzsock_t *z,
                   const char *session,
                   bool count,
                   const char *msg_type,
                   const char *content,
                   char ret_msg_id[40])
{
    char msg_id[40];
    char *hdr = jmsg_new_header(msg_type, session, msg_id);
    if (!hdr)
        return -ENOMEM;
    jmsg_t m = {.nbuf = 0};
    m.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
    m.part[JPART_PARENT] = (jspan_t){"{}", 2};
    m.part[JPART_METADATA] = (jspan_t){"{}", 2};
    m.part[JPART_CONTENT] = (jspan_t){content, strlen(content)};
    int r = kz_send_jmsg(z, k->sign, &m);
    if (r >= 0 && count)
        kwire__count(k, KMGR_TO_KERNEL, &m);
    free(hdr);
    if (r >= 0)
        memcpy(ret_msg_id, msg_id, sizeof(msg_id));
    return r;
}
