/* kgw-sandbox-init: pid 1 of every sandbox. It is exec'd from a sealed memfd with the argv
 * "init" and an empty environment (so /proc/1/cmdline, /proc/1/environ and /proc/1/exe show
 * nothing of the host), after privileges were dropped and the seccomp filter loaded. It reaps
 * every process of the sandbox, forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the kernel's
 * process group, and exits with the kernel's status — which ends the pid namespace and so
 * kills whatever the kernel left behind. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define KERNEL_PID 2 /* the first child of pid 1; it leads its own process group */

static void forward(int sig)
{
    kill(-KERNEL_PID, sig);
}

int main(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    /* init runs with the kernel's uid: without this, kernel code could read or write its
     * memory through /proc/1/mem (exec made it dumpable again) */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return 127;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward;
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
    for (;;) {
        int st;
        pid_t pid = wait(&st);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            return 0; /* no children left */
        }
        if (pid == KERNEL_PID)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
}
