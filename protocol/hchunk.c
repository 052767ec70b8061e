#include "protocol/hchunk.h"

#include <errno.h>
#include <string.h>

enum {
    H_SIZE,    /* hex digits of a chunk size */
    H_SIZE_LF, /* the size line's CR seen */
    H_DATA,    /* data bytes */
    H_DATA_CR, /* the CR after a chunk's data */
    H_DATA_LF,
    H_TRAILER, /* at the start of a trailer line (or the final CRLF) */
    H_TRAILER_LINE,
    H_TRAILER_LF,
    H_END_LF, /* the final CR seen */
    H_DONE,
};

void hchunk_init(struct hchunk *c)
{
    memset(c, 0, sizeof(*c));
    c->state = H_SIZE;
}

static int hexval(uint8_t ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int hchunk_feed(struct hchunk *c, const uint8_t *in, size_t len, buf_t *out, size_t *ret_used)
{
    size_t i = 0;
    while (i < len && c->state != H_DONE) {
        uint8_t ch = in[i];
        switch (c->state) {
        case H_SIZE:
            if (++c->line > HCHUNK_LINE_MAX)
                return -EINVAL;
            if (ch == '\r') {
                if (c->digits == 0)
                    return -EINVAL;
                c->state = H_SIZE_LF;
            } else if (c->ext) {
                if (ch < 0x20 && ch != '\t')
                    return -EINVAL;
            } else if (ch == ';' || ch == ' ' || ch == '\t') {
                if (c->digits == 0)
                    return -EINVAL;
                c->ext = 1;
            } else {
                int v = hexval(ch);
                if (v < 0 || c->digits >= 15) /* < 2^60 */
                    return -EINVAL;
                c->left = c->left << 4 | (uint64_t)v;
                c->digits++;
            }
            i++;
            break;
        case H_SIZE_LF:
            if (ch != '\n')
                return -EINVAL;
            i++;
            c->line = 0;
            c->digits = 0;
            c->ext = 0;
            c->state = c->left ? H_DATA : H_TRAILER;
            break;
        case H_DATA: {
            size_t n = len - i < c->left ? len - i : (size_t)c->left;
            int rc = buf_append(out, in + i, n);
            if (rc < 0)
                return rc;
            i += n;
            c->left -= n;
            if (c->left == 0)
                c->state = H_DATA_CR;
            break;
        }
        case H_DATA_CR:
            if (ch != '\r')
                return -EINVAL;
            i++;
            c->state = H_DATA_LF;
            break;
        case H_DATA_LF:
            if (ch != '\n')
                return -EINVAL;
            i++;
            c->state = H_SIZE;
            break;
        case H_TRAILER:
            if (ch == '\r') {
                c->state = H_END_LF;
                i++;
                break;
            }
            c->state = H_TRAILER_LINE;
            /* fall through */
        case H_TRAILER_LINE:
            if (++c->trailer > HCHUNK_TRAILER_MAX)
                return -EINVAL;
            if (ch == '\r')
                c->state = H_TRAILER_LF;
            else if (ch < 0x20 && ch != '\t')
                return -EINVAL;
            i++;
            break;
        case H_TRAILER_LF:
            if (ch != '\n')
                return -EINVAL;
            i++;
            c->state = H_TRAILER;
            break;
        case H_END_LF:
            if (ch != '\n')
                return -EINVAL;
            i++;
            c->state = H_DONE;
            break;
        default:
            return -EINVAL;
        }
    }
    *ret_used = i;
    return c->state == H_DONE ? 1 : 0;
}
