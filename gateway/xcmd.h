/* xcmd.c: commands in a kernel's sandbox (kernelmgr/kcmd.h) for the faces (docs/commands.md):
 * a command as a client asks for it, its stdin fed to its pipe, a command streamed to its
 * clients within the kernel's output budget (the commands API, xcmdapi.h: one; E2B's
 * processes, e2bsbx.c: any number, or none), and a run that collects a command's output for MCP's run_command. */
#ifndef KGW_GATEWAY_XCMD_H
#define KGW_GATEWAY_XCMD_H

#include <jansson.h>

#include "common/buf.h"
#include "gateway/gw.h"
#include "gateway/kerr.h"
#include "kernelmgr/kcmd.h"

#define XCMD_COMMAND_MAX (64 * 1024) /* bytes of "command" */
#define XCMD_STDIN_MAX   (1 << 20)   /* bytes of "stdin" */
#define XCMD_ENV_MAX     256         /* entries of "env" */
#define XCMD_QUEUE_MAX   (256 * 1024) /* bytes queued for a client before its command pauses */

/* A command as a client asks for it: {"command": "..."} (run by /bin/bash -l -c) or
 * {"argv": [...]}, and "cwd", "env" {NAME: VALUE}, "timeout" (seconds), "stdin". */
struct xcmd_spec {
    char **argv; /* NULL-terminated */
    char *cwd;   /* NULL: the workspace */
    char **env;  /* "NAME=VALUE", NULL-terminated; NULL: none */
    double timeout;
    char *stdin_data; /* NULL: no stdin (/dev/null) */
    size_t stdin_len;
};
/* 0, or -EINVAL with a message in err. allowed: the names of the fields the face takes
 * (NULL-terminated): others are refused. */
int xcmd_spec_parse(json_t *body, const char *const *allowed, struct xcmd_spec *ret, char *err,
                    size_t errsz);
void xcmd_spec_fini(struct xcmd_spec *s);

/* The command's options for kcmd_start (pointing into s). */
struct kcmd_opts xcmd_spec_opts(const struct xcmd_spec *s);

/* A command's stdin: s's bytes (taken from s), written as the pipe takes them, then the pipe
 * closed. cmd: the owner's pointer to the command (NULL once it is released). NULL without
 * stdin or memory (the command then gets EOF at once). */
struct xcmd_stdin *xcmd_stdin_start(evl_t *evl, kcmd_t **cmd, struct xcmd_spec *s);
void xcmd_stdin_free(struct xcmd_stdin **p);
/* A command's stdin fed as it comes (E2B's SendInput): at most max bytes waiting. */
struct xcmd_stdin *xcmd_stdin_new(evl_t *evl, kcmd_t **cmd, size_t max);
/* Appends n bytes, written as the pipe takes them: 0, -ENOBUFS past max waiting, -EPIPE once
 * closing, -ENOMEM. */
int xcmd_stdin_write(struct xcmd_stdin *in, const void *buf, size_t n);
/* Closes the pipe once what waits is written (EOF for the command). */
void xcmd_stdin_close(struct xcmd_stdin *in);

/* A command's end as the faces tell it: {"status", "exit_code", "signal", "duration_ms",
 * "message"}, new reference. */
json_t *xcmd_end_json(const struct kcmd_end *e);

/* A command streamed to its clients. Its events, framed by the face (ops), wait in each
 * client's queue, charged to the kernel's share of the output budget (common/obudget.h) until
 * the face has written them; past XCMD_QUEUE_MAX queued for one client, or with the share over
 * its limit, the command's output is no longer read (kcmd_pause) until the clients take what
 * is queued: the command then waits on its pipe, and the gateway holds a bounded amount for a
 * slow client (which its face cuts after its stall timeout). The client that started it has
 * the stream's own queue (xcmd_stream_pending); more attach as taps (E2B's Connect), each with
 * its own queue. With no client attached (xcmd_stream_detach, no taps) the command runs on: its
 * output is read and dropped, never paused, nothing held for it. */
