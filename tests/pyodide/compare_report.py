"""`tensorloupe.compare` of the converter fixtures, as JSON: run in CPython and in Pyodide (under
Node) by test_compare_in_pyodide.py; the two must be identical. Standard library and tensorloupe
only (this file runs inside Pyodide).

    compare_report.py OUT.json FIXTURES_DIR
"""

from __future__ import annotations

import json
import sys

import tensorloupe

PAIRS = [("out/converted-src/llama/model.safetensors", "converted/tiny-llama.q8_0.gguf", False),
         ("converted/tiny-mixtral.f16.gguf", "out/converted-src/mixtral/model.safetensors", True)]


def build(fixtures: str) -> dict:
    out = {}
    for a, b, exact in PAIRS:
        result = tensorloupe.compare(f"{fixtures}/{a}", f"{fixtures}/{b}", samples=1000, exact=exact)
        out[f"{a} vs {b}"] = result.to_json()
    return out


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump(build(sys.argv[2]), f, sort_keys=True, allow_nan=False)
