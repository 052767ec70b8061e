#include "gateway/setup.h"

#include "gateway/faces.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "gateway/channel.h"
#include "gateway/ckpt.h"
#include "gateway/conns.h"
#include "gateway/e2b.h"
#include "gateway/glisten.h"
#include "gateway/kops.h"
#include "gateway/sdnotify.h"
#include "gateway/sessions.h"
#include "gateway/wschan.h"
#include "gateway/mcp.h"
#include "gateway/xexec.h"

size_t setup_nofile(gw_t *g)
{
    /* Kernels and clients need descriptors; lws sizes its tables from this limit. A kernel
     * websocket costs 7 (its socket; shell, control and stdin DEALERs: each a mailbox and an
     * ipc connection), a kernel KMGR_KERNEL_FDS (docs/operations.md "Capacity"). The kernel
     * manager refuses a start (503) that would leave less than SETUP_FD_RESERVE; at start-up
     * this only warns when --max-kernels does not fit. */
    g->cfg.km.fd_per_client = SETUP_FD_PER_CLIENT;
    g->cfg.km.fd_reserve = SETUP_FD_RESERVE;
    rlim_t want = SETUP_FD_PER_CLIENT * (rlim_t)g->cfg.max_connections +
                  KMGR_KERNEL_FDS * (rlim_t)g->cfg.km.max_kernels + 256;
    struct rlimit rl = {want, want}; /* what is assumed should getrlimit fail */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_max < want) { /* root may raise the hard limit */
            struct rlimit raised = {want, want};
            if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
                rl = raised;
        }
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < want)
            log_warn("open files limited to %llu (wanted %llu for --max-connections and "
                     "--max-kernels)",
                     (unsigned long long)rl.rlim_cur, (unsigned long long)want);
        /* what the gateway holds without kernels (listeners, loop, logs, fork server) is
         * about SETUP_FD_BASE */
        rlim_t per = KMGR_KERNEL_FDS + SETUP_FD_PER_CLIENT;
        rlim_t fixed = SETUP_FD_BASE + SETUP_FD_RESERVE;
        rlim_t fit = rl.rlim_cur > fixed ? (rl.rlim_cur - fixed) / per : 0;
        if (fit < (rlim_t)g->cfg.km.max_kernels)
            log_warn("--max-kernels %d: the open-file limit (%llu) fits about %llu kernels with a "
                     "client each; starts beyond that are refused (503)",
                     g->cfg.km.max_kernels, (unsigned long long)rl.rlim_cur,
                     (unsigned long long)fit);
    }
    return (size_t)rl.rlim_cur;
}

void setup_sched(gw_t *g)
{
    /* The gateway relays every tenant's messages and spends microseconds on each: a short
     * slice gives its wake-ups an early deadline under EEVDF, so a busy host's kernels do not
     * delay them by a whole default slice each. Weight (its CPU share) is not touched. */
    int r;
    if (g->cfg.sched_slice_us > 0 &&
        (r = util_sched_slice((uint64_t)g->cfg.sched_slice_us * 1000)) < 0)
        log_warn("--sched-slice-us: %s", strerror(-r));
}

int setup_signals(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGUSR2);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0)
        return -errno;
    return sfd;
}

static void lws_logger(int level, const char *line)
{
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    log_debug("lws: %.*s", (int)n, line);
}


/* What lws's FILTER_NETWORK_CONNECTION did for its own listener: the per-address limits. */
static int accept_filter(void *data, const struct lws_filter_network_conn_args *a)
{
    gw_t *g = data;
    return g->conns ? conns_accept(g->conns, a) : 0;
}

/* vh fed from a socket for ip:port: one of the inherited ones, or a new one. */
static int listen_on(gw_t *g, struct lws_vhost *vh, const char *ip, long long port, bool tls,
                     int *inherited, int n, struct glisten **ret)
{
    int fd = glisten_socket(ip, port, inherited, n);
    if (fd < 0) {
        log_error("cannot listen on %s:%lld: %s", ip[0] ? ip : "*", port, strerror(-fd));
        return fd;
    }
    if (!(*ret = glisten_new(&g->loop.evl, fd, vh, tls, accept_filter, g))) {
        int err = errno;
        log_error("cannot listen on %s:%lld: %s", ip, port, strerror(err));
        return -err;
    }
    return 0;
}

