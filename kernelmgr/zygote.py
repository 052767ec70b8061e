# The Python half of kgw-zygote (kernelmgr/zygote.c embeds this file): what the fork server
# does once (_kgw_preload) and what each forked kernel does (_kgw_launch).
#
# A cold ipykernel spends its start importing (done once here) and then about 60 ms in
# IPKernelApp.initialize(). Most of that is the same for every kernel, so the fork server
# computes it once too:
#   - the application's command line (always `-f /run/kernel/connection.json`), parsed;
#   - the interactive shell (ZMQInteractiveShell: magics, prefilters, completer, traceback
#     handlers, display hooks, the user namespace), built with the configuration the kernel
#     would load, which is none: the shell is pre-built only when no IPython configuration file
#     exists in the places a kernel looks (its profile directory is in a fresh home, and the
#     system directories are checked here);
#   - its extensions (storemagic), loaded into that shell;
#   - the application's Session (its key, pid and id are set in each kernel).
# Everything that depends on the kernel's own process, files or environment is made in the
# kernel, as IPKernelApp would: the profile directory in its home, the history database, the
# pickleshare db, the ZeroMQ sockets and threads, the I/O streams, environment variables. The
# fork server itself creates no ZeroMQ context, no thread and no file outside its scratch
# directory, and runs no user code.
import os
import sys
import threading

_kgw = {}


def _kgw_config_files():
    """IPython configuration files a kernel in the sandbox could load, besides its profile."""
    from IPython.core.application import ENV_CONFIG_DIRS, SYSTEM_CONFIG_DIRS
    found = []
    for d in list(ENV_CONFIG_DIRS) + list(SYSTEM_CONFIG_DIRS):
        for base in ("ipython_config", "ipython_kernel_config"):
            for ext in (".py", ".json"):
                p = os.path.join(d, base + ext)
                if os.path.exists(p):
                    found.append(p)
    return found


def _kgw_prebuild(args, scratch):
    from IPython.core.profiledir import ProfileDir
    from ipykernel.compiler import XCachingCompiler
    from ipykernel.kernelapp import IPKernelApp
    from ipykernel.zmqshell import ZMQInteractiveShell
    from jupyter_client.session import Session

    app = IPKernelApp.instance()
    app.parse_command_line(list(args))
    # what the shell creates on disk (its IPython directory and profile, the pickleshare db)
    # goes to the scratch directory and is replaced in the kernel (_kgw_adopt); no history
    ipython_dir = os.path.join(scratch, ".ipython")
    os.makedirs(ipython_dir, exist_ok=True)
    profile = ProfileDir.create_profile_dir_by_name(ipython_dir, "default")
    app.config.HistoryManager.enabled = False
    try:
        shell = ZMQInteractiveShell.instance(parent=app, ipython_dir=ipython_dir,
                                             profile_dir=profile, user_module=None,
                                             user_ns=None, kernel=None,
                                             compiler_class=XCachingCompiler)
    finally:
        del app.config.HistoryManager["enabled"]
        if not app.config.HistoryManager:
            del app.config["HistoryManager"]
    # the Session the kernel makes first (IPKernelApp.init_connection_file); its key, pid and
    # id are the kernel's own (_kgw_launch). A placeholder key: an empty one would be logged.
    app.session = Session(parent=app, key=b"-")
    _kgw.update(app=app, shell=shell, args=tuple(args),
                extensions=_kgw_load_extensions(app, shell))
    _kgw_warm(shell)
    app.session.key = b""


