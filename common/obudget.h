/* The gateway-wide budget of kernel output held for clients, in bytes, and each kernel's share
 * of it (an obudget_share: one per kernel, however many clients it has).
 *
 * Every buffer that keeps a kernel's output on its way to a client charges the bytes it holds
 * to that kernel's share (an encoded message: common/blob.c, while any queue holds it; a
 * /channel client's queued message) and releases them when it lets go. Before relaying an
 * output message (stream, display_data, update_display_data) the kernel asks
 * obudget_share_admit: a message that would take its share or the whole budget over the limit
 * is dropped (docs/protocol.md "Output buffer limit").
 *
 * A message of n bytes is admitted for a kernel holding h bytes when
 *     h + n <= limit / N            N: shares holding bytes, the asking one counted
 * and  held + n <= limit  or  h + n <= reserve    (held: all shares together)
 * so a lone busy kernel may use the whole budget, two flooding at once half each, and so on;
 * and a quiet kernel (its clients read what it prints) always has its reserve, however full
 * the others keep the budget. Whatever is admitted, all shares together hold at most
 * limit + reserve x kernels (the gateway sets reserve = limit / (2 x --max-kernels): 1.5 x
 * limit), plus the messages that are never dropped for the share alone (replies, status,
 * errors, results): those are held up to the share's ceiling, twice its limit (at least the
 * reserve), past which the kernel ends its slowest clients (kernelmgr/kout.c). */
#ifndef KGW_COMMON_OBUDGET_H
#define KGW_COMMON_OBUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct obudget {
    size_t limit;                    /* bytes (0: no limit) */
    size_t reserve;                  /* bytes each share may hold even when the budget is full */
    size_t held;                     /* bytes held now, all shares together */
    size_t peak;                     /* the most held at once */
    unsigned busy;                   /* shares holding bytes now */
    uint64_t dropped, dropped_bytes; /* messages refused by obudget_share_admit, their bytes */
    uint64_t coalesced;              /* repeats not held for clients (kernelmgr/kout.c) */
    uint64_t ended;                  /* clients ended for holding a share past its ceiling */
} obudget_t;

typedef struct obudget_share obudget_share_t;

/* A default limit for a host: 1/64 of the memory the gateway may use (its cgroup's memory.max
 * when set, else the RAM), clamped to 32..128 MiB: below --max-ws-queue-bytes, so a kernel's
 * output is dropped before its one slow websocket is disconnected, and the gateway's peak stays
 * near 200 MiB with six flooding kernels (docs/operations.md "Output buffer"). */
size_t obudget_default_limit(void);

/* A share of b (b outlives every share), with one reference; NULL + errno. */
obudget_share_t *obudget_share_new(obudget_t *b);
obudget_share_t *obudget_share_ref(obudget_share_t *s);
/* Drops a reference; the last one frees it (it holds nothing then: every charge was released
 * by the holder of a reference). */
void obudget_share_unref(obudget_share_t **s);
void obudget_share_charge(obudget_share_t *s, size_t n);
void obudget_share_release(obudget_share_t *s, size_t n);
size_t obudget_share_held(const obudget_share_t *s);
/* The share's limit now (see above). */
size_t obudget_share_limit(const obudget_share_t *s);
/* Whether n more bytes fit in the share and in the budget; a refusal counts as a drop. */
bool obudget_share_admit(obudget_share_t *s, size_t n);
/* The most the share may hold of messages that are never refused for its limit alone:
 * 2 x obudget_share_limit, at least the reserve (all shares together: at most 2 x limit).
 * 0: no limit. */
size_t obudget_share_ceiling(const obudget_share_t *s);

#endif
