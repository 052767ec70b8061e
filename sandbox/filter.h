/* The sandbox's syscall filter (libseccomp), compiled once in the gateway; sandboxed children
 * only load the compiled program (no allocation between fork and exec). */
#ifndef KGW_SANDBOX_FILTER_H
#define KGW_SANDBOX_FILTER_H

/* Compiles the filter. 0 or -errno. Idempotent. */
int sbx_filter_prepare(void);
/* Loads the compiled filter into the calling thread (async-signal-safe). 0 or -errno. */
int sbx_filter_load(void);

#endif
