/* TLS interception (see ktls.h). OpenSSL does every part of TLS and X.509 here. */
#include "kernelmgr/ktls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/egpol.h"

struct leaf {
    char host[EGPOL_HOST_MAX + 1];
    X509 *cert;
    time_t made;
};

struct ktls {
    EVP_PKEY *ca_key, *leaf_key;
    X509 *ca;
    char *ca_pem;
    SSL_CTX *server, *client;
    struct leaf cache[KTLS_CACHE_MAX];
    size_t next; /* the slot replaced next when the cache is full (oldest first) */
};

static void ssl_err(char *err, size_t errsz, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[160] = "";
    if (e)
        ERR_error_string_n(e, buf, sizeof(buf));
    snprintf(err, errsz, "%s%s%s", what, e ? ": " : "", buf);
    ERR_clear_error();
}

static bool add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ex)
        return false;
    int ok = X509_add_ext(cert, ex, -1);
    X509_EXTENSION_free(ex);
    return ok == 1;
}

static bool random_serial(X509 *cert)
{
    unsigned char b[16];
    if (RAND_bytes(b, sizeof(b)) != 1)
        return false;
    b[0] &= 0x7f; /* positive */
    BIGNUM *bn = BN_bin2bn(b, sizeof(b), NULL);
    bool ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert));
    BN_free(bn);
    return ok;
}

/* A certificate with key's public half, subject CN=cn, valid from an hour ago for days. */
static X509 *cert_new(EVP_PKEY *key, const char *cn, long days)
{
    X509 *c = X509_new();
    if (!c || X509_set_version(c, 2) != 1 || !random_serial(c) ||
        !X509_gmtime_adj(X509_getm_notBefore(c), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(c), days * 86400L) || X509_set_pubkey(c, key) != 1 ||
        X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_UTF8,
                                   (const unsigned char *)cn, -1, -1, 0) != 1) {
        X509_free(c);
        return NULL;
    }
    return c;
}

static int make_ca(ktls_t *t, char *err, size_t errsz)
{
    char cn[64];
    unsigned char r[4];
    RAND_bytes(r, sizeof(r));
    snprintf(cn, sizeof(cn), "kgw egress CA %02x%02x%02x%02x", r[0], r[1], r[2], r[3]);
    if (!(t->ca_key = EVP_EC_gen("P-256")) || !(t->ca = cert_new(t->ca_key, cn, 3650)) ||
        X509_set_issuer_name(t->ca, X509_get_subject_name(t->ca)) != 1 ||
        !add_ext(t->ca, t->ca, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
        !add_ext(t->ca, t->ca, NID_key_usage, "critical,keyCertSign,cRLSign") ||
        !add_ext(t->ca, t->ca, NID_subject_key_identifier, "hash") ||
        !X509_sign(t->ca, t->ca_key, EVP_sha256())) {
        ssl_err(err, errsz, "cannot make the egress CA");
        return -ENOMEM;
    }
    return 0;
}

static int load_ca(ktls_t *t, const char *path, char *err, size_t errsz)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int r = -errno;
        snprintf(err, errsz, "%s: %s", path, strerror(errno));
        return r;
    }
    if (fstat(fd, &st) < 0 || (st.st_mode & (S_IRWXG | S_IRWXO))) {
        close(fd);
        snprintf(err, errsz, "%s: group or others may access it: chmod 600 it", path);
        return -EPERM;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return -ENOMEM;
    }
    t->ca = PEM_read_X509(f, NULL, NULL, NULL);
    rewind(f);
    t->ca_key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    if (!t->ca || !t->ca_key || X509_check_private_key(t->ca, t->ca_key) != 1) {
        ssl_err(err, errsz, "egress CA file: expected a PEM certificate and its private key");
        return -EINVAL;
    }
    if (X509_check_ca(t->ca) == 0) {
        snprintf(err, errsz, "%s: the certificate is not a CA's", path);
        return -EINVAL;
    }
    return 0;
}

static char *pem_of(X509 *c)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *p = NULL, *out = NULL;
    if (b && PEM_write_bio_X509(b, c) == 1) {
        long n = BIO_get_mem_data(b, &p);
        if (n > 0 && (out = malloc((size_t)n + 1))) {
            memcpy(out, p, (size_t)n);
            out[n] = '\0';
        }
    }
    BIO_free(b);
    return out;
}

