/* ratelimit: failed logins per address (IPv6 per /64), token buckets, bounded tables. */
#include <stdio.h>
#include <string.h>

#include "check.h"

#include "gateway/ratelimit.h"

static void test_addr_keys(void)
{
    char k[RL_ADDR_MAX];
    CHECK_CASE("address keys");
    rl_addr_key("192.0.2.1", k);
    CHECK_STR(k, "192.0.2.1");
    rl_addr_key("::ffff:192.0.2.1", k);
    CHECK_STR(k, "192.0.2.1");
    rl_addr_key("2001:db8:1:2:3:4:5:6", k);
    CHECK_STR(k, "2001:db8:1:2::/64");
    char k2[RL_ADDR_MAX];
    rl_addr_key("2001:db8:1:2:ffff::1", k2);
    CHECK_STR(k, k2);
}

static void test_auth_failures(void)
{
    struct rl_opts o = {.auth_fail_limit = 3, .auth_fail_window_s = 60};
    rl_t *rl = rl_new(&o);
    int retry = 0;
    CHECK_CASE("failed logins");
    CHECK(!rl_auth_blocked(rl, "192.0.2.1", &retry, 1000));
    CHECK(!rl_auth_failed(rl, "192.0.2.1", 1000));
    CHECK(!rl_auth_failed(rl, "192.0.2.1", 2000));
    CHECK(rl_auth_failed(rl, "192.0.2.1", 3000)); /* the third reaches the limit */
    CHECK(rl_auth_blocked(rl, "192.0.2.1", &retry, 4000));
    CHECK_INT(retry, 57);
    CHECK(!rl_auth_blocked(rl, "192.0.2.2", &retry, 4000));
    /* the window ends */
    CHECK(!rl_auth_blocked(rl, "192.0.2.1", &retry, 61001));
    /* IPv6 neighbours in one /64 share the count */
    rl_auth_failed(rl, "2001:db8::1", 1000);
    rl_auth_failed(rl, "2001:db8::2", 1000);
    rl_auth_failed(rl, "2001:db8::3", 1000);
    CHECK(rl_auth_blocked(rl, "2001:db8::4", &retry, 1000));
    CHECK(!rl_auth_blocked(rl, "2001:db8:0:1::4", &retry, 1000));
    /* a flood of addresses cannot grow the table; it only recycles entries */
    char a[32];
    for (int i = 0; i < 200000; i++) {
        snprintf(a, sizeof(a), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        rl_auth_failed(rl, a, 5000 + i);
    }
    rl_destroy(&rl);
    CHECK(rl == NULL);
}

static void test_buckets(void)
{
    struct rl_opts o = {.rate = 10, .burst = 5};
    rl_t *rl = rl_new(&o);
    int wait = 0;
    CHECK_CASE("token buckets");
    for (int i = 0; i < 5; i++)
        CHECK(rl_take(rl, "alice", 1, 1000, &wait));
    CHECK(!rl_take(rl, "alice", 1, 1000, &wait));
    CHECK_INT(wait, 100);
    CHECK(rl_take(rl, "bob", 1, 1000, &wait)); /* per tenant */
    CHECK(rl_take(rl, "alice", 1, 1100, &wait)); /* refilled one */
    CHECK(!rl_take(rl, "alice", 1, 1100, &wait));
    /* charge: work already done goes into debt, bounded by the burst */
    for (int i = 0; i < 100; i++)
        rl_charge(rl, "carol", 1, 2000, &wait);
    CHECK(!rl_charge(rl, "carol", 1, 2000, &wait));
    CHECK_INT(wait, 500); /* a debt of at most one burst: 5 tokens at 10/s */
    CHECK(rl_charge(rl, "carol", 1, 3100, &wait));
    struct rl_opts off = {0};
    rl_t *none = rl_new(&off);
    for (int i = 0; i < 1000; i++)
        CHECK(rl_take(none, "x", 1, 0, &wait));
    rl_destroy(&none);
    rl_destroy(&rl);
}

static int fwd(const char *peer, const char *xff, const char *trusted, char *out)
{
    return rl_forwarded_client(peer, xff, strlen(xff), trusted, out);
}

static void test_forwarded(void)
{
    char out[RL_ADDR_MAX];
    CHECK_CASE("X-Forwarded-For");
    CHECK(fwd("127.0.0.1", "203.0.113.7", "127.0.0.1", out));
    CHECK_STR(out, "203.0.113.7");
    CHECK(!fwd("192.0.2.9", "203.0.113.7", "127.0.0.1", out)); /* peer not trusted */
    CHECK(fwd("127.0.0.1", "198.51.100.1, 203.0.113.7", "127.0.0.1", out));
    CHECK_STR(out, "203.0.113.7"); /* the client's own header entry is not believed */
    CHECK(fwd("127.0.0.1", "198.51.100.1, 203.0.113.7, 10.0.0.1", "127.0.0.1, 10.0.0.1", out));
    CHECK_STR(out, "203.0.113.7"); /* through two proxies */
    CHECK(fwd("127.0.0.1", "203.0.113.7, bogus!", "127.0.0.1", out) == 0);
    CHECK(fwd("127.0.0.1", "bogus!, 2001:db8::5", "127.0.0.1", out));
    CHECK_STR(out, "2001:db8::5");
    CHECK(!fwd("127.0.0.1", "", "127.0.0.1", out));
    CHECK(!fwd("127.0.0.1", " , ", "127.0.0.1", out));
    CHECK_CASE("X-Forwarded-For from trusted networks");
    CHECK(fwd("10.42.3.7", "203.0.113.7", "10.42.0.0/16", out));
    CHECK_STR(out, "203.0.113.7");
    CHECK(!fwd("10.43.0.1", "203.0.113.7", "10.42.0.0/16", out));
    CHECK(fwd("10.42.3.7", "203.0.113.7, 10.42.9.9", "192.0.2.1, 10.42.0.0/16", out));
    CHECK_STR(out, "203.0.113.7"); /* hops inside the network are proxies too */
    CHECK(fwd("fd00::1:2", "2001:db8::5", "fd00::/64", out));
    CHECK_STR(out, "2001:db8::5");
    CHECK(!fwd("fd01::1", "2001:db8::5", "fd00::/64", out));
    CHECK(fwd("192.0.2.200", "203.0.113.7", "0.0.0.0/0", out));
    CHECK(fwd("192.0.2.200", "203.0.113.7", "192.0.2.200/32", out));
    CHECK(!fwd("192.0.2.201", "203.0.113.7", "192.0.2.200/32", out));
    CHECK(!fwd("192.0.2.200", "203.0.113.7", "192.0.2.0/33", out));   /* too many bits */
    CHECK(!fwd("192.0.2.200", "203.0.113.7", "192.0.2.0/", out));     /* no bits */
    CHECK(!fwd("192.0.2.200", "203.0.113.7", "192.0.2.0/2x", out));   /* not a number */
    CHECK(!fwd("192.0.2.200", "203.0.113.7", "/8", out));             /* no network */
    CHECK(!fwd("192.0.2.200", "203.0.113.7", "fd00::/0", out));       /* another family */
    CHECK(!fwd("192.0.2.200", "203.0.113.7", "192.0.2.0/0024", out)); /* over 3 digits */
}

static void test_conns(void)
{
    struct rl_opts o = {.conns_per_addr = 3, .hdr_conns_per_addr = 2};
    rl_t *rl = rl_new(&o);
    int c[4], h[3];
    CHECK_CASE("connections per address");
    for (int i = 0; i < 3; i++) {
        c[i] = rl_conn_open(rl, "192.0.2.1");
        CHECK(c[i] >= 0);
        CHECK_INT(c[i], c[0]); /* one entry per address */
    }
    CHECK_INT(rl_conn_open(rl, "192.0.2.1"), RL_REFUSED);       /* reported */
    CHECK_INT(rl_conn_open(rl, "192.0.2.1"), RL_REFUSED_AGAIN); /* not again */
    CHECK_INT(rl_conn_open(rl, "::ffff:192.0.2.1"), RL_REFUSED_AGAIN);
    CHECK(rl_conn_open(rl, "192.0.2.2") >= 0); /* per address */
    rl_conn_close(rl, c[0]);
    c[3] = rl_conn_open(rl, "192.0.2.1"); /* room again */
    CHECK_INT(c[3], c[0]);
    CHECK_INT(rl_conn_open(rl, "192.0.2.1"), RL_REFUSED); /* a new refusal is reported */
    for (int i = 1; i < 4; i++)
        rl_conn_close(rl, c[i]);
    rl_conn_close(rl, c[0]); /* more closes than opens: nothing to undo */
    rl_conn_close(rl, RL_UNCOUNTED);
    rl_conn_close(rl, 1 << 30);
    CHECK(rl_conn_open(rl, "192.0.2.1") >= 0);
    /* IPv6 neighbours in one /64 share the count */
    CHECK(rl_conn_open(rl, "2001:db8::1") >= 0);
    CHECK(rl_conn_open(rl, "2001:db8::2") >= 0);
    CHECK(rl_conn_open(rl, "2001:db8::3") >= 0);
    CHECK_INT(rl_conn_open(rl, "2001:db8::4"), RL_REFUSED);
    CHECK(rl_conn_open(rl, "2001:db8:0:1::4") >= 0);

    CHECK_CASE("connections in their header phase per address");
    /* a count of its own, with its own limit: the address's open connections are not it */
    h[0] = rl_hdr_open(rl, "192.0.2.1");
    h[1] = rl_hdr_open(rl, "192.0.2.1");
    CHECK(h[0] >= 0 && h[1] == h[0]);
    CHECK_INT(rl_hdr_open(rl, "192.0.2.1"), RL_REFUSED);
    CHECK_INT(rl_hdr_open(rl, "192.0.2.1"), RL_REFUSED_AGAIN);
    CHECK(rl_hdr_open(rl, "192.0.2.3") >= 0);
    rl_hdr_close(rl, h[1]); /* its headers are complete: it no longer counts */
    h[2] = rl_hdr_open(rl, "192.0.2.1");
    CHECK_INT(h[2], h[0]);
    CHECK_INT(rl_hdr_open(rl, "192.0.2.1"), RL_REFUSED);
    rl_hdr_close(rl, h[0]);
    rl_hdr_close(rl, h[2]);
    CHECK(rl_hdr_open(rl, "192.0.2.1") >= 0);
    rl_destroy(&rl);

    CHECK_CASE("connection counts without limits");
    struct rl_opts off = {0};
    rl_t *none = rl_new(&off);
    for (int i = 0; i < 1000; i++) {
        CHECK(rl_conn_open(none, "192.0.2.1") >= 0);
        CHECK(rl_hdr_open(none, "192.0.2.1") >= 0);
    }
    rl_destroy(&none);
}

/* A flood of addresses fills the table: connections are then accepted uncounted, never
 * refused, and the table is whole again once they close. */
static void test_conns_crowded(void)
{
    enum { N = 100000 };
    static int idx[N];
    struct rl_opts o = {.conns_per_addr = 1, .hdr_conns_per_addr = 1};
    rl_t *rl = rl_new(&o);
    char a[32];
    int uncounted = 0, refused = 0;
    CHECK_CASE("crowded connection table");
    for (int i = 0; i < N; i++) {
        snprintf(a, sizeof(a), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        idx[i] = rl_hdr_open(rl, a);
        uncounted += idx[i] == RL_UNCOUNTED;
        refused += idx[i] == RL_REFUSED || idx[i] == RL_REFUSED_AGAIN;
    }
    CHECK(uncounted > 0);
    CHECK_INT(refused, 0);
    for (int i = 0; i < N; i++)
        rl_hdr_close(rl, idx[i]);
    for (int i = 0; i < N; i += 97) {
        snprintf(a, sizeof(a), "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        idx[i] = rl_hdr_open(rl, a);
        CHECK(idx[i] >= 0);
        CHECK_INT(rl_hdr_open(rl, a), RL_REFUSED);
    }
    rl_destroy(&rl);
}

int main(void)
{
    test_forwarded();
    test_addr_keys();
    test_auth_failures();
    test_buckets();
    test_conns();
    test_conns_crowded();
    CHECK_DONE();
}
