/* kgw selftest (see selftest.h). One kernel, started as a client's would be (the gateway's
 * options, its default kernelspec, no warm pool), with an egress policy that names only a
 * loopback listener of the gateway's; a Python cell checks from inside and writes
 * its findings to the kernel's workspace, where the gateway reads them (a file the kernel
 * controls: read without following links, bounded, parsed with jansson). */
#include "gateway/selftest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "kernelmgr/kconn.h"
#include "kernelmgr/kmgr.h"

#define RESULT_FILE ".kgw-selftest.json"
#define RESULT_MAX  (256 * 1024)
#define DEADLINE_MS 90000
#define CANARY_NAME "KGW_SELFTEST_CANARY"
#define SESSION     "kgw-selftest"
/* a secret the kernel gets as a placeholder: its value (never in the cell: the kernel is
 * told its SHA-256 and length) must reach the listener and nowhere in the kernel */
#define SECRET_NAME   "SELFTEST_SECRET"
#define SECRET_PREFIX "kgwst"

/* The cell: P holds the expectations; every check is [group, check, expected, seen, ok]. */
static const char script[] =
    "import os, json, socket, errno, ctypes, resource, base64, threading\n"
    "P = json.loads(base64.b64decode('%s'))\n"
    "C = []\n"
    "def check(group, name, expected, seen, ok):\n"
    "    C.append([group, name, str(expected), str(seen), bool(ok)])\n"
    "def err_of(fn):\n"
    "    try:\n"
    "        fn()\n"
    "        return 'succeeded'\n"
    "    except OSError as e:\n"
    "        return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__\n"
    "def conn(addr):\n"
    "    socket.create_connection(addr, timeout=3).close()\n"
    "ids = (os.getuid(), os.geteuid(), os.getgid(), os.getegid())\n"
    "check('identity', 'uid and gid', '1000 (real and effective)', ids, ids == (1000,) * 4)\n"
    "check('identity', 'supplementary groups', 'none', os.getgroups(), os.getgroups() == [])\n"
    "st = {}\n"
    "for l in open('/proc/self/status').read().splitlines():\n"
    "    k, _, v = l.partition(':')\n"
    "    st[k] = v.strip()\n"
    "caps = {k: st.get(k, '?') for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')}\n"
    "check('capabilities', 'capability sets', 'all empty', ' '.join('%%s=%%s' %% kv for kv in "
    "caps.items()), all(v != '?' and int(v, 16) == 0 for v in caps.values()))\n"
    "check('capabilities', 'no_new_privs', '1', st.get('NoNewPrivs'), st.get('NoNewPrivs') == "
    "'1')\n"
    "check('seccomp', 'filter', 'mode 2 (filter)', st.get('Seccomp'), st.get('Seccomp') == '2')\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "r = libc.syscall(435, None, 0)\n"
    "e = ctypes.get_errno()\n"
    "check('seccomp', 'clone3 refused', 'ENOSYS', errno.errorcode.get(e, e) if r < 0 else "
    "'returned %%d' %% r, r < 0 and e == errno.ENOSYS)\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    r = libc.unshare(0x10000000)\n"
    "    os._exit(0 if r == 0 else ctypes.get_errno() & 0xff)\n"
    "code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
    "check('seccomp', 'unshare(CLONE_NEWUSER) refused', 'EPERM', 'succeeded' if code == 0 else "
    "errno.errorcode.get(code, code), code == errno.EPERM)\n"
    "c1 = open('/proc/1/cmdline', 'rb').read()\n"
    "check('namespaces', 'pid 1 (inside)', 'the sandbox init', c1, c1 == b'init\\0')\n"
    "procs = sorted(int(d) for d in os.listdir('/proc') if d.isdigit())\n"
    "check('namespaces', 'processes visible', 'only the sandbox\\'s', procs, len(procs) <= 4 and "
    "max(procs) < 100)\n"
    "check('namespaces', 'hostname', 'sandbox', socket.gethostname(), socket.gethostname() == "
    "'sandbox')\n"
    "um = [l.split() for l in open('/proc/self/uid_map').read().splitlines()]\n"
    "check('namespaces', 'uid map', 'single unprivileged host uids', um, all(m[2] == '1' and "
    "m[1] != '0' for m in um))\n"
    "check('filesystem', 'root read-only', 'EROFS', err_of(lambda: open('/kgw-selftest', "
    "'w')), err_of(lambda: open('/kgw-selftest', 'w')) == 'EROFS')\n"
    "check('filesystem', '/usr read-only', 'EROFS', err_of(lambda: open('/usr/kgw-selftest', "
    "'w')), err_of(lambda: open('/usr/kgw-selftest', 'w')) == 'EROFS')\n"
    "seen = [p for p in P['host_paths'] if os.path.lexists(p)]\n"
    "check('filesystem', 'host files', 'none of ' + ', '.join(P['host_paths']), seen or 'none', "
    "not seen)\n"
    "check('filesystem', 'workspace writable', 'succeeded', err_of(lambda: open('/mnt/data/"
    ".kgw-w', 'w').close()), os.path.exists('/mnt/data/.kgw-w'))\n"
    "devs = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
    "check('network', 'interfaces', 'lo only', devs, devs == ['lo'])\n"
    "e4 = err_of(lambda: conn(('192.0.2.1', 80)))\n"
    "check('network', 'IPv4 route out', 'ENETUNREACH', e4, e4 in ('ENETUNREACH', "
    "'EHOSTUNREACH'))\n"
    "e6 = err_of(lambda: conn(('2001:db8::1', 80)))\n"
    "check('network', 'IPv6 route out', 'ENETUNREACH', e6, e6 in ('ENETUNREACH', "
    "'EHOSTUNREACH', 'EADDRNOTAVAIL'))\n"
    "try:\n"
    "    socket.getaddrinfo('example.com', 443)\n"
    "    dns = 'resolved'\n"
    "except OSError as e:\n"
    "    dns = type(e).__name__\n"
    "check('network', 'DNS', 'no resolution', dns, dns != 'resolved')\n"
    "eg = err_of(lambda: conn(('127.0.0.1', P['gw_port'])))\n"
    "check('network', 'gateway port %%d unreachable' %% P['gw_port'], 'ECONNREFUSED', eg, eg == "
    "'ECONNREFUSED')\n"
    "import urllib.request, urllib.error\n"
    "def fetch(port):\n"
    "    try:\n"
    "        with urllib.request.urlopen('http://127.0.0.1:%%d/' %% port, timeout=10) as r:\n"
    "            return r.status, r.read().decode(errors='replace')\n"
    "    except urllib.error.HTTPError as e:\n"
    "        return e.code, str(e.reason)\n"
    "    except Exception as e:\n"
    "        return 0, repr(e)\n"
    "px = os.environ.get('HTTP_PROXY')\n"
    "check('egress', 'proxy variables', 'http://127.0.0.1:3128', px, px == "
    "'http://127.0.0.1:3128')\n"
    "s, b = fetch(P['egress_port'])\n"
    "check('egress', 'the host its policy names', '200 kgw-selftest', '%%s %%s' %% (s, b[:60]), "
    "s == 200 and b == 'kgw-selftest')\n"
    "s, b = fetch(P['gw_port'])\n"
    "check('egress', 'a host its policy does not name', '403', '%%s %%s' %% (s, b[:60]), s == "
    "403)\n"
    "import hashlib\n"
    "ph = os.environ.get(P['secret_name'], '')\n"
    "check('secrets', 'variable holds a placeholder', 'kgw-secret- and 32 hex digits', ph[:11] + "
    "'...' if ph else 'absent', ph.startswith('kgw-secret-') and len(ph) == 43)\n"
    "blobs = [open('/proc/self/environ', 'rb').read(), '\\0'.join('%%s=%%s' %% kv for kv in "
    "os.environ.items()).encode()]\n"
    "for top in ('/run', '/opt', '/tmp', '/mnt/data', os.path.expanduser('~'), '/dev/shm'):\n"
    "    for d, _, fs in os.walk(top):\n"
    "        for f in fs[:200]:\n"
    "            try:\n"
    "                with open(os.path.join(d, f), 'rb') as fh:\n"
    "                    blobs.append(fh.read(1 << 20))\n"
    "            except OSError:\n"
    "                pass\n"
    "pre, n, found = P['secret_prefix'].encode(), P['secret_len'], 0\n"
    "for b in blobs:\n"
    "    i = b.find(pre)\n"
    "    while i >= 0:\n"
    "        found += hashlib.sha256(b[i:i + n]).hexdigest() == P['secret_sha256']\n"
    "        i = b.find(pre, i + 1)\n"
    "check('secrets', 'value readable in the kernel', 'nowhere (environment, files)', '%%d places "
    "in %%d files' %% (found, len(blobs)) if found else 'nowhere in %%d' %% len(blobs), found "
    "== 0)\n"
    "try:\n"
    "    rq = urllib.request.Request('http://127.0.0.1:%%d/secret' %% P['egress_port'], "
    "headers={'Authorization': ph})\n"
    "    with urllib.request.urlopen(rq, timeout=10) as r:\n"
    "        s, b = r.status, r.read().decode(errors='replace')\n"
    "except Exception as e:\n"
    "    s, b = 0, repr(e)\n"
    "check('secrets', 'placeholder sent to its host', '200 kgw-selftest', '%%s %%s' %% (s, "
    "b[:60]), s == 200 and b == 'kgw-selftest')\n"
    "lim = {'NOFILE': (P['nofile'],) * 2, 'FSIZE': (P['fsize'],) * 2, 'CORE': (0, 0)}\n"
    "for n, want in lim.items():\n"
    "    got = resource.getrlimit(getattr(resource, 'RLIMIT_' + n))\n"
    "    check('rlimits', 'RLIMIT_' + n, want, got, tuple(got) == tuple(want))\n"
    "leak = [k for k, v in os.environ.items() if k == P['canary'] or P['canary_value'] in v]\n"
    "check('environment', 'gateway variables', 'none (canary absent)', leak or 'none', not leak)\n"
    "check('environment', 'HOME', '/home/sandbox', os.environ.get('HOME'), "
    "os.environ.get('HOME') == '/home/sandbox')\n"
    "if P['pids'] <= 4096:\n"
    "    ev, ts, refused = threading.Event(), [], False\n"
    "    try:\n"
    "        for i in range(P['pids'] + 16):\n"
    "            t = threading.Thread(target=ev.wait)\n"
    "            t.start()\n"
    "            ts.append(t)\n"
    "    except RuntimeError:\n"
    "        refused = True\n"
    "    ev.set()\n"
    "    for t in ts:\n"
    "        t.join()\n"
    "    check('cgroup', 'pids limit enforced', 'threads refused before %%d' %% P['pids'], '%%d "
    "started, then %%s' %% (len(ts), 'refused' if refused else 'no refusal'), refused and "
    "len(ts) < P['pids'])\n"
    "open('/mnt/data/" RESULT_FILE "', 'w').write(json.dumps(C))\n";

