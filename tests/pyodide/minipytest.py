"""Run the core test modules that need nothing but the library inside Pyodide, without pytest.

pytest is not available to Pyodide offline, so this installs a small stand-in module named
`pytest` (raises, mark.parametrize, fixture, skip, approx) and runs every `test_*` function of the
given files. Modules that import the CPython-only test oracles (numpy, torch, safetensors, gguf,
hypothesis, ...) cannot run here and are reported as skipped, with the import that failed; the
CPython-vs-Pyodide comparison of those formats is done by parity.py instead.

Fixtures supported: tmp_path (a fresh directory). A test needing any other fixture is skipped.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import json
import math
import re
import shutil
import sys
import tempfile
import traceback
import types
from pathlib import Path


class Skipped(Exception):
    pass


class ExceptionInfo:
    def __init__(self):
        self.value = None
        self.type = None

    def match(self, pattern):
        assert re.search(pattern, str(self.value)), f"{pattern!r} not in {str(self.value)!r}"
        return True


class _Raises:
    def __init__(self, expected, match=None):
        self.expected, self.pattern, self.info = expected, match, ExceptionInfo()

    def __enter__(self):
        return self.info

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError(f"DID NOT RAISE {self.expected}")
        if not issubclass(kind, self.expected):
            return False
        self.info.value, self.info.type = value, kind
        if self.pattern is not None:
            self.info.match(self.pattern)
        return True


class _Mark:
    def __getattr__(self, name):
        if name == "parametrize":
            return _parametrize

        def decorator(*args, **kwargs):
            if args and callable(args[0]) and len(args) == 1 and not kwargs:
                return args[0]
            return lambda f: f
        return decorator


def _parametrize(names, values, **kwargs):
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)

    def decorate(f):
        f.__dict__.setdefault("_params", []).insert(0, (names, list(values)))
        return f
    return decorate


class _Approx:
    def __init__(self, expected, rel=1e-6, abs=1e-12):
        self.expected, self.rel, self.abs = expected, rel, abs

    def __eq__(self, other):
        return math.isclose(other, self.expected, rel_tol=self.rel, abs_tol=self.abs)


def _skip(reason="", allow_module_level=False):
    raise Skipped(reason)


def install_shim() -> None:
    shim = types.ModuleType("pytest")
    shim.raises = lambda expected, match=None: _Raises(expected, match)
    shim.mark = _Mark()
    shim.fixture = lambda *a, **k: (a[0] if a and callable(a[0]) else (lambda f: f))
    shim.skip = _skip
    shim.approx = lambda expected, rel=1e-6, abs=1e-12: _Approx(expected, rel, abs)
    shim.importorskip = lambda name, *a, **k: importlib.import_module(name)
    sys.modules["pytest"] = shim


def _cases(function):
    params = getattr(function, "_params", [])
    if not params:
        yield "", {}
        return
    for combo in itertools.product(*[values for _, values in params]):
        kwargs = {}
        labels = []
        for (names, _), value in zip(params, combo):
            value = value if len(names) > 1 else (value,)
            kwargs.update(zip(names, value))
            labels.append("-".join(str(v) for v in value))
        yield f"[{'-'.join(labels)}]", kwargs


def run_file(path: Path) -> dict:
    out = {"passed": [], "failed": {}, "skipped": {}}
    name = f"pyodide_tests_{path.stem}"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, Skipped) as e:
        out["module_skipped"] = f"{type(e).__name__}: {e}"
        return out
    for attr, function in sorted(vars(module).items()):
        if not attr.startswith("test_") or not callable(function):
            continue
        for label, kwargs in _cases(function):
            test_id = f"{path.name}::{attr}{label}"
            wanted = [p for p in inspect.signature(function).parameters if p not in kwargs]
            unknown = [p for p in wanted if p != "tmp_path"]
            if unknown:
                out["skipped"][test_id] = f"needs fixture {', '.join(unknown)}"
                continue
            tmp = Path(tempfile.mkdtemp()) if "tmp_path" in wanted else None
            try:
                function(**kwargs, **({"tmp_path": tmp} if tmp else {}))
                out["passed"].append(test_id)
            except Skipped as e:
                out["skipped"][test_id] = str(e)
            except Exception:
                out["failed"][test_id] = traceback.format_exc(limit=6)
            finally:
                if tmp:
                    shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str]) -> None:
    """minipytest.py OUT.json TEST_FILE...: run the files, write {file: result}."""
    install_shim()
    results = {Path(p).name: run_file(Path(p)) for p in argv[1:]}
    with open(argv[0], "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
