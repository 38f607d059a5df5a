"""Sharded PyTorch .bin checkpoints (transformers 4.x save_pretrained(safe_serialization=False,
max_shard_size=...), written by fixtures/bin_shard_files.py) opened as one model: by folder, by
index, by any selection of shards, ZIP and legacy, with the index checked against the shards.
torch.load of each shard and the model's own parameter count are the oracles."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bin_shard_files

import tensorloupe
from tensorloupe.errors import FormatError
from tensorloupe.web.handlers import Session

ROOT = Path(__file__).resolve().parent.parent
INDEX = bin_shard_files.INDEX_NAME


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    return bin_shard_files.write_all(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="module")
def params():
    return sum(p.numel() for p in bin_shard_files.build_model().parameters())


def shard_paths(folder: Path) -> list[Path]:
    return sorted(folder.glob("pytorch_model-*-of-*.bin"))


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib")})


def assert_same_as_torch(ckpt, paths):
    want = {}
    for path in paths:
        want.update(torch.load(path, map_location="cpu", weights_only=True))
    assert [t.name for t in ckpt.tensors] == list(want)
    for t in ckpt.tensors:
        w = want[t.name]
        assert t.shape == tuple(w.shape) and t.dtype == "F32", t.name
        assert tensorloupe.values(t, 0, t.numel) == w.flatten().tolist(), t.name


@pytest.mark.parametrize("folder", ["bin_shards_folder", "bin_shards_legacy_folder"])
def test_the_folder_opens_as_one_model(sets, params, folder):
    ckpt = tensorloupe.open(str(sets[folder]))
    paths = shard_paths(sets[folder])
    assert len(paths) == 3 and ckpt.warnings == []
    assert ckpt.format == ("pytorch-zip" if folder == "bin_shards_folder" else "pytorch-legacy")
    assert ckpt.name == "pytorch_model-{00001..00003}-of-00003.bin"
    assert_same_as_torch(ckpt, paths)
    assert sum(t.numel for t in ckpt.tensors) == params
    index = json.loads((sets[folder] / INDEX).read_text())
    assert sum(t.nbytes for t in ckpt.tensors) == index["metadata"]["total_size"]
    assert ckpt.extras["shards"]["missing"] == [] and ckpt.extras["index"]["name"] == INDEX
    # one safety report for every shard's pickle
    assert ckpt.extras["safety"]["dangerous"] == []
    assert {g["name"]: g["count"] for g in ckpt.extras["safety"]["globals"]}[
        "torch._utils._rebuild_tensor_v2"] == 3


def test_the_index_alone_opens_its_shards(sets, params):
    ckpt = tensorloupe.open(str(sets["bin_shard_index"]))
    assert len(ckpt.tensors) == 21 and sum(t.numel for t in ckpt.tensors) == params


def test_any_selection_of_shards_opens_and_names_the_missing_ones(sets):
    paths = shard_paths(sets["bin_shards_folder"])
    ckpt = tensorloupe.open([str(paths[2]), str(paths[0])])
    assert ckpt.warnings == ["part 2 of 3 (pytorch_model-00002-of-00003.bin) is missing: its "
                             "tensors are not shown"]
    assert ckpt.extras["shards"]["missing"] == ["pytorch_model-00002-of-00003.bin"]
    assert_same_as_torch(ckpt, [paths[0], paths[2]])
    one = tensorloupe.open([str(paths[1])])
    assert one.extras["shards"]["missing"] == [paths[0].name, paths[2].name]


def test_every_cli_command_opens_the_folder(sets, params):
    folder = sets["bin_shards_folder"]
    doc = json.loads(cli("inspect", "--json", folder).stdout)
    family = next(f for f in doc["architecture"]["fields"] if f["key"] == "family")
    assert (family["value"], family["source"]) == ("llama", "config.json: model_type")
    assert sum(r["numel"] for r in doc["tensors"]) == doc["parameters"] == params
    for command in (["health", folder], ["stats", folder, "model.norm.weight"],
                    ["values", folder, "lm_head.weight"], ["moe", folder],
                    ["diff", folder, sets["bin_shards_legacy_folder"]],
                    ["inspect", sets["bin_shard_index"]],
                    ["inspect", *shard_paths(folder)]):
        done = cli(*command)
        assert done.returncode == 0, (command, done.stderr)
    assert "21 byte identical" in cli("diff", folder, sets["bin_shards_legacy_folder"]).stdout


def test_the_page_groups_and_opens_the_dropped_folder(sets, params):
    folder = sets["bin_shards_folder"]
    files = [{"rel": f"bin-shards/{p.name}", "path": str(p), "size": p.stat().st_size,
              "folder": True} for p in sorted(folder.iterdir())]
    s = Session()
    entries = s.handle("group", {"files": files})[0]["entries"]
    assert [(e["kind"], e["name"]) for e in entries] == [("set", "pytorch_model-*-of-00003.bin")]
    result, _ = s.handle("open", {"paths": entries[0]["paths"], "config": entries[0]["config"]})
    assert result["tensor_count"] == 21 and result["warnings"] == []
    fields = s.handle("model_details", {})[0]["architecture"]["fields"]
    assert next(f for f in fields if f["key"] == "family")["value"] == "llama"


# --- an index that disagrees with its shards ------------------------------------------------------

def copy_set(sets, tmp_path) -> Path:
    folder = tmp_path / "m"
    shutil.copytree(sets["bin_shards_folder"], folder)
    return folder


def edit_index(folder: Path, edit) -> None:
    index = json.loads((folder / INDEX).read_text())
    edit(index["weight_map"])
    (folder / INDEX).write_text(json.dumps(index))


def test_a_tensor_the_index_puts_in_another_shard_is_said(sets, tmp_path):
    folder = copy_set(sets, tmp_path)
    edit_index(folder, lambda m: m.update({"lm_head.weight": "pytorch_model-00001-of-00003.bin"}))
    ckpt = tensorloupe.open(str(folder))
    assert ("tensor 'lm_head.weight' is in pytorch_model-00003-of-00003.bin but the index says "
            "pytorch_model-00001-of-00003.bin") in ckpt.warnings
    # lm_head.weight was all of shard 3: the index no longer names it, but the folder holds it
    assert ("pytorch_model-00003-of-00003.bin is not named by pytorch_model.bin.index.json; its "
            "tensors are shown anyway") in ckpt.warnings
    assert len(ckpt.tensors) == 21


def test_a_tensor_the_index_names_that_no_shard_holds_is_said(sets, tmp_path):
    folder = copy_set(sets, tmp_path)
    edit_index(folder, lambda m: m.update({"model.ghost.weight": "pytorch_model-00002-of-00003.bin"}))
    ckpt = tensorloupe.open(str(folder))
    assert any("1 tensor the index lists is in none of the shards, e.g. 'model.ghost.weight'"
               in w for w in ckpt.warnings)


def test_a_shard_the_index_names_that_is_absent_is_named(sets, tmp_path):
    folder = copy_set(sets, tmp_path)
    (folder / "pytorch_model-00002-of-00003.bin").unlink()
    ckpt = tensorloupe.open(str(folder))
    assert ckpt.extras["shards"]["missing"] == ["pytorch_model-00002-of-00003.bin"]
    assert "part 2 of 3 (pytorch_model-00002-of-00003.bin) is missing" in ckpt.warnings[0]


def test_a_tensor_in_two_shards_is_an_error(sets, tmp_path):
    folder = copy_set(sets, tmp_path)
    third = folder / "pytorch_model-00003-of-00003.bin"
    state = torch.load(third, weights_only=True)
    state["model.embed_tokens.weight"] = torch.zeros(256, 64)
    torch.save(state, third)
    with pytest.raises(FormatError) as e:
        tensorloupe.open(str(folder))
    assert "tensor 'model.embed_tokens.weight' is in two parts" in str(e.value)
    assert "pytorch_model-00001-of-00003.bin and pytorch_model-00003-of-00003.bin" in str(e.value)


def test_a_dangerous_global_in_any_shard_is_in_the_set_s_safety_report(sets, tmp_path):
    folder = copy_set(sets, tmp_path)
    second = folder / "pytorch_model-00002-of-00003.bin"
    state = torch.load(second, weights_only=True)
    state["hook"] = print     # pickled as the global builtins.print: never called by tensorloupe
    torch.save(state, second)
    ckpt = tensorloupe.open(str(folder))
    assert ckpt.extras["safety"]["dangerous"] == ["builtins.print"]
    assert any(w.startswith("pytorch_model-00002-of-00003.bin: the pickle names 1 dangerous")
               for w in ckpt.warnings)
    assert cli("inspect", "--strict", folder).returncode != 0


# --- a missing part is an error (safetensors and .bin sets alike) ----------------------------------

@pytest.fixture(scope="module")
def st_sets(tmp_path_factory):
    import shard_files
    return shard_files.write_all(tmp_path_factory.mktemp("st"))


def without(folder: Path, tmp_path: Path, name: str, index: bool = True) -> Path:
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    (copy / name).unlink()
    if not index:
        for path in copy.glob("*.index.json"):
            path.unlink()
    return copy


CASES = {  # (folder key, the shard deleted, a tensor it held)
    "bin": ("bin_shards_folder", "pytorch_model-00002-of-00003.bin", "model.layers.1.mlp.up_proj.weight"),
    "safetensors": ("sharded_folder", "model-00002-of-00003.safetensors",
                    "model.layers.1.mlp.experts.0.up_proj.weight"),
}


@pytest.mark.parametrize("case", CASES)
def test_health_says_a_missing_shard_first_as_an_error_and_exits_5(sets, st_sets, tmp_path, case):
    key, gone, _ = CASES[case]
    folder = without({**sets, **st_sets}[key], tmp_path, gone)
    done = cli("health", "--json", folder)
    assert done.returncode == 5, done.stderr
    doc = json.loads(done.stdout)
    assert doc["counts"]["error"] == 1
    first = doc["flags"][0]
    assert (first["kind"], first["severity"], first["tensor"]) == ("missing_part", "error", gone)
    assert first["message"] == f"part 2 of 3 ({gone}) is missing: its tensors are not shown"
    text = cli("health", folder).stdout
    assert "1 error," in text.splitlines()[1]
    assert text.splitlines()[4].split()[:3] == ["error", "missing_part", gone]


@pytest.mark.parametrize("case", CASES)
def test_inspect_says_a_missing_shard_first_and_strict_fails(sets, st_sets, tmp_path, case):
    key, gone, _ = CASES[case]
    folder = without({**sets, **st_sets}[key], tmp_path, gone)
    sentence = f"part 2 of 3 ({gone}) is missing: its tensors are not shown"
    text = cli("inspect", folder)
    assert text.returncode == 0
    assert text.stdout.splitlines()[:2] == ["Errors: the checkpoint is incomplete", f"  ! {sentence}"]
    strict = cli("inspect", "--strict", folder)
    assert strict.returncode == 5 and sentence in strict.stderr
    assert json.loads(cli("inspect", "--json", folder).stdout)["errors"] == [sentence]


@pytest.mark.parametrize("case", CASES)
def test_stats_of_a_tensor_in_the_missing_shard_names_the_file(sets, st_sets, tmp_path, case):
    key, gone, tensor = CASES[case]
    folder = without({**sets, **st_sets}[key], tmp_path, gone)
    done = cli("stats", folder, tensor)
    assert done.returncode == 2
    assert f"no tensor named {tensor!r}: the index puts it in {gone}, which is missing" in done.stderr
    # without the index the file names still say which parts are missing
    bare = without({**sets, **st_sets}[key], tmp_path / "bare", gone, index=False)
    done = cli("stats", bare, tensor)
    assert f"no tensor named {tensor!r}: 1 of the 3 parts is missing ({gone}): it may be in " \
           "one of them" in done.stderr


def test_a_tensor_the_index_names_that_no_shard_holds_is_an_error(sets, tmp_path):
    folder = copy_set(sets, tmp_path)
    edit_index(folder, lambda m: m.update({"model.ghost.weight": "pytorch_model-00002-of-00003.bin"}))
    done = cli("health", "--json", folder)
    assert done.returncode == 5
    flag = json.loads(done.stdout)["flags"][0]
    assert (flag["kind"], flag["severity"]) == ("not_in_shards", "error")
    assert "1 tensor the index lists is in none of the shards, e.g. 'model.ghost.weight'" \
        in flag["message"]
    assert cli("inspect", "--strict", folder).returncode == 5


def test_a_complete_set_has_no_errors(sets):
    assert cli("health", sets["bin_shards_folder"]).returncode == 0
    assert json.loads(cli("inspect", "--json", sets["bin_shards_folder"]).stdout)["errors"] == []


def test_the_page_health_scan_leads_with_the_missing_shard(sets, tmp_path):
    folder = without(sets["bin_shards_folder"], tmp_path, "pytorch_model-00002-of-00003.bin")
    ckpt = tensorloupe.open(str(folder))
    report = tensorloupe.health(ckpt).to_json()
    assert report["flags"][0]["tensor"] == "pytorch_model-00002-of-00003.bin"
    assert report["flags"][0]["severity"] == "error"


def test_the_index_url_opens_its_shards_by_ranges(sets, params):
    import threading

    import build
    server = build.make_server(sets["bin_shards_folder"], port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{INDEX}"
        ckpt = tensorloupe.open(url)
        assert ckpt.name == "pytorch_model-{00001..00003}-of-00003.bin" and ckpt.warnings == []
        assert sum(t.numel for t in ckpt.tensors) == params
        ckpt.close()
    finally:
        server.shutdown()
        server.server_close()
