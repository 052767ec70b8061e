/* kgw-zygote: the fork server. A Python interpreter (libpython, embedded) that imports
 * ipykernel, IPython, zmq and jupyter_client once, pre-builds what every kernel's application
 * would build the same way (zygote.py), creates no ZeroMQ context and no thread, never runs
 * user code, and forks one kernel per request from the gateway into the same sandbox as the
 * exec path (sandbox/sbx.h, "the fork server").
 *
 * Started by the gateway (kernelmgr/kzygote.c) from a sealed memfd, with the kernelspec's argv
 * (so a kernel's /proc/self/cmdline reads as with the exec path), as an unprivileged uid of its
 * own with no capabilities, no_new_privs, no core dumps, a clean environment and these
 * descriptors only:
 *   0-2  /dev/null, /dev/null, the gateway's stderr (for its own start-up errors)
 *   3    SOCK_SEQPACKET to the gateway: its configuration in ("P" + comma-separated extra
 *        modules to import + NUL + a scratch directory it may write), then requests
 *        (sbx_start_forked) and moves into the next kernel's cgroup (sbx_fork_server_move);
 *        one "R" out when ready
 *   4    kgw-sandbox-init (executable memfd)
 * Its environment is the sandbox's default (PATH, LANG, HOME): every forked kernel shows it
 * in /proc/self/environ, and gets its own in os.environ. */
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/sbx.h"

#define SERVER_FD 3
#define INIT_FD   4

/* kernelmgr/zygote.py: _kgw_preload runs here, _kgw_launch in each kernel */
#include "kernelmgr/zygote_py.h"

/* In sanitizer builds (the sandbox library is instrumented): Python's interpreter-lifetime
 * allocations are not leaks, and every forked kernel would report them at exit. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
}

static PyObject *ns;

struct kernel_arg {
    sbx_fork_req_t *req;
};

static PyObject *strv_list(char *const *v)
{
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && v[i]; i++) {
        PyObject *s = PyUnicode_DecodeFSDefault(v[i]);
        if (!s || PyList_Append(l, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(s);
    }
    return l;
}

/* The final sandboxed process (uid 1000, seccomp loaded, pid 2 of its namespace). */
static void run_kernel(void *data)
{
    struct kernel_arg *a = data;
    /* no exec follows: descriptors marked close-on-exec must go now (this also closes the
     * gateway's set-up report, which tells it the set-up is over) */
    syscall(SYS_close_range, 3u, ~0u, 0u);
    /* an exec would make the process dumpable again after the uid change (so it can read
     * its own /proc/self files, as an exec'd kernel can); without one, do it here */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    PyOS_AfterFork_Child();
    PyObject *launch = PyDict_GetItemString(ns, "_kgw_launch");
    PyObject *env = strv_list(sbx_fork_req_env(a->req));
    PyObject *args = strv_list(sbx_fork_req_payload(a->req));
    sbx_fork_req_wipe(a->req); /* host paths: the kernel has no use for them */
    if (launch && env && args) {
        PyObject *r = PyObject_CallFunctionObjArgs(launch, env, args, NULL);
        if (!r) {
            if (PyErr_ExceptionMatches(PyExc_SystemExit)) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyObject *code = value ? PyObject_GetAttrString(value, "code") : NULL;
                long c = code && PyLong_Check(code) ? PyLong_AsLong(code) : 0;
                fflush(NULL);
                _exit((int)c);
            }
            PyErr_Print();
            _exit(1);
        }
        _exit(0);
    }
    _exit(127);
}

/* --kgw-probe: every set-up step, then exit (the gateway's dry run of the forked path) */
static void probe(void *data)
{
    _exit(0);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* Backs the pre-loaded heap with huge pages where the kernel can (MADV_COLLAPSE, Linux 6.1):
 * each start forks this process three times over (proxy, init, kernel), and a fork copies
 * one page-table entry per 2 MiB huge page instead of 512 (2-8 ms less per start here, with
 * numpy, pandas and matplotlib pre-loaded). Children still copy 4 KiB on write. Best effort:
 * nothing changes where it fails. */
static void collapse_heap(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    const unsigned long huge = 2UL << 20;
    while (f && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perms[8], path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perms, path) < 3)
            continue;
        /* private anonymous memory and the brk heap only; not address space merely reserved
         * (a sanitizer runtime's shadow is terabytes) */
        if (strncmp(perms, "rw", 2) != 0 || perms[3] != 'p' ||
            (path[0] && strcmp(path, "[heap]") != 0) || hi - lo > (1UL << 30))
            continue;
        unsigned long a = (lo + huge - 1) & ~(huge - 1), b = hi & ~(huge - 1);
        if (b > a)
            madvise((void *)a, b - a, MADV_COLLAPSE);
    }
    if (f)
        fclose(f);
}

static int serve(void)
{
    for (;;) {
        sbx_fork_req_t *req = NULL;
        int r = sbx_fork_req_recv(SERVER_FD, INIT_FD, &req);
        if (r == -EPIPE)
            return 0; /* the gateway closed the socket: retired */
        if (r == SBX_FORK_MOVED)
            continue;
        if (r < 0) {
            if (r == -EINTR || r == -EBADMSG)
                continue;
            return 1;
        }
        struct kernel_arg a = {req};
        char *const *pl = sbx_fork_req_payload(req);
        bool is_probe = pl[0] && !strcmp(pl[0], "--kgw-probe");
        PyOS_BeforeFork();
        sbx_fork_req_spawn(req, SERVER_FD, is_probe ? probe : run_kernel, &a);
        PyOS_AfterFork_Parent();
        sbx_fork_req_free(&req);
    }
}

int main(int argc, char **argv)
{
    PyStatus st;
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.parse_argv = 0;
    config.install_signal_handlers = 1;
    /* the interpreter the kernelspec names: sys.executable, sys.prefix and sys.path follow */
    st = PyConfig_SetBytesString(&config, &config.program_name, argc > 0 ? argv[0] : "python3");
    if (!PyStatus_Exception(st))
        st = PyConfig_SetBytesArgv(&config, argc, argv);
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
        fprintf(stderr, "kgw-zygote: cannot start Python: %s\n", st.err_msg ? st.err_msg : "?");
        return 1;
    }
    PyObject *main = PyImport_AddModule("__main__");
    ns = PyDict_New();
    PyDict_SetItemString(ns, "__builtins__", PyDict_GetItemString(PyModule_GetDict(main),
                                                                  "__builtins__"));
    PyObject *r = PyRun_String((const char *)kgw_zygote_py, Py_file_input, ns, ns);
    if (!r) {
        PyErr_Print();
        return 1;
    }
    Py_DECREF(r);
    /* "P" extra-modules NUL scratch-directory */
    char conf[PATH_MAX + 512];
    ssize_t n = recv(SERVER_FD, conf, sizeof(conf) - 1, 0);
    if (n < 1 || conf[0] != 'P')
        return 1;
    conf[n] = '\0';
    size_t elen = strlen(conf + 1);
    const char *scratch = (size_t)n > elen + 2 ? conf + elen + 2 : "";
    PyObject *args = strv_list(argc == 5 ? argv + 3 : (char *const[]){NULL});
    r = args ? PyObject_CallFunction(PyDict_GetItemString(ns, "_kgw_preload"), "sOs", conf + 1,
                                     args, scratch)
             : NULL;
    Py_XDECREF(args);
    if (!r) {
        PyErr_Print();
        return 1;
    }
    Py_DECREF(r);
    collapse_heap();
    if (send(SERVER_FD, "R", 1, MSG_NOSIGNAL) != 1)
        return 1;
    return serve();
}
