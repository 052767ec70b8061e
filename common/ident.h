/* Identifier classes: the one place that says which untrusted names kgw accepts.
 *
 * Every name that arrives from a client, a key file, a kernelspec directory or a kernel and is
 * then used as a key, a file name, a URL segment or a log field is checked here. Each class is
 * the exact rule its callers had before; they are not merged where they differ, because widening
 * or narrowing what a checker accepts is a security change. All classes are ASCII only: a byte
 * >= 0x80 or a NUL byte inside [s, s+n) is refused by every class, and so is n == 0.
 *
 *   \w below is [A-Za-z0-9_] (ASCII, as in a POSIX bracket expression, not Unicode).
 */
#ifndef KGW_COMMON_IDENT_H
#define KGW_COMMON_IDENT_H

#include <stdbool.h>
#include <stddef.h>

/* Length bounds (bytes), one per class. */
#define IDENT_TENANT_MAX   64
#define IDENT_KSPEC_MAX    128
#define IDENT_NAME_MAX     255
#define IDENT_PYNAME_MAX   64
#define IDENT_ENVNAME_MAX  128
#define IDENT_UUIDISH_MAX  128
#define IDENT_TOKEN_MAX    100
#define IDENT_INSTANCE_MAX 128
#define IDENT_KNAME_MAX    64

enum ident_class {
    /* API key file tenants (common/keyfile.c): [A-Za-z0-9._-]{1,64}, not starting with '.' or
     * '-'. A tenant names a workspace directory and appears in logs and metrics labels. */
    IDENT_TENANT,
    /* Kernelspec and kernelspec resource names (kernelmgr/kspec.c, gateway/route.c, --pool):
     * [A-Za-z0-9._-]{1,128}, not starting with '.' (a leading '-' is allowed). */
    IDENT_KSPEC,
    /* RPC string arguments flagged RPC_P_NAME (protocol/rpc.c: kernel_name, workspace):
     * [A-Za-z0-9._-]{1,255}, not starting with '.' or '-'. The RPC parameter's own max (128,
     * 255) is checked first; 255 is a file name's limit (NAME_MAX). */
    IDENT_NAME,
    /* Callback names on the kernel callback socket (protocol/kcallmsg.c): an ASCII Python
     * identifier, [A-Za-z_][A-Za-z0-9_]*, 1..64 bytes. */
    IDENT_PYNAME,
    /* Keys of RPC dict arguments flagged RPC_P_ENVNAME (protocol/rpc.c: env):
     * [A-Za-z0-9_]{1,128}; a leading digit is allowed (the "KERNEL_" prefix the RPC table
     * requires comes first). 128 is RPC_KEY_MAX, checked first by the caller. */
    IDENT_ENVNAME,
    /* Kernel and session ids in URLs and REST bodies (gateway/route.c, gateway/http.c), the
     * shape jupyter_server routes: \w+-\w+-\w+-\w+-\w+ (exactly five non-empty groups), 1..128
     * bytes. */
    IDENT_UUIDISH,
    /* Websocket session_id query arguments (gateway/wschan.c): printable ASCII without space,
     * bytes 0x21..0x7e, 1..100 bytes. */
    IDENT_TOKEN,
    /* The gateway's --instance-id (gateway/http.c): [A-Za-z0-9._:-]{1,128}, any first byte of
     * the set. (An empty --instance-id means "generate one"; the caller handles that before.) */
    IDENT_INSTANCE,
    /* Names of MCP named kernels (gateway/mcp.c, the Kgw-Kernel-Name header):
     * [A-Za-z0-9._-]{1,64}, not starting with '.' or '-'. A name appears in logs, audit events
     * and tool results. */
    IDENT_KNAME,
    IDENT_N
};

/* True if the n bytes at s (no terminator needed; s may be NULL when n is 0) are a name of
 * class c. */
bool ident_ok(const char *s, size_t n, enum ident_class c);
/* ident_ok over a NUL-terminated string; false for NULL. */
bool ident_str_ok(const char *s, enum ident_class c);
/* The longest name of class c, in bytes (one of the IDENT_*_MAX above). */
size_t ident_max(enum ident_class c);

#endif
