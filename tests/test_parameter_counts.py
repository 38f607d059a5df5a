"""Parameters count the model's weights only (fixtures/count_files.py, written by torch): buffers,
optimizer moments, RNG byte tensors and step counters are shown apart, a tied view is counted
once, and the header says "values stored" when they are not all parameters. Oracle: the live
models' sum(p.numel() for p in model.parameters()) and sum over buffers()."""

import subprocess
import sys
from pathlib import Path

import pytest

import count_files

import tensorloupe
from tensorloupe.architecture import summarize

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return count_files.write_all(tmp_path_factory.mktemp("counts"))


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib")})


def counts(path):
    with tensorloupe.open(path) as ckpt:
        return summarize(ckpt).to_json()["parameters"], ckpt.parameter_count


@pytest.mark.parametrize("key", ["counts/bn_state_dict.pt", "counts/training_dict.pt",
                                 "counts/whole_module.pt"])
def test_the_total_is_the_live_model_s_parameters_and_buffers_are_apart(files, key):
    live = count_files.cnn()
    params, stored = counts(files[key])
    assert params["total"] == sum(p.numel() for p in live.parameters()) == 845
    assert params["buffers"]["parameters"] == sum(b.numel() for b in live.buffers()) == 9
    assert params["buffers"]["tensors"] == 3
    assert stored > params["total"]


def test_a_training_dict_keeps_moments_rng_and_counters_apart(files):
    params, stored = counts(files["counts/training_dict.pt"])
    state = params["training_state"]
    assert state["rng"]["parameters"] == 5056 and state["counters"]["parameters"] == 1
    # Adam: exp_avg and exp_avg_sq per parameter, and a step per parameter
    assert state["optimizer"]["parameters"] == 2 * 845 + 6
    assert stored == 845 + 9 + 5056 + 1 + 2 * 845 + 6
    out = cli("inspect", files["counts/training_dict.pt"]).stdout
    assert f"  values      {stored:,} stored" in out
    assert "  parameters  845 (the model's weights; apart: buffers 9, optimizer 1,696, " \
           "counters 1, rng 5,056)" in out


def test_a_tied_view_is_counted_once(files):
    live = count_files.tied()
    params, stored = counts(files["counts/tied.bin"])
    assert params["total"] == sum(p.numel() for p in live.parameters()) == 66
    assert params["tied"]["parameters"] == 66 and stored == 132
    assert "parameters  66 (the model's weights; apart: tied views 66)" in \
        cli("inspect", files["counts/tied.bin"]).stdout


def test_a_file_of_parameters_only_keeps_the_one_line(tmp_path):
    import torch
    torch.save({"w": torch.ones(3, 4)}, tmp_path / "w.pt")
    out = cli("inspect", tmp_path / "w.pt").stdout
    assert "  parameters  12 (F32 12)" in out and "  values      " not in out
