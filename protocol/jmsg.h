/* Jupyter messages on the ZeroMQ wire: [identities..., "<IDS|MSG>", hmac, header, parent_header,
 * metadata, content, buffers...]. A jmsg_t is a view into frames owned by someone else. Every
 * byte here may come from a hostile kernel or client: the parsers check counts and sizes and
 * never trust a length they did not measure. */
#ifndef KGW_PROTOCOL_JMSG_H
#define KGW_PROTOCOL_JMSG_H

#include <stdbool.h>
#include <stddef.h>

typedef struct jspan {
    const char *p;
    size_t n;
} jspan_t;

enum jchan { JCHAN_SHELL = 0, JCHAN_IOPUB, JCHAN_STDIN, JCHAN_CONTROL, JCHAN_N };

#define JMSG_DELIM         "<IDS|MSG>"
#define JMSG_MAX_BUFFERS   64
#define JMSG_MAX_IDS       16
#define JMSG_MAX_HEADER    (64 * 1024)
#define JMSG_MSG_ID_MAX    128
#define JMSG_MSG_TYPE_MAX  64

enum { JPART_HEADER = 0, JPART_PARENT, JPART_METADATA, JPART_CONTENT };

typedef struct jmsg {
    jspan_t sig;
    jspan_t part[4]; /* header, parent_header, metadata, content (JSON objects) */
    size_t nbuf;
    jspan_t buf[JMSG_MAX_BUFFERS];
} jmsg_t;

/* The header fields the gateway routes on. */
typedef struct jhdr {
    char msg_id[JMSG_MSG_ID_MAX];
    char msg_type[JMSG_MSG_TYPE_MAX];
} jhdr_t;

const char *jchan_name(enum jchan c);
/* Returns the channel or -EINVAL. */
int jchan_parse(const char *s, size_t n);

/* Splits received frames at the delimiter. Returns 0, or -EBADMSG for a malformed message. */
int jmsg_parse_frames(const jspan_t *frames, size_t n, jmsg_t *out);
/* Parses a header object: msg_type and msg_id must be strings within bounds. 0 / -EBADMSG. */
int jhdr_parse(jspan_t header, jhdr_t *out);
/* True when span is a JSON object (checked with jansson). */
bool jmsg_is_json_object(jspan_t s);
/* Parts at most this long are parsed in full by jmsg_parts_ok(). */
#define JMSG_FULL_CHECK_MAX (64 * 1024)
/* True when the four JSON parts may be spliced into a client's JSON document: parts up to
 * JMSG_FULL_CHECK_MAX are parsed; longer ones (large outputs: parsing 50 MB with jansson takes
 * over half a second) must be brace-delimited objects. Either way the gateway's own keys come
 * after the parts, so a part cannot change the channel a client sees. */
bool jmsg_parts_ok(const jmsg_t *m);

/* Builds the header JSON of a message the gateway itself sends (kernel_info_request, status,
 * ...). Returns a malloc'd string or NULL. msg_id_out (37 bytes) receives the new id. */
char *jmsg_new_header(const char *msg_type, const char *session, char msg_id_out[37]);
/* A message the gateway makes: m's parts point at header, parent ("{}" when NULL), metadata
 * "{}" and content, which must outlive m; h gets msg_id and msg_type. */
void jmsg_own(jmsg_t *m, jhdr_t *h, const char *header, const char *msg_id, const char *msg_type,
              const char *parent, const char *content);

#endif
