"""DeepSpeed checkpoints of model-parallel runs, written by DeepSpeed's engine on two gloo ranks
(fixtures/deepspeed_parallel_files.py). A pipeline's layer files open as one model named as the
PipelineModule names its parameters, with the values torch.load reads from each layer file; a
tensor-parallel checkpoint shows each rank's partition under its rank, values equal to that
rank's module state (rank 0's also to DeepSpeed's zero_to_fp32 given rank 0's files: it refuses
the folder of two ranks), never joined, and says why; a
missing rank or stage is an error naming the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

import deepspeed_parallel_files
import tensorloupe

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("pipe", "tp2")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = ROOT / "fixtures" / "out" / "deepspeed"
    if all((made / name / "latest").exists() for name in NAMES):
        return {name: made / name for name in NAMES}
    out = tmp_path_factory.mktemp("ds-parallel")
    deepspeed_parallel_files.write_all(out)
    return {name: out / "deepspeed" / name for name in NAMES}


def inspect(path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", "--json", str(path)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib"),
                                                               "PATH": "/usr/bin:/bin"})
    return done.returncode, json.loads(done.stdout) if done.stdout else {}


def values(ckpt, name) -> torch.Tensor:
    return torch.from_numpy(ckpt.tensor(name).numpy().copy()).double()


def test_pipeline_layers_open_as_one_model_with_torch_s_values(folders):
    tag = folders["pipe"] / "global_step2"
    want = {}
    for path in sorted(tag.glob("layer_*-model_states.pt")):
        layer = int(path.name.split("_")[1].split("-")[0])
        want.update({f"{layer}.{k}": v for k, v in torch.load(path, weights_only=True).items()})
    assert sorted(want) == ["0.bias", "0.weight", "2.bias", "2.weight", "3.bias", "3.weight",
                            "4.bias", "4.weight"]          # layer 1 is the ReLU: an empty file
    with tensorloupe.open(folders["pipe"]) as ckpt:
        assert ckpt.format == "deepspeed-pipeline" and ckpt.warnings == []
        assert [t.name for t in ckpt.tensors] == list(want)
        for name, w in want.items():
            assert ckpt.tensor(name).shape == tuple(w.shape)
            assert torch.equal(values(ckpt, name).reshape(w.shape), w.double()), name
        assert ckpt.parameter_count == sum(w.numel() for w in want.values())
        # the two stages' files are its training state (their optimizer state inside)
        parts = [p["file"] for p in ckpt.extras["training"]["parts"]]
        assert parts == ["mp_rank_00_model_states.pt", "mp_rank_01_model_states.pt"]
    code, doc = inspect(folders["pipe"])
    assert code == 0 and doc["format"] == "deepspeed-pipeline" and doc["tensor_count"] == 8


def test_a_missing_stage_file_is_an_error_naming_it(folders, tmp_path):
    copy = tmp_path / "pipe"
    shutil.copytree(folders["pipe"], copy)
    (copy / "global_step2" / "mp_rank_01_model_states.pt").unlink()
    with tensorloupe.open(copy) as ckpt:
        assert ckpt.extras["shards"]["errors"] == [
            "stage 1's file mp_rank_01_model_states.pt is missing: its optimizer state cannot be shown"]


def test_tensor_parallel_ranks_are_shown_apart_with_their_values(folders, tmp_path):
    tag = folders["tp2"] / "global_step2"
    with tensorloupe.open(folders["tp2"]) as ckpt:
        assert ckpt.metadata["tensor_parallel"] == 2
        assert any("not joined" in w and "mp_rank_01/" in w for w in ckpt.warnings)
        names = [t.name for t in ckpt.tensors]
        assert names == ["mp_rank_00/col.weight", "mp_rank_00/col.bias", "mp_rank_00/row.weight",
                         "mp_rank_00/row.bias", "mp_rank_01/col.weight", "mp_rank_01/col.bias",
                         "mp_rank_01/row.weight"]
        for rank in (0, 1):
            module = torch.load(tag / f"mp_rank_{rank:02d}_model_states.pt", weights_only=False)["module"]
            for name, w in module.items():
                got = values(ckpt, f"mp_rank_{rank:02d}/{name}").reshape(w.shape)
                assert torch.equal(got, w.double()), (rank, name)
                assert ckpt.tensor(f"mp_rank_{rank:02d}/{name}").info["tensor_parallel"] == {"rank": rank, "ranks": 2}
        # DeepSpeed's own converter refuses the folder (it expects one optimizer file per
        # data-parallel rank and finds both ranks'); given rank 0's files alone it reads them:
        rank0 = tmp_path / "rank0"
        (rank0 / "global_step2").mkdir(parents=True)
        (rank0 / "latest").write_text("global_step2")
        for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"):
            shutil.copy(tag / name, rank0 / "global_step2" / name)
        for name, w in get_fp32_state_dict_from_zero_checkpoint(str(rank0)).items():
            assert torch.equal(values(ckpt, f"mp_rank_00/{name}").reshape(w.shape), w.double())
        # the fp32 master weights, each rank's from its own optimizer states
        assert ckpt.tensor("mp_rank_01/col.weight").info["zero"]["from"] == "fp32 master weights"


def test_a_missing_tensor_parallel_rank_is_an_error(folders, tmp_path):
    copy = tmp_path / "tp2"
    shutil.copytree(folders["tp2"], copy)
    for name in ("mp_rank_01_model_states.pt", "zero_pp_rank_0_mp_rank_01_optim_states.pt"):
        (copy / "global_step2" / name).unlink()
    with tensorloupe.open(copy) as ckpt:
        # rank 0 alone is an ordinary ZeRO checkpoint; rank 1 of mp_world_size 2 is missing
        assert ckpt.extras["shards"]["errors"] == [
            "tensor-parallel rank 1's files (mp_rank_01_model_states.pt and its optimizer states) "
            "are missing: its partition of the model is not shown"]
    code, doc = inspect(copy)
    assert doc["errors"] and "rank 1" in doc["errors"][0]


def test_a_layer_file_alone_says_it_is_one_layer_of_a_pipeline(folders):
    path = folders["pipe"] / "global_step2" / "layer_02-model_states.pt"
    with tensorloupe.open(path) as ckpt:
        assert [t.name for t in ckpt.tensors] == ["weight", "bias"]      # as the file stores them
        assert ckpt.warnings == ["this is layer 2 of a DeepSpeed pipeline checkpoint (one file per "
                                 "layer): open the folder to see the layers as one model"]
    # given with others, the layer files are the model named by layer, without the stage files said
    layers = sorted((folders["pipe"] / "global_step2").glob("layer_0[23]-*"))
    with tensorloupe.open([str(p) for p in layers]) as ckpt:
        assert [t.name for t in ckpt.tensors] == ["2.weight", "2.bias", "3.weight", "3.bias"]
        assert any("no stage file" in w for w in ckpt.warnings)
