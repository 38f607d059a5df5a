"""Opening a file imports the reader it needs and not the others (detect.READERS imports each in
its turn), and what only some files or commands need is imported when first needed. In Pyodide
an import costs several times what it does here, and the page's first boot waits for every one
(bench/browser_open.py), so these are checked on sys.modules of a fresh interpreter.

Each check runs `python -S` (no site: the only imports are the interpreter's own and ours) with
this checkout's pylib on the path.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf_files
import torch_files

PYLIB = Path(__file__).resolve().parent.parent / "pylib"

TORCH_READERS = ("tensorloupe.formats.pytorch", "tensorloupe.unpickling")
GGUF_READER = ("tensorloupe.formats.gguf",)
GGML_CODECS = ("tensorloupe.dtypes.ggml",)
# Slow imports in Pyodide that a safetensors file never needs: the pickle grammar and tarfile
# (torch readers), urllib.parse with ipaddress (URLs), statistics with fractions and decimal.
SLOW_STDLIB = ("pickle", "pickletools", "tarfile", "urllib.parse", "ipaddress", "statistics")


def imported(code: str) -> set[str]:
    """The modules a fresh `python -S` holds after running `code`."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(PYLIB)}, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def under(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_opening_safetensors_imports_neither_the_torch_nor_the_gguf_reader(demo_path):
    modules = imported(f"import tensorloupe\ntensorloupe.open({str(demo_path)!r}).close()")
    assert "tensorloupe.formats.safetensors" in modules
    assert under(modules, TORCH_READERS + GGUF_READER + GGML_CODECS) == []
    assert sorted(modules & set(SLOW_STDLIB)) == []


def test_inspect_of_a_safetensors_file_imports_no_other_reader(demo_path):
    modules = imported("import tensorloupe.cli\n"
                       f"assert tensorloupe.cli.main(['inspect', {str(demo_path)!r}]) == 0")
    assert "tensorloupe.formats.safetensors" in modules
    assert under(modules, TORCH_READERS + GGUF_READER) == []
    # the command's own modules only: no tokenizers, no health report text
    assert under(modules, ("tensorloupe.tokens", "tensorloupe.healthscan.text")) == []


def test_a_gguf_file_imports_its_reader_and_codecs_but_no_torch_reader(tmp_path):
    path = gguf_files.write_llama(tmp_path / "tiny.gguf")
    modules = imported(f"import tensorloupe\ntensorloupe.open({str(path)!r}).close()")
    assert "tensorloupe.formats.gguf.reader" in modules
    assert "tensorloupe.dtypes.ggml" in modules
    # torch.load takes any name but *.safetensors: what it would make of a GGUF's bytes is
    # decided (formats/pytorch/loadpath.py), with no torch reader and no tarfile for a real one
    loadpath = "tensorloupe.formats.pytorch.loadpath"
    assert loadpath in modules
    assert under(modules - {loadpath}, TORCH_READERS) == ["tensorloupe.formats.pytorch"]
    assert "tarfile" not in modules


def test_a_torch_file_imports_the_torch_reader_and_no_ggml_codecs(tmp_path):
    path = torch_files.write_all(tmp_path)["state_dict"]
    modules = imported(f"import tensorloupe\ntensorloupe.open({str(path)!r}).close()")
    assert "tensorloupe.formats.pytorch.zipped" in modules
    # The GGUF reader comes before torch in the sniffing order, so it is imported to sniff;
    # its codecs are imported by a GGUF file's tensors only.
    assert under(modules, GGML_CODECS) == []


def test_the_worker_boots_and_shows_the_demo_with_only_the_safetensors_reader():
    # What the page does first: hello, the demo, its first tensor's statistics and heatmap; and
    # listing a dropped folder's files, which goes by extensions without importing readers.
    modules = imported("""
import json
from tensorloupe.web import dispatch
def ok(op, args):
    text, _ = dispatch(op, json.dumps(args))
    reply = json.loads(text)
    assert reply["ok"], reply
    return reply["result"]
ok("hello", {})
first = ok("open_demo", {})["tensors"]["names"].split("\\n")[0]
ok("tensor", {"name": first})
ok("heatmap", {"name": first})
files = [{"rel": f"m/{n}", "path": f"/mnt/m/{n}", "size": 1, "folder": True}
         for n in ("model.gguf", "model.pt", "notes.txt")]
assert len(ok("group", {"files": files})["entries"]) == 2
""")
    # (the ggml table is there: the memory block prices the weights at Q8_0 and Q4_K)
    assert under(modules, TORCH_READERS + GGUF_READER) == []
    assert sorted(modules & set(SLOW_STDLIB)) == []


def test_the_workers_boot_imports_neither_the_comparison_nor_the_health_scan():
    # What worker.mjs runs before it says "ready": the handlers and `hello`. The Compare and
    # Health tabs import theirs with their first request.
    modules = imported("from tensorloupe.web import dispatch\ndispatch('hello', '{}')")
    assert "tensorloupe.web.handlers" in modules
    assert under(modules, ("tensorloupe.comparison", "tensorloupe.healthscan")) == []


def test_health_and_compare_are_the_api_functions_whichever_is_imported_first():
    # The analyses' packages are named apart from the API's functions (healthscan, comparison;
    # test_layering.py keeps it so), so importing one first (as the CLI, the page's handlers or a
    # user may) cannot put a module in a function's place.
    code = """
import tensorloupe, tensorloupe.healthscan.rules, tensorloupe.comparison.match
from tensorloupe.comparison import DEFAULT_SAMPLES
from tensorloupe.healthscan import health
assert callable(tensorloupe.compare) and tensorloupe.compare.__module__ == "tensorloupe"
assert tensorloupe.health is health and tensorloupe.health_cost.__module__ == "tensorloupe.healthscan"
assert tensorloupe.COMPARE_SAMPLES == DEFAULT_SAMPLES
assert tensorloupe.Comparison.__module__ == "tensorloupe.comparison"
"""
    assert "tensorloupe.comparison.match" in imported(code)
    # and from a fresh start, by attribute only
    assert "tensorloupe.healthscan.rules" in imported("import tensorloupe\nassert callable(tensorloupe.health)")
