/* A kernel's secrets (common/secrets.h): the names it was given and a placeholder for each,
 * new per kernel, which its environment holds in place of the values. Its egress proxy asks
 * ksecret_resolve for each placeholder of a request head: the value, looked up at that moment
 * in the gateway's current table (so a reloaded file takes effect on the next request), when
 * the request goes to one of that secret's hosts; otherwise a refusal naming the secret. */
#ifndef KGW_KERNELMGR_KSECRET_H
#define KGW_KERNELMGR_KSECRET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/secrets.h"

/* Injections and refusals by secret name, gateway-wide (the metrics): at most
 * KSECRET_STATS_MAX names, later ones counted under "" (other). */
#define KSECRET_STATS_MAX 64
struct ksecret_stats {
    struct {
        char name[SECRETS_NAME_MAX + 1];
        uint64_t injected, refused;
    } v[KSECRET_STATS_MAX];
    size_t n;
    uint64_t other_injected, other_refused;
};

typedef struct ksecret ksecret_t;

/* The kernel of tenant gets names (n of them, at most SECRETS_PER_KERNEL; the caller checked
 * that tenant has them); *table is the gateway's current table. NULL + errno. */
ksecret_t *ksecret_new(const char *tenant,
                       const char *const *names,
                       size_t n,
                       secrets_t *const *table,
                       struct ksecret_stats *stats);
void ksecret_destroy(ksecret_t **ks);
size_t ksecret_count(const ksecret_t *ks);
/* Secret i: its name and placeholder. */
const char *ksecret_name(const ksecret_t *ks, size_t i);
const char *ksecret_placeholder(const ksecret_t *ks, size_t i);
/* True when one of the kernel's secrets may be sent to host:port (its proxy then reads
 * HTTPS to that host: kernelmgr/ktls.h). */
bool ksecret_wants(const ksecret_t *ks, const char *host, int port);
/* For placeholder ph (EGSUB_PH_LEN bytes) on a request to host:port: 0 with the value (valid
 * until the table is reloaded) and the secret's index; or -EPERM with why (into whybuf) and
 * the index (-1: not one of this kernel's placeholders). Counts the injection or refusal. */
int ksecret_resolve(ksecret_t *ks, const char *ph, const char *host, int port, const char **val,
                    size_t *vlen, int *ret_idx, char *whybuf, size_t whysz);

#endif
