"""Thousands of files at once (issue 25): a shard set of 2,000 files opens and is read under a
limit of 256 open files (source.base.OPEN_FILES keeps at most MAX_OPEN handles), and a folder of
3,000 unrelated models is refused in a short message (display.some_of), not a 200 KB line."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tensorloupe.cli import main

ROOT = Path(__file__).resolve().parent.parent


def tiny_safetensors(path: Path, name: str, value: float) -> None:
    """One F32 tensor of 4 elements, every one `value` (written with the stdlib: the format is a
    length, a JSON header and the bytes)."""
    header = json.dumps({name: {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + struct.pack("<4f", *[value] * 4))


def shard_set(folder: Path, shards: int) -> Path:
    folder.mkdir()
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tiny_safetensors(folder / name, f"layers.{i}.weight", float(i))
        weight_map[f"layers.{i}.weight"] = name
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 16 * shards}, "weight_map": weight_map}))
    return folder


CHILD = """
import json, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
from tensorloupe.cli import main
from tensorloupe.source.base import OPEN_FILES
folder = sys.argv[1]
if len(sys.argv) > 2:
    OPEN_FILES.MAX_OPEN = int(sys.argv[2])   # the control: every file held open
assert main(["inspect", "--json", folder]) == 0, "inspect"
assert main(["health", "--json", folder]) == 0, "health"
assert main(["values", folder, "layers.1999.weight", "--json"]) == 0, "values"
"""


def test_a_2000_shard_set_opens_and_reads_under_256_open_files(tmp_path):
    if sys.platform == "emscripten":    # Pyodide runs this file too, and has no subprocess
        pytest.skip("no subprocess in Pyodide")
    folder = shard_set(tmp_path / "set", 2000)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}
    child = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True,
                           text=True, env=env, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    inspect, health, values = _documents(child.stdout)
    assert inspect["tensor_count"] == 2000
    assert [m["constant"] for m in health["tensors"]] == [float(i) for i in range(2000)]
    assert values["values"] == [1999.0] * 4
    # The control: with every file held open, the same set fails at the limit.
    child = subprocess.run([sys.executable, "-c", CHILD, str(folder), "1000000"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode != 0 and "Too many open files" in child.stdout + child.stderr


def _documents(text: str):
    """The JSON documents printed one after another."""
    decoder, at = json.JSONDecoder(), 0
    while at < len(text):
        value, end = decoder.raw_decode(text, at)
        yield value
        at = end
        while at < len(text) and text[at].isspace():
            at += 1


def test_a_folder_of_3000_unrelated_models_is_refused_in_a_short_message(tmp_path, capsys):
    folder = tmp_path / "zoo"
    folder.mkdir()
    for i in range(3000):
        tiny_safetensors(folder / f"model_{i:04d}_{'abcdefghij'[i % 10] * 12}.safetensors", "w", 1.0)
    assert main(["inspect", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.encode()) < 2048 and len(err.strip().splitlines()) == 1, len(err)
    assert "the folder holds several checkpoints" in err and "and 2,990 more" in err
