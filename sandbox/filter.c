#include "sandbox/filter.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static struct sock_fprog prog;

/* Denied with EPERM: Python then raises a clean PermissionError. */
static const char *const denied[] = {
    /* tracing */
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    /* mounts and roots */
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    /* namespaces */
    "setns", "unshare",
    /* kernel attack surface */
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "fanotify_init", "lookup_dcookie",
    /* modules and kexec */
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    /* clocks */
    "clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "stime",
    /* file handles */
    "open_by_handle_at", "name_to_handle_at",
    /* obsolete or host-wide */
    "uselib", "ustat", "sysfs", "_sysctl", "acct", "swapon", "swapoff", "reboot", "syslog",
    "quotactl", "quotactl_fd", "vhangup", "nfsservctl", "create_module", "get_kernel_syms",
    "query_module", "iopl", "ioperm", "personality",
};

static int build(scmp_filter_ctx ctx)
{
    static const unsigned long clone_new[] = {CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS,
                                              CLONE_NEWIPC,  CLONE_NEWUSER,   CLONE_NEWPID,
                                              CLONE_NEWNET,  CLONE_NEWTIME};
    int r;
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
        int nr = seccomp_syscall_resolve_name(denied[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture */
        if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
            return r;
    }
    /* clone: no flag that makes a namespace (one rule per flag; rules are ORed) */
    for (size_t i = 0; i < sizeof(clone_new) / sizeof(clone_new[0]); i++)
        if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, clone_new[i], clone_new[i]))) < 0)
            return r;
    /* clone3 passes its flags in memory a filter cannot read: ENOSYS, and glibc falls back */
    if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
        return r;
    /* sockets: unix, inet, inet6, and netlink for NETLINK_ROUTE only (libzmq and glibc's
     * getifaddrs use it; refusing all netlink makes libzmq abort) */
    for (int d = 0; d < AF_MAX; d++) {
        if (d == AF_UNIX || d == AF_INET || d == AF_INET6 || d == AF_NETLINK)
            continue;
        if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                                  SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)d))) < 0)
            return r;
    }
    if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2,
                              SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
                              SCMP_A2(SCMP_CMP_NE, 0 /* NETLINK_ROUTE */))) < 0)
        return r;
    if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                              SCMP_A0(SCMP_CMP_GE, AF_MAX))) < 0)
        return r;
    /* no faking terminal input for another process */
    if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI))) < 0)
        return r;
    return 0;
}

int sbx_filter_prepare(void)
{
    int r, fd = -1;
    if (prog.filter)
        return 0;
    /* everything not listed is allowed; other architectures' syscalls (i386 via int 0x80,
     * x32) kill the process */
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return -ENOMEM;
    if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0 ||
        (r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0 || (r = build(ctx)) < 0)
        goto out;
    fd = memfd_create("seccomp", MFD_CLOEXEC);
    if (fd < 0 || (r = seccomp_export_bpf(ctx, fd)) < 0) {
        r = fd < 0 ? -errno : r;
        goto out;
    }
    off_t len = lseek(fd, 0, SEEK_END);
    struct sock_filter *f = malloc((size_t)len);
    if (!f || len <= 0 || pread(fd, f, (size_t)len, 0) != len) {
        free(f);
        r = -EIO;
        goto out;
    }
    prog.filter = f;
    prog.len = (unsigned short)((size_t)len / sizeof(struct sock_filter));
    log_debug("seccomp: filter of %u instructions", prog.len);
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    seccomp_release(ctx);
    return r;
}

int sbx_filter_load(void)
{
    if (!prog.filter)
        return -EINVAL;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return -errno;
    return 0;
}
