"""A torch ZIP is recognised by its members, not its first one or its name: TorchScript archives
(storages first, constants.pkl) open under any name, and a ZIP of something else says so."""

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import torch_files as tf

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                          capture_output=True, text=True, env=ENV, timeout=120)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    return tf.write_torchscript(tmp_path_factory.mktemp("ts") / "silero_vad.jit")


def test_torchscript_archive_opens_by_content(script):
    assert zipfile.ZipFile(script).namelist()[0].endswith("/data/0")   # not data.pkl first
    proc = cli("inspect", script, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "pytorch-zip" and doc["extras"]["torchscript"]["format"] == "TorchScript"
    assert doc["extras"]["torchscript"]["code_files"] == 1
    loaded = torch.jit.load(str(script))
    for name in ("weight", "bias"):
        proc = cli("values", script, name, "--json", "--count", "10")
        assert proc.returncode == 0, proc.stderr
        expected = getattr(loaded, name).detach().numpy().ravel().tolist()
        assert json.loads(proc.stdout)["values"] == expected


# (a .npz is a ZIP of something else too, but one tensorloupe reads: tests/test_numpy_files.py)
@pytest.mark.parametrize("name", ["archive.zip", "model.pt"])
def test_a_zip_of_something_else_says_so(tmp_path, name):
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
        archive.writestr("data.pkl", b"\x80\x02}q\x00.")   # a pickle, but no storages or records
    proc = cli("inspect", path)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"tensorloupe: {name}: ") and "ZIP archive but not a PyTorch checkpoint" in line