def _kgw_warm(shell):
    """What a kernel's first execution would compute on the way (a one-shot's only execution is
    a kernel's first). In the fork server: computed once, every forked kernel inherits it. In
    the kernel, before it serves: the same again, now only reads of what is computed, so that
    the kernel takes its own copies of those pages (copy-on-write) during its start instead of
    its first execution. Only caches a later execution would fill the same way, none a client
    can see: no code is run, nothing enters the history, the execution count, the user
    namespace, linecache or the compiler's cell names, and no event or display hook is called.
    """
    import ast
    cell = "1+1\n"
    # IPython's input transformers tokenize the cell: tokenize compiles its regular
    # expressions on first use (the re module's cache)
    cell = shell.transform_cell(cell)
    # whether the cell has a top-level await: a compile of its own
    shell.should_run_async(cell, transformed_cell=cell, preprocessing_exc_tuple=None)
    shell.loop_runner  # its default (IPython's asyncio runner), imported on first use
    # the parse and compile of run_cell, under a name no cell has (the kernel's compiler,
    # shell.compile, would record the cell in linecache: not used)
    compile(ast.parse(cell), "<kgw-warm-up>", "exec")
    # the display hook's formatters: each formatter's traits take their defaults on first
    # access (per instance) through per-class generators (traitlets caches both); formatting a
    # value reads them all and changes nothing
    shell.display_formatter.format(2)


def _kgw_load_extensions(app, shell):
    """Loads the application's extensions (storemagic by default) into the pre-built shell, as
    IPKernelApp.init_extensions would, and returns their names. None, and nothing loaded, when
    one is not IPython's own or is configured (StoreMagics.autorestore would read the db): the
    kernel then loads them itself."""
    from IPython.core.extensions import BUILTINS_EXTS
    names = list(app.default_extensions) + list(app.extensions) + list(app.extra_extensions)
    if any(n not in BUILTINS_EXTS for n in names) or app.config.get("StoreMagics"):
        return None  # a third-party extension, or one whose configuration may read files
    em = shell.extension_manager
    for n in names:
        em.load_extension(n)
    return names


def _kgw_preload(extra, args, scratch):
    # numexpr (via pandas) would start threads: one, while this process forks
    os.environ['NUMEXPR_NUM_THREADS'] = '1'
    os.environ['MPLBACKEND'] = 'module://matplotlib_inline.backend_inline'
    os.environ['PYDEVD_DISABLE_FILE_VALIDATION'] = '1'  # debugpy's frozen-modules warning
    import ipykernel.kernelapp, ipykernel.ipkernel, ipykernel.zmqshell, IPython, zmq
    import jupyter_client, importlib, importlib.util, faulthandler  # (IPKernelApp.patch_io)
    for m in [m.strip() for m in extra.split(',') if m.strip()]:
        try:
            importlib.import_module(m)
        except Exception as e:
            sys.stderr.write('kgw-zygote: cannot preload %s: %r\n' % (m, e))
    # the inline backend hooks into the shell when it is imported: never here
    sys.modules.pop('matplotlib_inline.backend_inline', None)
    _kgw['launcher'] = importlib.util.find_spec('ipykernel_launcher').origin
    conf = _kgw_config_files()
    if conf:
        sys.stderr.write('kgw-zygote: IPython configuration in %s: kernels build their shell '
                         'themselves\n' % ', '.join(conf))
    elif scratch:
        try:
            _kgw_prebuild(args, scratch)
        except Exception as e:
            import traceback
            traceback.print_exc()
            sys.stderr.write('kgw-zygote: cannot pre-build the kernel application (%r): '
                             'kernels build it themselves\n' % (e,))
            _kgw_forget()
    if threading.active_count() != 1:
        raise RuntimeError('threads after preload: %r' % threading.enumerate())


def _kgw_forget():
    from ipykernel.kernelapp import IPKernelApp
    from ipykernel.zmqshell import ZMQInteractiveShell
    ZMQInteractiveShell.clear_instance()
    IPKernelApp.clear_instance()
    for k in ("app", "shell", "args", "extensions"):
        _kgw.pop(k, None)


