"""A pickled nn.Module says which of its tensors are buffers and which parameters (its _buffers
and _parameters, read as inert data by the allow-list machine): that evidence counts parameters,
whatever the names, and the count says which evidence it used. Oracle: the live module's
sum(p.numel() for p in parameters()) and sum over buffers()."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import count_files
import tensorloupe
from tensorloupe.architecture import summarize

ROOT = Path(__file__).resolve().parent.parent


class Custom(torch.nn.Module):
    """A buffer no name rule knows (`scale`, `table`) and a learned parameter named like RoPE's
    inv_freq buffer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.proj = torch.nn.Linear(6, 4)
        self.register_buffer("scale", torch.ones(4))
        self.register_buffer("table", torch.arange(12.0).reshape(3, 4))
        self.inv_freq = torch.nn.Parameter(torch.rand(3))


def parameters_of(path):
    with tensorloupe.open(path) as ckpt:
        return summarize(ckpt).to_json()["parameters"]


@pytest.mark.parametrize("how", ["module", "state_dict"])
def test_the_pickled_module_s_slots_count_parameters(tmp_path, how):
    live = Custom()
    path = tmp_path / f"{how}.pt"
    torch.save(live if how == "module" else live.state_dict(), path)
    params = parameters_of(path)
    if how == "module":          # the module's own word: exact, whatever the names
        assert params["total"] == sum(p.numel() for p in live.parameters()) == 31
        assert params["buffers"]["parameters"] == sum(b.numel() for b in live.buffers()) == 16
        assert params["buffers"]["evidence"] == ["the pickled modules' _buffers",
                                                 "the pickled modules' _parameters"]
    else:   # a state_dict records no slots: names only (scale and table read as weights, the
        # learned inv_freq as a buffer), and it says so
        assert params["total"] == 24 + 4 + 4 + 12
        assert params["buffers"] == {"parameters": 3, "tensors": 1, "bytes": 12, "example": "inv_freq",
                                     "evidence": ["names"]}


def test_inspect_says_which_evidence_told_buffers_apart(tmp_path):
    torch.save(count_files.cnn(), tmp_path / "cnn.pt")
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "inspect", str(tmp_path / "cnn.pt")],
                         capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pylib")}).stdout
    assert ("(buffers, not parameters: 9 in 3 tensors, e.g. 1.running_mean; told apart by the "
            "pickled modules' _buffers and the pickled modules' _parameters)") in out
