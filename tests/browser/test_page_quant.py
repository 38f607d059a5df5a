"""A quantised checkpoint in the page (issue 24): a compressed-tensors int4 safetensors file opened
with its config.json shows the dequantised weight, its sampled and exact statistics equal to what
`tensorloupe stats --json` prints (run here as a user would, in a subprocess), and says
"dequantised from <scheme>" beside them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import quant_files
from page_checks import assert_stats_equal

ROOT = Path(__file__).resolve().parents[2]
CASE = "ct_int4_group_wide"          # 256 x 1024 int4, group 128: sampled, not read whole
NAME = "model.layers.0.mlp.down_proj.weight"


def cli(*args) -> list:
    """This worktree's CLI (not an installed one)."""
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args), "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "pylib")})
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quant-page")
    quant_files.write_all(out)
    return out / "quant" / CASE


def test_the_tensor_tab_shows_the_dequantised_values_as_the_cli(app, folder):
    model, config = folder / "model.safetensors", folder / "config.json"
    before = app.opened()
    app.open_with_input(model, config)     # the config.json goes with the model (web/files.py)
    app.wait_model(model.name, before)
    assert app.fact("tensor_count") == "1"
    app.select(NAME)
    (sampled,) = cli("stats", model, NAME)
    assert not sampled["exact"] and sampled["dequantised_from"].startswith("compressed-tensors")
    assert_stats_equal(app.stats(), sampled["stats"])
    page = app.page
    assert page.get_attribute("#stats", "data-samples") == str(sampled["samples"])
    assert page.inner_text("#stats-dequantised") == f"dequantised from {sampled['dequantised_from']}"
    page.click("#exact-button")
    page.wait_for_selector("#exact-stats:not([hidden]) .stat[data-key=mean]", timeout=60_000)
    (exact,) = cli("stats", model, NAME, "--exact")
    assert_stats_equal(app.stats("#exact-stats"), exact["stats"])
    app.screenshot("tensor-quantised")
