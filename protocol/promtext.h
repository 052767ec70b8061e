/* The Prometheus text exposition format, version 0.0.4: metric families (a HELP and a TYPE
 * line) and their samples, appended to a bounded buffer. Label values are escaped (backslash,
 * double quote, line feed) and so is HELP text (backslash, line feed); metric and label names
 * are the caller's constants ([a-zA-Z_:][a-zA-Z0-9_:]*) and are not checked. */
#ifndef KGW_PROTOCOL_PROMTEXT_H
#define KGW_PROTOCOL_PROMTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/hist.h"

#define PROMTEXT_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct promtext {
    buf_t *out;
    int err; /* the first error: later writes do nothing */
} promtext_t;

struct promtext_label {
    const char *name, *value;
};

void promtext_init(promtext_t *p, buf_t *out);
/* "# HELP name help" and "# TYPE name type" (counter, gauge, histogram). */
void promtext_family(promtext_t *p, const char *name, const char *type, const char *help);
/* A sample: name{labels} value. nl may be 0 (labels then unused). */
void promtext_uint(promtext_t *p, const char *name, const struct promtext_label *labels,
                   size_t nl, uint64_t value);
void promtext_double(promtext_t *p, const char *name, const struct promtext_label *labels,
                     size_t nl, double value);
/* A histogram's samples: name_bucket{labels,le="..."} (cumulative, up to le="+Inf"),
 * name_sum{labels} and name_count{labels}. */
void promtext_hist(promtext_t *p, const char *name, const struct promtext_label *labels,
                   size_t nl, const hist_t *h);
/* 0, or the first error of a write: -EMSGSIZE (over the buffer's limit), -ENOMEM. */
int promtext_status(const promtext_t *p);

#endif