ktls_t *ktls_new(const char *ca_file, const char *upstream_cas, char *err, size_t errsz)
{
    ktls_t *t = calloc(1, sizeof(*t));
    int r;
    if (!t) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    r = ca_file && ca_file[0] ? load_ca(t, ca_file, err, errsz) : make_ca(t, err, errsz);
    if (r < 0)
        goto fail;
    r = -ENOMEM;
    if (!(t->ca_pem = pem_of(t->ca)) || !(t->leaf_key = EVP_EC_gen("P-256"))) {
        ssl_err(err, errsz, "cannot make the leaf key");
        goto fail;
    }
    if (!(t->server = SSL_CTX_new(TLS_server_method())) ||
        !(t->client = SSL_CTX_new(TLS_client_method())) ||
        SSL_CTX_set_min_proto_version(t->server, TLS1_2_VERSION) != 1 ||
        SSL_CTX_set_min_proto_version(t->client, TLS1_2_VERSION) != 1) {
        ssl_err(err, errsz, "cannot make TLS contexts");
        goto fail;
    }
    long mode = SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;
    SSL_CTX_set_mode(t->server, mode);
    SSL_CTX_set_mode(t->client, mode);
    /* HTTP/1.1 only: the proxy reads request heads */
    static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(t->client, alpn, sizeof(alpn));
    SSL_CTX_set_options(t->server, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
    SSL_CTX_set_options(t->client, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_verify(t->client, SSL_VERIFY_PEER, NULL);
    if ((upstream_cas && upstream_cas[0]
             ? SSL_CTX_load_verify_locations(t->client, upstream_cas, NULL)
             : SSL_CTX_set_default_verify_paths(t->client)) != 1) {
        ssl_err(err, errsz, "cannot load the CAs to verify hosts with");
        r = -EINVAL;
        goto fail;
    }
    return t;
fail:
    ktls_destroy(&t);
    errno = -r;
    return NULL;
}

void ktls_destroy(ktls_t **pt)
{
    ktls_t *t = *pt;
    if (!t)
        return;
    for (size_t i = 0; i < KTLS_CACHE_MAX; i++)
        X509_free(t->cache[i].cert);
    SSL_CTX_free(t->server);
    SSL_CTX_free(t->client);
    EVP_PKEY_free(t->ca_key);
    EVP_PKEY_free(t->leaf_key);
    X509_free(t->ca);
    free(t->ca_pem);
    free(t);
    *pt = NULL;
}

const char *ktls_ca_pem(const ktls_t *t)
{
    return t->ca_pem;
}

static bool is_ip(const char *host)
{
    unsigned char b[16];
    return inet_pton(AF_INET, host, b) == 1 || inet_pton(AF_INET6, host, b) == 1;
}

/* The cached leaf for host, or a new one (replacing the oldest when the cache is full). */
static X509 *leaf_for(ktls_t *t, const char *host)
{
    time_t now = time(NULL);
    struct leaf *slot = NULL;
    for (size_t i = 0; i < KTLS_CACHE_MAX; i++) {
        struct leaf *l = &t->cache[i];
        if (l->cert && !strcmp(l->host, host)) {
            if (now - l->made < (KTLS_LEAF_DAYS - 1) * 86400L)
                return l->cert;
            slot = l; /* due for renewal */
            break;
        }
    }
    if (!slot) {
        slot = &t->cache[t->next];
        t->next = (t->next + 1) % KTLS_CACHE_MAX;
    }
    char san[EGPOL_HOST_MAX + 8];
    snprintf(san, sizeof(san), "%s:%s", is_ip(host) ? "IP" : "DNS", host);
    /* CN at most 64 characters (X.509's upper bound); clients check the SAN, which has it all */
    char cn[65];
    snprintf(cn, sizeof(cn), "%s", host);
    X509 *c = cert_new(t->leaf_key, cn, KTLS_LEAF_DAYS);
    if (!c || X509_set_issuer_name(c, X509_get_subject_name(t->ca)) != 1 ||
        !add_ext(c, t->ca, NID_basic_constraints, "critical,CA:FALSE") ||
        !add_ext(c, t->ca, NID_key_usage, "critical,digitalSignature") ||
        !add_ext(c, t->ca, NID_ext_key_usage, "serverAuth") ||
        !add_ext(c, t->ca, NID_subject_alt_name, san) ||
        !add_ext(c, t->ca, NID_subject_key_identifier, "hash") ||
        !add_ext(c, t->ca, NID_authority_key_identifier, "keyid:always") ||
        !X509_sign(c, t->ca_key, EVP_sha256())) {
        X509_free(c);
        ERR_clear_error();
        return NULL;
    }
    X509_free(slot->cert);
    slot->cert = c;
    slot->made = now;
    snprintf(slot->host, sizeof(slot->host), "%s", host);
    return c;
}

SSL *ktls_accept_new(ktls_t *t, const char *host, int fd)
{
    X509 *leaf = leaf_for(t, host);
    SSL *s = leaf ? SSL_new(t->server) : NULL;
    if (!s || SSL_use_certificate(s, leaf) != 1 || SSL_use_PrivateKey(s, t->leaf_key) != 1 ||
        SSL_add1_chain_cert(s, t->ca) != 1 || SSL_set_fd(s, fd) != 1) {
        SSL_free(s);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_accept_state(s);
    return s;
}

SSL *ktls_connect_new(ktls_t *t, const char *host, int fd)
{
    SSL *s = SSL_new(t->client);
    bool ip = is_ip(host);
    if (!s || SSL_set_fd(s, fd) != 1 ||
        (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), host) != 1
            : (SSL_set_tlsext_host_name(s, host) != 1 || SSL_set1_host(s, host) != 1))) {
        SSL_free(s);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_connect_state(s);
    return s;
}
