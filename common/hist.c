#include "common/hist.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

void hist_init(hist_t *h, const double *bounds, size_t n)
{
    assert(n >= 1 && n <= HIST_MAX_BOUNDS);
    memset(h, 0, sizeof(*h));
    h->bounds = bounds;
    h->nbounds = n;
    for (size_t i = 0; i < n; i++)
        snprintf(h->le[i], sizeof(h->le[i]), "%.15g", bounds[i]);
}

void hist_observe(hist_t *h, double v)
{
    size_t i = 0;
    while (i < h->nbounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}
