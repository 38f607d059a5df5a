"""A file cut short says "truncated" whatever its format, as the safetensors reader always did:
torch ZIPs (whose directory is at the end) and GGUF files cut anywhere."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gguf_files
import torch_files

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    return {"zip": torch_files.save(torch_files.plain_state_dict(), folder / "model.pt"),
            "gguf": gguf_files.write_llama(folder / "model.gguf")}


def inspect_cut(whole, tmp_path, kind, fraction):
    data = whole[kind].read_bytes()
    cut = tmp_path / whole[kind].name
    cut.write_bytes(data[:int(len(data) * fraction)])
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", str(cut)],
                          capture_output=True, text=True, env=ENV, timeout=60)


@pytest.mark.parametrize("kind", ["zip", "gguf"])
@pytest.mark.parametrize("fraction", [0.002, 0.3, 0.6, 0.95])
def test_a_file_cut_short_says_truncated(whole, tmp_path, kind, fraction):
    proc = inspect_cut(whole, tmp_path, kind, fraction)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"tensorloupe: {whole[kind].name}: ") and "truncated" in line, line
