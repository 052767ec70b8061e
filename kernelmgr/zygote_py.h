/* kernelmgr/zygote.py, embedded at build time (scripts/embed.py): the Python half of
 * kgw-zygote. */
#ifndef KGW_KERNELMGR_ZYGOTE_PY_H
#define KGW_KERNELMGR_ZYGOTE_PY_H

#include <stddef.h>

extern const unsigned char kgw_zygote_py[];
extern const size_t kgw_zygote_py_len;

#endif
