/* protocol/e2bwire.c: the E2B SDKs' bodies as they send them, what kgw refuses, sandbox paths
 * and Connect envelopes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>

#include "check.h"

#include "protocol/e2bwire.h"

static int create(const char *body, struct e2bwire_create *c, char *err)
{
    CHECK_CASE(body);
    return e2bwire_create_parse(body, strlen(body), c, err, E2BWIRE_ERR_MAX);
}

static int path(const char *in, char *out)
{
    CHECK_CASE(in);
    return e2bwire_path(in, strlen(in), out, FPATH_MAX + 1);
}

int main(void)
{
    struct e2bwire_create c;
    char err[E2BWIRE_ERR_MAX], out[FPATH_MAX + 1];

    /* e2b 2.51.0's create (undefined fields are left out) */
    CHECK_INT(create("{\"templateID\":\"code-interpreter-v1\",\"timeout\":300,"
                     "\"envVars\":{\"A\":\"1\"},\"metadata\":{\"k\":\"v\"}}",
                     &c, err),
              0);
    CHECK_STR(c.template_id, "code-interpreter-v1");
    CHECK(c.timeout == 300);
    CHECK_STR(json_string_value(json_object_get(c.env, "A")), "1");
    CHECK_STR(json_string_value(json_object_get(c.metadata, "k")), "v");
    e2bwire_create_fini(&c);
    CHECK_INT(create("", &c, err), 0);
    CHECK(c.timeout == -1 && c.template_id[0] == '\0');
    e2bwire_create_fini(&c);
    /* e2b 2.50.0's: secure true, allow_internet_access true unless the caller says false */
    CHECK_INT(create("{\"templateID\":\"base\",\"timeout\":300,\"secure\":true,"
                     "\"allow_internet_access\":false}",
                     &c, err),
              0);
    /* no internet: no egress at all (not the tenant's policy) */
    CHECK(json_is_array(c.egress) && json_array_size(c.egress) == 0 && !c.internet);
    e2bwire_create_fini(&c);
    /* internet: the tenant's policy (the gateway checks it has one) */
    CHECK_INT(
        create("{\"templateID\":\"base\",\"secure\":true,\"allow_internet_access\":true}", &c, err),
        0);
    CHECK(c.internet && !c.egress);
    e2bwire_create_fini(&c);
    CHECK_INT(create("{\"allow_internet_access\":\"yes\"}", &c, err), -EINVAL);
    CHECK_INT(create("{\"secure\":false}", &c, err), -EINVAL);
    /* autoPause: paused at its timeout, memory kept; a filesystem-only pause, or a resume by
     * traffic, is not offered */
    CHECK_INT(create("{\"autoPause\":true,\"autoPauseMemory\":true}", &c, err), 0);
    CHECK(c.auto_pause);
    e2bwire_create_fini(&c);
    CHECK_INT(create("{\"autoPause\":\"yes\"}", &c, err), -EINVAL);
    CHECK_INT(create("{\"autoPause\":true,\"autoPauseMemory\":false}", &c, err), -EINVAL);
    CHECK(strstr(err, "autoPauseMemory"));
    CHECK_INT(create("{\"autoPause\":true,\"autoResume\":{\"enabled\":true}}", &c, err), -EINVAL);
    CHECK_INT(create("{\"autoPause\":false,\"autoResume\":{\"enabled\":false}}", &c, err), 0);
    CHECK(!c.auto_pause);
    e2bwire_create_fini(&c);
    /* a pause's body */
    CHECK_INT(e2bwire_pause_parse("", 0, err, sizeof(err)), 0);
    CHECK_INT(e2bwire_pause_parse("{\"memory\":true}", 15, err, sizeof(err)), 0);
    CHECK_INT(e2bwire_pause_parse("{\"memory\":false}", 16, err, sizeof(err)), -EINVAL);
    CHECK_INT(e2bwire_pause_parse("{\"memory\":1}", 12, err, sizeof(err)), -EINVAL);
    CHECK_INT(e2bwire_pause_parse("{\"timeout\":1}", 13, err, sizeof(err)), -EINVAL);
    CHECK_INT(e2bwire_pause_parse("[]", 2, err, sizeof(err)), -EINVAL);
    /* network: deny all but allowOut, as an allowlist of any port */
    CHECK_INT(create("{\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"pypi.org\","
                     "\"1.1.1.1\",\"8.8.8.8/32\",\"*.example.com\"],\"allowPublicTraffic\":false}}",
                     &c, err),
              0);
    CHECK_INT((int)json_array_size(c.egress), 4);
    CHECK_STR(json_string_value(json_array_get(c.egress, 0)), "pypi.org");
    CHECK_STR(json_string_value(json_array_get(c.egress, 2)), "8.8.8.8");
    CHECK_STR(json_string_value(json_array_get(c.egress, 3)), "*.example.com");
    e2bwire_create_fini(&c);
    /* hosts as egress policies hold them: lowercase, no trailing dot; an IPv6 address */
    CHECK_INT(create("{\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"PyPI.ORG.\","
                     "\"2001:db8::1\",\"2001:db8::2/128\"]}}",
                     &c, err),
              0);
    CHECK_STR(json_string_value(json_array_get(c.egress, 0)), "pypi.org");
    CHECK_STR(json_string_value(json_array_get(c.egress, 1)), "2001:db8::1");
    CHECK_STR(json_string_value(json_array_get(c.egress, 2)), "2001:db8::2");
    e2bwire_create_fini(&c);
    CHECK_INT(create("{\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"a b\"]}}", &c,
                     err),
              -EINVAL);
    CHECK_INT(create("{\"network\":{\"denyOut\":[\"0.0.0.0/0\"]}}", &c, err), 0);
    CHECK(json_is_array(c.egress) && json_array_size(c.egress) == 0);
    e2bwire_create_fini(&c);
    CHECK_INT(create("{\"allow_internet_access\":false,\"network\":{\"allowOut\":[\"a.io\"]}}",
                     &c, err),
              0);
    CHECK_INT((int)json_array_size(c.egress), 1);
    e2bwire_create_fini(&c);
    CHECK_INT(create("{\"network\":{\"allowPublicTraffic\":false}}", &c, err), 0);
    CHECK(!c.egress);
    e2bwire_create_fini(&c);
    /* what an allowlist cannot say */
    CHECK_INT(create("{\"network\":{\"allowOut\":[\"x\"]}}", &c, err), -EINVAL);
    CHECK(strstr(err, "network") != NULL);
    CHECK_INT(create("{\"network\":{\"denyOut\":[\"1.2.3.4\"]}}", &c, err), -EINVAL);
    CHECK(strstr(err, "allowlist") != NULL);
    CHECK_INT(create("{\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"10.0.0.0/8\"]}}",
                     &c, err),
              -EINVAL);
    CHECK(strstr(err, "CIDR") != NULL);
    CHECK_INT(create("{\"network\":{\"allowPublicTraffic\":true}}", &c, err), -EINVAL);
    CHECK_INT(create("{\"network\":{\"egressProxy\":{\"address\":\"p:1\"}}}", &c, err), -EINVAL);
    CHECK_INT(create("{\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/v\"}]}", &c, err), -EINVAL);
    CHECK_INT(create("{\"timout\":3}", &c, err), -EINVAL);
    CHECK(strstr(err, "unknown field") != NULL);
    CHECK_INT(create("{\"timeout\":-1}", &c, err), -EINVAL);
    CHECK_INT(create("{\"timeout\":86401}", &c, err), -EINVAL);
    CHECK_INT(create("{\"timeout\":1.5}", &c, err), -EINVAL);
    CHECK_INT(create("{\"envVars\":{\"A\":1}}", &c, err), -EINVAL);
    CHECK_INT(create("{\"envVars\":[]}", &c, err), -EINVAL);
    CHECK_INT(create("[]", &c, err), -EINVAL);
    CHECK_INT(create("{\"templateID\":\"a\",\"templateID\":\"b\"}", &c, err), -EINVAL);

    long long t;
    CHECK_INT(e2bwire_timeout_parse("{\"timeout\":60}", 14, true, &t, err, sizeof(err)), 0);
    CHECK(t == 60);
    CHECK_INT(e2bwire_timeout_parse("{}", 2, true, &t, err, sizeof(err)), -EINVAL);
    CHECK_INT(e2bwire_timeout_parse("{}", 2, false, &t, err, sizeof(err)), 0);
    CHECK(t == -1);

    struct e2bwire_exec x;
    const char *ex = "{\"code\":\"x\",\"context_id\":\"abc\",\"language\":\"python\"}";
    CHECK_INT(e2bwire_exec_parse(ex, strlen(ex), &x, err, sizeof(err)), 0);
    CHECK_STR(x.code, "x");
    CHECK_STR(x.context_id, "abc");
    e2bwire_exec_fini(&x);
    ex = "{\"code\":\"x\",\"language\":\"r\"}";
    CHECK_INT(e2bwire_exec_parse(ex, strlen(ex), &x, err, sizeof(err)), -EINVAL);
    /* per-run variables */
    ex = "{\"code\":\"x\",\"env_vars\":{\"A\":\"b\"}}";
    CHECK_INT(e2bwire_exec_parse(ex, strlen(ex), &x, err, sizeof(err)), 0);
    CHECK_STR(json_string_value(json_object_get(x.env, "A")), "b");
    e2bwire_exec_fini(&x);
    ex = "{\"code\":\"x\",\"env_vars\":{\"A-B\":\"b\"}}";
    CHECK_INT(e2bwire_exec_parse(ex, strlen(ex), &x, err, sizeof(err)), -EINVAL);
    ex = "{\"code\":\"x\",\"env_vars\":{\"A\":1}}";
    CHECK_INT(e2bwire_exec_parse(ex, strlen(ex), &x, err, sizeof(err)), -EINVAL);
    ex = "{\"language\":\"python\"}";
    CHECK_INT(e2bwire_exec_parse(ex, strlen(ex), &x, err, sizeof(err)), -EINVAL);

    /* paths: /home/user is the workspace */
    CHECK_INT(path("/home/user/a/b.txt", out), 7);
    CHECK_STR(out, "a/b.txt");
    CHECK_INT(path("a//b/./c/../d", out), 5);
    CHECK_STR(out, "a/b/d");
    CHECK_INT(path("/home/user", out), 0);
    CHECK_INT(path("/home/user/", out), 0);
    CHECK_INT(path("/home/user/x/..", out), 0);
    CHECK_INT(path("/home/user/..", out), -EACCES);
    CHECK_INT(path("../etc", out), -EACCES);
    CHECK_INT(path("/home/username", out), -EACCES);
    CHECK_INT(path("/etc/passwd", out), -EACCES);
    CHECK_INT(path("", out), -EINVAL);
    CHECK_INT(path("a\nb", out), -EINVAL);

    struct e2bwire_fsreq f;
    const char *mv = "{\"source\":\"/home/user/a\",\"destination\":\"b\"}";
    CHECK_INT(e2bwire_fsreq_parse("Move", mv, strlen(mv), &f, err, sizeof(err)), 0);
    CHECK_STR(f.path, "a");
    CHECK_STR(f.path2, "b");
    const char *ls = "{\"path\":\"/etc\",\"depth\":1}";
    CHECK_INT(e2bwire_fsreq_parse("ListDir", ls, strlen(ls), &f, err, sizeof(err)), -EACCES);
    ls = "{\"path\":\"/home/user\",\"depth\":9}";
    CHECK_INT(e2bwire_fsreq_parse("ListDir", ls, strlen(ls), &f, err, sizeof(err)), -EINVAL);
    ls = "{\"path\":\"/home/user\",\"depth\":0}";
    CHECK_INT(e2bwire_fsreq_parse("ListDir", ls, strlen(ls), &f, err, sizeof(err)), 0);
    CHECK(f.depth == 1 && f.path[0] == '\0');
    CHECK_INT(e2bwire_fsreq_parse("Stat", "{}", 2, &f, err, sizeof(err)), -EINVAL);
    /* watches: WatchDir as files.watchDir sends it (defaults left out), proto names too */
    const char *wd = "{\"path\":\"/home/user/w\",\"recursive\":true}";
    CHECK_INT(e2bwire_fsreq_parse("WatchDir", wd, strlen(wd), &f, err, sizeof(err)), 0);
    CHECK(f.recursive);
    CHECK_STR(f.path, "w");
    wd = "{\"path\":\"w\",\"include_entry\":false,\"allowNetworkMounts\":true}";
    CHECK_INT(e2bwire_fsreq_parse("CreateWatcher", wd, strlen(wd), &f, err, sizeof(err)), 0);
    CHECK(!f.recursive);
    wd = "{\"path\":\"w\",\"includeEntry\":true}"; /* envd 0.6.3's: not offered */
    CHECK_INT(e2bwire_fsreq_parse("WatchDir", wd, strlen(wd), &f, err, sizeof(err)), -ENOSYS);
    CHECK_STR(e2bwire_code_name(-ENOSYS), "unimplemented");
    wd = "{\"path\":\"w\",\"recursive\":1}";
    CHECK_INT(e2bwire_fsreq_parse("WatchDir", wd, strlen(wd), &f, err, sizeof(err)), -EINVAL);
    wd = "{\"path\":\"/etc\"}";
    CHECK_INT(e2bwire_fsreq_parse("WatchDir", wd, strlen(wd), &f, err, sizeof(err)), -EACCES);
    wd = "{\"path\":\"w\",\"recursive\":true}"; /* not a field of Stat */
    CHECK_INT(e2bwire_fsreq_parse("Stat", wd, strlen(wd), &f, err, sizeof(err)), -EINVAL);
    wd = "{\"watcherId\":\"w0123abc\"}";
    CHECK_INT(e2bwire_fsreq_parse("GetWatcherEvents", wd, strlen(wd), &f, err, sizeof(err)), 0);
    CHECK_STR(f.watcher, "w0123abc");
    wd = "{\"watcher_id\":\"w1\"}";
    CHECK_INT(e2bwire_fsreq_parse("RemoveWatcher", wd, strlen(wd), &f, err, sizeof(err)), 0);
    CHECK_STR(f.watcher, "w1");
    wd = "{\"watcherId\":\"../x\"}";
    CHECK_INT(e2bwire_fsreq_parse("RemoveWatcher", wd, strlen(wd), &f, err, sizeof(err)),
              -EINVAL);
    CHECK_INT(e2bwire_fsreq_parse("RemoveWatcher", "{}", 2, &f, err, sizeof(err)), -EINVAL);
    wd = "{\"path\":\"w\"}"; /* a watcher is named by its id */
    CHECK_INT(e2bwire_fsreq_parse("GetWatcherEvents", wd, strlen(wd), &f, err, sizeof(err)),
              -EINVAL);
    /* inotify masks as envd's event types, in its order */
    {
        const char *types[E2BWIRE_WATCH_TYPES];
        CHECK(e2bwire_watch_types(IN_CREATE | IN_ISDIR, types) == 1);
        CHECK_STR(types[0], "EVENT_TYPE_CREATE");
        CHECK(e2bwire_watch_types(IN_MODIFY, types) == 1);
        CHECK_STR(types[0], "EVENT_TYPE_WRITE");
        CHECK(e2bwire_watch_types(IN_MOVED_FROM, types) == 1);
        CHECK_STR(types[0], "EVENT_TYPE_RENAME");
        CHECK(e2bwire_watch_types(IN_MOVED_TO, types) == 1);
        CHECK_STR(types[0], "EVENT_TYPE_CREATE");
        CHECK(e2bwire_watch_types(IN_DELETE, types) == 1);
        CHECK_STR(types[0], "EVENT_TYPE_REMOVE");
        CHECK(e2bwire_watch_types(IN_ATTRIB | IN_MODIFY, types) == 2);
        CHECK_STR(types[0], "EVENT_TYPE_CHMOD");
        CHECK_STR(types[1], "EVENT_TYPE_WRITE");
        CHECK(e2bwire_watch_types(IN_IGNORED | IN_Q_OVERFLOW | IN_OPEN, types) == 0);
    }
    /* inotify records: each within what was read */
    {
        uint8_t rec[2 * (sizeof(struct inotify_event) + 16)];
        struct inotify_event ev = {.wd = 3, .mask = IN_CREATE, .len = 16};
        memset(rec, 0, sizeof(rec));
        memcpy(rec, &ev, sizeof(ev));
        memcpy(rec + sizeof(ev), "a.txt", 5);
        ev = (struct inotify_event){.wd = 4, .mask = IN_DELETE_SELF, .len = 0};
        memcpy(rec + sizeof(ev) + 16, &ev, sizeof(ev));
        size_t off = 0, nl;
        int w;
        uint32_t m;
        const char *nm;
        size_t total = 2 * sizeof(ev) + 16;
        CHECK_INT(e2bwire_inotify_next(rec, total, &off, &w, &m, &nm, &nl), 1);
        CHECK(w == 3 && m == IN_CREATE && nl == 5 && memcmp(nm, "a.txt", 5) == 0);
        CHECK_INT(e2bwire_inotify_next(rec, total, &off, &w, &m, &nm, &nl), 1);
        CHECK(w == 4 && m == IN_DELETE_SELF && nl == 0);
        CHECK_INT(e2bwire_inotify_next(rec, total, &off, &w, &m, &nm, &nl), 0);
        off = 0; /* a name past the end */
        CHECK_INT(e2bwire_inotify_next(rec, sizeof(ev) + 8, &off, &w, &m, &nm, &nl), -EBADMSG);
        off = 0;
        CHECK_INT(e2bwire_inotify_next(rec, sizeof(ev) - 1, &off, &w, &m, &nm, &nl), -EBADMSG);
    }
    /* multipart/form-data as undici's FormData sends it */
    {
        char b[E2BWIRE_BOUNDARY_MAX + 1];
        CHECK_INT(e2bwire_boundary("multipart/form-data; boundary=----formdata-undici-0123", b,
                                   sizeof(b)),
                  0);
        CHECK_STR(b, "----formdata-undici-0123");
        CHECK_INT(e2bwire_boundary("Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a b\"", b,
                                   sizeof(b)),
                  0);
        CHECK_STR(b, "a b");
        CHECK_INT(e2bwire_boundary("multipart/form-data", b, sizeof(b)), -EINVAL);
        CHECK_INT(e2bwire_boundary("multipart/form-data; boundary=", b, sizeof(b)), -EINVAL);
        CHECK_INT(e2bwire_boundary("application/json; boundary=x", b, sizeof(b)), -EINVAL);
        CHECK_INT(e2bwire_boundary("multipart/form-data; boundary=\"x", b, sizeof(b)), -EINVAL);
        static const char body[] =
            "preamble\r\n--XX\r\n"
            "Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a \\\"q\\\".txt\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n"
            "one\r\n--X\r\n"
            "\r\n--XX\r\n"
            "content-disposition: form-data; name=file\r\n\r\n"
            "no file name\r\n--XX\r\n"
            "Content-Disposition: form-data; name=\"other\"; filename=\"x\"\r\n\r\n"
            "\r\n--XX--\r\n";
        size_t off = 0;
        struct e2bwire_part part;
        size_t n = sizeof(body) - 1;
        CHECK_INT(e2bwire_part_next(body, n, "XX", &off, &part), 1);
        CHECK_STR(part.name, "file");
        CHECK(part.has_filename);
        CHECK_STR(part.filename, "/home/user/a \"q\".txt");
        CHECK(part.len == 10 && memcmp(part.data, "one\r\n--X\r\n", 10) == 0);
        CHECK_INT(e2bwire_part_next(body, n, "XX", &off, &part), 1);
        CHECK_STR(part.name, "file");
        CHECK(!part.has_filename && part.len == 12 && memcmp(part.data, "no file name", 12) == 0);
        CHECK_INT(e2bwire_part_next(body, n, "XX", &off, &part), 1);
        CHECK_STR(part.name, "other");
        CHECK(part.len == 0);
        CHECK_INT(e2bwire_part_next(body, n, "XX", &off, &part), 0);
        /* a body that starts with its delimiter; one not ended; none at all */
        off = 0;
        static const char b2[] = "--XX\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nz";
        CHECK_INT(e2bwire_part_next(b2, sizeof(b2) - 1, "XX", &off, &part), -EINVAL);
        off = 0;
        CHECK_INT(e2bwire_part_next("no parts", 8, "XX", &off, &part), -EINVAL);
        /* a file name longer than a path */
        char *big = malloc(2 * FPATH_MAX + 200);
        CHECK(big != NULL);
        int bn = snprintf(big, 2 * FPATH_MAX + 200,
                          "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"");
        memset(big + bn, 'a', FPATH_MAX + 1);
        bn += FPATH_MAX + 1;
        bn += snprintf(big + bn, 100, "\"\r\n\r\nz\r\n--XX--");
        off = 0;
        CHECK_INT(e2bwire_part_next(big, (size_t)bn, "XX", &off, &part), -ENAMETOOLONG);
        free(big);
    }
    /* signed file URLs: envd's signatures (the values computed apart, with Python's hashlib) */
    {
        char sig[E2BWIRE_SIGNATURE_LEN + 1];
        e2bwire_signature("hello.txt", "read", "", "tok", NULL, sig);
        CHECK_STR(sig, "v1_dEkXrS/Y6p/Op9rMpEpzXeRJ5bBL0LYkjrRJr9/Zz44");
        long long exp = 1700000000;
        e2bwire_signature("/home/user/a b.txt", "write", "user", "0123abcd", &exp, sig);
        CHECK_STR(sig, "v1_mxvSOT4DF7rVAUCPP92Ia+Grep6lnOwVktniEPt3A3I");
        exp = -5;
        e2bwire_signature("", "write", "", "t", &exp, sig);
        CHECK_STR(sig, "v1_g4cDnraCY7O52IhB49SjMDaZjqm9rfwavpEuRmFyCac");
        CHECK_INT(e2bwire_expiration_parse("1700000000", &exp), 0);
        CHECK(exp == 1700000000);
        CHECK_INT(e2bwire_expiration_parse("+12", &exp), 0);
        CHECK(exp == 12);
        CHECK_INT(e2bwire_expiration_parse("-3", &exp), 0);
        CHECK(exp == -3);
        static const char *const bad_exp[] = {"", "-", "1.5", " 1", "1 ", "0x10", "12a",
                                              "99999999999999999999", "9223372036854775808"};
        for (size_t i = 0; i < sizeof(bad_exp) / sizeof(bad_exp[0]); i++) {
            CHECK_CASE(bad_exp[i]);
            CHECK_INT(e2bwire_expiration_parse(bad_exp[i], &exp), -EINVAL);
        }
    }

    /* process.Start as commands.run sends it */
    struct e2bwire_start st;
    const char *sr = "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],"
                     "\"envs\":{\"A_1\":\"x\"},\"cwd\":\"/home/user/d\"},\"stdin\":false}";
    CHECK_INT(e2bwire_start_parse(sr, strlen(sr), &st, err, sizeof(err)), 0);
    CHECK_STR(st.argv[0], "/bin/bash");
    CHECK_STR(st.argv[3], "echo hi");
    CHECK(st.argv[4] == NULL);
    CHECK_STR(st.env[0], "A_1=x");
    CHECK(st.env[1] == NULL);
    CHECK_STR(st.cwd, "d");
    e2bwire_start_fini(&st);
    sr = "{\"process\":{\"cmd\":\"/bin/sh\"},\"pty\":{\"size\":{\"cols\":80,\"rows\":24}}}";
    CHECK_INT(e2bwire_start_parse(sr, strlen(sr), &st, err, sizeof(err)), -ENOSYS);
    sr = "{\"process\":{\"cmd\":\"/bin/sh\"},\"stdin\":true}";
    CHECK_INT(e2bwire_start_parse(sr, strlen(sr), &st, err, sizeof(err)), 0);
    CHECK(st.stdin_open);
    e2bwire_start_fini(&st);
    /* SendInput, CloseStdin */
    {
        unsigned ipid = 0;
        uint8_t *data = NULL;
        size_t dn = 0;
        sr = "{\"process\":{\"pid\":7},\"input\":{\"stdin\":\"aGVsbG8=\"}}";
        CHECK_INT(e2bwire_input_parse(sr, strlen(sr), &ipid, &data, &dn, err, sizeof(err)), 0);
        CHECK(ipid == 7 && dn == 5 && memcmp(data, "hello", 5) == 0);
        free(data);
        sr = "{\"process\":{\"pid\":7},\"input\":{}}"; /* empty bytes are left out */
        CHECK_INT(e2bwire_input_parse(sr, strlen(sr), &ipid, &data, &dn, err, sizeof(err)), 0);
        CHECK(dn == 0);
        free(data);
        sr = "{\"process\":{\"pid\":7},\"input\":{\"pty\":\"aA==\"}}";
        CHECK_INT(e2bwire_input_parse(sr, strlen(sr), &ipid, &data, &dn, err, sizeof(err)),
                  -EINVAL);
        sr = "{\"process\":{\"pid\":7},\"input\":{\"stdin\":\"***\"}}";
        CHECK_INT(e2bwire_input_parse(sr, strlen(sr), &ipid, &data, &dn, err, sizeof(err)),
                  -EINVAL);
        sr = "{\"process\":{\"pid\":8}}";
        CHECK_INT(e2bwire_input_parse(sr, strlen(sr), &ipid, NULL, NULL, err, sizeof(err)), 0);
        CHECK(ipid == 8);
        /* Connect's too: a selector by pid alone (tags are not kept), nothing beside */
        const char *const bad[] = {"{\"process\":{\"tag\":\"x\"}}",
                                   "{\"process\":{\"pid\":8,\"tag\":\"x\"}}",
                                   "{\"process\":{\"pid\":-1}}",
                                   "{\"process\":{\"pid\":4294967296}}",
                                   "{\"process\":{\"pid\":8},\"input\":{}}",
                                   "{\"pid\":8}"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
            CHECK_INT(e2bwire_input_parse(bad[i], strlen(bad[i]), &ipid, NULL, NULL, err,
                                          sizeof(err)),
                      -EINVAL);
        CHECK(ipid == 8);
    }
    /* elsewhere in the sandbox: an absolute path of its own file system */
    sr = "{\"process\":{\"cmd\":\"/bin/sh\",\"cwd\":\"/tmp/test-git\"}}";
    CHECK_INT(e2bwire_start_parse(sr, strlen(sr), &st, err, sizeof(err)), 0);
    CHECK(st.cwd_abs);
    CHECK_STR(st.cwd, "/tmp/test-git");
    e2bwire_start_fini(&st);
    /* a relative one stays in the workspace */
    sr = "{\"process\":{\"cmd\":\"/bin/sh\",\"cwd\":\"../../../etc\"}}";
    CHECK_INT(e2bwire_start_parse(sr, strlen(sr), &st, err, sizeof(err)), -EINVAL);
    sr = "{\"process\":{\"cmd\":\"/bin/sh\",\"envs\":{\"A=B\":\"x\"}}}";
    CHECK_INT(e2bwire_start_parse(sr, strlen(sr), &st, err, sizeof(err)), -EINVAL);
    sr = "{\"process\":{\"args\":[\"x\"]}}";
    CHECK_INT(e2bwire_start_parse(sr, strlen(sr), &st, err, sizeof(err)), -EINVAL);
    unsigned pid;
    int sig;
    sr = "{\"process\":{\"pid\":1001},\"signal\":\"SIGNAL_SIGKILL\"}";
    CHECK_INT(e2bwire_signal_parse(sr, strlen(sr), &pid, &sig, err, sizeof(err)), 0);
    CHECK(pid == 1001 && sig == 9);
    sr = "{\"process\":{\"tag\":\"x\"},\"signal\":\"SIGNAL_SIGKILL\"}";
    CHECK_INT(e2bwire_signal_parse(sr, strlen(sr), &pid, &sig, err, sizeof(err)), -EINVAL);
    sr = "{\"process\":{\"pid\":1},\"signal\":\"SIGNAL_SIGSTOP\"}";
    CHECK_INT(e2bwire_signal_parse(sr, strlen(sr), &pid, &sig, err, sizeof(err)), -EINVAL);

    /* envelopes */
    buf_t b;
    buf_init(&b, SIZE_MAX);
    CHECK_INT(e2bwire_envelope_write(&b, E2BWIRE_ENV_END, "{}", 2), 0);
    CHECK_MEM(b.data, b.len, "\x02\x00\x00\x00\x02{}", 7);
    uint8_t fl;
    size_t off, n, used;
    CHECK_INT(e2bwire_envelope_parse((const uint8_t *)b.data, b.len, 16, &fl, &off, &n, &used), 0);
    CHECK(fl == E2BWIRE_ENV_END && off == 5 && n == 2 && used == 7);
    CHECK_INT(e2bwire_envelope_parse((const uint8_t *)b.data, 6, 16, &fl, &off, &n, &used),
              -EAGAIN);
    CHECK_INT(e2bwire_envelope_parse((const uint8_t *)b.data, b.len, 1, &fl, &off, &n, &used),
              -EMSGSIZE);
    CHECK_INT(e2bwire_envelope_parse((const uint8_t *)"\x01\0\0\0\0", 5, 16, &fl, &off, &n, &used),
              -EPROTO);
    buf_fini(&b);
    CHECK_STR(e2bwire_code_name(-ENOENT), "not_found");
    CHECK_INT(e2bwire_code_status("unimplemented"), 501);
    CHECK_INT(e2bwire_code_status("not_found"), 404);

    /* the listing's query: e2b 2.51.0's (metadata's pairs encoded once more) */
    struct e2bwire_list l;
    const char *q1[] = {"metadata=user=a%2520b&app=prod%2526x", "state=running,paused",
                        "limit=5", "order=asc", "startedAfter=2025-01-02T03:04:05.5Z",
                        "template=base"};
    CHECK_INT(e2bwire_list_parse(q1, 6, &l, err, sizeof(err)), 0);
    CHECK_STR(json_string_value(json_object_get(l.metadata, "user")), "a b");
    CHECK_STR(json_string_value(json_object_get(l.metadata, "app")), "prod&x");
    CHECK(l.states == (E2BWIRE_STATE_RUNNING | E2BWIRE_STATE_PAUSED));
    CHECK(l.limit == 5 && l.ascending && !l.has_token);
    CHECK(l.started_after_us == 1735787045500000LL);
    CHECK_STR(l.template_id, "base");
    e2bwire_list_fini(&l);
    const char *q2[] = {"state=paused", "startedAfter=2025-01-02T05:04:05+02:00"};
    CHECK_INT(e2bwire_list_parse(q2, 2, &l, err, sizeof(err)), 0);
    CHECK(l.states == E2BWIRE_STATE_PAUSED && l.limit == E2BWIRE_LIST_LIMIT_MAX && !l.ascending);
    CHECK(l.started_after_us == 1735787045000000LL);
    e2bwire_list_fini(&l);
    /* a token names an item; the order puts items before or after it */
    char tok[96], arg[128];
    e2bwire_list_token(tok, sizeof(tok), 42, "00000000-0000-4000-8000-000000000001");
    snprintf(arg, sizeof(arg), "nextToken=%s", tok);
    const char *q3[] = {arg};
    CHECK_INT(e2bwire_list_parse(q3, 1, &l, err, sizeof(err)), 0);
    CHECK(l.has_token && l.token_us == 42);
    CHECK_STR(l.token_id, "00000000-0000-4000-8000-000000000001");
    CHECK(e2bwire_list_before(&l, 43, "a", 42, "b")); /* newest first */
    CHECK(e2bwire_list_before(&l, 42, "b", 42, "a"));
    CHECK(!e2bwire_list_before(&l, 41, "z", 42, "a"));
    e2bwire_list_fini(&l);
    /* refused, never dropped */
    static const char *const bad[] = {"state=sleeping", "limit=0", "limit=101", "limit=5x",
                                      "order=up", "nextToken=zz", "nextToken=1.x",
                                      "startedAfter=2025-13-01T00:00:00Z",
                                      "startedAfter=2025-01-01", "metadata=novalue",
                                      "metadata=k=%zz", "metadata=k=%2500", "owner=me"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_CASE(bad[i]);
        CHECK_INT(e2bwire_list_parse(&bad[i], 1, &l, err, sizeof(err)), -EINVAL);
        CHECK(err[0] != '\0');
    }
    /* envVars: one name rule */
    CHECK(e2bwire_env_name_ok("_A1") && !e2bwire_env_name_ok("1A") &&
          !e2bwire_env_name_ok("A-B") && !e2bwire_env_name_ok(""));
    CHECK_INT(create("{\"envVars\":{\"A-B\":\"1\"}}", &c, err), -EINVAL);
    CHECK_DONE();
}
