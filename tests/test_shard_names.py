"""A shard set is named as a set, and every tensor says which file its bytes (and offset) are in."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}


def cli(*argv):
    proc = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    import shard_files
    return shard_files.write_all(tmp_path_factory.mktemp("shards"))


def test_a_shard_set_is_named_as_a_set_with_its_file_count(folders):
    out = cli("inspect", folders["sharded_folder"])
    # the summary's first line (after the architecture block, which inspect prints first)
    assert "model-{00001..00003}-of-00003.safetensors  (3 files)" in out.splitlines()
    assert "bytes) in 3 files" in out
    doc = json.loads(cli("inspect", folders["shard_1"], folders["shard_3"], "--json"))
    assert doc["file"] == "model-{00001,00003}-of-00003.safetensors"
    assert doc["files"] == ["model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"]


def test_each_tensor_names_its_file_in_the_table_and_json(folders):
    from safetensors import safe_open
    parts = [folders[f"shard_{i}"] for i in (1, 2, 3)]
    owner = {}
    for p in parts:
        with safe_open(str(p), "np") as f:
            owner.update({k: Path(p).name for k in f.keys()})
    doc = json.loads(cli("inspect", *parts, "--json"))
    assert {t["name"]: t["file"] for t in doc["tensors"]} == owner
    lines = cli("inspect", *parts).split("\nTensors\n", 1)[1].splitlines()
    assert lines[0].split() == ["name", "dtype", "shape", "size", "bits", "offset", "file"]
    rows = {line.split()[0]: line.split()[-1] for line in lines[1:] if line.strip()}
    assert rows == owner


def test_split_gguf_parts_named_as_a_set(folders):
    parts = [folders[f"gguf_split_{i}"] for i in (1, 2, 3)]
    doc = json.loads(cli("inspect", *parts, "--json"))
    assert doc["file"] == "tiny-split-{00001..00003}-of-00003.gguf"
    assert {t["file"] for t in doc["tensors"]} == {Path(p).name for p in parts}


def test_a_single_file_keeps_its_name_and_tensors_name_it(demo_path):
    doc = json.loads(cli("inspect", demo_path, "--json"))
    assert doc["file"] == demo_path.name and doc["files"] == [demo_path.name]
    assert {t["file"] for t in doc["tensors"]} == {demo_path.name}
    assert "file" not in cli("inspect", demo_path).split("\nTensors\n", 1)[1].splitlines()[0].split()
