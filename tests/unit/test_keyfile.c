/* keyfile: key-file lines, lookups (blake2b and password hashes), generated keys. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#include "common/keyfile.h"

static int parse(const char *line, struct keyfile_entry *e)
{
    char err[160];
    return keyfile_parse_line(line, strlen(line), e, err, sizeof(err));
}

static void test_lines(void)
{
    struct keyfile_entry e;
    CHECK_CASE("key-file lines");
    CHECK_INT(parse("", &e), 0);
    CHECK_INT(parse("   ", &e), 0);
    CHECK_INT(parse("# comment", &e), 0);
    CHECK_INT(parse("  # indented comment", &e), 0);
    CHECK_INT(parse("alice blake2b:" "00112233445566778899aabbccddeeff"
                    "00112233445566778899aabbccddeeff", &e), 1);
    CHECK_STR(e.tenant, "alice");
    CHECK(!e.pw && e.hash[1] == 0x11);
    CHECK_INT(parse("bob\tblake2b:" "00112233445566778899aabbccddeeff"
                    "00112233445566778899aabbccddeeff \r", &e), 1);
    CHECK_STR(e.tenant, "bob");
    CHECK_INT(parse("carol $argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$abcdefghijk", &e), 1);
    CHECK(e.pw);
    /* refused: a key in clear, bad hex, bad tenant names, extra fields, NUL */
    CHECK_INT(parse("alice 0123456789abcdef0123456789abcdef", &e), -EINVAL);
    CHECK_INT(parse("alice blake2b:zz112233445566778899aabbccddeeff"
                    "00112233445566778899aabbccddeeff", &e), -EINVAL);
    CHECK_INT(parse("alice blake2b:0011", &e), -EINVAL);
    CHECK_INT(parse("../x blake2b:00112233445566778899aabbccddeeff"
                    "00112233445566778899aabbccddeeff", &e), -EINVAL);
    CHECK_INT(parse("-x blake2b:00112233445566778899aabbccddeeff"
                    "00112233445566778899aabbccddeeff", &e), -EINVAL);
    CHECK_INT(parse("alice", &e), -EINVAL);
    CHECK_INT(parse("alice blake2b:00112233445566778899aabbccddeeff"
                    "00112233445566778899aabbccddeeff extra", &e), -EINVAL);
    char nul[] = "alice blake2b:00";
    nul[3] = '\0';
    char err[100];
    CHECK_INT(keyfile_parse_line(nul, sizeof(nul) - 1, &e, err, sizeof(err)), -EINVAL);
    char longline[KEYFILE_LINE_MAX + 10];
    memset(longline, 'a', sizeof(longline) - 1);
    longline[sizeof(longline) - 1] = '\0';
    CHECK_INT(parse(longline, &e), -EINVAL);
}

static void test_generate_and_lookup(void)
{
    char key[2 * KEYFILE_GEN_BYTES + 1], key2[sizeof(key)], line[KEYFILE_LINE_MAX];
    char line2[KEYFILE_LINE_MAX], path[] = "/tmp/kgw-keyfile-XXXXXX", err[200];
    CHECK_CASE("generate, load, lookup");
    CHECK_INT(keyfile_generate("alice", key, sizeof(key), line, sizeof(line)), 0);
    CHECK_INT(keyfile_generate("bob", key2, sizeof(key2), line2, sizeof(line2)), 0);
    CHECK(strcmp(key, key2) != 0);
    CHECK(strstr(line, key) == NULL);
    CHECK_INT(keyfile_generate("bad name", key, sizeof(key), line, sizeof(line)), -EINVAL);
    CHECK_INT(keyfile_generate("alice", key, sizeof(key), line, sizeof(line)), 0);
    /* a password-hashed key too */
    char pw[crypto_pwhash_STRBYTES];
    CHECK_INT(crypto_pwhash_str(pw, "correct horse", 13, crypto_pwhash_OPSLIMIT_MIN,
                                crypto_pwhash_MEMLIMIT_MIN), 0);
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# keys\n%s\n\n%s\ncarol %s\n", line, line2, pw);
    fclose(f);
    keyfile_t *kf = NULL;
    CHECK_INT(keyfile_load(path, &kf, err, sizeof(err)), 0);
    CHECK_INT(kf->n, 3);
    CHECK_STR(keyfile_lookup(kf, key, strlen(key)), "alice");
    CHECK_STR(keyfile_lookup(kf, key2, strlen(key2)), "bob");
    CHECK(keyfile_lookup(kf, "nope", 4) == NULL);
    CHECK(keyfile_lookup(kf, key, strlen(key) - 1) == NULL);
    CHECK(keyfile_lookup(kf, "", 0) == NULL);
    CHECK_STR(keyfile_lookup(kf, "correct horse", 13), "carol");
    CHECK_STR(keyfile_lookup(kf, "correct horse", 13), "carol"); /* now from the cache */
    CHECK(keyfile_lookup(kf, "correct horsf", 13) == NULL);
    keyfile_t *one = keyfile_single("default", "k1");
    keyfile_t *both = keyfile_merge(kf, one);
    CHECK_STR(keyfile_lookup(both, "k1", 2), "default");
    CHECK_STR(keyfile_lookup(both, key2, strlen(key2)), "bob");
    keyfile_free(&both);
    keyfile_free(&one);
    keyfile_free(&kf);
    CHECK(kf == NULL);
    /* errors name the line */
    f = fopen(path, "w");
    fprintf(f, "%s\nalice plaintext-key\n", line);
    fclose(f);
    CHECK_INT(keyfile_load(path, &kf, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, ":2:") != NULL);
    f = fopen(path, "w");
    fprintf(f, "# only comments\n");
    fclose(f);
    CHECK_INT(keyfile_load(path, &kf, err, sizeof(err)), -ENOENT);
    unlink(path);
    CHECK(keyfile_load(path, &kf, err, sizeof(err)) == -ENOENT);
}

#define H "blake2b:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* the optional egress policy after the hash */
static void test_egress(void)
{
    struct keyfile_entry e, v[3];
    CHECK_CASE("egress");
    CHECK_INT(parse("alice " H " egress=pypi.org:443,*.pythonhosted.org:443 ", &e), 1);
    CHECK_STR(e.egress, "pypi.org:443,*.pythonhosted.org:443");
    CHECK_INT(parse("alice " H, &e), 1);
    CHECK_STR(e.egress, "");
    CHECK_INT(parse("alice " H " egress=pypi.org", &e), -EINVAL);
    CHECK_INT(parse("alice " H " egres=pypi.org:443", &e), -EINVAL);
    CHECK_INT(parse("alice " H " egress=a:1 extra", &e), -EINVAL);
    CHECK_INT(parse("bob " H, &v[0]), 1);
    CHECK_INT(parse("bob " H " egress=a.example:80", &v[1]), 1);
    CHECK_INT(parse("bob " H " egress=b.example:80", &v[2]), 1);
    keyfile_t kf = {v, 3};
    CHECK_STR(keyfile_egress(&kf, "bob"), "a.example:80");
    CHECK_STR(keyfile_egress(&kf, "carol"), "");
    CHECK_STR(keyfile_egress(NULL, "bob"), "");
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    test_lines();
    test_generate_and_lookup();
    test_egress();
    CHECK_DONE();
}
