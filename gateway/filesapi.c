/* The workspace file endpoints (filesapi.h): upload (multipart or raw PUT, streamed into an
 * O_TMPFILE and linked into place when complete), download (streamed from an open
 * descriptor), check_file, the listing and delete. Every path is resolved below the workspace
 * root by files.c (files_openat: openat2, nothing followed), and only regular files are read.
 * Nothing here names a host path in a reply. */
#include "gateway/filesapi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "gateway/files.h"
#include "kernelmgr/wspace.h"
#include "protocol/fpath.h"

#define DL_CHUNK         (64 * 1024) /* bytes read and written per step of a download */
#define SPA_STORAGE      4096        /* lws_spa's buffer: > FPATH_MAX + a boundary */
#define SPA_PATH         0           /* index of the "path" form field */
#define BOUNDARY_MAX     70          /* RFC 2046 */
#define MULTIPART_SLACK  65536       /* a multipart body's bytes beyond the file's (estimate) */
#define CHARGE_CHUNK     (16LL << 20) /* upload bytes charged to a kernel's cgroup at a time */
#define HELD_MAX         (4 << 20) /* upload bytes that arrived while a charge runs */

enum fx_kind { FX_UPLOAD, FX_DOWNLOAD };

struct fxfer {
    struct fxfer *prev, *next; /* gw_t.xfers: every transfer in progress */
    gw_t *g;
    enum fx_kind kind;
    wspace_t *ws;   /* held while the transfer runs */
    int root;       /* the workspace's root directory */
    int fd;         /* download: the file; upload: the O_TMPFILE (-1 once failed) */
    long long size; /* download: the Content-Length sent; upload: bytes written */
    long long sent;
    bool headers_sent;
    /* upload */
    bool multipart, in_file, file_seen, file_done;
    struct lws_spa *spa;
    struct lwsac *ac; /* the spa's memory */
    int err;          /* first failure: its status (the body is still read to its end) */
    long long expect;  /* the body's Content-Length */
    long long charged; /* bytes allocated in a kernel's memory cgroup (wspace_charge_start) */
    bool uncharged;    /* no kernel to charge: the gateway's cgroup holds the pages */
    /* a charge in progress: a child the loop watches allocates the next chunk; the body is
     * not read meanwhile (what had arrived waits in held), nor the upload answered */
    struct gw_req *r;
    wspace_charge_t *wc;
    long long chunk;
    buf_t held;
    bool done_pending;
    char errmsg[200];
    char filename[FPATH_NAME_MAX + 2];
};

static const char *const spa_params[] = {"path"};

/* Status and message for a failed resolution of the client's path q (quoted). */
static void path_error(struct gw_req *r, int err, const char *q)
{
    switch (err) {
    case -ENOENT:
        return req_error(r, 404, "no such file or directory: %s", q);
    case -ENOTDIR:
        return req_error(r, 409, "%s: a parent is not a directory", q);
    case -ELOOP:
    case -EXDEV:
        return req_error(r, 409,
                         "%s: a symbolic link or mount point is in the way (never followed)", q);
    case -ENOSPC:
    case -EDQUOT:
        return req_error(r, 413, "%s: the workspace is full", q);
    case -ENAMETOOLONG:
        return req_error(r, 400, "%s: path too long", q);
    default:
        log_warn("files: %s: %s", q, strerror(-err));
        return req_error(r, 500, "%s: %s", q, strerror(-err));
    }
}

/* An audit event of a file operation on w (docs/audit.md). */
static void audit_file(const struct gw_req *r, const char *event, const wspace_t *w,
                       const char *path, long long size, const char *result)
{
    if (!audit_enabled())
        return;
    audit_event(event, "s:s, s:s, s:s, s:o, s:I, s:o", "tenant", r->caller.tenant, "addr",
                r->caller.addr, "workspace", wspace_id(w), "path", audit_str(path, strlen(path)),
                "size", (json_int_t)size, "result", audit_str(result, strlen(result)));
}

static const char *quote_path(char *q, size_t qsz, const char *path)
{
    return log_quote(q, qsz, path, strlen(path));
}

