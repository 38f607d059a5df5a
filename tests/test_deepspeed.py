"""DeepSpeed ZeRO folders (fixtures/deepspeed_files.py: DeepSpeed's own engine, two gloo ranks,
ZeRO 1 bf16, 2 and 3) opened as one model. Oracle: deepspeed's own
`get_fp32_state_dict_from_zero_checkpoint` (zero_to_fp32's functions, imported; the folder's
zero_to_fp32.py is never run), every element of every tensor; torch.load of the files for what
the oracle leaves out; the live model's parameters() for the totals."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

import deepspeed_files

import tensorloupe
from tensorloupe.architecture import summarize
from tensorloupe.errors import FormatError
from tensorloupe.opening import shards

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = list(deepspeed_files.CONFIGS)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = ROOT / "fixtures" / "out" / "deepspeed"
    if all((made / name / "latest").exists() for name in CONFIGS):
        return {name: made / name for name in CONFIGS}
    out = tmp_path_factory.mktemp("ds")
    deepspeed_files.write_all(out)
    return {name: out / "deepspeed" / name for name in CONFIGS}


@pytest.fixture(scope="module")
def oracle(folders):
    return {name: get_fp32_state_dict_from_zero_checkpoint(str(folder))
            for name, folder in folders.items()}


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib")})


def values(t) -> torch.Tensor:
    return torch.from_numpy(t.numpy().copy())


@pytest.mark.parametrize("name", CONFIGS)
def test_the_folder_is_the_model_zero_to_fp32_makes_element_for_element(folders, oracle, name):
    expected = oracle[name]
    with tensorloupe.open(folders[name]) as ckpt:    # the folder with `latest`
        assert ckpt.format == "deepspeed-zero"
        got = {t.name: t for t in ckpt.tensors}
        module = torch.load(next((folders[name] / "global_step2").glob("*model_states.pt")),
                            weights_only=False)["module"]
        # the bf16 optimizer keeps no frozen list: zero_to_fp32 drops the frozen bias; it is
        # shown as the model states store it, and said
        extra = set(got) - set(expected)
        assert extra == ({"a.bias"} if name == "zero1-bf16" else set())
        assert set(expected) <= set(got)
        for key, want in expected.items():
            t = got[key]
            assert t.problem is None and list(t.shape) == list(want.shape), key
            assert torch.equal(values(t).to(want.dtype), want), key
        for key in extra:
            assert torch.equal(values(got[key]).to(torch.float32), module[key].float())
            assert any(key in w and "zero_to_fp32 leaves them out" in w for w in ckpt.warnings)
        assert not shards.errors(ckpt)


@pytest.mark.parametrize("name", CONFIGS)
def test_parameters_count_the_model_and_the_buffer_is_apart(folders, name):
    live = deepspeed_files.model()
    with tensorloupe.open(folders[name]) as ckpt:
        params = summarize(ckpt).to_json()["parameters"]
    assert params["total"] == sum(p.numel() for p in live.parameters()) == 80
    assert params["buffers"]["tensors"] == 1 and params["buffers"]["parameters"] == 7


def test_the_training_state_is_beside_the_model_with_each_file_s_safety(folders):
    folder = folders["zero2"] / "global_step2"       # the tag folder itself opens too
    with tensorloupe.open(folder) as ckpt:
        training = ckpt.extras["training"]
        assert training["kind"] == "DeepSpeed ZeRO"
        kinds = sorted((p["kind"], p["file"]) for p in training["parts"])
        assert kinds == [("model states", "mp_rank_00_model_states.pt"),
                         ("optimizer", "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                         ("optimizer", "zero_pp_rank_1_mp_rank_00_optim_states.pt")]
        for part in training["parts"]:
            if part["kind"] != "optimizer":
                continue
            saved = torch.load(folder / part["file"], weights_only=False)["optimizer_state_dict"]
            moments = part["summary"]["moments"]
            state = saved["base_optimizer_state"]["state"][0]
            assert moments["exp_avg"]["values"] == state["exp_avg"].numel()
            assert part["summary"]["groups"][0]["step"] == int(state["step"])
            assert part["safety"]["weights_only"]["loads"] is False
        assert ckpt.extras["deepspeed"]["stage"] == 2 and ckpt.extras["deepspeed"]["world_size"] == 2
        assert "deepspeed.runtime.zero.config.ZeroStageEnum" in ckpt.extras["safety"]["dangerous"]


def test_a_parameter_is_read_in_place_from_both_ranks(folders, oracle):
    """a.weight's 35 elements in ZeRO 3: 18 in rank 0's partition, 17 (+1 padding) in rank 1's;
    reading it reads its 140 bytes, no more."""
    with tensorloupe.open(folders["zero3"]) as ckpt:
        t = ckpt.tensor("a.weight")
        assert [s[0] for s in t.info["zero"]["spans"]] == [0, 1]
        before = ckpt.bytes_read()
        assert torch.equal(values(t), oracle["zero3"]["a.weight"])
        assert ckpt.bytes_read() - before <= 2 * 4096   # the block cache reads whole blocks
        assert ckpt.bytes_asked() >= t.nbytes == 140


def test_inspect_json_and_stats_agree_with_the_oracle(folders, oracle):
    done = cli("inspect", "--json", folders["zero2"])
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["format"] == "deepspeed-zero"
    assert {t["name"]: t["shape"] for t in doc["tensors"]} == \
        {k: list(v.shape) for k, v in oracle["zero2"].items()}
    stats = cli("stats", folders["zero2"], "b.weight")
    assert stats.returncode == 0, stats.stderr
    assert f"{oracle['zero2']['b.weight'].max().item():.4g}"[:4] in stats.stdout


@pytest.mark.parametrize("file, role", [
    ("zero_pp_rank_1_mp_rank_00_optim_states.pt", "optimizer states of rank 1"),
    ("mp_rank_00_model_states.pt", "model states of rank 0")])
def test_one_file_alone_says_what_it_is_part_of(folders, file, role):
    with tensorloupe.open(folders["zero2"] / "global_step2" / file) as ckpt:
        assert ckpt.format == "pytorch-zip"
        said = [w for w in ckpt.warnings if "DeepSpeed ZeRO checkpoint" in w]
        assert said and role in said[0] and "open the folder" in said[0]


def test_a_missing_rank_is_an_error_and_its_parameters_say_so(folders, tmp_path):
    folder = tmp_path / "global_step2"
    shutil.copytree(folders["zero3"] / "global_step2", folder)
    (folder / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    with tensorloupe.open(folder) as ckpt:
        errors = shards.errors(ckpt)
        assert errors and "zero_pp_rank_1_mp_rank_00_optim_states.pt is missing" in errors[0]
        assert "rank 1" in ckpt.tensor("a.weight").problem
        assert ckpt.tensor("scale").problem is None
    assert cli("inspect", "--strict", folder).returncode != 0


def test_param_shapes_that_do_not_fit_the_partitions_are_a_clear_error(folders, tmp_path):
    """A model-states file whose param_shapes name more elements than the flat partitions hold
    (a.weight said to be 7x6) is refused, naming the file and the parameter that does not fit."""
    folder = tmp_path / "global_step2"
    shutil.copytree(folders["zero2"] / "global_step2", folder)
    path = folder / "mp_rank_00_model_states.pt"
    state = torch.load(path, weights_only=True)     # no DeepSpeed class in the model states
    state["param_shapes"][0]["a.weight"] = torch.Size([7, 6])
    torch.save(state, path)
    with pytest.raises(FormatError) as raised:
        tensorloupe.open(folder)
    assert raised.value.file == "mp_rank_00_model_states.pt"
    assert "parameter 'b.weight' reaches past the end of the flat partitions" in str(raised.value)
