/* protocol/promtext (the Prometheus text format) and common/hist (its histograms): exact
 * output, escaping, cumulative buckets, the buffer's limit. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"

#include "common/hist.h"
#include "protocol/promtext.h"

static const double bounds[] = {0.01, 0.1, 1};

static void test_hist(void)
{
    hist_t h;
    CHECK_CASE("hist");
    hist_init(&h, bounds, 3);
    hist_observe(&h, 0.01); /* le: a value on a bound is in that bucket */
    hist_observe(&h, 0.05);
    hist_observe(&h, 0.5);
    hist_observe(&h, 0.7);
    hist_observe(&h, 30);
    CHECK_INT(h.counts[0], 1);
    CHECK_INT(h.counts[1], 1);
    CHECK_INT(h.counts[2], 2);
    CHECK_INT(h.counts[3], 1);
    CHECK_INT(h.count, 5);
    CHECK(fabs(h.sum - 31.26) < 1e-9);
}

static void test_samples(void)
{
    buf_t b;
    promtext_t p;
    CHECK_CASE("samples");
    buf_init(&b, 1 << 16);
    promtext_init(&p, &b);
    promtext_family(&p, "kgw_x_total", "counter", "Things\\done\nsecond line");
    promtext_uint(&p, "kgw_x_total", (struct promtext_label[]){{"a", "1"}, {"b", "x\"y\\z\nw"}},
                  2, 18446744073709551615ULL);
    promtext_uint(&p, "kgw_x_total", NULL, 0, 0);
    promtext_double(&p, "kgw_y", (struct promtext_label[]){{"s", ""}}, 1, 0.25);
    promtext_double(&p, "kgw_y", NULL, 0, 1.0 / 0.0);
    promtext_double(&p, "kgw_y", NULL, 0, NAN);
    promtext_double(&p, "kgw_y", NULL, 0, 12345678);
    CHECK_INT(promtext_status(&p), 0);
    CHECK_STR(b.data, "# HELP kgw_x_total Things\\\\done\\nsecond line\n"
                      "# TYPE kgw_x_total counter\n"
                      "kgw_x_total{a=\"1\",b=\"x\\\"y\\\\z\\nw\"} 18446744073709551615\n"
                      "kgw_x_total 0\n"
                      "kgw_y{s=\"\"} 0.25\n"
                      "kgw_y +Inf\n"
                      "kgw_y NaN\n"
                      "kgw_y 12345678\n");
    buf_fini(&b);
}

static void test_histogram(void)
{
    buf_t b;
    promtext_t p;
    hist_t h;
    CHECK_CASE("histogram");
    hist_init(&h, bounds, 3);
    hist_observe(&h, 0.05);
    hist_observe(&h, 2);
    buf_init(&b, 1 << 16);
    promtext_init(&p, &b);
    promtext_hist(&p, "kgw_s_seconds", (struct promtext_label[]){{"path", "fork"}}, 1, &h);
    promtext_hist(&p, "kgw_t_seconds", NULL, 0, &h);
    CHECK_INT(promtext_status(&p), 0);
    CHECK_STR(b.data, "kgw_s_seconds_bucket{path=\"fork\",le=\"0.01\"} 0\n"
                      "kgw_s_seconds_bucket{path=\"fork\",le=\"0.1\"} 1\n"
                      "kgw_s_seconds_bucket{path=\"fork\",le=\"1\"} 1\n"
                      "kgw_s_seconds_bucket{path=\"fork\",le=\"+Inf\"} 2\n"
                      "kgw_s_seconds_sum{path=\"fork\"} 2.05\n"
                      "kgw_s_seconds_count{path=\"fork\"} 2\n"
                      "kgw_t_seconds_bucket{le=\"0.01\"} 0\n"
                      "kgw_t_seconds_bucket{le=\"0.1\"} 1\n"
                      "kgw_t_seconds_bucket{le=\"1\"} 1\n"
                      "kgw_t_seconds_bucket{le=\"+Inf\"} 2\n"
                      "kgw_t_seconds_sum 2.05\n"
                      "kgw_t_seconds_count 2\n");
    buf_fini(&b);
}

static void test_limit(void)
{
    buf_t b;
    promtext_t p;
    CHECK_CASE("limit");
    buf_init(&b, 40);
    promtext_init(&p, &b);
    promtext_family(&p, "kgw_a_long_metric_name", "gauge", "help text that does not fit");
    CHECK_INT(promtext_status(&p), -EMSGSIZE);
    size_t len = b.len;
    promtext_uint(&p, "k", NULL, 0, 1); /* sticky: nothing more is written */
    CHECK_INT(b.len, len);
    CHECK_INT(promtext_status(&p), -EMSGSIZE);
    buf_fini(&b);
}

int main(void)
{
    test_hist();
    test_samples();
    test_histogram();
    test_limit();
    CHECK_DONE();
}
