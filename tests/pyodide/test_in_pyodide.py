"""The library inside Pyodide (the npm runtime the browser app serves, run under Node) reads every
fixture exactly as CPython does, and the core test modules that need no CPython-only oracle pass
there too. Parity is proven on the same bytes, not assumed."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import parity  # tests/pyodide/parity.py: the same report code runs on both sides

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# Test modules that must run (and pass) inside Pyodide: they need only the library.
PURE_MODULES = ("test_source.py", "test_moe_detect.py", "test_container_bytes.py", "test_quant_cells.py",
                "test_token_encode_pure.py", "test_quant_order.py", "test_pipeline_urls.py",
                "test_rawstats_bits.py",   # rawstats: the page's exact statistics, bit for bit
                "test_sum_squares.py")     # hypot's sum of squares: 3.11's numbers in Pyodide's 3.14


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo never",))


def _own_files(out: Path) -> None:
    """Files the fixture generators do not cover: non-finite values, a hostile pickle, 4 GiB sparse."""
    import numpy as np
    import torch
    from safetensors.numpy import save_file

    x = np.linspace(-3, 3, 30 * 40, dtype=np.float32).reshape(30, 40)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    save_file({"x": x, "i8": np.arange(-64, 64, dtype=np.int8).reshape(8, 16),
               "c": (np.arange(12) + 1j).astype(np.complex64)}, str(out / "special.safetensors"))
    g = torch.Generator().manual_seed(11)
    torch.save({"a.weight": torch.randn(40, 24, generator=g).half(),
                "a.view": torch.randn(16, 16, generator=g).t(),
                "payload": _Evil()}, out / "hostile.pt")
    shape = (65536, 16384)
    nbytes = math.prod(shape) * 2
    header = json.dumps({"big": {"dtype": "BF16", "shape": list(shape), "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(out / "sparse.safetensors", "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + nbytes)


@pytest.fixture(scope="session")
def parity_files(tmp_path_factory) -> list[Path]:
    out = tmp_path_factory.mktemp("parity-files")
    import gguf_files
    import safetensors_files
    generators = [safetensors_files, gguf_files]
    try:
        import torch_files
        generators.append(torch_files)
    except ImportError:
        pass   # the torch fixture generator is optional: _own_files writes torch files too
    for module in generators:
        module.write_all(out)
    _own_files(out)
    return sorted(p for p in out.iterdir() if p.is_file())


@pytest.fixture(scope="session")
def pyodide_results(parity_files, tmp_path_factory) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed to run Pyodide (install Node.js 20+)")
    if not (ROOT / "node_modules" / "pyodide" / "pyodide.mjs").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=ROOT, check=True)
    out = tmp_path_factory.mktemp("pyodide-out")
    files_dir = parity_files[0].parent
    spec = {
        "mounts": {"/host/pylib": str(ROOT / "pylib"), "/host/tests": str(ROOT / "tests"),
                   "/host/fixtures": str(ROOT / "fixtures"), "/host/files": str(files_dir),
                   "/host/out": str(out)},
        "path": ["/host/pylib", "/host/tests/pyodide", "/host/fixtures"],
        "runs": [
            {"script": "/host/tests/pyodide/parity.py",
             "argv": ["/host/out/parity.json", *[f"/host/files/{p.name}" for p in parity_files]]},
            {"script": "/host/tests/pyodide/minipytest.py",
             "argv": ["/host/out/tests.json", *[f"/host/tests/{p.name}" for p in sorted((ROOT / "tests").glob("test_*.py"))]]},
        ],
    }
    (out / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([node, str(HERE / "run.mjs"), str(out / "spec.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"Pyodide run failed:\n{done.stderr[-4000:]}"
    return {"parity": json.loads((out / "parity.json").read_text()),
            "tests": json.loads((out / "tests.json").read_text()),
            "run": json.loads(done.stdout.strip().splitlines()[-1])}


def first_difference(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {a!r} (CPython) != {b!r} (Pyodide)"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'CPython' if key in a else 'Pyodide'}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} (CPython) != {len(b)} (Pyodide)"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} (CPython) != {b!r} (Pyodide)"


def test_every_fixture_reads_the_same_in_pyodide_as_in_cpython(parity_files, pyodide_results):
    expected = json.loads(json.dumps(parity.build([str(p) for p in parity_files]), sort_keys=True, allow_nan=False))
    got = pyodide_results["parity"]
    assert got["python"] == "parity-v1"
    assert pyodide_results["run"]["python"] == json.loads((ROOT / "package.json").read_text())["dependencies"]["pyodide"]
    difference = first_difference(expected, got)
    assert difference is None, difference
    # The report really covers the formats and the sampler, not just error paths.
    library = {name: entry["library"] for name, entry in got["files"].items()}
    formats = {entry["inspect"]["format"] for entry in library.values() if "inspect" in entry}
    assert {"safetensors", "gguf", "pytorch-zip"} <= formats
    sampled = sum(1 for entry in library.values() if "tensors" in entry
                  for t in entry["tensors"].values() if "sample_small" in t)
    assert sampled >= 50
    assert library["sparse.safetensors"]["opened_with"]["bytes_read"] < 1 << 20
    assert "posix.system" in json.dumps(library["hostile.pt"]["inspect"]["extras"]["safety"])
    assert library["lfs-pointer.safetensors"]["error"][0] == "UnknownFormatError"
    # The expert analysis and the similarities of hard vectors compare equal too, bit for bit.
    assert len(got["gram"]) == 40 and got["gram"][4][36] == 1.0 and got["gram"][5][37] == -1.0
    assert sorted(got["redundancy"]["layers"][0]["clusters"]) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_core_test_modules_pass_inside_pyodide(pyodide_results):
    results = pyodide_results["tests"]
    failures = {test: trace for result in results.values() for test, trace in result["failed"].items()}
    assert not failures, "\n\n".join(f"{test}\n{trace}" for test, trace in failures.items())
    for module in PURE_MODULES:
        assert module in results and "module_skipped" not in results[module], results.get(module)
        assert len(results[module]["passed"]) >= 5, results[module]
