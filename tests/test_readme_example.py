"""The README's Python example runs as written, against the demo model its comment says to write."""

import os
import re
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}


def python_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_example_runs_against_the_demo(tmp_path):
    code = python_example()
    assert 'tensorloupe.open("demo.safetensors")' in code
    made = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "demo", "--out", "demo.safetensors"],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == 4
    mean, std, p99 = map(float, lines[0].split())
    assert std > 0 and p99 > mean
    name = "model.layers.0.block_sparse_moe.experts.0.w2.weight"
    with safe_open(str(tmp_path / "demo.safetensors"), "np") as f:
        oracle = f.get_tensor(name)
    assert eval(lines[1]) == oracle.ravel()[:10].tolist()   # the ten exact values
    assert sum(eval(lines[2])) == 96 * 192              # the exact histogram counts every element
    bytes_read, reads = map(int, lines[3].split())
    assert 0 < bytes_read <= (tmp_path / "demo.safetensors").stat().st_size and reads > 0


def test_the_readme_compare_example_runs_against_the_converter_fixtures(tmp_path):
    """The second example, with its two file names pointed at the HF checkpoint and its Q8_0
    conversion by llama.cpp's converter (fixtures/converted_llama.py)."""
    section = (ROOT / "README.md").read_text().split("## Python API", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[1]
    assert '"model.safetensors", "model-Q8_0.gguf"' in code
    code = code.replace('"model.safetensors"', repr(str(ROOT / "fixtures/out/converted-src/llama/model.safetensors")))
    code = code.replace('"model-Q8_0.gguf"', repr(str(ROOT / "fixtures/converted/tiny-llama.q8_0.gguf")))
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    headline, snr = ran.stdout.splitlines()
    assert headline.startswith("Q8_0 vs ") and "median SNR" in headline
    assert 30 < float(snr) < 80   # Q8_0 of random weights: ~40 dB; the Q/K permutation undone
