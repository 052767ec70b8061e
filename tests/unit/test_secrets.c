/* common/secrets.c: --secrets-file lines, the file's checks (mode, duplicates), look-ups and
 * placeholders. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

#include "common/secrets.h"

static int parse(const char *s, struct secrets_entry *e, char *err)
{
    CHECK_CASE(s);
    return secrets_parse_line(s, strlen(s), e, err, 200);
}

static void bad(const char *line, const char *why)
{
    struct secrets_entry e;
    char err[200] = "";
    CHECK_INT(parse(line, &e, err), -EINVAL);
    CHECK(strstr(err, why) != NULL);
}

static char *write_file(const char *text, mode_t mode)
{
    static char path[] = "/tmp/kgw-test-secrets-XXXXXX";
    strcpy(path, "/tmp/kgw-test-secrets-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(fchmod(fd, mode) == 0);
    close(fd);
    return path;
}

int main(void)
{
    struct secrets_entry e;
    char err[200];

    CHECK_INT(parse("acme OPENAI_API_KEY api.openai.com:443 sk-abc 123  ", &e, err), 1);
    CHECK_STR(e.tenant, "acme");
    CHECK_STR(e.name, "OPENAI_API_KEY");
    CHECK_STR(e.value, "sk-abc 123  "); /* the value runs to the end of the line */
    CHECK_INT(e.vlen, 12);
    CHECK_INT(e.hosts->n, 1);
    CHECK_INT(e.hosts->v[0].port, 443);
    secrets_entry_fini(&e);
    CHECK_INT(parse("t DB_TOKEN db.example:5432,www.example.org:443\tv\r", &e, err), 1);
    CHECK_STR(e.value, "v"); /* a CR before the newline is not the value's */
    CHECK_INT(e.hosts->n, 2);
    secrets_entry_fini(&e);
    CHECK_INT(parse("   # a comment", &e, err), 0);
    CHECK_INT(parse("", &e, err), 0);

    bad("acme KEY api.example.com:443", "expected");
    bad("a/b KEY h:1 v", "tenant");
    bad("acme lower h:1 v", "secret name");
    bad("acme PATH h:1 v", "secret name");
    bad("acme HTTPS_PROXY h:1 v", "secret name");
    bad("acme LD_PRELOAD h:1 v", "secret name");
    bad("acme KERNEL_X h:1 v", "secret name");
    bad("acme 1X h:1 v", "secret name");
    bad("acme KEY *:443 v", "wildcard");
    bad("acme KEY api.example.com:443,*.example.org:443 v", "wildcard");
    /* fields out of order: the value in the hosts' place is not quoted in the error */
    CHECK_INT(parse("acme KEY sk-secretvalue api.example.com:443", &e, err), -EINVAL);
    CHECK(!strstr(err, "sk-secretvalue"));
    bad("acme KEY nohostport v", "hosts");
    bad("acme KEY h:1 a\x01b", "printable");
    bad("acme KEY h:1 x-kgw-secret-0", "must not contain");
    char big[SECRETS_VALUE_MAX + 64];
    int n = snprintf(big, sizeof(big), "acme KEY h:1 ");
    memset(big + n, 'v', SECRETS_VALUE_MAX + 1);
    big[n + SECRETS_VALUE_MAX + 1] = '\0';
    bad(big, "value longer");
    /* the reason never quotes the value */
    CHECK_INT(parse("acme KEY *:443 topsecret", &e, err), -EINVAL);
    CHECK(strstr(err, "topsecret") == NULL);

    CHECK(secrets_name_ok("OPENAI_API_KEY", 14));
    CHECK(!secrets_name_ok("", 0));
    CHECK(!secrets_name_ok("SSL_CERT_FILE", 13));
    CHECK(!secrets_name_ok("REQUESTS_CA_BUNDLE", 18));

    /* files: mode, duplicates, look-ups */
    secrets_t *s = NULL;
    const char *text = "# secrets\nacme A_KEY a.example:443 one\n\nbeta A_KEY a.example:443 two\n"
                       "acme B_KEY b.example:80 three\n";
    char *p = write_file(text, 0644);
    CHECK_CASE("group/others");
    CHECK_INT(secrets_load(p, &s, err, sizeof(err)), -EPERM);
    CHECK(strstr(err, "chmod 600") != NULL);
    CHECK(chmod(p, 0600) == 0);
    CHECK_CASE("load");
    CHECK_INT(secrets_load(p, &s, err, sizeof(err)), 0);
    unlink(p);
    CHECK(s && s->n == 3);
    CHECK_STR(secrets_find(s, "beta", "A_KEY")->value, "two");
    CHECK_STR(secrets_find(s, "acme", "B_KEY")->value, "three");
    CHECK(secrets_find(s, "beta", "B_KEY") == NULL);
    CHECK(egpol_match(secrets_find(s, "acme", "A_KEY")->hosts, "a.example", 443) != NULL);
    CHECK(egpol_match(secrets_find(s, "acme", "A_KEY")->hosts, "b.example", 443) == NULL);
    secrets_free(&s);
    CHECK(s == NULL);
    p = write_file("acme K h:1 a\nacme K h:1 b\n", 0600);
    CHECK_CASE("duplicate");
    CHECK_INT(secrets_load(p, &s, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, ":2:") && strstr(err, "twice"));
    unlink(p);
    p = write_file("acme K h:1 a\nbroken\n", 0600);
    CHECK_CASE("bad line");
    CHECK_INT(secrets_load(p, &s, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, ":2:") != NULL);
    unlink(p);
    CHECK_INT(secrets_load("/nonexistent/kgw-secrets", &s, err, sizeof(err)), -ENOENT);

    char ph[SECRETS_PH_LEN + 1], ph2[SECRETS_PH_LEN + 1];
    secrets_placeholder(ph);
    secrets_placeholder(ph2);
    CHECK_INT(strlen(ph), SECRETS_PH_LEN);
    CHECK(!strncmp(ph, SECRETS_PH_PREFIX, SECRETS_PH_PREFLEN));
    CHECK(strcmp(ph, ph2) != 0);
    CHECK_DONE();
}