def _kgw_adopt(app):
    """In the kernel: make the pre-built shell this process's, as IPythonKernel.__init__ would
    have built it here (called from IPKernelApp.init_kernel)."""
    from pickleshare import PickleShareDB
    from IPython.paths import get_ipython_dir
    from IPython.utils.path import get_home_dir
    shell = _kgw["shell"]
    # its value, as the shell would have set it here; without notifying observers that would
    # create directories a kernel does not create
    shell._trait_values["ipython_dir"] = get_ipython_dir()
    shell.home_dir = get_home_dir()
    shell.init_logger()
    shell.profile_dir = app.profile_dir
    shell.db = PickleShareDB(os.path.join(app.profile_dir.location, 'db'))
    shell.configurables.remove(shell.history_manager)
    shell.init_history()
    shell.init_user_ns()  # In, Out, _ih, _oh, _dh of the new history
    shell.init_environment()
    shell._orig_sys_module_state = {'stdin': sys.stdin, 'stdout': sys.stdout,
                                    'stderr': sys.stderr, 'excepthook': sys.excepthook}


def _kgw_shadowed(names, dirs):
    """Whether a module in these directories (the kernel's own import path) would be imported
    for one of these extension names instead of IPython's."""
    from importlib.machinery import PathFinder
    return any(PathFinder.find_spec(n, dirs) is not None for n in names)


def _kgw_launch(env, args):
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition('=')
        os.environ[k] = v
    sys.argv = [_kgw['launcher']] + list(args)
    # PYTHONPATH as an interpreter started with this environment would apply it
    extra = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    path = [os.getcwd()] + [p for p in extra if p not in sys.path]
    sys.path[0:0] = path
    # the sandbox's set-up reset every signal to its default: what an interpreter started
    # with exec ignores (a write to a closed socket must raise EPIPE, not kill the kernel)
    import signal
    for name in ('SIGPIPE', 'SIGXFSZ'):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    # the temporary directory, found on first use by writing a probe file (ipykernel names
    # its cells' files after it on the first execution): this kernel's, with its environment
    import tempfile
    tempfile.gettempdir()
    import random
    random.seed()  # also done by its at-fork hook; explicit for clarity
    np = sys.modules.get('numpy')
    if np is not None:
        np.random.seed()
    from ipykernel import kernelapp
    from IPython.paths import get_ipython_dir
    app = _kgw.get("app")
    if app is None or tuple(args) != _kgw["args"] or os.environ.get("IPYTHONDIR"):
        if app is not None:
            _kgw_forget()
        kernelapp.launch_new_instance()
        return
    # the command line is parsed and no configuration file exists (_kgw_preload)
    app.parse_command_line = lambda argv=None: None
    app.load_config_file = lambda *a, **kw: None
    app.update_config = lambda config: None  # with the command line's config: nothing new
    session = app.session
    session.pid = os.getpid()
    if "session" not in app.config.get("Session", {}):
        from jupyter_client.session import new_id
        session.session = new_id()
    names = _kgw["extensions"]
    if names is not None and \
            not _kgw_shadowed(names, path + [os.path.join(get_ipython_dir(), "extensions")]):
        app.init_extensions = lambda: None  # loaded in the pre-built shell
    init_kernel = app.init_kernel

    def adopting_init_kernel():
        _kgw_adopt(app)
        init_kernel()
        shell = app.kernel.shell
        shell.parent = app.kernel
        shell.kernel = app.kernel

    app.init_kernel = adopting_init_kernel
    from ipykernel.iostream import OutStream
    flush = OutStream.flush

    def initial_flush(stream):
        # the flushes in IPKernelApp.initialize: each a round trip to the I/O thread, with
        # nothing to send unless something was written
        if getattr(stream, "_flush_pending", True) or getattr(stream, "_buffer", None) is None \
                or stream._buffer.tell():
            flush(stream)

    OutStream.flush = initial_flush
    try:
        app.initialize()
    finally:
        OutStream.flush = flush
    for k in ("init_kernel", "parse_command_line", "load_config_file", "update_config",
              "init_extensions"):
        app.__dict__.pop(k, None)
    try:
        _kgw_warm(app.kernel.shell)  # the pages its first execution would copy, copied now
    except Exception as e:  # only a cost moved: never a reason not to serve
        sys.stderr.write('kgw-zygote: warm-up in the kernel failed: %r\n' % (e,))
    app.start()
