/* The E2B-compatible API's wire formats (docs/e2b.md), untrusted bytes from E2B
 * SDKs: the control plane's create body, the code interpreter's /execute body,
 * sandbox paths
 * (/home/user/...), the Connect-RPC JSON request bodies of the filesystem calls
 * and Connect envelopes (the connect+json stream framing). Pure: no gateway
 * state. */
#ifndef KGW_PROTOCOL_E2BWIRE_H
#define KGW_PROTOCOL_E2BWIRE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "protocol/fpath.h"

#define E2BWIRE_HOME         "/home/user" /* the workspace, as E2B paths name it */
#define E2BWIRE_TEMPLATE_MAX 128          /* bytes of a template id */
#define E2BWIRE_TIMEOUT_MAX  86400        /* seconds of a sandbox's lifetime */
#define E2BWIRE_MAP_MAX      64           /* entries of envVars, metadata */
#define E2BWIRE_KEY_MAX      128          /* bytes of a key of envVars or metadata */
#define E2BWIRE_VALUE_MAX    4096         /* bytes of a value of envVars or metadata */
#define E2BWIRE_ENVELOPE_MAX (1u << 20)   /* bytes of one Connect envelope's payload */
#define E2BWIRE_ERR_MAX      256

/* POST /sandboxes and POST /v2/sandboxes. */
struct e2bwire_create {
    char template_id[E2BWIRE_TEMPLATE_MAX + 1]; /* "" : none given */
    long long timeout;                          /* seconds; -1: none given */
    json_t *env;                                /* object of strings, or NULL */
    json_t *metadata;                           /* object of strings, or NULL */
    /* network access: the hosts (names or IP addresses) of network.allowOut the sandbox may
     * reach, [] for none, when the create's allow_internet_access or network deny all
     * traffic; NULL for the tenant's own egress policy (none given, or allow_internet_access
     * true: the caller checks that the tenant has one). The caller takes, for each host, the
     * tenant's policy entries for it. */
    json_t *egress;
    bool internet; /* allow_internet_access: true */
    bool auto_pause; /* autoPause: paused, not killed, at its timeout */
};

/* Parses a create body (len bytes): a JSON object of the fields the SDKs send.
 * envVars' names follow e2bwire_env_name_ok.
 * What kgw does not offer is refused, not ignored: secure false, network's
 * egressProxy, rules, httpsPorts, maskRequestHost and allowPublicTraffic true, a denyOut
 * other than all traffic (kgw's egress is an allowlist), CIDR ranges, iam or mcp or
 * volumeMounts with content, autoPauseMemory false (a pause keeps memory)
 * or autoResume on; any other field is refused too. 0 with out filled (release
 * with e2bwire_create_fini), or -EINVAL with a one-line message in err. */
int e2bwire_create_parse(
    const char *body, size_t len, struct e2bwire_create *out, char *err, size_t errsz);
void e2bwire_create_fini(struct e2bwire_create *c);

/* An environment variable's name on the E2B face (envVars, env_vars, a command's envs): the
 * gateway's one rule (util_env_name_ok), at most E2BWIRE_KEY_MAX bytes. */
bool e2bwire_env_name_ok(const char *name);

/* The body of POST /sandboxes/{id}/pause ({"memory": bool}, optional; false, a
 * filesystem-only pause, is refused): 0, or -EINVAL with a one-line message in err. */
int e2bwire_pause_parse(const char *body, size_t len, char *err, size_t errsz);

/* The body of POST /sandboxes/{id}/timeout ({"timeout": seconds}, required) and
 * of POST [/v2]/sandboxes/{id}/connect ({"timeout"} optional, -1 when absent).
 */
int e2bwire_timeout_parse(
    const char *body, size_t len, bool required, long long *ret_timeout, char *err, size_t errsz);

/* GET /sandboxes and GET /v2/sandboxes: the listing's query. */
#define E2BWIRE_LIST_LIMIT_MAX 100 /* items of one page (and the default) */
#define E2BWIRE_STATE_RUNNING  0x1u
#define E2BWIRE_STATE_PAUSED   0x2u
struct e2bwire_list {
    json_t *metadata;          /* object of strings every listed sandbox has, or NULL */
    unsigned states;           /* E2BWIRE_STATE_* wanted (both when none is named) */
    unsigned limit;            /* 1 .. E2BWIRE_LIST_LIMIT_MAX */
    bool ascending;            /* order=asc (the default is newest first) */
    long long started_after_us; /* -1: none */
    char template_id[E2BWIRE_TEMPLATE_MAX + 1]; /* "" : any */
    bool has_token;            /* nextToken: the page starts at this item */
    long long token_us;
    char token_id[40];
};
/* Parses the query's n arguments, each "name=value" as the URL decoded them: metadata
 * ("k=v&k2=v2", each key and value URL-encoded once more, as the SDKs send it), state
 * ("running", "paused", comma-separated or repeated), limit, order ("asc", "desc"),
 * startedAfter (RFC 3339), template, nextToken (from e2bwire_list_token). A parameter kgw
 * does not know is refused, never ignored. 0 with out filled (release with
 * e2bwire_list_fini), or -EINVAL with a one-line message in err. */
