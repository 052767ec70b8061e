/* kernelmgr internal (floor 1): a kernel process's stderr (kstderr.c). */
#ifndef KGW_KERNELMGR_KSTDERR_INT_H
#define KGW_KERNELMGR_KSTDERR_INT_H

#include "kernelmgr/private.h"

/* A kernel process's stderr, its newest TAILBUF_SIZE bytes kept (k->err: struct kstderr,
 * allocated by the first open, freed with the kernel by kstderr__free).
 * open: a new pipe for the process about to start (the tail starts empty); ret_wfd is its write
 * end, for the process (the caller closes it once the process has it). drain: what is left,
 * once the process has ended; the pipe is closed. excerpt: its last lines, short and printable,
 * secrets blotted out (tailbuf_excerpt); log: its last lines to the log, as warnings. */
struct kstderr;
int kstderr__open(kernel_t *k, int *ret_wfd);
/* A restart in place (kinstance__resume): the pipe's read end fd, handed over, is k's again
 * (taken: close-on-exec again; closed with k). 0 or -errno (the caller closes fd). */
int kstderr__resume(kernel_t *k, int fd);
/* The pipe's read end, -1 for none. */
int kstderr__fd(const kernel_t *k);
void kstderr__drain(kernel_t *k);
void kstderr__free(kernel_t *k);
size_t kstderr__excerpt(const kernel_t *k, char *out, size_t outsz);
void kstderr__log(const kernel_t *k);

#endif
