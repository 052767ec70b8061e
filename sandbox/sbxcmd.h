/* The wire between the gateway and a sandbox's init (kgw-sandbox-init) for commands run in the
 * sandbox: one SOCK_SEQPACKET socket pair per sandbox, made by the gateway before the start.
 * Init holds its end (inherited through the proxy, closed in the kernel before its code runs,
 * close-on-exec in init itself: no process of the sandbox but init has it; init is not
 * dumpable, so /proc/1/fd is closed to the kernel's uid). The kernel therefore cannot write to
 * it; the parser is small and bounded anyway (a libFuzzer target: tests/fuzz/fuzz_sbxcmd.c).
 *
 * gateway -> init, one message each:
 *   SPAWN  {head, then NUL-terminated: cwd, argv..., env...} with 2 descriptors (stdout,
 *          stderr write ends) or 3 (SBXCMD_F_STDIN: stdin's read end first)
 *   SIGNAL {head} (sig): to the command's process group
 * init -> gateway: struct sbxcmd_event, one message each: STARTED (pid inside) or FAILED
 * (err: errno of the fork, the chdir or the exec), then EXITED (status: a wait status) once
 * init reaped it; the rest of its process group is killed before that.
 *
 * This file is also compiled into kgw-sandbox-init (static, libc only). */
#ifndef KGW_SANDBOX_SBXCMD_H
#define KGW_SANDBOX_SBXCMD_H

#include <stddef.h>
#include <stdint.h>

#define SBXCMD_MAGIC    0x4b47574bU /* "KGWK" */
#define SBXCMD_MSG_MAX  (64 * 1024) /* bytes of a request */
#define SBXCMD_STR_MAX  1024        /* argv and env strings, each list */
#define SBXCMD_CMDS_MAX 64          /* commands init tracks at once */
#define SBXCMD_F_STDIN  1U

enum sbxcmd_op { SBXCMD_SPAWN = 1, SBXCMD_SIGNAL = 2 };
enum sbxcmd_ev { SBXCMD_STARTED = 1, SBXCMD_FAILED = 2, SBXCMD_EXITED = 3 };

struct sbxcmd_head {
    uint32_t magic, op, id, flags;
    int32_t sig;
    uint32_t nargv, nenv;
};

struct sbxcmd_event {
    uint32_t magic, type, id;
    int32_t pid, err, status;
};

/* A request as parsed: pointers into the message's buffer. */
struct sbxcmd_req {
    struct sbxcmd_head h;
    const char *cwd;
    char **argv; /* NULL-terminated (into vec) */
    char **env;  /* NULL-terminated (into vec) */
};

/* Parses the n bytes of buf (a request received whole; buf has room for n + 1 bytes, a NUL is
 * written at buf[n]), its strings' pointers going into vec (vecmax entries; at least
 * 2 * SBXCMD_STR_MAX + 2 to take any valid request). 0, or -EBADMSG / -E2BIG. A SPAWN has
 * sig 0, an absolute cwd, at least one argv string (the first not empty), and nothing after
 * its strings; a SIGNAL has no strings and a signal 1..64. */
int sbxcmd_parse(char *buf, size_t n, char **vec, size_t vecmax, struct sbxcmd_req *ret);

/* Gateway side: the SPAWN request of id (argv: at least one string; env: NULL-terminated;
 * cwd: an absolute path) in a new buffer (*ret, *ret_len; the caller frees). 0, -E2BIG
 * beyond the limits above, -EINVAL, -ENOMEM. */
int sbxcmd_encode_spawn(uint32_t id, uint32_t flags, const char *cwd, const char *const *argv,
                        const char *const *env, char **ret, size_t *ret_len);

#endif
