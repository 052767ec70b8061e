/* common/obudget.h: shares of the output buffer budget, and blobs charged to them. */
#include "check.h"

#include "common/blob.h"
#include "common/obudget.h"

int main(void)
{
    obudget_t b = {.limit = 1000, .reserve = 50};

    CHECK_CASE("a lone share may use the whole budget");
    obudget_share_t *a = obudget_share_new(&b), *q = obudget_share_new(&b);
    CHECK(a && q);
    CHECK_INT(obudget_share_limit(a), 1000);
    CHECK(obudget_share_admit(a, 600));
    obudget_share_charge(a, 600);
    CHECK_INT(b.held, 600);
    CHECK_INT(b.busy, 1);
    CHECK(obudget_share_admit(a, 400));
    CHECK(!obudget_share_admit(a, 401));
    CHECK_INT(b.dropped, 1);
    CHECK_INT(b.dropped_bytes, 401);

    CHECK_CASE("a second busy share halves the shares");
    CHECK_INT(obudget_share_limit(q), 500); /* counted as it asks */
    CHECK(obudget_share_admit(q, 300));
    obudget_share_charge(q, 300);
    CHECK_INT(b.busy, 2);
    CHECK_INT(obudget_share_limit(a), 500);
    CHECK(!obudget_share_admit(a, 1)); /* a holds 600, over its half */
    CHECK(obudget_share_admit(q, 100));

    CHECK_CASE("a full budget still leaves each share its reserve");
    obudget_share_t *c = obudget_share_new(&b);
    obudget_share_charge(q, 100); /* held: 1000 */
    CHECK_INT(b.held, 1000);
    CHECK(obudget_share_admit(c, 50));
    CHECK(!obudget_share_admit(c, 51));
    CHECK_INT(b.peak, 1000);

    CHECK_CASE("the ceiling is twice the share, at least the reserve");
    CHECK_INT(obudget_share_limit(q), 500);
    CHECK_INT(obudget_share_ceiling(q), 1000);
    b.reserve = 5000;
    CHECK_INT(obudget_share_ceiling(q), 5000);
    b.reserve = 50;

    CHECK_CASE("releases free the share and the budget");
    obudget_share_release(a, 600);
    CHECK_INT(b.busy, 1);
    CHECK_INT(b.held, 400);
    obudget_share_release(q, 1000); /* more than it holds: what it holds */
    CHECK_INT(b.held, 0);
    CHECK_INT(b.busy, 0);
    CHECK_INT(b.peak, 1000);
    CHECK_INT(obudget_share_ceiling(a), 2000); /* alone again */

    CHECK_CASE("a blob charges its share until its last reference goes");
    blob_t *x = blob_new(16, 100), *y;
    CHECK(x != NULL);
    blob_charge(x, a);
    blob_charge(x, q); /* once: it stays with a */
    CHECK_INT(obudget_share_held(a), 100);
    CHECK_INT(obudget_share_held(q), 0);
    y = blob_ref(x);
    obudget_share_unref(&a); /* the kernel goes; the queued blob keeps the share */
    CHECK(a == NULL);
    blob_unref(&x);
    CHECK_INT(b.held, 100);
    blob_unref(&y);
    CHECK_INT(b.held, 0);
    CHECK_INT(b.busy, 0);
    x = blob_new(0, 10);
    blob_charge(x, NULL); /* no share: nothing charged */
    CHECK(x && x->share == NULL);
    blob_unref(&x);

    CHECK_CASE("no limit admits everything");
    obudget_t none = {0};
    obudget_share_t *n = obudget_share_new(&none);
    CHECK(obudget_share_admit(n, (size_t)1 << 40));
    CHECK_INT(none.dropped, 0);
    CHECK_INT(obudget_share_ceiling(n), 0);
    obudget_share_unref(&n);

    CHECK_CASE("the default is 32..128 MiB");
    size_t d = obudget_default_limit();
    CHECK(d >= (size_t)32 << 20 && d <= (size_t)128 << 20);

    obudget_share_unref(&q);
    obudget_share_unref(&c);
    CHECK_DONE();
}
