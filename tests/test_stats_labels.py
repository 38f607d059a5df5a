"""`stats` as a user reads it: an exact label covers every element (histogram included), sampled
figures say they are sampled, and a constant tensor's histogram is one bin holding the value."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import save_file

import gguf_files

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}
QUANT = "token_embd.weight"       # Q4_K 1100 x 256 in tiny-llama.gguf


def cli(*argv):
    proc = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    return gguf_files.write_llama(folder / "tiny-llama.gguf")


@pytest.fixture(scope="module")
def oracle(llama):
    [t] = [t for t in GGUFReader(llama).tensors if t.name == QUANT]
    return dequantize(t.data, t.tensor_type).astype(np.float64).ravel()


def test_exact_histogram_covers_every_element(llama, oracle):
    [entry] = json.loads(cli("stats", llama, QUANT, "--exact", "--bins", "16", "--json"))
    hist = entry["histogram"]
    assert entry["exact"] is True and hist["exact"] is True and entry["samples"] == oracle.size
    assert sum(hist["counts"]) == oracle.size
    assert hist["edges"][0] == pytest.approx(oracle.min(), rel=1e-6)
    assert hist["edges"][-1] == pytest.approx(oracle.max(), rel=1e-6)
    expected, _ = np.histogram(oracle, bins=16, range=(oracle.min(), oracle.max()))
    # The same bins; an element exactly on an edge may be counted on either side of it.
    assert np.abs(np.array(hist["counts"]) - expected).sum() <= 4


def test_exact_text_histogram_is_of_every_element(llama, oracle):
    out = cli("stats", llama, QUANT, "--exact", "--bins", "8")
    assert f"histogram of all {oracle.size:,} elements" in out and "sampled" not in out
    counts = [int(line.rsplit(" ", 1)[1].replace(",", "")) for line in out.splitlines() if "│" in line]
    assert len(counts) == 8 and sum(counts) == oracle.size


def test_sampled_figures_say_sampled_on_every_line(llama, oracle):
    out = cli("stats", llama, QUANT, "--samples", "1024", "--bins", "4")
    lines = out.splitlines()
    assert f"1,024 of {oracle.size:,} elements sampled" in lines[0]
    assert lines[1].lstrip().startswith("sampled  min") and lines[2].lstrip().startswith("sampled  p1")
    assert "histogram of 1,024 sampled values" in out
    [entry] = json.loads(cli("stats", llama, QUANT, "--samples", "1024", "--json"))
    assert entry["exact"] is False and entry["histogram"]["exact"] is False


def test_constant_tensor_histogram_is_one_bin_with_the_value(tmp_path):
    path = tmp_path / "c.safetensors"
    save_file({"ones": np.ones(100, np.float32), "zeros": np.zeros((4, 5), np.float16)}, str(path))
    entries = {e["name"]: e for e in json.loads(cli("stats", path, "--json"))}
    assert entries["ones"]["histogram"]["edges"] == [1.0, 1.0]
    assert entries["ones"]["histogram"]["counts"] == [100]
    assert entries["zeros"]["histogram"]["counts"] == [20]
    [exact] = json.loads(cli("stats", path, "ones", "--exact", "--json"))
    assert exact["histogram"]["counts"] == [100]
    out = cli("stats", path, "ones")
    assert [line.split() for line in out.splitlines() if "│" in line] == [["1", "│" + "█" * 40, "100"]]
