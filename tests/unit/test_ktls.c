/* kernelmgr/ktls.c: the egress CA made at start, leaf certificates for DNS names and IP
 * literals that a client trusting only that CA verifies (and rejects for another name), the
 * cache past its bound, and a CA file refused when others may read it. Handshakes run on
 * non-blocking socket pairs, stepped from both ends. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

#include "kernelmgr/ktls.h"

/* A handshake between ktls's server side for host and a client that trusts ca_pem and
 * expects want (a name or an address): true when the client verified it. */
static bool handshake(ktls_t *t, const char *host, const char *want, const char *ca_pem)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    SSL *s = ktls_accept_new(t, host, sv[0]);
    CHECK(s != NULL);
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    BIO *b = BIO_new_mem_buf(ca_pem, -1);
    X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(cctx), ca);
    SSL_CTX_set_verify(cctx, SSL_VERIFY_PEER, NULL);
    SSL *c = SSL_new(cctx);
    SSL_set_fd(c, sv[1]);
    if (strchr(want, ':') || (want[0] >= '0' && want[0] <= '9'))
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c), want);
    else
        SSL_set1_host(c, want);
    SSL_set_connect_state(c);
    int sd = 0, cd = 0, steps = 0;
    bool failed = false;
    while ((sd != 1 || cd != 1) && steps++ < 100 && !failed) {
        if (cd != 1) {
            cd = SSL_do_handshake(c);
            int e = SSL_get_error(c, cd);
            failed = cd != 1 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
        }
        if (sd != 1 && !failed) {
            sd = SSL_do_handshake(s);
            int e = SSL_get_error(s, sd);
            failed = sd != 1 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
        }
    }
    bool ok = !failed && cd == 1 && SSL_get_verify_result(c) == X509_V_OK;
    ERR_clear_error();
    SSL_free(c);
    SSL_free(s);
    SSL_CTX_free(cctx);
    X509_free(ca);
    BIO_free(b);
    close(sv[0]);
    close(sv[1]);
    return ok;
}

int main(void)
{
    char err[200] = "";
    ktls_t *t = ktls_new(NULL, NULL, err, sizeof(err));
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "ktls_new: %s\n", err);
        return 1;
    }
    const char *ca = ktls_ca_pem(t);
    CHECK(ca && strstr(ca, "BEGIN CERTIFICATE"));
    CHECK_CASE("dns");
    CHECK(handshake(t, "api.example.com", "api.example.com", ca));
    CHECK_CASE("dns, cached");
    CHECK(handshake(t, "api.example.com", "api.example.com", ca));
    CHECK_CASE("ipv4");
    CHECK(handshake(t, "127.0.0.2", "127.0.0.2", ca));
    CHECK_CASE("ipv6");
    CHECK(handshake(t, "::1", "::1", ca));
    CHECK_CASE("another name");
    CHECK(!handshake(t, "api.example.com", "evil.example.com", ca));
    CHECK_CASE("another address");
    CHECK(!handshake(t, "127.0.0.2", "127.0.0.3", ca));
    /* another gateway's CA is not this one */
    ktls_t *t2 = ktls_new(NULL, NULL, err, sizeof(err));
    CHECK_CASE("another CA");
    CHECK(t2 && !handshake(t2, "api.example.com", "api.example.com", ca));
    ktls_destroy(&t2);
    /* past the cache's bound: still right */
    char host[64];
    for (int i = 0; i < KTLS_CACHE_MAX + 20; i++) {
        int sv[2];
        snprintf(host, sizeof(host), "h%d.example.com", i);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        SSL *s = ktls_accept_new(t, host, sv[0]);
        CHECK(s != NULL);
        SSL_free(s);
        close(sv[0]);
        close(sv[1]);
    }
    CHECK_CASE("after the cache turned over");
    CHECK(handshake(t, "api.example.com", "api.example.com", ca));
    /* a CA file others may read is refused */
    char path[] = "/tmp/kgw-test-ca-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, ca, strlen(ca)) == (ssize_t)strlen(ca));
    fchmod(fd, 0644);
    close(fd);
    CHECK_CASE("ca file mode");
    CHECK(ktls_new(path, NULL, err, sizeof(err)) == NULL && strstr(err, "chmod 600"));
    chmod(path, 0600);
    CHECK_CASE("ca file without its key");
    CHECK(ktls_new(path, NULL, err, sizeof(err)) == NULL);
    unlink(path);
    ktls_destroy(&t);
    CHECK(t == NULL);
    CHECK_DONE();
}