/* ---- the request's workspace ---- */

/* The workspace named by ?workspace=, held by nobody yet; NULL after replying. Another
 * tenant's workspace is answered exactly like a missing one. */
static wspace_t *request_workspace(struct gw_req *r, int *ret_root)
{
    char buf[1024], q[WSPACE_ID_MAX + 8]; /* lws stops at the first argument that does not fit */
    const char *id = lws_get_urlarg_by_name(r->wsi, "workspace=", buf, sizeof(buf));
    if (!id || !id[0]) {
        req_error(r, 400, "the workspace query parameter is required (?workspace=ID)");
        return NULL;
    }
    wspace_t *w = strlen(id) <= WSPACE_ID_MAX ? kmgr_workspace(r->g->km, id) : NULL;
    if (!w || strcmp(wspace_tenant(w), r->caller.tenant) != 0) {
        req_error(r, 404, "no such workspace: %s", log_quote(q, sizeof(q), id, strlen(id)));
        return NULL;
    }
    wspace_touch(w);
    int root = open(wspace_path(w), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0) {
        log_warn("files: workspace=%s: cannot open its directory: %s", wspace_id(w),
                 strerror(errno));
        req_error(r, 500, "workspace %s is not available", wspace_id(w));
        return NULL;
    }
    *ret_root = root;
    return w;
}

static long long free_bytes(int root)
{
    struct statvfs sv;
    if (fstatvfs(root, &sv) < 0)
        return -1;
    return (long long)sv.f_bavail * (long long)sv.f_frsize;
}

static void xfer_free(struct fxfer **px)
{
    struct fxfer *x = *px;
    if (!x)
        return;
    if (x->spa)
        lws_spa_destroy(x->spa); /* frees x->ac (and calls spa_cb: x is still valid) */
    wspace_charge_cancel(&x->wc);
    buf_fini(&x->held);
    lwsac_free(&x->ac);
    if (x->fd >= 0)
        close(x->fd); /* an unlinked O_TMPFILE vanishes here */
    if (x->root >= 0)
        close(x->root);
    if (x->ws)
        wspace_release(x->ws);
    if (x->prev)
        x->prev->next = x->next;
    else
        x->g->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    free(x);
    *px = NULL;
}

void filesapi_req_fini(struct gw_req *r)
{
    struct fxfer *x = r->face;
    r->face = NULL;
    xfer_free(&x);
}

void filesapi_shutdown(gw_t *g)
{
    for (struct fxfer *x = g->xfers; x; x = x->next) {
        wspace_charge_cancel(&x->wc);
        if (x->fd >= 0)
            close(x->fd);
        if (x->root >= 0)
            close(x->root);
        x->fd = x->root = -1;
        x->ws = NULL; /* the kernel manager frees it next, hold or not */
    }
}

static struct fxfer *xfer_new(gw_t *g, enum fx_kind kind, wspace_t *w, int root)
{
    struct fxfer *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->g = g;
    x->next = g->xfers;
    if (x->next)
        x->next->prev = x;
    g->xfers = x;
    x->kind = kind;
    x->ws = w;
    x->root = root;
    x->fd = -1;
    wspace_hold(w);
    return x;
}

/* ---- check_file, listing, delete ---- */

static void handle_check_file(struct gw_req *r, wspace_t *w, int root)
{
    struct stat st = {0};
    char q[160];
    int fd = files_openat(root, r->fpath, O_PATH, 0);
    if (fd >= 0 && fstat(fd, &st) < 0)
        st.st_mode = 0;
    if (fd >= 0)
        close(fd);
    if (fd < 0 && fd != -ENOENT && fd != -ELOOP && fd != -ENOTDIR && fd != -EXDEV)
        return path_error(r, fd, quote_path(q, sizeof(q), r->fpath));
    bool reg = fd >= 0 && S_ISREG(st.st_mode);
    long long size = reg ? (long long)st.st_size : 0;
    req_reply(r, 200,
              json_pack("{s:b, s:b, s:I}", "exists", reg, "too_large",
                        reg && size > r->g->cfg.max_download_bytes, "size", (json_int_t)size));
}

