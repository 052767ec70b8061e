/* Readiness for a service manager (systemd's Type=notify, through $NOTIFY_SOCKET): READY=1
 * once kgw listens and its pool is filling, STOPPING=1 when it begins to stop. Built without
 * libsystemd, the calls compile to nothing; outside a service (no $NOTIFY_SOCKET) they do
 * nothing. */
#ifndef KGW_GATEWAY_SDNOTIFY_H
#define KGW_GATEWAY_SDNOTIFY_H

#ifdef KGW_HAVE_LIBSYSTEMD
/* status: one line for `systemctl status` */
void sdnotify_ready(const char *status);
void sdnotify_stopping(void);
/* The listening sockets the service manager passed (socket activation: $LISTEN_FDS for this
 * process), as a count of descriptors from SD_LISTEN_FDS_START (3); the variables are unset,
 * so no child sees them. 0 when there are none. */
int sdnotify_listen_fds(void);
#else
static inline int sdnotify_listen_fds(void)
{
    return 0;
}
static inline void sdnotify_ready(const char *status)
{
    (void)status;
}
static inline void sdnotify_stopping(void)
{
}
#endif

#endif
