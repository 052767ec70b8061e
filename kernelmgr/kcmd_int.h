/* kernelmgr internal (floor 1): a kernel's commands (kcmd.c; the public part: kcmd.h). */
#ifndef KGW_KERNELMGR_KCMD_INT_H
#define KGW_KERNELMGR_KCMD_INT_H

#include "kernelmgr/private.h"

/* Before a sandboxed start: the command socket pair; k keeps its end (watched), *ret_init is
 * the end for the sandbox's init (sbx_profile_t.ctl_fd; the caller closes it once the
 * process is started). 0 or -errno (the kernel then runs without commands). */
int kcmd__open(kernel_t *k, int *ret_init);
/* A restart in place (kinstance__resume): k's end of the command socket, handed over, is k's
 * again (taken: close-on-exec again). 0 or -errno (the caller closes fd). */
int kcmd__resume(kernel_t *k, int fd);
/* k's end of the command socket (-1: none), and its commands running. */
int kcmd__fd(const kernel_t *k);
int kcmd__running(const kernel_t *k);
/* k's process ended (or never started, or k is freed): its commands end (KCMD_KERNEL_GONE;
 * unsandboxed ones are killed and end when reaped) and its socket is closed. */
void kcmd__detach(kernel_t *k);
/* k's commands (k->cmds, kcmd.c: allocated by kcmd__open or the first kcmd_start) are freed
 * with the kernel, after kcmd__detach's effects. */
struct kcmds;
void kcmd__free(kernel_t *k);

#endif
