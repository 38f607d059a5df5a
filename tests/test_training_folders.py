"""Training-run folders opened as the model plus its training state: a transformers Trainer's
checkpoint-2/ and an accelerate save_state folder, both written by the libraries themselves
(fixtures/training_files.py). The oracles: transformers' from_pretrained of the folder (parameter
total, tensor values), torch.load of every training file (optimizer groups and moments, scheduler,
RNG), the TrainingArguments object and TrainerState.load_from_json, and torch's own list of the
globals it would not load (get_unsafe_globals_in_checkpoint)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import training_files

import tensorloupe
from tensorloupe.opening import grouping
from tensorloupe.web.handlers import Session

ROOT = Path(__file__).resolve().parent.parent
TRAINER_PARTS = [("optimizer.pt", "optimizer"), ("rng_state.pth", "rng"),
                 ("scheduler.pt", "scheduler"), ("trainer_state.json", "trainer state"),
                 ("training_args.bin", "training arguments")]
ACCELERATE_PARTS = [("optimizer.bin", "optimizer"), ("random_states_0.pkl", "rng"),
                    ("scheduler.bin", "scheduler")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return training_files.write_all(tmp_path_factory.mktemp("training"))


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib")})


def parts_of(ckpt) -> dict:
    return {p["file"]: p for p in ckpt.extras["training"]["parts"]}


def live_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# --- the Trainer's checkpoint-N/ --------------------------------------------------------------------

def test_the_trainer_folder_opens_as_its_model(folders):
    from transformers import AutoModelForCausalLM
    folder = folders["trainer_checkpoint"]
    ckpt = tensorloupe.open(str(folder))
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert loaded.config.tie_word_embeddings   # the head is the embedding: counted once
    assert ckpt.parameter_count == live_parameters(loaded) == 90_432
    assert ckpt.format == "safetensors" and ckpt.files == ["model.safetensors"]
    state = loaded.state_dict()
    for t in ckpt.tensors:
        assert tensorloupe.values(t, 0, t.numel) == state[t.name].flatten().tolist(), t.name
    assert ckpt.extras["training"]["kind"] == "transformers Trainer"
    assert [(p["file"], p["kind"]) for p in ckpt.extras["training"]["parts"]] == TRAINER_PARTS


def assert_optimizer_as_torch_loads_it(part, path):
    want = torch.load(path, weights_only=True)
    summary = part["summary"]
    assert summary["group_count"] == len(want["param_groups"])
    assert summary["params"] == sum(len(g["params"]) for g in want["param_groups"])
    assert summary["params_with_state"] == len(want["state"])
    for got, group in zip(summary["groups"], want["param_groups"]):
        assert got["params"] == len(group["params"])
        assert got["hyperparameters"]["lr"] == group["lr"]
        assert got["hyperparameters"]["weight_decay"] == group["weight_decay"]
        assert got["hyperparameters"]["betas"] == list(group["betas"])
        assert got["step"] == int(want["state"][group["params"][0]]["step"])
        for moment in ("exp_avg", "exp_avg_sq"):
            tensors = [want["state"][i][moment] for i in group["params"]]
            assert got["moments"][moment] == {
                "tensors": len(tensors), "values": sum(t.numel() for t in tensors),
                "bytes": sum(t.numel() * t.element_size() for t in tensors)}
    for moment, total in summary["moments"].items():
        assert total["values"] == sum(s[moment].numel() for s in want["state"].values())


def test_the_trainer_s_training_state_is_what_torch_loads(folders):
    from transformers import TrainerState
    folder = folders["trainer_checkpoint"]
    parts = parts_of(tensorloupe.open(str(folder)))
    assert_optimizer_as_torch_loads_it(parts["optimizer.pt"], folder / "optimizer.pt")
    # the Adam moments are one copy each of every trained parameter, never counted as parameters
    assert parts["optimizer.pt"]["summary"]["moments"]["exp_avg"]["values"] == 90_432

    scheduler = torch.load(folder / "scheduler.pt", weights_only=True)
    got = parts["scheduler.pt"]["summary"]["state"]
    assert (got["last_epoch"], got["_step_count"], got["base_lrs"]) == \
        (scheduler["last_epoch"], scheduler["_step_count"], scheduler["base_lrs"])

    rng = torch.load(folder / "rng_state.pth", weights_only=False)   # our own fixture
    assert parts["rng_state.pth"]["summary"]["generators"] == list(rng)

    args = torch.load(folder / "training_args.bin", weights_only=False)
    got = parts["training_args.bin"]["summary"]
    assert got["class"] == "transformers.training_args.TrainingArguments"
    assert got["fields"]["learning_rate"] == args.learning_rate
    assert got["fields"]["max_steps"] == args.max_steps
    assert got["fields"]["seed"] == args.seed
    assert got["fields"]["lr_scheduler_type"] == args.lr_scheduler_type.value
    assert got["fields"]["optim"] == args.optim.value

    state = TrainerState.load_from_json(str(folder / "trainer_state.json"))
    got = parts["trainer_state.json"]["summary"]
    assert (got["global_step"], got["epoch"], got["max_steps"]) == \
        (state.global_step, state.epoch, state.max_steps) == (2, 0.5, 2)
    assert [(e["step"], e["loss"]) for e in got["log_history"]] == \
        [(e["step"], e["loss"]) for e in state.log_history if "loss" in e]


def test_each_pickle_part_keeps_its_own_safety_report_and_strict_fails(folders):
    folder = folders["trainer_checkpoint"]
    ckpt = tensorloupe.open(str(folder))
    parts = parts_of(ckpt)
    unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(folder / "training_args.bin")))
    assert set(parts["training_args.bin"]["safety"]["dangerous"]) == unsafe and len(unsafe) == 9
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        assert parts[name]["safety"]["dangerous"] == []
    assert parts["trainer_state.json"].get("safety") is None     # JSON: nothing to run
    assert set(ckpt.extras["safety"]["dangerous"]) == unsafe      # the folder's report names them
    done = cli("inspect", "--strict", folder)
    assert done.returncode == 4 and "TrainingArguments" in done.stderr
    assert "training_args.bin" in done.stdout


def test_a_dangerous_global_in_the_optimizer_shows_in_its_part(folders, tmp_path):
    folder = tmp_path / "checkpoint-2"
    shutil.copytree(folders["trainer_checkpoint"], folder)
    state = torch.load(folder / "optimizer.pt", weights_only=True)
    state["hook"] = print     # pickled as the global builtins.print: never called by tensorloupe
    torch.save(state, folder / "optimizer.pt")
    ckpt = tensorloupe.open(str(folder))
    assert parts_of(ckpt)["optimizer.pt"]["safety"]["dangerous"] == ["builtins.print"]
    assert "builtins.print" in ckpt.extras["safety"]["dangerous"]
    assert any(w.startswith("optimizer.pt: the pickle names 1 dangerous") for w in ckpt.warnings)


def test_a_training_file_that_cannot_be_read_is_said_and_the_model_still_opens(folders, tmp_path):
    folder = tmp_path / "checkpoint-2"
    shutil.copytree(folders["trainer_checkpoint"], folder)
    data = (folder / "optimizer.pt").read_bytes()
    (folder / "optimizer.pt").write_bytes(data[:len(data) // 2])
    (folder / "trainer_state.json").write_text("{not json")
    ckpt = tensorloupe.open(str(folder))
    assert ckpt.parameter_count == 90_432
    parts = parts_of(ckpt)
    assert "summary" not in parts["optimizer.pt"] and parts["optimizer.pt"]["error"]
    assert "not valid JSON" in parts["trainer_state.json"]["error"]
    assert any(w.startswith("the optimizer (optimizer.pt) cannot be read") for w in ckpt.warnings)


def test_every_cli_command_agrees_on_the_folder(folders):
    folder = folders["trainer_checkpoint"]
    done = cli("inspect", "--json", folder)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["parameters"] == 90_432
    assert [(p["file"], p["kind"]) for p in doc["extras"]["training"]["parts"]] == TRAINER_PARTS
    text = cli("inspect", folder).stdout
    assert "Training state: transformers Trainer (5 files beside the model" in text
    assert "optimizer.pt  pytorch-zip" in text and "group 0:" in text
    assert "loss " in text and "global_step 2" in text
    stats = cli("stats", folder, "model.layers.0.mlp.up_proj.weight")
    assert stats.returncode == 0 and "128×64" in stats.stdout
    assert cli("health", folder).returncode == 0


def test_a_training_file_alone_is_still_the_file_it_is(folders):
    folder = folders["trainer_checkpoint"]
    alone = tensorloupe.open(str(folder / "optimizer.pt"))
    assert alone.format == "pytorch-zip" and "training" not in alone.extras
    assert alone.extras["optimizer"]["group_count"] == 2
    assert alone.warnings == ["this is the optimizer of a training run (transformers Trainer), "
                              "not a model: its values are training state; open its folder to "
                              "see it beside the model"]
    assert not any("this is the" in w for w in tensorloupe.open(str(folder)).warnings)
    done = cli("inspect", folder / "trainer_state.json")
    assert done.returncode == 2 and "trainer state of a training checkpoint" in done.stderr


def test_the_page_and_the_cli_group_the_folder_alike(folders):
    folder = folders["trainer_checkpoint"]
    names = sorted(p.name for p in folder.iterdir())
    found = grouping.group(names, name=lambda n: n, directory=lambda n: "", listed=lambda n: False)
    assert [(g.name, g.members) for g in found] == [
        ("model.safetensors + training state", ["model.safetensors"] + [f for f, _ in TRAINER_PARTS])]
    files = [{"rel": f"checkpoint-2/{p.name}", "path": str(p), "size": p.stat().st_size,
              "folder": True} for p in sorted(folder.iterdir())]
    s = Session()
    entries = s.handle("group", {"files": files})[0]["entries"]
    assert [(e["kind"], e["name"]) for e in entries] == [("set", "model.safetensors + training state")]
    result, _ = s.handle("open", {"paths": entries[0]["paths"], "config": entries[0]["config"]})
    doc = json.loads(cli("inspect", "--json", folder).stdout)
    assert result["parameters"] == doc["parameters"] == 90_432
    assert [(p["file"], p["kind"], p["summary"] if "summary" in p else None)
            for p in result["extras"]["training"]["parts"]] == \
        [(p["file"], p["kind"], p["summary"]) for p in doc["extras"]["training"]["parts"]]


def test_a_trainer_folder_with_pytorch_model_bin_counts_the_tied_head_once(folders):
    from transformers import AutoModelForCausalLM
    folder = folders["trainer_bin_checkpoint"]
    ckpt = tensorloupe.open(str(folder))
    live = AutoModelForCausalLM.from_pretrained(folders["trainer_checkpoint"])
    assert ckpt.format == "pytorch-zip" and ckpt.files == ["pytorch_model.bin"]
    want = torch.load(folder / "pytorch_model.bin", weights_only=True)
    assert [t.name for t in ckpt.tensors] == list(want)       # lm_head.weight is stored too
    for t in ckpt.tensors:
        assert tensorloupe.values(t, 0, t.numel) == want[t.name].flatten().tolist(), t.name
    # ...viewing the embedding's storage: the model's parameters count it once, as
    # model.parameters() does (the file header's "parameters" counts values stored: 106,816)
    doc = json.loads(cli("inspect", "--json", folder).stdout)
    counted = doc["architecture"]["parameters"]
    assert counted["total"] == live_parameters(live) == 90_432
    assert (counted["tied"]["example"], counted["tied"]["parameters"]) == ("lm_head.weight", 16_384)
    assert "Parameters  90,432" in cli("inspect", folder).stdout
    assert [(p["file"], p["kind"]) for p in ckpt.extras["training"]["parts"]] == TRAINER_PARTS
    names = {g["name"] for g in ckpt.extras["safety"]["globals"]}
    assert "torch._utils._rebuild_tensor_v2" in names        # the model's own pickle is there too
    assert cli("inspect", "--strict", folder).returncode == 4  # training_args.bin


# --- accelerate's save_state ------------------------------------------------------------------------

def test_the_accelerate_folder_opens_as_its_model_and_state(folders):
    from safetensors.torch import load_file
    folder = folders["accelerate_state"]
    ckpt = tensorloupe.open(str(folder))
    assert ckpt.parameter_count == live_parameters(training_files.accelerate_model()) == 212
    want = load_file(folder / "model.safetensors")
    assert [t.name for t in ckpt.tensors] == sorted(want)
    for t in ckpt.tensors:
        assert tensorloupe.values(t, 0, t.numel) == want[t.name].flatten().tolist()
    assert ckpt.extras["training"]["kind"] == "accelerate"
    parts = parts_of(ckpt)
    assert [(p["file"], p["kind"]) for p in ckpt.extras["training"]["parts"]] == ACCELERATE_PARTS
    assert_optimizer_as_torch_loads_it(parts["optimizer.bin"], folder / "optimizer.bin")
    scheduler = torch.load(folder / "scheduler.bin", weights_only=True)
    got = parts["scheduler.bin"]["summary"]["state"]
    assert (got["last_epoch"], got["gamma"], got["_last_lr"]) == \
        (scheduler["last_epoch"], scheduler["gamma"], scheduler["_last_lr"])
    rng = torch.load(folder / "random_states_0.pkl", weights_only=False)   # our own fixture
    assert parts["random_states_0.pkl"]["summary"]["generators"] == list(rng)
    assert ckpt.extras["safety"]["dangerous"] == []
    # nothing dangerous, but torch.load(weights_only=True) refuses random_states_0.pkl (NumPy)
    assert ckpt.extras["safety"]["weights_only"]["files"] == ["random_states_0.pkl"]
    assert cli("inspect", "--strict", folder).returncode == 6
    assert cli("health", folder).returncode == 0