int setup_listen(gw_t *g, const struct lws_protocols *protocols,
                 const struct lws_protocols *metrics_protocols, size_t fd_limit)
{
    lws_set_log_level(LLL_ERR | LLL_WARN | (log__level >= LOG_LVL_DEBUG ? LLL_NOTICE : 0),
                      lws_logger);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    /* kgw accepts itself (gateway/glisten.h) and lws adopts the connections */
    info.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    info.protocols = protocols;
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8 | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    /* A connection holds a header table (16 KiB) from accept until its request headers are
     * complete; lws allocates one when it is taken and frees it when it is given back, so a
     * pool as large as the connections costs nothing up front. Its timer on a table held
     * (timeout_secs_ah_idle) is --header-timeout: conns.c answers fresh connections a
     * moment before it, and it times a kept-alive connection's next request. */
    info.max_http_header_data = 16384;
    info.max_http_header_pool2 = (unsigned)g->cfg.max_connections;
    info.timeout_secs_ah_idle = (unsigned)g->cfg.header_timeout;
    info.fd_limit_per_thread = (unsigned)fd_limit;
    /* bodies and answers that do not complete in time are dropped; idle keep-alive
     * connections go after keepalive_timeout */
    info.timeout_secs = (unsigned)g->cfg.http_timeout;
    info.keepalive_timeout = (int)g->cfg.http_timeout;
    info.vhost_name = "kgw";
    if (g->cfg.certfile[0]) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = g->cfg.certfile;
        info.ssl_private_key_filepath = g->cfg.keyfile;
        /* HTTP/1.1 only: over h2 (which lws offers by default) answers without a body (204)
         * and streamed ones (executions, downloads) never ended their stream, so a browser's
         * or curl's request hung */
        info.alpn = "http/1.1";
    }
    /* one loop for lws and kgw's own fds and timers: lws on kgw's libuv loop (epoll), through
     * lws's libuv event-lib plugin (libwebsockets-evlib-uv) */
    int r = lwsloop_init(&g->loop);
    if (r < 0) {
        log_error("cannot make the event loop: %s", strerror(-r));
        return r;
    }
    info.options |= LWS_SERVER_OPTION_LIBUV;
    info.foreign_loops = lwsloop_foreign(&g->loop);
    g->ctx = lws_create_context(&info);
    if (!g->ctx) {
        log_error("cannot create the server context (is libwebsockets' libuv plugin, Debian's "
                  "libwebsockets-evlib-uv, installed?)");
        return -EIO;
    }
    lwsloop_attach(&g->loop, g->ctx);
    struct lws_vhost *vh = lws_create_vhost(g->ctx, &info);
    if (!vh) {
        int err = errno;
        log_error("cannot make the server's vhost: %s", strerror(err));
        return err > 0 ? -err : -EIO;
    }
    /* sockets from the service manager (socket activation) or the kgw this one replaced */
    int n = sdnotify_listen_fds(), inherited[8];
    if (n > 8) {
        log_warn("%d sockets passed in: only the first 8 are looked at", n);
        for (int i = 8; i < n; i++)
            close(3 + i);
        n = 8;
    }
    for (int i = 0; i < n; i++)
        inherited[i] = 3 + i;
    r = listen_on(g, vh, g->cfg.ip, g->cfg.port, g->cfg.certfile[0], inherited, n, &g->listener);
    if (r >= 0 && g->cfg.metrics_port > 0) { /* plain HTTP, on the same loop */
        struct lws_context_creation_info mi = info;
        const char *mip = g->cfg.metrics_ip[0] ? g->cfg.metrics_ip : g->cfg.ip;
        mi.protocols = metrics_protocols;
        /* lws moves a connection to the first vhost of its vhost's port when its Host names
         * none: the two must not share the "port" of a vhost without a listener */
        mi.port = CONTEXT_PORT_NO_LISTEN;
        mi.vhost_name = "kgw-metrics";
        mi.ssl_cert_filepath = NULL; /* plain even when --port serves TLS */
        mi.ssl_private_key_filepath = NULL;
        mi.options &= ~(uint64_t)(LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
                                  LWS_SERVER_OPTION_CREATE_VHOST_SSL_CTX);
        if (!(g->metrics_vhost = lws_create_vhost(g->ctx, &mi))) {
            int err = errno;
            log_error("cannot make the metrics vhost: %s", strerror(err));
            r = err > 0 ? -err : -EIO;
        } else if ((r = listen_on(g, g->metrics_vhost, mip, g->cfg.metrics_port, false,
                                  inherited, n, &g->metrics_listener)) >= 0) {
            log_info("metrics: GET /metrics without a key on http://%s:%lld/metrics", mip,
                     g->cfg.metrics_port);
        }
    }
    for (int i = 0; i < n; i++) {
        if (inherited[i] >= 0) {
            log_warn("a socket passed in (descriptor %d) is not for --ip/--port or "
                     "--metrics-ip/--metrics-port: closed", inherited[i]);
            close(inherited[i]);
        }
    }
    return r < 0 ? r : 0;
}

void setup_unlisten(gw_t *g)
{
    glisten_destroy(&g->listener);
    glisten_destroy(&g->metrics_listener);
}

/* Where a helper is: the option's path when set; else next to the kgw executable when it is
 * there (the build tree, where meson puts kgw, its helpers and python/ side by side); else the
 * installed directory (meson's libexecdir/kgw or datadir/kgw/python). The directory of kgw is as
 * trusted as kgw itself: whoever can write there can replace kgw. NULL when the path of kgw
 * cannot be read. */
