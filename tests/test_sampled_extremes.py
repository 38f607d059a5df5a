"""A sample's min and max are bounds of the tensor's, and every rendering says so (issue 27):
a sampled max of 0.379 was shown as if it were the tensor's, whose true max is 1.049. The CLI's
text prints `min ≤` / `max ≥` for a sample, its JSON says `"extremes": "sampled"`; an exact pass,
or a sample that read every element, gives the tensor's own extremes, labelled exact."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe.sampler.sampling import sample_windows

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}
SPIKE = 1.049


def cli(*argv) -> str:
    proc = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def spiked(tmp_path_factory):
    """A 1024 x 1024 float32 weight with one spike where no sample window looks, and a small
    tensor the sampler reads whole."""
    rng = np.random.default_rng(27)
    big = (rng.standard_normal(1 << 20) * 0.1).clip(-0.379, 0.379).astype(np.float32)
    path = tmp_path_factory.mktemp("extremes") / "spiked.safetensors"
    save_file({"big": big.reshape(1024, 1024), "small": np.float32([0.5, -2.0, 3.25])}, path)
    with tensorloupe.open(str(path)) as ckpt:
        windows = sample_windows(ckpt.tensor("big"))
    seen = np.zeros(big.size, bool)
    for start, count in windows:
        seen[start:start + count] = True
    big[np.flatnonzero(~seen)[len(windows)]] = SPIKE      # a place between two windows
    save_file({"big": big.reshape(1024, 1024), "small": np.float32([0.5, -2.0, 3.25])}, path)
    return path, big


def test_a_sampled_max_is_printed_as_a_bound(spiked):
    path, big = spiked
    line = cli("stats", path, "big").splitlines()[1]
    assert line.startswith("  sampled  min ≤ -0.379  max ≥ 0.379  mean "), line
    assert big.max() == np.float32(SPIKE)          # the tensor's max lies beyond the sample's


def test_json_says_the_extremes_are_sampled_and_bound_the_true_ones(spiked):
    path, big = spiked
    [entry] = json.loads(cli("stats", path, "big", "--json"))
    assert (entry["extremes"], entry["exact"]) == ("sampled", False)
    assert entry["stats"]["max"] <= float(big.max()) and entry["stats"]["min"] >= float(big.min())
    assert entry["stats"]["max"] < SPIKE


def test_exact_gives_the_tensors_own_extremes_labelled_exact(spiked):
    path, big = spiked
    [entry] = json.loads(cli("stats", path, "big", "--exact", "--json"))
    assert entry["extremes"] == "exact"
    assert (entry["stats"]["min"], entry["stats"]["max"]) == (float(big.min()), float(big.max()))
    line = cli("stats", path, "big", "--exact").splitlines()[1]
    assert line.startswith(f"  exact    min -0.379  max {SPIKE}  mean "), line


def test_a_tensor_the_sampler_reads_whole_has_exact_extremes(spiked):
    path, _ = spiked
    [entry] = json.loads(cli("stats", path, "small", "--json"))
    assert (entry["extremes"], entry["stats"]["min"], entry["stats"]["max"]) == ("exact", -2.0, 3.25)
    assert cli("stats", path, "small").splitlines()[1].startswith("  exact    min -2  max 3.25  ")
    with tensorloupe.open(str(path)) as ckpt:   # the page's payload (Sample.to_json) says the same
        assert tensorloupe.sample(ckpt.tensor("small")).to_json()["extremes"] == "exact"
        assert tensorloupe.sample(ckpt.tensor("big")).to_json()["extremes"] == "sampled"
