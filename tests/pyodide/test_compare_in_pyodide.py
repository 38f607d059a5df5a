"""tensorloupe.compare gives the same report, number for number, in Pyodide (the runtime the
browser app serves, run under Node) as in CPython, on the real converter's GGUF files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import compare_report  # tests/pyodide/compare_report.py: the same code runs on both sides

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def test_compare_is_the_same_in_pyodide(tmp_path):
    node = shutil.which("node")
    assert node is not None, "node is needed to run Pyodide (install Node.js 20+)"
    spec = {"mounts": {"/host/pylib": str(ROOT / "pylib"), "/host/tests": str(ROOT / "tests"),
                       "/host/fixtures": str(ROOT / "fixtures"), "/host/out": str(tmp_path)},
            "path": ["/host/pylib", "/host/tests/pyodide"],
            "runs": [{"script": "/host/tests/pyodide/compare_report.py",
                      "argv": ["/host/out/compare.json", "/host/fixtures"]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([node, str(HERE / "run.mjs"), str(tmp_path / "spec.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"Pyodide run failed:\n{done.stderr[-4000:]}"
    got = json.loads((tmp_path / "compare.json").read_text())
    expected = json.loads(json.dumps(compare_report.build(str(ROOT / "fixtures")), sort_keys=True, allow_nan=False))
    assert got == expected
    report = got["converted/tiny-mixtral.f16.gguf vs out/converted-src/mixtral/model.safetensors"]
    assert report["mode"] == "exact" and report["summary"]["counts"]["values_differ"] == 34
