"""Quantised checkpoints in the page (issue 24): a safetensors file opened with its config.json shows
each quantised weight dequantised, its sampled and exact statistics equal to what
`tensorloupe stats --json` prints (run here as a user would, in a subprocess), and says
"dequantised from <scheme>" beside them. One scheme of each kind, in one page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tensorloupe
import quant_bnb_files
import quant_files
from page_checks import assert_stats_equal

ROOT = Path(__file__).resolve().parents[2]
CASES = ["ct_int4_group_wide",          # 256 x 1024 int4, group 128: sampled, not read whole
         "ct_nvfp4_wide", "fp8_block", "mxfp4_experts_odd", "gptq_v1_3bit_actorder_out64", "awq_gemm_g32",
         # written by bitsandbytes (via transformers), ModelOpt, hqq; sparse-24 (quant_bnb_files)
         "bnb_nf4_double", "bnb_int8", "modelopt_nvfp4", "hqq_3bit_g64_f16", "sparse24_bf16_odd"]


def cli(*args) -> list:
    """This worktree's CLI (not an installed one)."""
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args), "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "pylib")})
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quant-page")
    quant_files.write_all(out)
    quant_bnb_files.write_all(out)
    return out / "quant"


@pytest.mark.parametrize("case", CASES)
def test_the_tensor_tab_shows_the_dequantised_values_as_the_cli(app, written, case):
    folder = written / case
    model, config = folder / "model.safetensors", folder / "config.json"
    with tensorloupe.open(model) as ckpt:
        name = next(t.name for t in ckpt.tensors if t.parts)    # the first, of one or of a model's
    before = app.opened()
    app.open_with_input(model, config)     # the config.json goes with the model (web/files.py)
    app.wait_model(model.name, before)
    app.select(name)
    (sampled,) = cli("stats", model, name)
    assert sampled["exact"] == (case != "ct_int4_group_wide") and sampled["dequantised_from"]
    assert_stats_equal(app.stats(), sampled["stats"])
    page = app.page
    assert page.get_attribute("#stats", "data-samples") == str(sampled["samples"])
    assert page.inner_text("#stats-dequantised") == f"dequantised from {sampled['dequantised_from']}"
    page.click("#exact-button")
    # selecting a tensor hides the previous exact block: this waits for this tensor's run
    page.wait_for_selector("#exact-stats:not([hidden]) .stat[data-key=mean]", timeout=60_000)
    (exact,) = cli("stats", model, name, "--exact")
    assert_stats_equal(app.stats("#exact-stats"), exact["stats"])
    app.screenshot(f"tensor-quantised-{case}")
    # the Summary names the scheme and the file that said it, as inspect --json does
    quantisation = cli("inspect", model)["extras"]["quantisation"]
    app.tab("summary")
    card = page.locator("#quantisation")
    assert card.get_attribute("data-dequantised") == str(quantisation["dequantised"]) != "0"
    text = card.inner_text()
    assert all(scheme in text for scheme in quantisation["schemes"]) and quantisation["source"] in text