static const char *helper_path(const char *opt, const char *rel, const char *probe,
                               const char *installed, char *buf, size_t sz)
{
    char self[PATH_MAX], p[PATH_MAX + 64];
    if (opt && opt[0])
        return opt;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(p, sizeof(p), "%s/%s%s", self, rel, probe);
    if (access(p, F_OK) == 0)
        snprintf(buf, sz, "%s/%s", self, rel);
    else
        snprintf(buf, sz, "%s/%s", installed, rel);
    return buf;
}

/* kgw-sandbox-init (and kgw-zygote) in a sealed memfd: every sandbox's pid 1 is exec'd from
 * it, so its /proc/1/exe names no host path. opt: --sandbox-init or --fork-server-exe. */
static int load_exe(const char *opt, const char *name, char *why, size_t whysz)
{
    char def[PATH_MAX + 64];
    const char *path = helper_path(opt, name, "", KGW_LIBEXECDIR, def, sizeof(def));
    if (!path) {
        int err = errno;
        snprintf(why, whysz, "cannot find kgw's own path: %s", strerror(err));
        return -err;
    }
    int src = open(path, O_RDONLY | O_CLOEXEC);
    if (src < 0) {
        int err = errno;
        snprintf(why, whysz, "cannot open %s: %s", path, strerror(err));
        return -err;
    }
    log_debug("%s: %s", name, path);
    int mfd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    struct stat st;
    if (mfd < 0 || fstat(src, &st) < 0 ||
        sendfile(mfd, src, NULL, (size_t)st.st_size) != st.st_size ||
        fchmod(mfd, 0555) < 0 ||
        fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        snprintf(why, whysz, "cannot load %s: %s", path, strerror(errno));
        close(src);
        if (mfd >= 0)
            close(mfd);
        return -EIO;
    }
    close(src);
    return mfd;
}

/* --python-path; or python/ next to the kgw executable in the build tree; or the installed
 * datadir/kgw/python: the directory of kgw_tools.py. */
static const char *python_dir(const gw_t *g, char *buf, size_t sz)
{
    return helper_path(g->cfg.python_path, "python", "/kgw_tools.py", KGW_DATADIR, buf, sz);
}

int setup_kernels(gw_t *g)
{
    static char pydir[PATH_MAX + 8]; /* the kernel manager's for as long as it runs */
    char why[256];
    g->cfg.km.python_dir = python_dir(g, pydir, sizeof(pydir));
    if (g->cfg.sandbox) {
        /* the helpers first: after the unshare below, /proc/self/exe may name kgw by a path
         * relative to a bind mount the new namespace cannot reach (its directory is lost) */
        struct kmgr_sandbox *sb = &g->cfg.sb;
        sb->init_fd = load_exe(g->cfg.sandbox_init, "kgw-sandbox-init", why, sizeof(why));
        if (sb->init_fd < 0) {
            log_error("sandbox: %s", why);
            return sb->init_fd;
        }
        if (g->cfg.fork_server) {
            sb->zygote_fd = load_exe(g->cfg.fork_server_exe, "kgw-zygote", why, sizeof(why));
            if (sb->zygote_fd < 0)
                log_warn("fork server: %s; kernels start with exec", why);
            sb->zygote_spec = g->cfg.default_kernel;
        }
        /* A private mount namespace: the per-kernel runtime tmpfs mounts are invisible to the
         * host and vanish with the gateway. Failure is reported by the sandbox's dry run.
         * After a restart in place the process is in its own already (gateway/handover.h). */
        if (!g->handed_over && unshare(CLONE_NEWNS) == 0)
            mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
        g->cfg.km.sandbox = sb;
    } else {
        log_warn("**********************************************************************");
        log_warn("--no-sandbox: kernels run UNSANDBOXED with the gateway's privileges.");
        log_warn("Anyone who can run code in a kernel owns this host. Development only.");
        log_warn("**********************************************************************");
    }
    g->out_budget.limit = g->cfg.output_buffer_bytes > 0 ? (size_t)g->cfg.output_buffer_bytes
                                                         : obudget_default_limit();
    g->out_budget.reserve = g->out_budget.limit / (2 * (size_t)g->cfg.km.max_kernels);
    g->cfg.km.out_budget = &g->out_budget;
    log_info("output buffer budget: %zu bytes for all kernels' clients (%zu reserved each)",
             g->out_budget.limit, g->out_budget.reserve);
    g->km = kmgr_new(&g->loop.evl, &g->cfg.km);
    if (!g->km) {
        int err = errno;
        log_error("cannot start the kernel manager: %s", strerror(err));
        return err > 0 ? -err : -ENOMEM;
    }
    return faces_init(g); /* each subscribes itself to kernel events (gateway/faces.c) */
}
