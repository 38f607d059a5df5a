"""What a global a pickle names would do if a real unpickler (torch.load(weights_only=False))
imported and called it: "inert" or "dangerous", with the reason. (allowlist.py says first which
names are allowed: rebuilt as data by tensorloupe.)
"""

from __future__ import annotations

# The verdict is honest by construction: a global is "allowed" (rebuilt as data here), "inert"
# (on the short list below of names known not to run code when a real unpickler calls them), or
# "dangerous": either a row below that says what it runs, or, for every other name, "may execute
# code" (a real unpickler imports its module, which may run code, then calls it).
MAY_EXECUTE = "not on the allow-list: torch.load(weights_only=False) imports it and may execute code"
RUNS_COMMAND, IMPORTS, CALLS, EXECUTES = ("runs a shell command", "imports any module by name",
                                          "calls any callable it is given",
                                          "executes Python source or bytecode")
DANGEROUS_MODULES: dict[str, str] = {
    **dict.fromkeys(("os", "posix", "nt", "_posixsubprocess", "_winapi", "subprocess", "pty",
                     "commands", "multiprocessing", "asyncio"), "runs commands or processes"),
    **dict.fromkeys(("runpy", "code", "codeop", "pdb", "bdb", "timeit", "cProfile", "profile",
                     "trace", "doctest", "idlelib", "lib2to3", "torch.jit", "torch.package",
                     "torch.utils.cpp_extension"), EXECUTES),
    **dict.fromkeys(("importlib", "_frozen_importlib", "_frozen_importlib_external", "imp",
                     "zipimport", "pkgutil", "site", "sysconfig", "pip", "setuptools", "distutils",
                     "torch.hub"), IMPORTS),
    **dict.fromkeys(("pickle", "_pickle", "marshal", "dill", "joblib", "cloudpickle", "shelve",
                     "torch.serialization", "torch.utils.data.datapipes"),
                    "unpickles or loads further data (its handlers call pickle.loads)"),
    **dict.fromkeys(("socket", "urllib", "http", "requests", "ftplib", "smtplib", "telnetlib",
                     "imaplib", "poplib", "xmlrpc", "webbrowser"), "opens connections or runs a "
                    "program (imaplib.IMAP4_stream, webbrowser)"),
    **dict.fromkeys(("shutil", "tempfile", "pathlib", "io", "_io", "posixpath", "ntpath",
                     "fileinput", "glob"), "reads, writes or deletes files"),
    **dict.fromkeys(("sys", "ctypes", "_ctypes", "signal", "_thread", "threading", "gc", "inspect",
                     "types", "functools", "_functools", "operator", "_operator", "copyreg",
                     "builtins", "logging.config", "mailcap", "pydoc", "uuid",
                     "torch.utils.collect_env", "torch._C"),
                    "has gadgets that call, import or run what a pickle gives them"),
}
DANGEROUS_NAMES: dict[str, str] = {
    **dict.fromkeys(("builtins.eval", "builtins.exec", "builtins.compile",
                     "torch.jit.unsupported_tensor_ops.execWrapper",
                     "numpy.testing._private.utils.runstring", "doctest.run_docstring_examples"),
                    EXECUTES),
    **dict.fromkeys(("builtins.__import__", "_frozen_importlib._gcd_import", "pydoc.locate",
                     "pkgutil.resolve_name", "importlib.import_module"), IMPORTS),
    **dict.fromkeys(("builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.globals",
                     "builtins.locals", "builtins.vars", "operator.attrgetter",
                     "_operator.attrgetter"), "reaches or changes any attribute"),
    **dict.fromkeys(("operator.methodcaller", "_operator.methodcaller", "functools.partial",
                     "_functools.partial", "functools.reduce", "_functools.reduce", "builtins.map",
                     "builtins.filter", "copyreg._reconstructor", "builtins.type"), CALLS),
    **dict.fromkeys(("pydoc.pipepager", "pydoc.tempfilepager", "uuid._get_command_stdout",
                     "imaplib.IMAP4_stream", "mailcap.findmatch", "torch.utils.collect_env.run",
                     "os.system", "posix.system", "_os.posix_spawn", "os.posix_spawn"),
                    RUNS_COMMAND),
    "logging.config.dictConfig": "imports and calls whatever its configuration names",
    "builtins.open": "opens (and creates) files",
    **dict.fromkeys(("builtins.input", "builtins.breakpoint", "builtins.help", "builtins.exit",
                     "builtins.quit"), "interacts with the terminal or stops the process"),
    **dict.fromkeys(("torch.load", "torch.save", "torch.hub.load", "torch.jit.load",
                     "torch.serialization.load", "torch.storage._load_from_bytes", "numpy.load",
                     "numpy.lib.npyio.load", "numpy.lib._npyio_impl.load", "numpy.fromfile",
                     "numpy.lib.format.read_array"),
                    "loads another file or pickle (numpy.load with allow_pickle unpickles)"),
}
# The short list of names known not to run code when a real unpickler imports and calls them.
INERT_NAMES: dict[str, str] = {
    **dict.fromkeys((f"builtins.{t}" for t in ("int", "float", "str", "bool", "dict", "list",
                                              "tuple", "range", "object", "NoneType")),
                    "a builtin data type"),
    **dict.fromkeys(("collections.defaultdict", "collections.Counter", "collections.deque",
                     "argparse.Namespace", "datetime.datetime", "datetime.date", "datetime.time",
                     "datetime.timedelta", "datetime.timezone", "decimal.Decimal",
                     "fractions.Fraction", "uuid.UUID", "torch.serialization._get_layout"),
                    "a standard data class"),
    # DCP's .metadata records its checkpoint_id as a path: building one reads no file
    **dict.fromkeys(("pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePosixPath",
                     "pathlib.PureWindowsPath"), "a path object (building it opens no file)"),
    **dict.fromkeys(("copyreg.__newobj__", "copyreg.__newobj_ex__"),
                    "creates an instance of a class the pickle names (judged on its own)"),
}
UNREGISTERED_EXT = "copyreg._extension_registry"
_DANGEROUS_ATTRS = frozenset(name.rpartition(".")[2] for name in DANGEROUS_NAMES) | {
    "system", "popen", "spawnv", "execv", "run", "call", "check_output", "Popen", "rmtree",
    "posix_spawn", "posix_spawnp", "_os"}


def judge_other(module: str, name: str) -> tuple[str, str]:
    """(verdict, reason) of a global that is not allow-listed: "inert" or "dangerous"."""
    full = f"{module}.{name}"
    if full in DANGEROUS_NAMES:
        return "dangerous", DANGEROUS_NAMES[full]
    # A dotted name is an attribute walk from the module (protocol 4): through `os`, `eval` or a
    # dunder (`__globals__`, `__builtins__`) it reaches anything.
    if "." in name or ("__" in name and full not in INERT_NAMES):
        return "dangerous", "an attribute walk from a module (it can reach any object)"
    if full in INERT_NAMES:
        return "inert", INERT_NAMES[full]
    if module == UNREGISTERED_EXT:
        return "inert", "no extension is registered under this code: a real unpickler stops here"
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        reason = DANGEROUS_MODULES.get(".".join(parts[:i]))
        if reason:
            return "dangerous", f"module {'.'.join(parts[:i])} {reason}"
    if module.startswith("torch.nn.modules.") and name[:1].isupper() and name.isidentifier():
        return "inert", "a torch.nn module class (rebuilt by torch's own __setstate__)"
    return "dangerous", MAY_EXECUTE