int e2bwire_list_parse(const char *const *args, size_t n, struct e2bwire_list *out, char *err,
                       size_t errsz);
void e2bwire_list_fini(struct e2bwire_list *l);
/* The nextToken naming the item (started_us, id) that starts the next page. */
void e2bwire_list_token(char *out, size_t outsz, long long started_us, const char *id);
/* Whether (started_us, id) comes before the item (b_us, b_id) in the listing's order. */
bool e2bwire_list_before(const struct e2bwire_list *l, long long started_us, const char *id,
                         long long b_us, const char *b_id);

/* POST /execute of the code interpreter: {"code", "context_id", "language",
 * "env_vars"}. language must be absent or "python"; env_vars an object of strings. */
struct e2bwire_exec {
    char *code;          /* malloc'd */
    char context_id[64]; /* "" : the default context */
    json_t *env;         /* env_vars for this run only (names: e2bwire_env_name_ok), or NULL */
};
int e2bwire_exec_parse(
    const char *body, size_t len, struct e2bwire_exec *out, char *err, size_t errsz);
void e2bwire_exec_fini(struct e2bwire_exec *x);

/* An E2B path to a workspace-relative normal path (protocol/fpath.h) in out
 * (outsz >= FPATH_MAX + 1): "/home/user" or "/home/user/" is the workspace
 * itself (out ""), a path below it is that path relative; a relative path is
 * relative to /home/user; "." and ".." components and repeated or trailing '/'
 * are resolved lexically, never above the workspace. Returns the length of out;
 * -EINVAL (bad bytes, empty, bad shape), -EACCES (absolute outside /home/user,
 * or above it), -ENAMETOOLONG. */
int e2bwire_path(const char *in, size_t len, char *out, size_t outsz);

/* The filesystem calls' requests (JSON codec): path, and for ListDir depth, for
 * Move source and destination (then in path and path2); for WatchDir and CreateWatcher
 * recursive (includeEntry, envd 0.6.3's entries in events, is not offered: -ENOSYS;
 * allowNetworkMounts is taken, there are none), for GetWatcherEvents and RemoveWatcher
 * watcherId. Fields go by their JSON or their proto name; unknown ones are refused, as
 * protobuf JSON parsing does. method: "ListDir", "Stat", "MakeDir", "Remove", "Move",
 * "WatchDir", "CreateWatcher", "GetWatcherEvents", "RemoveWatcher". */
#define E2BWIRE_WATCHER_MAX 64 /* bytes of a watcher id ([A-Za-z0-9_-]) */
struct e2bwire_fsreq {
    char path[FPATH_MAX + 1];
    char path2[FPATH_MAX + 1];
    unsigned depth; /* ListDir: 1 .. 8 (0 in the request means 1) */
    bool recursive; /* WatchDir, CreateWatcher */
    char watcher[E2BWIRE_WATCHER_MAX + 1]; /* GetWatcherEvents, RemoveWatcher */
};
/* 0, or -EINVAL (bad request: invalid_argument) / -EACCES (outside the
 * workspace: permission_denied) / -ENOSYS (not offered: unimplemented) with a message in
 * err. */
int e2bwire_fsreq_parse(const char *method,
                        const char *body,
                        size_t len,
                        struct e2bwire_fsreq *out,
                        char *err,
                        size_t errsz);

/* process.Process/Start's request (JSON codec): {"process": {"cmd", "args", "envs", "cwd"},
 * "stdin", "tag"}. A PTY is not offered (-ENOSYS: unimplemented); stdin true keeps a pipe
 * open for SendInput. argv: cmd then args (NULL-terminated, pointing into strs); env: "NAME=VALUE"
 * strings (NULL-terminated); cwd: a workspace-relative path ("" the workspace), from a path
 * under /home/user. */
#define E2BWIRE_ARGS_MAX   256
#define E2BWIRE_ARGV_BYTES (64 * 1024)
struct e2bwire_start {
    char *strs; /* malloc'd: the strings below point into it */
    const char *argv[E2BWIRE_ARGS_MAX + 2];
    const char *env[E2BWIRE_MAP_MAX + 1];
    char cwd[FPATH_MAX + 1];
    bool cwd_abs; /* cwd is an absolute path outside /home/user, in the sandbox's own file
                   * system (only a sandboxed kernel has one) */
    bool stdin_open; /* "stdin": true: fed by SendInput until CloseStdin */
};
int e2bwire_start_parse(
    const char *body, size_t len, struct e2bwire_start *out, char *err, size_t errsz);
void e2bwire_start_fini(struct e2bwire_start *s);

/* process.Process/SendSignal's request: {"process": {"pid": N}, "signal": "SIGNAL_SIGKILL" |
 * "SIGNAL_SIGTERM" | 9 | 15}. 0 with *ret_pid and *ret_sig (SIGKILL or SIGTERM). */
int e2bwire_signal_parse(
    const char *body, size_t len, unsigned *ret_pid, int *ret_sig, char *err, size_t errsz);

