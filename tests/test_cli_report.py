"""inspect as a gate (--strict) and as a reader: PyTorch metadata without the tensor list."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_files as tf

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pylib")}


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, argv)],
                          capture_output=True, text=True, env=ENV, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tf.write_all(tmp_path_factory.mktemp("torch"))


def test_strict_fails_on_a_dangerous_global(files, tmp_path):
    proc = cli("inspect", "--strict", files["hostile"])
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert "Pickle safety report" in proc.stdout          # the report is still printed
    [line] = proc.stderr.splitlines()
    assert line.startswith("tensorloupe: hostile.pt: --strict:")
    assert "posix.system" in line and "builtins.exec" in line
    assert cli("inspect", "--strict", "--json", files["hostile"]).returncode == 4
    assert cli("inspect", files["hostile"]).returncode == 0       # without --strict: a report only
    assert not (tmp_path / tf.CANARY_NAME).exists() and not Path(tf.CANARY_NAME).exists()


@pytest.mark.parametrize("name", ["state_dict", "lightning", "legacy"])
def test_strict_passes_clean_checkpoints(files, name):
    proc = cli("inspect", files[name], "--strict")
    assert proc.returncode == 0, proc.stderr


def test_strict_fails_on_what_torch_s_default_load_refuses(files):
    """A pickled nn.Module names nothing dangerous (torch.nn classes are inert), but
    torch.load(weights_only=True) refuses those classes: --strict exits 6 and says why."""
    proc = cli("inspect", files["module"], "--strict")
    assert proc.returncode == 6, proc.stderr
    assert proc.stderr.startswith("tensorloupe: module.pt: --strict: torch.load(weights_only=True)")
    assert "torch.nn.modules.linear.Linear" in proc.stderr
    assert "torch.load(weights_only=True), torch's default since 2.6: refuses it (globals: " \
        in proc.stdout


def test_strict_exit_code_is_documented():
    helptext = " ".join(cli("--help").stdout.split())
    assert "4 (inspect --strict)" in helptext and "6 (inspect --strict)" in helptext
    assert "exit with code 4" in " ".join(cli("inspect", "--help").stdout.split())


def metadata_lines(out):
    block = out.split("\nMetadata\n", 1)[1].split("\n\n", 1)[0] if "\nMetadata\n" in out else ""
    return [line.strip() for line in block.splitlines()]


def test_a_plain_state_dict_has_no_metadata_section(files):
    out = cli("inspect", files["state_dict"]).stdout
    assert "\nMetadata\n" not in out
    assert "model.0.weight" in out.split("\nTensors\n", 1)[1]


def test_lightning_metadata_is_its_non_tensor_entries(files):
    out = cli("inspect", files["lightning"]).stdout
    lines = metadata_lines(out)
    keys = [line.split(":", 1)[0] for line in lines]
    assert {"epoch", "global_step", "hyper_parameters", "lr_schedulers"} <= set(keys)
    assert "state_dict" not in keys                     # all tensors: in the table
    text = "\n".join(lines)
    assert "'tensor':" not in text and "exp_avg" not in text
    assert "'lr': 0.001" in text                        # the optimizer's settings stay
    # JSON keeps the whole rendered object, tensor references included.
    doc = json.loads(cli("inspect", files["lightning"], "--json").stdout)
    assert doc["metadata"]["state_dict"] == {"tensors": 6, "tree": "state_dict.model."}
