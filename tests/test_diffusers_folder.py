"""A diffusers pipeline folder (fixtures/diffusers_files.py: save_pretrained of a tiny
StableDiffusionPipeline, plus an fp16 variant of the unet beside it) opened as one model.
Oracles: DiffusionPipeline.from_pretrained (every tensor of every component equals the loaded
module's state_dict, parameter counts are the live modules' sums) and model_index.json."""

import json
import shutil
from pathlib import Path

import pytest
import torch

import diffusers_files

import tensorloupe
from tensorloupe.errors import UsageError
from tensorloupe.web import files as page_files

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "out" / "diffusers" / "tiny-sd"


@pytest.fixture(scope="module")
def folder():
    if not (OUT / "model_index.json").exists():
        diffusers_files.write_all(OUT.parent.parent)
    return OUT


@pytest.fixture(scope="module")
def loaded(folder):
    from diffusers import DiffusionPipeline
    return DiffusionPipeline.from_pretrained(folder)


def test_every_component_tensor_equals_from_pretrained(folder, loaded):
    ck = tensorloupe.open(folder)
    assert ck.format == "diffusers"
    pipeline = ck.extras["pipeline"]
    index = json.loads((folder / "model_index.json").read_text())
    assert pipeline["class"] == index["_class_name"] == type(loaded).__name__
    components = {c["name"]: c for c in pipeline["components"]}
    assert set(components) == {k for k, v in index.items() if isinstance(v, list) and v[0]}
    with_weights = {name for name, module in loaded.components.items()
                    if isinstance(module, torch.nn.Module)}
    assert {n for n, c in components.items() if c.get("tensors")} == with_weights
    seen = 0
    for name in with_weights:
        state = loaded.components[name].state_dict()
        mine = {t.name.split("/", 1)[1]: t for t in ck.tensors if t.name.startswith(name + "/")}
        assert set(mine) == set(state), name
        for key, value in state.items():
            assert torch.equal(torch.from_numpy(mine[key].numpy()), value), (name, key)
        assert components[name]["parameters"] == sum(v.numel() for v in state.values())
        # diffusers' own count of the live module's parameters (buffers aside: these have none)
        assert components[name]["parameters"] == sum(p.numel() for p in loaded.components[name].parameters())
        assert components[name]["class"] == type(loaded.components[name]).__name__
        seen += len(state)
    assert seen == len(ck.tensors)
    assert components["unet"]["files"] == ["diffusion_pytorch_model.safetensors"]   # not the fp16 variant
    assert components["unet"]["config"]["block_out_channels"] == [8, 16]
    assert components["scheduler"].get("tensors") is None


def test_cli_inspect_shows_the_pipeline(folder, capsys):
    from tensorloupe.cli import main
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "Pipeline  StableDiffusionPipeline" in out
    assert "unet             diffusers.UNet2DConditionModel" in out
    assert main(["inspect", "--json", str(folder)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["format"] == "diffusers" and shown["tensor_count"] == 320
    assert [c["name"] for c in shown["extras"]["pipeline"]["components"]][:3] == \
        ["scheduler", "text_encoder", "tokenizer"]


def test_the_page_lists_a_dropped_pipeline_folder_as_one_entry(folder):
    given = [{"rel": f"tiny-sd/{p.relative_to(folder).as_posix()}", "path": str(p),
              "size": p.stat().st_size, "folder": True}
             for p in sorted(folder.rglob("*")) if p.is_file()]
    entries = page_files.group(page_files.given(given))
    assert len(entries) == 1
    entry = entries[0]
    assert entry["name"] == "tiny-sd (diffusers pipeline, 3 components)"
    assert entry["files"][0] == "model_index.json"
    assert "diffusion_pytorch_model.fp16.safetensors" not in entry["files"]
    ck = tensorloupe.open(entry["paths"])
    assert ck.format == "diffusers" and len(ck.tensors) == 320


def test_a_folder_without_model_files_is_refused(folder, tmp_path):
    copy = tmp_path / "empty-sd"
    copy.mkdir()
    shutil.copy(folder / "model_index.json", copy)
    shutil.copytree(folder / "scheduler", copy / "scheduler")
    with pytest.raises(UsageError):
        tensorloupe.open(copy)
