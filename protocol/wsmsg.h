/* Jupyter messages on the websocket, both encodings jupyter_server speaks:
 *  - legacy (no subprotocol): a message without buffers is a JSON text frame with a "channel"
 *    key; with buffers it is a binary frame: uint32 BE count, uint32 BE offsets, JSON, buffers;
 *  - v1.kernel.websocket.jupyter.org: every frame binary: uint64 LE offset count, uint64 LE
 *    offsets, then channel, header, parent_header, metadata, content, buffers. */
#ifndef KGW_PROTOCOL_WSMSG_H
#define KGW_PROTOCOL_WSMSG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/blob.h"
#include "protocol/jmsg.h"

enum wsproto { WSPROTO_LEGACY = 0, WSPROTO_V1, WSPROTO_N };

#define WSMSG_V1_NAME "v1.kernel.websocket.jupyter.org"
#define BLOB_BINARY   1u /* blob flag: send as a binary frame */

/* A message decoded from a client frame: spans point into the frame or into `owned`. */
typedef struct wsmsg {
    enum jchan chan;
    jmsg_t m;
    jhdr_t hdr;
    char *owned;
} wsmsg_t;

/* Decodes one complete client frame. Returns 0; -EBADMSG (malformed: drop, count against the
 * peer); -ENOENT (unknown channel); -ENOMEM. On success call wsmsg_fini(). */
int wsmsg_decode(enum wsproto proto, bool binary, const char *data, size_t len, wsmsg_t *out);
void wsmsg_fini(wsmsg_t *w);

/* Encodes a message for a client. `hdr` is the parsed header of m. Returns a blob with
 * `headroom` bytes reserved (flag BLOB_BINARY set for binary frames) or NULL + errno. */
blob_t *wsmsg_encode(enum wsproto proto, enum jchan chan, const jmsg_t *m, const jhdr_t *hdr,
                     size_t headroom);

#endif
