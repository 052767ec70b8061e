/* A histogram of observations over fixed upper bounds, for metrics: counting is a few compares
 * and adds, so it can sit on any hot path. Prometheus' cumulative buckets are derived when it
 * is written out (protocol/promtext.h). Embedded in its owner's statistics (hist_init). */
#ifndef KGW_COMMON_HIST_H
#define KGW_COMMON_HIST_H

#include <stddef.h>
#include <stdint.h>

#define HIST_MAX_BOUNDS 16

#define HIST_LE_MAX 24 /* bytes of a bound as text */

typedef struct hist {
    const double *bounds;                 /* ascending upper bounds (static storage) */
    size_t nbounds;
    char le[HIST_MAX_BOUNDS][HIST_LE_MAX]; /* the bounds as text ("%.15g"), made once */
    uint64_t counts[HIST_MAX_BOUNDS + 1]; /* per bucket, not cumulative; the last: above all */
    uint64_t count;
    double sum;
} hist_t;

/* bounds: n (1..HIST_MAX_BOUNDS) ascending values that outlive the histogram. */
void hist_init(hist_t *h, const double *bounds, size_t n);
/* Counts v in the first bucket whose bound is >= v (Prometheus' "le"). */
void hist_observe(hist_t *h, double v);

#endif
