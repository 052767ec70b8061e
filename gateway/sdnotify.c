#include "gateway/sdnotify.h"

#include <string.h>
#include <systemd/sd-daemon.h>

#include "common/log.h"

void sdnotify_ready(const char *status)
{
    int r = sd_notifyf(0, "READY=1\nSTATUS=%.200s", status);
    if (r < 0)
        log_warn("sd_notify READY=1: %s", strerror(-r));
    else if (r > 0)
        log_debug("told the service manager: ready");
}

int sdnotify_listen_fds(void)
{
    int n = sd_listen_fds(1);
    if (n < 0)
        log_warn("sockets from the service manager: %s", strerror(-n));
    return n > 0 ? n : 0;
}

void sdnotify_stopping(void)
{
    int r = sd_notify(0, "STOPPING=1\nSTATUS=stopping");
    if (r < 0)
        log_warn("sd_notify STOPPING=1: %s", strerror(-r));
}