static void handle_list(struct gw_req *r, wspace_t *w, int root)
{
    req_reply(r, 200, files_list_at(w, root));
}

static void handle_delete(struct gw_req *r, wspace_t *w, int root)
{
    const char *base;
    char q[160];
    struct stat st;
    quote_path(q, sizeof(q), r->fpath);
    int dir = files_open_parent(root, w, r->fpath, false, &base);
    if (dir < 0)
        return path_error(r, dir, q);
    int rc = 0;
    if (fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        rc = -errno;
    else if (unlinkat(dir, base, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0)
        rc = -errno;
    close(dir);
    if (rc == -ENOTEMPTY || rc == -EEXIST)
        return req_error(r, 409, "%s: the directory is not empty", q);
    if (rc < 0)
        return path_error(r, rc, q);
    log_info("files: workspace=%s: deleted %s", wspace_id(w), q);
    audit_file(r, "file_delete", w, r->fpath, 0, "ok");
    req_reply(r, 204, NULL);
}

/* ---- download ---- */

static void start_download(struct gw_req *r, wspace_t *w, int root)
{
    char q[160];
    struct stat st;
    quote_path(q, sizeof(q), r->fpath);
    /* O_NONBLOCK: a fifo planted by the kernel must not block the loop */
    int fd = files_openat(root, r->fpath, O_RDONLY | O_NONBLOCK, 0);
    if (fd < 0) {
        close(root);
        return path_error(r, fd == -ENXIO ? -ENOENT : fd, q);
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        close(root);
        return req_error(r, 404, "%s is not a regular file", q);
    }
    if (st.st_size > r->g->cfg.max_download_bytes) {
        close(fd);
        close(root);
        return req_error(r, 413, "%s is larger than the download limit (%lld bytes)", q,
                         r->g->cfg.max_download_bytes);
    }
    struct fxfer *x = xfer_new(r->g, FX_DOWNLOAD, w, root);
    if (!x) {
        close(fd);
        close(root);
        return req_error(r, 500, "out of memory");
    }
    x->fd = fd;
    x->size = (long long)st.st_size;
    r->face = x;
    log_debug("files: workspace=%s: download %s (%lld bytes)", wspace_id(w), q, x->size);
    audit_file(r, "file_download", w, r->fpath, x->size, "ok");
    lws_callback_on_writable(r->wsi);
}

static int download_headers(struct gw_req *r)
{
    struct fxfer *x = r->face;
    unsigned char hdr[LWS_PRE + 2048], *start = hdr + LWS_PRE, *p = start,
                                       *end = hdr + sizeof(hdr) - 1;
    char disp[64 + 3 * FPATH_NAME_MAX];
    int n = snprintf(disp, sizeof(disp), "attachment; filename*=UTF-8''");
    if (fpath_attr_encode(fpath_basename(r->fpath), disp + n, sizeof(disp) - (size_t)n) < 0)
        return -1;
    static const char ctype[] = "application/octet-stream";
    if (lws_add_http_header_status(r->wsi, 200, &p, end) ||
        lws_add_http_header_by_token(r->wsi, WSI_TOKEN_HTTP_CONTENT_TYPE,
                                     (const unsigned char *)ctype, (int)sizeof(ctype) - 1, &p,
                                     end) ||
        lws_add_http_header_by_name(r->wsi, (const unsigned char *)"content-disposition:",
                                    (const unsigned char *)disp, (int)strlen(disp), &p, end) ||
        http_add_common_headers(r->g, r->wsi, &p, end) ||
        lws_add_http_header_content_length(r->wsi, (lws_filepos_t)x->size, &p, end) ||
        lws_finalize_http_header(r->wsi, &p, end))
        return -1;
    if (lws_write(r->wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) < 0)
        return -1;
    x->headers_sent = true;
    return 0;
}

int filesapi_download_write(struct gw_req *r)
{
    static unsigned char chunk[LWS_PRE + DL_CHUNK]; /* lws copies what the socket does not take */
    struct fxfer *x = r->face;
    if (!x || x->kind != FX_DOWNLOAD) /* not downloading (its answer is stored) */
        return 0;
    if (!x->headers_sent && download_headers(r) < 0)
        return -1;
    while (x->sent < x->size && !lws_send_pipe_choked(r->wsi)) {
        long long want = x->size - x->sent;
        size_t n = want > DL_CHUNK ? DL_CHUNK : (size_t)want;
        ssize_t got = pread(x->fd, chunk + LWS_PRE, n, (off_t)x->sent);
        if (got <= 0) {
            /* shrunk under us (the kernel owns it): the promised length cannot be kept */
            char q[160];
            log_info("files: workspace=%s: %s changed during its download; connection closed",
                     wspace_id(x->ws), quote_path(q, sizeof(q), r->fpath));
            return -1;
        }
        bool last = x->sent + got == x->size;
        if (lws_write(r->wsi, chunk + LWS_PRE, (size_t)got,
                      last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0)
            return -1;
        x->sent += got;
    }
    if (x->sent < x->size) {
        /* a reader that stops reading must not hold the workspace (and a descriptor) forever:
         * cut after --stall-timeout seconds without taking anything, as the execute API's */
        lws_set_timeout(r->wsi, PENDING_TIMEOUT_USER_OK, (int)r->g->cfg.stall_timeout);
        lws_callback_on_writable(r->wsi);
        return 0;
    }
    lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
    wspace_touch(x->ws);
    return 1;
}

/* ---- upload ---- */

static void upload_fail(struct fxfer *x, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void upload_fail(struct fxfer *x, int status, const char *fmt, ...)
{
    if (x->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->errmsg, sizeof(x->errmsg), fmt, ap);
    va_end(ap);
    x->err = status;
    if (x->fd >= 0) { /* give the space back now */
        close(x->fd);
        x->fd = -1;
    }
}

static int charge_in_child(void *arg)
{
    const struct fxfer *x = arg;
    return fallocate(x->fd, FALLOC_FL_KEEP_SIZE, (off_t)x->charged, (off_t)x->chunk) < 0 ? errno
                                                                                      : 0;
}

static void upload_write(struct fxfer *x, const char *p, size_t n);
static void on_charged(void *data, int rc);

/* Starts charging chunk more bytes; false when it could not start (x failed, or uncharged). */
static bool charge_start(struct fxfer *x, long long chunk)
{
    x->chunk = chunk;
    if (!(x->wc = wspace_charge_start(x->ws, chunk, charge_in_child, x, on_charged, x))) {
        on_charged(x, -errno);
        return false;
    }
    lws_rx_flow_control(x->r->wsi, 0); /* the client waits (TCP pushes back) */
    return true;
}

/* The charge of x->chunk bytes ended (rc 0, or -errno, or errno > 0 from fallocate). */
static void on_charged(void *data, int rc)
{
    struct fxfer *x = data;
    bool was_running = x->wc != NULL;
    x->wc = NULL;
    rc = rc > 0 ? -rc : rc;
    if (rc == -ENOSPC && x->chunk > (long long)x->held.len && x->held.len > 0) {
        /* the body's slack may not fit: what has arrived */
        if (charge_start(x, (long long)x->held.len))
            return;
    } else if (rc == 0) {
        x->charged += x->chunk;
    } else if (rc == -ENOMEM) {
        log_info("files: workspace=%s: upload refused at %lld bytes: over its kernel's memory "
                 "limit",
                 wspace_id(x->ws), x->size);
        upload_fail(x, 413,
                    "the upload does not fit its kernel's memory limit (a workspace's files "
                    "count against it; %lld bytes written, none kept)",
                    x->size);
    } else if (rc == -ENOSPC || rc == -EFBIG) {
        upload_fail(x, 413, "the workspace is full (%lld bytes written, none kept)", x->size);
    } else if (!x->err) {
        log_warn("files: workspace=%s: cannot charge an upload to its kernel: %s",
                 wspace_id(x->ws), strerror(-rc));
        x->uncharged = true;
    }
    if (!was_running)
        return; /* it never started: the caller goes on */
    /* what arrived meanwhile, then the body again (or the answer, if it is all here) */
    buf_t held = x->held;
    buf_init(&x->held, HELD_MAX);
    if (held.len)
        upload_write(x, held.data, held.len);
    buf_fini(&held);
    if (x->wc)
        return;
    lws_rx_flow_control(x->r->wsi, 1);
    if (x->done_pending) {
        x->done_pending = false;
        filesapi_upload_done(x->r);
    }
}

/* Before n more bytes are written: the next pages charged to a kernel of the workspace (chunks
 * of CHARGE_CHUNK, at most what the body still has), by a child the loop watches. True when
 * the bytes can be written now; false when they wait in held for the charge. */
static bool upload_charge(struct fxfer *x, const char *p, size_t n)
{
    if (x->wc) {
        if (buf_append(&x->held, p, n) < 0)
            upload_fail(x, 503, "out of memory while the upload waited; retry later");
        return false;
    }
    if (x->err || x->fd < 0 || x->uncharged || x->size + (long long)n <= x->charged)
        return true;
    if (!wspace_chargeable(x->ws)) { /* the pages are then the gateway's */
        x->uncharged = true;
        return true;
    }
    long long left = x->expect - x->charged, chunk = left < CHARGE_CHUNK ? left : CHARGE_CHUNK;
    if (chunk < (long long)n)
        chunk = (long long)n;
    if (buf_append(&x->held, p, n) < 0) {
        upload_fail(x, 503, "out of memory; retry later");
        return false;
    }
    if (charge_start(x, chunk))
        return false;
    buf_reset(&x->held); /* it could not start: x failed, or is uncharged */
    return !x->err;
}

static void upload_write(struct fxfer *x, const char *p, size_t n)
{
    if (!upload_charge(x, p, n))
        return;
    while (n > 0 && !x->err) {
        ssize_t w = write(x->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == ENOSPC || errno == EDQUOT || errno == EFBIG)) {
            upload_fail(x, 413, "the workspace is full (%lld bytes written, none kept)", x->size);
            return;
        }
        if (w <= 0) {
            log_warn("files: workspace=%s: upload write: %s", wspace_id(x->ws), strerror(errno));
            upload_fail(x, 500, "cannot write the file");
            return;
        }
        x->size += w;
        p += w;
        n -= (size_t)w;
    }
}

static int spa_cb(void *data, const char *name, const char *filename, char *buf, int len,
                  enum lws_spa_fileupload_states state)
{
    struct fxfer *x = data;
    switch (state) {
    case LWS_UFS_OPEN:
        if (x->file_seen || strcmp(name, "file") != 0) {
            upload_fail(x, 400, "one file part is expected, named \"file\"");
            return 0;
        }
        x->file_seen = x->in_file = true;
        snprintf(x->filename, sizeof(x->filename), "%s", filename ? filename : "");
        return 0;
    case LWS_UFS_CONTENT:
    case LWS_UFS_FINAL_CONTENT:
        if (x->in_file && len > 0 && buf)
            upload_write(x, buf, (size_t)len);
        if (state == LWS_UFS_FINAL_CONTENT && x->in_file) {
            x->in_file = false;
            x->file_done = true;
        }
        return 0;
    case LWS_UFS_CLOSE:
    default:
        return 0;
    }
}

/* True when the Content-Type is what lws_spa parses as multipart, with a sane boundary. */
static bool multipart_ok(struct lws *wsi)
{
    char ct[200]; /* lws_spa reads at most 204 bytes of it: longer, it would not see the type */
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE) >= (int)sizeof(ct) ||
        lws_hdr_copy(wsi, ct, sizeof(ct), WSI_TOKEN_HTTP_CONTENT_TYPE) <= 0)
        return false;
    if (strncmp(ct, "multipart/form-data", 19) != 0)
        return false;
    const char *b = strstr(ct, "boundary=");
    if (!b)
        return false;
    b += 9;
    if (*b == '"')
        b++;
    size_t n = strcspn(b, " ;\"");
    return n >= 1 && n <= BOUNDARY_MAX;
}

/* POST /upload (multipart) or PUT /upload/{path} (the raw file). */
static int upload_start(struct gw_req *r, long long content_length, bool multipart)
{
    gw_t *g = r->g;
    char q[160];
    int root = -1;
    if (content_length > g->cfg.max_upload_bytes)
        return -EFBIG;
    if (multipart && !multipart_ok(r->wsi)) {
        req_error(r, 415,
                  "POST /upload takes multipart/form-data (a \"file\" part and a \"path\" "
                  "field); PUT /upload/{path} takes the raw file");
        return 1;
    }
    wspace_t *w = request_workspace(r, &root);
    if (!w)
        return 1;
    long long avail = free_bytes(root);
    long long need = multipart ? content_length - MULTIPART_SLACK : content_length;
    if (avail >= 0 && need > avail) {
        close(root);
        req_error(r, 413, "the workspace is full: %lld bytes free, the upload has %lld", avail,
                  content_length);
        return 1;
    }
    struct fxfer *x = xfer_new(g, FX_UPLOAD, w, root);
    if (!x) {
        close(root);
        req_error(r, 500, "out of memory");
        return 1;
    }
    r->face = x;
    x->r = r;
    buf_init(&x->held, HELD_MAX);
    x->multipart = multipart;
    x->expect = content_length;
    x->fd = files_openat(root, ".", O_TMPFILE | O_WRONLY, 0600);
    if (x->fd < 0) {
        int rc = x->fd;
        x->fd = -1;
        path_error(r, rc, quote_path(q, sizeof(q), "."));
        return 1;
    }
    if (files_give(x->fd, w) < 0 || fchmod(x->fd, 0644) < 0) {
        log_warn("files: workspace=%s: cannot give an upload to its owner: %s", wspace_id(w),
                 strerror(errno));
        req_error(r, 500, "cannot create the file");
        return 1;
    }
    if (multipart) {
        lws_spa_create_info_t si = {
            .param_names = spa_params,
            .count_params = (int)UTIL_ARRAY_SIZE(spa_params),
            .max_storage = SPA_STORAGE,
            .opt_cb = spa_cb,
            .opt_data = x,
            /* With an lwsac, field values are copied out and the parse buffer never shrinks:
             * libwebsockets 4.1's in-buffer storage overflows once a field has used it up
             * (fixed upstream in 2026, "spa: defend against cross-chunk mismatches"). */
            .ac = &x->ac,
        };
        x->spa = lws_spa_create_via_info(r->wsi, &si);
        if (!x->spa) {
            req_error(r, 500, "out of memory");
            return 1;
        }
    }
    log_debug("files: workspace=%s: upload of %lld bytes started", wspace_id(w), content_length);
    return 0;
}

int filesapi_upload_body(struct gw_req *r, const void *in, size_t len)
{
    struct fxfer *x = r->face;
    if (x->err)
        return 0; /* read to the end, then answer */
    if (!x->multipart) {
        upload_write(x, in, len);
        return 0;
    }
    if (lws_spa_process(x->spa, in, (int)len) < 0) {
        upload_fail(x, 400, "malformed multipart/form-data body");
        return 0;
    }
    /* repeated "path" fields would pile up: bound them as they arrive */
    if (lws_spa_get_length(x->spa, SPA_PATH) > FPATH_MAX)
        upload_fail(x, 400, "\"path\" is longer than %d bytes", FPATH_MAX);
    return 0;
}

/* Links the complete temporary file at path, replacing a file of that name atomically. */
static int link_into_place(struct fxfer *x, const char *path)
{
    const char *base;
    char tmp[64], proc[64];
    struct stat st;
    int dir = files_open_parent(x->root, x->ws, path, true, &base);
    if (dir < 0)
        return dir;
    if (fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        close(dir);
        return -EISDIR;
    }
    int rc = -EEXIST;
    for (int i = 0; i < 8 && rc == -EEXIST; i++) {
        char hex[17];
        util_random_hex(hex, 8);
        snprintf(tmp, sizeof(tmp), ".kgw-upload-%s", hex);
        rc = linkat(x->fd, "", dir, tmp, AT_EMPTY_PATH) < 0 ? -errno : 0;
        if (rc == -ENOENT || rc == -EPERM) { /* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH */
            snprintf(proc, sizeof(proc), "/proc/self/fd/%d", x->fd);
            rc = linkat(AT_FDCWD, proc, dir, tmp, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
        }
    }
    if (rc == 0 && renameat(dir, tmp, dir, base) < 0) {
        rc = -errno;
        unlinkat(dir, tmp, 0);
    }
    close(dir);
    return rc;
}

void filesapi_upload_done(struct gw_req *r)
{
    struct fxfer *x = r->face;
    char path[FPATH_MAX + 1], q[160];
    if (x->wc) { /* the last bytes wait for their charge: answered after it */
        x->done_pending = true;
        return;
    }
    if (x->multipart && x->spa)
        lws_spa_finalize(x->spa);
    if (!x->err && x->multipart) {
        const char *p = lws_spa_get_string(x->spa, SPA_PATH);
        int plen = lws_spa_get_length(x->spa, SPA_PATH);
        if (!x->file_done)
            upload_fail(x, 400, "no complete \"file\" part in the form");
        else if (plen > 0 && (!p || strlen(p) != (size_t)plen))
            upload_fail(x, 400, "one \"path\" field is expected");
        else if (plen == 0 && strlen(x->filename) >= FPATH_NAME_MAX)
            upload_fail(x, 400, "no \"path\" field, and the part's filename is too long");
        else if (fpath_normalize(plen > 0 ? p : x->filename,
                                 plen > 0 ? (size_t)plen : strlen(x->filename), path,
                                 sizeof(path)) < 0)
            upload_fail(x, 400, "invalid path %s (relative, '/'-separated, no '.' or '..')",
                        plen > 0 ? log_quote(q, sizeof(q), p, (size_t)plen)
                                 : log_quote(q, sizeof(q), x->filename, strlen(x->filename)));
    } else if (!x->err) {
        snprintf(path, sizeof(path), "%s", r->fpath);
    }
    if (x->err) {
        audit_file(r, "file_upload", x->ws, x->multipart ? "" : r->fpath, x->size, x->errmsg);
        return req_error(r, x->err, "%s", x->errmsg);
    }
    quote_path(q, sizeof(q), path);
    if (x->charged > x->size) /* the pages charged beyond the end go back */
        (void)!ftruncate(x->fd, x->size);
    int rc = link_into_place(x, path);
    audit_file(r, "file_upload", x->ws, path, x->size, rc == 0 ? "ok" : strerror(-rc));
    if (rc == -EISDIR || rc == -ENOTEMPTY || rc == -EEXIST)
        return req_error(r, 409, "%s is a directory", q);
    if (rc < 0)
        return path_error(r, rc, q);
    log_info("files: workspace=%s: uploaded %s (%lld bytes)", wspace_id(x->ws), q, x->size);
    wspace_touch(x->ws);
    req_reply(r, 201, json_pack("{s:s, s:I}", "path", path, "size", (json_int_t)x->size));
}

/* ---- entry ---- */

/* fn answers with the request's workspace and its root directory, closed after it; nothing
 * after answering that there is no such workspace. */
static void on_workspace(struct gw_req *r, void (*fn)(struct gw_req *, wspace_t *, int))
{
    int root = -1;
    wspace_t *w = request_workspace(r, &root);
    if (!w)
        return;
    fn(r, w, root);
    close(root);
}

void filesapi_check_file(struct gw_req *r)
{
    on_workspace(r, handle_check_file);
}

void filesapi_list(struct gw_req *r)
{
    on_workspace(r, handle_list);
}

void filesapi_delete(struct gw_req *r)
{
    on_workspace(r, handle_delete);
}

void filesapi_download(struct gw_req *r)
{
    int root = -1;
    wspace_t *w = request_workspace(r, &root);
    if (w)
        start_download(r, w, root); /* owns root */
}

int filesapi_post_start(struct gw_req *r, long long content_length)
{
    return upload_start(r, content_length, true);
}

int filesapi_put_start(struct gw_req *r, long long content_length)
{
    return upload_start(r, content_length, false);
}