/* "the internet" of the egress checks: a loopback listener of the gateway's that answers
 * every request with "kgw-selftest" (the policy of the selftest's kernel names only it) */
#define HCONN_MAX 8
struct hconn {
    int fd;
    evl_io_t *io;
    size_t n;
    char buf[2048];
};

static struct {
    gw_t *g;
    int hfd, hport;
    evl_io_t *hio;
    struct hconn hc[HCONN_MAX];
    egpol_t egress;
    kernel_t *k;
    char instance[64]; /* the kernel manager's instance name (its cgroups are named after it) */
    kconn_t *c;
    kwait_t *w;
    evl_timer_t *deadline;
    json_t *checks;
    char msg_id[64];
    char canary[33];
    char secret[64];
    secrets_t *secrets, *saved; /* the selftest's, and the operator's (put back at the end) */
    bool secret_seen;           /* the listener received the value */
    bool done;
} T;

static void hconn_close(struct hconn *h)
{
    evl_io_destroy(&T.g->loop.evl, &h->io);
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

static void on_hconn(void *data)
{
    static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n"
                                 "Connection: close\r\n\r\nkgw-selftest";
    struct hconn *h = data;
    ssize_t n = recv(h->fd, h->buf + h->n, sizeof(h->buf) - 1 - h->n, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0) {
        h->n += (size_t)n;
        h->buf[h->n] = '\0';
        if (!strstr(h->buf, "\r\n\r\n") && h->n < sizeof(h->buf) - 1)
            return;
        if (T.secret[0] && strstr(h->buf, T.secret))
            T.secret_seen = true;
        ssize_t w = send(h->fd, answer, sizeof(answer) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    /* lwsloop drops a watch deleted in its own callback safely (it is not touched after) */
    hconn_close(h);
}

static void on_haccept(void *data)
{
    int fd = accept4(T.hfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    for (int i = 0; i < HCONN_MAX; i++)
        if (T.hc[i].fd < 0) {
            T.hc[i].fd = fd;
            T.hc[i].n = 0;
            if (!(T.hc[i].io = T.g->loop.evl.io_add(&T.g->loop.evl, fd, on_hconn, &T.hc[i])))
                hconn_close(&T.hc[i]);
            return;
        }
    close(fd);
}

static int hlisten(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    T.hfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (T.hfd < 0 || bind(T.hfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(T.hfd, 8) < 0 ||
        getsockname(T.hfd, (struct sockaddr *)&a, &len) < 0)
        return -errno;
    T.hport = ntohs(a.sin_port);
    if (!(T.hio = T.g->loop.evl.io_add(&T.g->loop.evl, T.hfd, on_haccept, NULL)))
        return -errno;
    char text[32], err[64];
    snprintf(text, sizeof(text), "127.0.0.1:%d", T.hport);
    return egpol_parse(text, strlen(text), &T.egress, err, sizeof(err));
}

static void add(const char *group, const char *name, const char *expected, const char *seen,
                bool ok)
{
    json_array_append_new(T.checks, json_pack("{s:s, s:s, s:s, s:s, s:b}", "group", group,
                                              "check", name, "expected", expected, "seen", seen,
                                              "pass", ok));
}

static void finish(void)
{
    if (T.done)
        return;
    T.done = true;
    T.g->stopping = true;
    lws_cancel_service(T.g->ctx);
}

/* ---- from the gateway's side ---- */

static void check_namespaces(pid_t pid)
{
    static const char *const ns[][2] = {{"user", "user"}, {"mnt", "mnt"}, {"net", "net"},
                                        {"ipc", "ipc"},   {"uts", "uts"}, {"cgroup", "cgroup"},
                                        {"pid", "pid_for_children"}};
    char same[128] = "", p[64], a[64], b[64];
    int n = 0;
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        snprintf(p, sizeof(p), "/proc/%d/ns/%s", (int)pid, ns[i][1]);
        ssize_t la = readlink(p, a, sizeof(a) - 1);
        snprintf(p, sizeof(p), "/proc/self/ns/%s", ns[i][0]);
        ssize_t lb = readlink(p, b, sizeof(b) - 1);
        if (la <= 0 || lb <= 0 || (la == lb && !memcmp(a, b, (size_t)la))) {
            snprintf(same + strlen(same), sizeof(same) - strlen(same), "%s%s", n ? " " : "",
                     ns[i][0]);
            n++;
        }
    }
    char seen[160];
    if (n)
        snprintf(seen, sizeof(seen), "shared or unreadable: %s", same);
    else
        snprintf(seen, sizeof(seen), "all 7 differ");
    add("namespaces", "user mnt net ipc uts cgroup pid", "all differ from the gateway's", seen,
        n == 0);
}

static long long read_ll(const char *path)
{
    char buf[64];
    if (util_read_small(path, buf, sizeof(buf)) < 0)
        return -1;
    if (!strncmp(buf, "max", 3))
        return LLONG_MAX;
    return strtoll(buf, NULL, 10);
}

/* The cgroup file of controller (v1) or the unified hierarchy (v2) for pid. */
static bool cgroup_file(pid_t pid, const char *controller, const char *v1, const char *v2,
                        char *out, size_t outsz)
{
    char p[64], line[512];
    snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(p, "re");
    bool found = false;
    if (!f)
        return false;
    while (!found && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (!*ctrls) {
            snprintf(out, outsz, "/sys/fs/cgroup%s/%s", path, v2);
            found = access(out, F_OK) == 0;
            continue;
        }
        for (char *save = NULL, *t = strtok_r((char *)ctrls, ",", &save); t;
             t = strtok_r(NULL, ",", &save))
            if (!strcmp(t, controller)) {
                snprintf(out, outsz, "/sys/fs/cgroup/%s%s/%s", controller, path, v1);
                found = access(out, F_OK) == 0;
            }
    }
    fclose(f);
    return found;
}

static void check_cgroup(pid_t pid, const char *name, const char *controller, const char *v1,
                         const char *v2, long long want)
{
    char file[PATH_MAX], exp[64], seen[PATH_MAX + 64];
    snprintf(exp, sizeof(exp), "%lld", want);
    if (!cgroup_file(pid, controller, v1, v2, file, sizeof(file))) {
        add("cgroup", name, exp, "no such cgroup file", false);
        return;
    }
    long long v = read_ll(file);
    snprintf(seen, sizeof(seen), "%lld (%s)", v, file);
    add("cgroup", name, exp, seen, v == want);
}

static void check_cpu(pid_t pid, long long millis)
{
    char q[PATH_MAX], p[PATH_MAX], exp[64], seen[96];
    snprintf(exp, sizeof(exp), "%lld/1000 of a CPU", millis);
    if (cgroup_file(pid, "cpu", "cpu.cfs_quota_us", "cpu.max", q, sizeof(q)) &&
        strstr(q, "cpu.cfs_quota_us")) {
        snprintf(p, sizeof(p), "%.*s/cpu.cfs_period_us", (int)(strrchr(q, '/') - q), q);
        long long quota = read_ll(q), period = read_ll(p);
        long long got = period > 0 ? quota * 1000 / period : -1;
        snprintf(seen, sizeof(seen), "%lld/1000 (quota %lld us per %lld us)", got, quota, period);
        add("cgroup", "CPU limit", exp, seen, got == millis);
    } else if (cgroup_file(pid, "cpu", "cpu.cfs_quota_us", "cpu.max", q, sizeof(q))) {
        char buf[64] = "";
        int fd = open(q, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
            close(fd);
        buf[n > 0 ? n : 0] = '\0';
        long long quota = -1, period = -1;
        sscanf(buf, "%lld %lld", &quota, &period);
        long long got = period > 0 ? quota * 1000 / period : -1;
        snprintf(seen, sizeof(seen), "%lld/1000 (cpu.max %lld %lld)", got, quota, period);
        add("cgroup", "CPU limit", exp, seen, got == millis);
    } else {
        add("cgroup", "CPU limit", exp, "no cpu controller for the kernel", false);
    }
}

/* ---- from inside ---- */

static char *params(void)
{
    const struct sbx_limits *lim = &T.g->cfg.sb.lim;
    char exe[PATH_MAX] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    json_t *hp = json_pack("[s, s, s]", "/etc/shadow", "/var/log",
                           T.g->cfg.km.runtime_dir);
    if (exe[0] && strncmp(exe, "/usr/", 5))
        json_array_append_new(hp, json_string(exe)); /* kgw itself, unless under /usr */
    if (T.g->cfg.key_file && T.g->cfg.key_file[0])
        json_array_append_new(hp, json_string(T.g->cfg.key_file));
    unsigned char h[crypto_hash_sha256_BYTES];
    char hex[2 * sizeof(h) + 1];
    crypto_hash_sha256(h, (const unsigned char *)T.secret, strlen(T.secret));
    sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
    json_t *p = json_pack("{s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:o, s:s, s:s, s:s, s:I}",
                          "gw_port",
                          (json_int_t)T.g->cfg.port, "egress_port", (json_int_t)T.hport, "nofile",
                          (json_int_t)lim->nofile, "fsize", (json_int_t)lim->fsize_bytes, "pids",
                          (json_int_t)lim->pids, "canary", CANARY_NAME, "canary_value", T.canary,
                          "host_paths", hp, "secret_name", SECRET_NAME, "secret_prefix",
                          SECRET_PREFIX, "secret_sha256", hex, "secret_len",
                          (json_int_t)strlen(T.secret));
    char *s = json_dumps(p, JSON_COMPACT);
    json_decref(p);
    if (!s)
        return NULL;
    size_t len = strlen(s), b64len = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
    char *b64 = malloc(b64len);
    if (b64)
        sodium_bin2base64(b64, b64len, (const unsigned char *)s, len,
                          sodium_base64_VARIANT_ORIGINAL);
    free(s);
    if (!b64)
        return NULL;
    char *code = NULL;
    if (asprintf(&code, script, b64) < 0)
        code = NULL;
    free(b64);
    return code;
}

static void read_results(void)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", wspace_path(kernel_workspace(T.k)), RESULT_FILE);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char *buf = malloc(RESULT_MAX);
    ssize_t n = fd >= 0 && buf ? read(fd, buf, RESULT_MAX) : -1;
    if (fd >= 0)
        close(fd);
    json_error_t je;
    json_t *v = n > 0 && n < RESULT_MAX ? json_loadb(buf, (size_t)n, 0, &je) : NULL;
    free(buf);
    size_t i;
    json_t *c;
    if (!json_is_array(v)) {
        add("kernel", "checks from inside", "results", "none (the cell failed)", false);
        json_decref(v);
        return;
    }
    json_array_foreach(v, i, c)
    {
        const char *g, *name, *exp, *seen;
        int ok;
        if (json_unpack(c, "[s, s, s, s, b]", &g, &name, &exp, &seen, &ok) == 0)
            add(g, name, exp, seen, ok);
    }
    json_decref(v);
}

static void on_reply(void *user, kconn_t *c, enum jchan chan, const jmsg_t *m, const jhdr_t *h)
{
    if (chan != JCHAN_SHELL || strcmp(h->msg_type, "execute_reply"))
        return;
    read_results();
    add("secrets", "value put in by the proxy", "the host received it",
        T.secret_seen ? "received" : "not received", T.secret_seen);
    finish();
}

static void send_cell(void)
{
    static const struct kconn_ops ops = {.reply = on_reply};
    char *code = params();
    char *hdr = jmsg_new_header("execute_request", SESSION, T.msg_id);
    json_t *content = json_pack("{s:s?, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 0,
                                "store_history", 0, "user_expressions", "allow_stdin", 0,
                                "stop_on_error", 1);
    char *cs = content ? json_dumps(content, JSON_COMPACT) : NULL;
    json_decref(content);
    if (code && hdr && cs && (T.c = kconn_new(T.k, SESSION, &ops, NULL))) {
        jmsg_t msg;
        jhdr_t h;
        jmsg_own(&msg, &h, hdr, T.msg_id, "execute_request", NULL, cs);
        if (kconn_send(T.c, JCHAN_SHELL, &msg, &h) < 0) {
            add("kernel", "run the checks", "sent", "could not send the cell", false);
            finish();
        }
    } else {
        add("kernel", "run the checks", "sent", "out of memory", false);
        finish();
    }
    free(code);
    free(hdr);
    free(cs);
}

static void on_started(void *data, kernel_t *k, int status)
{
    T.w = NULL;
    if (status < 0) {
        add("kernel", "start", "running", strerror(-status), false);
        return finish();
    }
    char seen[64];
    snprintf(seen, sizeof(seen), "running (%s)", kmgr_sandbox_mode(T.g->km));
    add("kernel", "start", "running, sandboxed", seen, T.g->cfg.sandbox);
    pid_t pid = kernel_pid(k);
    const struct sbx_limits *lim = &T.g->cfg.sb.lim;
    check_namespaces(pid);
    check_cgroup(pid, "memory limit", "memory", "memory.limit_in_bytes", "memory.max",
                 lim->mem_bytes);
    check_cgroup(pid, "pids limit", "pids", "pids.max", "pids.max", lim->pids);
    check_cpu(pid, lim->cpu_millis);
    send_cell();
}

/* The selftest's secret, for its listener only, in the table kernels' proxies read. */
static int secret_setup(gw_t *g)
{
    char line[256], err[160];
    struct secrets_entry e;
    snprintf(T.secret, sizeof(T.secret), SECRET_PREFIX);
    util_random_hex(T.secret + strlen(SECRET_PREFIX), 16);
    snprintf(line, sizeof(line), "selftest %s 127.0.0.1:%d %s", SECRET_NAME, T.hport, T.secret);
    int r = secrets_parse_line(line, strlen(line), &e, err, sizeof(err));
    sodium_memzero(line, sizeof(line));
    if (r != 1)
        return r < 0 ? r : -EINVAL;
    if (!(T.secrets = calloc(1, sizeof(*T.secrets))) ||
        !(T.secrets->v = malloc(sizeof(*T.secrets->v)))) {
        secrets_entry_fini(&e);
        return -ENOMEM;
    }
    T.secrets->v[0] = e;
    T.secrets->n = 1;
    T.saved = g->secrets;
    g->secrets = T.secrets;
    return 0;
}

static void on_deadline(void *data)
{
    add("kernel", "checks finished", "within 90 s", "timed out", false);
    finish();
}

int selftest_start(gw_t *g)
{
    T.g = g;
    T.hfd = -1;
    for (int i = 0; i < HCONN_MAX; i++)
        T.hc[i].fd = -1;
    if (!(T.checks = json_array()))
        return -ENOMEM;
    util_random_hex(T.canary, 16);
    setenv(CANARY_NAME, T.canary, 1); /* must not reach the kernel */
    if (!(T.deadline = g->loop.evl.timer_new(&g->loop.evl, on_deadline, NULL)))
        return -ENOMEM;
    g->loop.evl.timer_arm(&g->loop.evl, T.deadline, DEADLINE_MS);
    if (!g->cfg.sandbox) { /* the checks would run on the host itself */
        add("kernel", "sandbox", "enabled", "disabled (--no-sandbox): nothing checked", false);
        finish();
        return 0;
    }
    snprintf(T.instance, sizeof(T.instance), "%s", kmgr_instance(g->km));
    if (kmgr_sandbox_error(g->km))
        add("kernel", "sandbox", "available", kmgr_sandbox_error(g->km), false);
    int r = hlisten();
    if (r < 0)
        return r;
    if ((r = secret_setup(g)) < 0)
        return r;
    static const char *const names[] = {SECRET_NAME};
    struct kmgr_start st = {.spec_name = g->cfg.default_kernel, .tenant = "selftest",
                            .egress = &T.egress, .secrets = names, .nsecrets = 1};
    r = kmgr_start(g->km, &st, &T.k);
    if (r < 0) {
        add("kernel", "start", "running", strerror(-r), false);
        finish();
        return 0;
    }
    if ((r = kernel_wait(T.k, on_started, NULL, &T.w)) == -EALREADY)
        on_started(NULL, T.k, 0);
    else if (r < 0)
        return r;
    return 0;
}

int selftest_finish(bool json)
{
    size_t i, failed = 0;
    json_t *c;
    kwait_cancel(&T.w);
    kconn_destroy(&T.c);
    if (T.g) {
        evl_timer_destroy(&T.g->loop.evl, &T.deadline);
        for (int j = 0; j < HCONN_MAX; j++)
            hconn_close(&T.hc[j]);
        evl_io_destroy(&T.g->loop.evl, &T.hio);
        if (T.hfd >= 0)
            close(T.hfd);
        if (T.secrets) {
            T.g->secrets = T.saved;
            secrets_free(&T.secrets);
        }
    }
    if (!T.checks)
        return 1;
    if (json_array_size(T.checks) == 0)
        add("kernel", "checks", "some", "none ran", false);
    json_array_foreach(T.checks, i, c) failed += !json_is_true(json_object_get(c, "pass"));
    if (json) {
        json_t *out = json_pack("{s:O, s:b, s:s?, s:s}", "checks", T.checks, "passed",
                                failed == 0, "weakened",
                                KGW_TEST_WEAKEN[0] ? KGW_TEST_WEAKEN : NULL, "instance",
                                T.instance);
        char *s = out ? json_dumps(out, JSON_INDENT(2)) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(out);
    } else {
        printf("%-12s %-34s %-34s %-44s %s\n", "GROUP", "CHECK", "EXPECTED", "SEEN", "RESULT");
        json_array_foreach(T.checks, i, c)
        {
            printf("%-12.12s %-34.34s %-34.34s %-44.44s %s\n",
                   json_string_value(json_object_get(c, "group")),
                   json_string_value(json_object_get(c, "check")),
                   json_string_value(json_object_get(c, "expected")),
                   json_string_value(json_object_get(c, "seen")),
                   json_is_true(json_object_get(c, "pass")) ? "pass" : "FAIL");
        }
        printf("%zu checks, %zu failed%s%s\n", json_array_size(T.checks), failed,
               KGW_TEST_WEAKEN[0] ? "; TEST BUILD weakened: " : "", KGW_TEST_WEAKEN);
    }
    fflush(stdout);
    json_decref(T.checks);
    T.checks = NULL;
    return failed ? 1 : 0;
}
