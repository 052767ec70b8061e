/* e2bwatch.c: directory watches of the E2B sandbox plane (docs/e2b.md, "Directory watches"):
 * filesystem.Filesystem's WatchDir stream (the SDKs' files.watchDir) and its polled twin,
 * CreateWatcher, GetWatcherEvents and RemoveWatcher (the Python SDK's synchronous watch_dir).
 * One inotify descriptor per sandbox, on the gateway's loop; every directory is opened
 * below its workspace's root (nothing followed) before it is watched; a recursive watch
 * watches the directories that appear below it too. The directories watched are bounded per
 * sandbox (--e2b-max-watch-dirs) and per tenant (--e2b-tenant-max-watch-dirs). A stream ends
 * when its client goes, its directory is removed or its sandbox ends; a watcher when it is
 * removed or its sandbox ends. */
#ifndef KGW_GATEWAY_E2BWATCH_H
#define KGW_GATEWAY_E2BWATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "gateway/e2b_int.h"

#define E2BWATCH_PER_SBX 16          /* watches (streams and watchers) of one sandbox */
#define E2BWATCH_HELD    (1 << 20)   /* a stream's events its client has not taken yet */
#define E2BWATCH_QUEUED  4096        /* a watcher's events not asked for yet */

typedef struct e2bwatch e2bwatch_t;

/* filesystem.Filesystem/WatchDir (stream), CreateWatcher, GetWatcherEvents, RemoveWatcher
 * (unary) of sandbox s: answers r. */
void e2bwatch_rpc(struct gw_req *r, struct e2bsbx *s, const char *method, bool stream);
/* route_ops write of a WatchDir stream (q->watch): 0 more to come, 1 done, -1 close. */
int e2bwatch_write(struct e2breq *q);
/* A keepalive on a WatchDir stream idle for its client's Keepalive-Ping-Interval. */
void e2bwatch_tick(struct e2breq *q, uint64_t now_ms);
/* Ends a WatchDir stream's watch (its request is finished); takes NULL. */
void e2bwatch_destroy(e2bwatch_t **pw);
/* The sandbox ended: its watchers go, its streams get no more events (they are dropped). */
void e2bwatch_sbx_end(struct e2b *e, const char *sbx_id);
/* All of them (e2b_fini): streams whose requests are still open are only detached. */
void e2bwatch_fini(struct e2b *e);

#endif
