/* kernelmgr/kout: a kernel's iopub output against its share of the output buffer budget. The
 * kernel is a bare kernel_t; what its clients hold is the share's charge, which the test adds
 * for each message admitted and its overflow hook releases (as a client ended would). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/obudget.h"
#include "kernelmgr/kout_int.h"
#include "kernelmgr/kwire_int.h"
#include "kernelmgr/private.h"

static struct {
    int notices;
    int overflows;
    size_t last_min;
    size_t release; /* bytes an overflow call releases (an ended client's) */
} H;

static void on_notice(kernel_t *k, jspan_t parent, const char *text)
{
    (void)k;
    (void)parent;
    (void)text;
    H.notices++;
}

static unsigned on_overflow(kernel_t *k, size_t min)
{
    obudget_share_t *s = kout__share(k);
    size_t r = H.release < obudget_share_held(s) ? H.release : obudget_share_held(s);
    H.overflows++;
    H.last_min = min;
    obudget_share_release(s, r);
    return r > 0;
}

static const struct kernel_owner_ops own = {.notice = on_notice, .overflow = on_overflow};

/* Offers an iopub message of type with parent msg_id and content to kout__admit; an admitted
 * one is charged to the share, as a client's queue would. */
static bool offer(kernel_t *k, const char *type, const char *parent, const char *content)
{
    static char hdr[256], par[256];
    jmsg_t m = {0};
    jhdr_t h = {0};
    snprintf(hdr, sizeof(hdr), "{\"msg_type\":\"%s\",\"msg_id\":\"x\"}", type);
    snprintf(par, sizeof(par), "{\"msg_id\":\"%s\"}", parent);
    snprintf(h.msg_type, sizeof(h.msg_type), "%s", type);
    m.part[JPART_HEADER] = (jspan_t){hdr, strlen(hdr)};
    m.part[JPART_PARENT] = (jspan_t){par, strlen(par)};
    m.part[JPART_METADATA] = (jspan_t){"{}", 2};
    m.part[JPART_CONTENT] = (jspan_t){content, strlen(content)};
    bool ok = kout__admit(k, &m, &h);
    if (ok)
        obudget_share_charge(kout__share(k), kwire__bytes(&m));
    return ok;
}

int main(void)
{
    obudget_t b = {.limit = 4000, .reserve = 100};
    struct kmgr m = {0};
    kernel_t *k = calloc(1, sizeof(*k));
    CHECK(k != NULL);
    m.o.out_budget = &b;
    k->m = &m;
    k->own = &own;
    snprintf(k->id, sizeof(k->id), "k1");
    CHECK(kout__new(k) == 0);
    obudget_share_t *share = kout__share(k);
    char big[1200];
    memset(big, 'r', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    char result[1300];
    snprintf(result, sizeof(result), "{\"data\":{\"text/plain\":\"%s\"}}", big);

    CHECK_CASE("under the share everything passes, repeats included");
    CHECK(offer(k, "clear_output", "e1", "{\"wait\":true}"));
    CHECK(offer(k, "clear_output", "e1", "{\"wait\":true}"));
    CHECK(offer(k, "stream", "e1", "{\"text\":\"hi\"}"));
    CHECK_INT(b.coalesced, 0);

    CHECK_CASE("over the share: output dropped with one notice, results pass");
    while (obudget_share_held(share) < b.limit - 200)
        CHECK(offer(k, "stream", "e1", "{\"text\":\"0123456789012345678901234567890123\"}"));
    CHECK(!offer(k, "stream", "e1", result));
    CHECK(!offer(k, "stream", "e1", result));
    CHECK_INT(H.notices, 1);
    CHECK(offer(k, "execute_result", "e1", result));
    CHECK(obudget_share_held(share) > b.limit);

    CHECK_CASE("over the share a repeated clear_output or status is coalesced");
    CHECK(offer(k, "clear_output", "e1", "{\"wait\":true}"));
    CHECK(!offer(k, "clear_output", "e1", "{\"wait\":true}"));
    CHECK(!offer(k, "clear_output", "e1", "{\"wait\":true}"));
    CHECK_INT(b.coalesced, 2);
    CHECK(offer(k, "clear_output", "e1", "{\"wait\":false}")); /* says something else */
    CHECK(offer(k, "clear_output", "e2", "{\"wait\":false}")); /* another parent */
    CHECK(offer(k, "status", "e2", "{\"execution_state\":\"idle\"}"));
    CHECK(!offer(k, "status", "e2", "{\"execution_state\":\"idle\"}"));
    CHECK(offer(k, "status", "e2", "{\"execution_state\":\"busy\"}"));
    CHECK(offer(k, "status", "e2", "{\"execution_state\":\"idle\"}")); /* a pair: not coalesced */
    CHECK_INT(b.coalesced, 3);
    CHECK(!offer(k, "stream", "e2", result)); /* a dropped message is nothing between */
    CHECK(!offer(k, "status", "e2", "{\"execution_state\":\"idle\"}"));
    CHECK_INT(H.overflows, 0);

    CHECK_CASE("past the ceiling the clients holding most are ended, then the result passes");
    size_t ceiling = obudget_share_ceiling(share);
    CHECK_INT(ceiling, 2 * b.limit);
    while (obudget_share_held(share) + strlen(result) + 100 <= ceiling)
        CHECK(offer(k, "execute_result", "e2", result));
    CHECK_INT(H.overflows, 0);
    H.release = (size_t)-1; /* the one client that held it all */
    CHECK(offer(k, "execute_result", "e2", result));
    CHECK_INT(H.overflows, 1);
    CHECK_INT(H.last_min, b.limit / 4);
    CHECK_INT(b.ended, 1);
    CHECK(obudget_share_held(share) <= ceiling);

    CHECK_CASE("if the clients left still hold too much, all holding any are ended");
    while (obudget_share_held(share) + strlen(result) + 100 <= ceiling)
        CHECK(offer(k, "error", "e2", result));
    H.release = 0; /* the first round ends nobody */
    H.overflows = 0;
    size_t dropped = b.dropped;
    CHECK(!offer(k, "error", "e2", result)); /* nobody let go: refused, counted */
    CHECK_INT(H.overflows, 2);
    CHECK_INT(H.last_min, 0);
    CHECK_INT(b.dropped, dropped + 1);
    H.release = (size_t)-1;
    H.overflows = 0;
    CHECK(offer(k, "error", "e2", result));
    CHECK_INT(H.overflows, 1);

    CHECK_CASE("no budget: everything passes");
    obudget_share_release(share, obudget_share_held(share));
    b.limit = 0;
    for (int i = 0; i < 3; i++)
        CHECK(offer(k, "clear_output", "e3", "{\"wait\":true}"));

    obudget_share_release(share, obudget_share_held(share));
    kout__free(k);
    free(k);
    CHECK_DONE();
}
