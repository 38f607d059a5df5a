"""Every command takes a checkpoint the way `inspect` does (several shards, a folder, an index,
split GGUF parts, URLs), options may come anywhere, and the help says what each option does."""

import json
import os
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest

import tensorloupe
from tensorloupe.cli import build_parser, main

import build

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}
LAST_SHARD_TENSOR = "model.layers.2.self_attn.q_proj.weight"     # in model-00003-of-00003
LAST_PART_TENSOR = "output.weight"                                # in tiny-split-00003-of-00003


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    import shard_files
    return shard_files.write_all(tmp_path_factory.mktemp("shards"))


@pytest.fixture(scope="module")
def served(folders):
    server = build.make_server(Path(folders["sharded_folder"]), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def cli(*argv):
    """The installed command as a user runs it (this checkout's code)."""
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                          capture_output=True, text=True, env=ENV, timeout=120)


def stats_json(capsys, *argv):
    code = main([str(a) for a in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def shard_ways(f):
    shards = [f["shard_1"], f["shard_2"], f["shard_3"]]
    return {"folder": [f["sharded_folder"]], "index": [f["shard_index"]], "shards": shards,
            "index and shards": [f["shard_index"], *shards]}


@pytest.mark.parametrize("way", ["folder", "index", "shards", "index and shards"])
def test_stats_takes_a_sharded_checkpoint_every_way_inspect_does(capsys, folders, way):
    [entry] = stats_json(capsys, "stats", *shard_ways(folders)[way], LAST_SHARD_TENSOR)
    expected = tensorloupe.sample(tensorloupe.open(folders["shard_3"]).tensor(LAST_SHARD_TENSOR))
    assert entry["name"] == LAST_SHARD_TENSOR and entry["stats"] == expected.stats.to_json()


def test_stats_of_every_tensor_of_a_folder_covers_all_shards(capsys, folders):
    entries = stats_json(capsys, "stats", folders["sharded_folder"])
    assert len(entries) == len(tensorloupe.open(folders["sharded_folder"]).tensors) == 48


def test_values_of_split_gguf_parts_and_folder(capsys, folders):
    parts = [folders[f"gguf_split_{i}"] for i in (1, 2, 3)]
    expected = tensorloupe.values(tensorloupe.open(parts).tensor(LAST_PART_TENSOR), 3, 5)
    for given in (parts, [folders["gguf_split_folder"]]):
        assert main(["values", *map(str, given), LAST_PART_TENSOR, "--start", "3", "--count", "5",
                     "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["values"] == expected


def test_stats_and_values_read_an_index_url(capsys, served):
    # The index's shard names resolve relative to its URL; only ranges travel.
    url = f"{served}/model.safetensors.index.json"
    [entry] = stats_json(capsys, "stats", url, LAST_SHARD_TENSOR)
    assert entry["numel"] == 16 * 16
    assert main(["values", url, LAST_SHARD_TENSOR, "--count", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["values"]) == 2


def test_moe_of_a_folder_reads_its_config_for_top_k(folders):
    proc = cli("moe", folders["sharded_folder"], "--json", "--samples", "64")
    assert proc.returncode == 0, proc.stderr
    moe = json.loads(proc.stdout)["moe"]
    assert moe["detected"] and moe["top_k"] == 3 and "config.json" in moe["top_k_source"]


def test_moe_of_several_shards(capsys, folders):
    assert main(["moe", *map(str, shard_ways(folders)["shards"]), "--json", "--samples", "64"]) == 0
    assert len(json.loads(capsys.readouterr().out)["layers"]) == 3


def test_a_folder_of_several_checkpoints_names_them(tmp_path, demo_bytes):
    (tmp_path / "a.safetensors").write_bytes(demo_bytes)
    (tmp_path / "b.safetensors").write_bytes(demo_bytes)
    proc = cli("stats", tmp_path, "model.norm.weight")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "several checkpoints" in proc.stderr and "a.safetensors, b.safetensors" in proc.stderr


def test_options_anywhere_among_the_positionals(demo_path):
    proc = cli("stats", demo_path, "--exact", "model.norm.weight", "--json")
    assert proc.returncode == 0, proc.stderr
    [entry] = json.loads(proc.stdout)
    assert entry["name"] == "model.norm.weight" and entry["exact"] is True
    proc = cli("values", demo_path, "--count", "3", "model.norm.weight")
    assert proc.returncode == 0 and proc.stdout.count("\n  [") == 3


def test_version():
    proc = cli("--version")
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert proc.returncode == 0 and proc.stdout.strip() == f"tensorloupe {version}"


def test_every_option_has_help_and_value_options_say_their_default():
    parser = build_parser()
    [sub] = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    missing = []
    for name, p in sub.choices.items():
        for action in p._actions:
            text = action.help or ""
            if not text:
                missing.append(f"{name} {action.dest}: no help")
            elif action.option_strings and action.nargs != 0 and action.default is not None \
                    and "default" not in text:
                missing.append(f"{name} {action.dest}: no default in {text!r}")
    assert missing == []


def test_values_help_documents_its_default_count():
    proc = cli("values", "--help")
    assert proc.returncode == 0 and "how many elements (default 20)" in " ".join(proc.stdout.split())


def test_build_serve_takes_options_before_files(tmp_path, demo_bytes):
    # `build.py serve --port N FILE` (argparse without intermixed parsing refused FILE here).
    model = tmp_path / "m.safetensors"
    model.write_bytes(demo_bytes)
    proc = subprocess.Popen([sys.executable, str(ROOT / "build.py"), "serve", "--port", "0",
                             "--no-build", "--out", str(tmp_path), str(model)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert f"serving {model} as /files/m.safetensors" in "".join(lines), proc.stderr.read()