/* process.Process/SendInput's request ({"process": {"pid": N}, "input": {"stdin": BASE64}}):
 * 0 with *ret_pid and the bytes (*ret_data, malloc'd, *ret_n); with ret_data NULL,
 * CloseStdin's and Connect's ({"process": {"pid": N}}: a selector by tag is refused). -EINVAL
 * with a message otherwise. */
int e2bwire_input_parse(const char *body, size_t len, unsigned *ret_pid, uint8_t **ret_data,
                        size_t *ret_n, char *err, size_t errsz);

/* The EventType names (EVENT_TYPE_CREATE, ...) of one inotify event's mask as envd (fsnotify)
 * reports them, in its order: create (IN_CREATE, IN_MOVED_TO), rename (IN_MOVED_FROM,
 * IN_MOVE_SELF), chmod (IN_ATTRIB), write (IN_MODIFY), remove (IN_DELETE, IN_DELETE_SELF).
 * Their count (at most E2BWIRE_WATCH_TYPES). */
#define E2BWIRE_WATCH_TYPES 5
size_t e2bwire_watch_types(uint32_t mask, const char *ret[E2BWIRE_WATCH_TYPES]);
/* The next record of what read() gave from an inotify descriptor (len bytes, from *off): 1
 * with its wd, mask and name (*ret_name within buf, *ret_nlen bytes, no NUL; length 0 for
 * none), *off past it; 0 at the end; -EBADMSG for a record that does not fit. */
int e2bwire_inotify_next(const uint8_t *buf, size_t len, size_t *off, int *ret_wd,
                         uint32_t *ret_mask, const char **ret_name, size_t *ret_nlen);

/* Signed file URLs (the SDKs' downloadUrl and uploadUrl, /files?signature=...): envd's
 * signature is "v1_" and the SHA-256 of "PATH:OPERATION:USER:TOKEN" (":EXPIRATION" after it
 * when the URL has one) in base64, the standard alphabet without padding. PATH and USER are
 * the query's path and username as given ("" when absent), OPERATION "read" (GET) or
 * "write" (POST), TOKEN the sandbox's envdAccessToken. */
#define E2BWIRE_SIGNATURE_LEN 46 /* "v1_" and 43 base64 characters */
void e2bwire_signature(const char *path, const char *op, const char *user, const char *token,
                       const long long *expiration, char out[E2BWIRE_SIGNATURE_LEN + 1]);
/* signature_expiration (Unix seconds, a decimal integer as Go's ParseInt takes it: an
 * optional sign, 1 to 19 digits): 0 with *ret, or -EINVAL. */
int e2bwire_expiration_parse(const char *s, long long *ret);

/* multipart/form-data bodies (POST /files): the boundary of the Content-Type, then the
 * parts one after another. A part's name and filename come from its Content-Disposition
 * (form-data; quoted strings with their backslash escapes, or tokens); its bytes point into
 * the body. */
#define E2BWIRE_BOUNDARY_MAX 200  /* bytes of a boundary */
#define E2BWIRE_PART_HEAD    8192 /* bytes of a part's headers */
struct e2bwire_part {
    char name[64];              /* "" : none, not form-data, or too long */
    char filename[FPATH_MAX + 1];
    bool has_filename;
    const char *data;
    size_t len;
};
/* The boundary of a Content-Type "multipart/form-data; boundary=B" into out (outsz >
 * E2BWIRE_BOUNDARY_MAX): 0, or -EINVAL (another type, no boundary, a bad one). */
int e2bwire_boundary(const char *ctype, char *out, size_t outsz);
/* The next part of body (len bytes) from *off (0 at first): 1 with *ret, *off past it; 0 at
 * the closing delimiter; -EINVAL for a malformed body (no delimiter, a part not ended,
 * headers over E2BWIRE_PART_HEAD bytes), -ENAMETOOLONG for a filename over FPATH_MAX
 * bytes. */
int e2bwire_part_next(const char *body, size_t len, const char *boundary, size_t *off,
                      struct e2bwire_part *ret);

/* Connect envelopes: a flags byte, a big-endian 32-bit length, the payload. */
#define E2BWIRE_ENV_COMPRESSED 0x01
#define E2BWIRE_ENV_END        0x02
/* The first envelope of in (len bytes): 0 with *ret_flags, the payload
 * (*ret_off, *ret_n) and *ret_used (its whole length); -EAGAIN when in holds
 * less than a whole envelope; -EMSGSIZE when the payload is over max; -EPROTO
 * for a compressed one (no compression is offered). */
int e2bwire_envelope_parse(const uint8_t *in,
                           size_t len,
                           size_t max,
                           uint8_t *ret_flags,
                           size_t *ret_off,
                           size_t *ret_n,
                           size_t *ret_used);
/* Appends one envelope (flags, payload) to out. 0 or buf_append's error. */
int e2bwire_envelope_write(buf_t *out, uint8_t flags, const void *payload, size_t n);

/* Connect error codes: the name and the HTTP status of a unary error. */
const char *e2bwire_code_name(int errno_code);
int e2bwire_code_status(const char *code);

#endif