typedef struct xcmd_stream xcmd_stream_t;
struct xcmd_stream_ops {
    /* n bytes (at most KCMD_READ_MAX) of its stdout (fd 1) or stderr (fd 2), to frame and
     * queue with xcmd_stream_send */
    void (*output)(void *ud, int fd, const void *buf, size_t n);
    /* its end, once, last: the same */
    void (*end)(void *ud, const struct kcmd_end *e);
    /* bytes were queued: the client's connection may write them */
    void (*wake)(void *ud);
};
/* Starts the command o in k for ops (kops_command_start: its refusals in err): the stream, or
 * NULL. With o->stdin_open its stdin is a pipe fed by xcmd_stream_input (at most
 * XCMD_STDIN_MAX bytes waiting). The callbacks run from the loop, never inside this call. */
xcmd_stream_t *xcmd_stream_start(
    gw_t *g, kernel_t *k, const struct kcmd_opts *o, const struct xcmd_stream_ops *ops, void *ud,
    struct kerr *err);
/* Queues n framed bytes for each client attached (wakes them): 0, or -ENOMEM (they are lost
 * for one). */
int xcmd_stream_send(xcmd_stream_t *s, const void *framed, size_t n);
/* The starting client's bytes queued and not yet written (*ret: where they start). */
size_t xcmd_stream_pending(const xcmd_stream_t *s, const char **ret);
/* n of them were written: released, and the command read again if it waited for them. */
void xcmd_stream_taken(xcmd_stream_t *s, size_t n);
/* Whether its end was framed (nothing is queued after). */
bool xcmd_stream_ended(const xcmd_stream_t *s);
/* kops_command_signal: -ESRCH once it ended (404). */
int xcmd_stream_signal(xcmd_stream_t *s, int sig, struct kerr *err);
/* Bytes for its stdin (xcmd_stdin_write's codes), or its end; -EBADF: started without stdin,
 * or no memory to feed it (it got EOF). */
int xcmd_stream_input(xcmd_stream_t *s, const void *buf, size_t n);
int xcmd_stream_close_input(xcmd_stream_t *s);
/* The starting client goes (what it has queued is released): the command runs on, for the
 * taps, or with none its output read and dropped. */
void xcmd_stream_detach(xcmd_stream_t *s);
/* A command still running is killed (no callback after); what is queued for the starting
 * client goes; taps still attached outlive it, ended. NULL is fine. */
void xcmd_stream_free(xcmd_stream_t **s);

/* Another client attached to a stream: it gets what xcmd_stream_send queues from now on (and
 * what xcmd_tap_send queues for it alone); wake(ud) when bytes were queued. NULL: no memory. */
typedef struct xcmd_tap xcmd_tap_t;
xcmd_tap_t *xcmd_tap_new(xcmd_stream_t *s, void (*wake)(void *ud), void *ud);
/* As xcmd_stream_send, for it alone; -ENOMEM too once its stream is gone. */
int xcmd_tap_send(xcmd_tap_t *t, const void *framed, size_t n);
size_t xcmd_tap_pending(const xcmd_tap_t *t, const char **ret);
void xcmd_tap_taken(xcmd_tap_t *t, size_t n);
/* Whether its stream's end was framed, or its stream is gone (nothing is queued after). */
bool xcmd_tap_ended(const xcmd_tap_t *t);
/* It goes (what it has queued is released); the command runs on. NULL is fine. */
void xcmd_tap_free(xcmd_tap_t **t);

/* A command whose output is collected (MCP): stdout and stderr up to max bytes together (the
 * rest is counted, not kept), then done(ud) once it ended. */
typedef struct xcmd_run xcmd_run_t;
/* NULL with *ret_err (-errno of kcmd_start) and a message in err. */
xcmd_run_t *xcmd_run_start(gw_t *g, kernel_t *k, const struct xcmd_spec *s, size_t max,
                           void (*done)(void *ud), void *ud, char *err, size_t errsz);
/* Its text (valid UTF-8) of fd 1 or 2. */
const buf_t *xcmd_run_text(const xcmd_run_t *run, int fd);
/* {"status", "exit_code", "signal", "duration_ms", "message", "truncated"}: new reference. */
json_t *xcmd_run_end(const xcmd_run_t *run);
/* Cancels it (SIGKILL to its process group; done comes with status cancelled). */
void xcmd_run_cancel(gw_t *g, xcmd_run_t *run);
/* A command still running is killed. */
void xcmd_run_free(xcmd_run_t **run);

#endif
