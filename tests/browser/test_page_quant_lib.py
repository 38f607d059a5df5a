"""MLX, optimum-quanto and torchao weights in the page (issue 24): each opened as a user would
(the safetensors file with its config.json; the torch.save file alone), its weight shown
dequantised, with the sampled statistics and the "dequantised from" line `tensorloupe stats
--json` prints (run in a subprocess, this worktree's CLI), and the Summary's counts of
`inspect --json`."""

from __future__ import annotations

from pathlib import Path

import pytest

from page_checks import assert_stats_equal
from test_page_quant import cli

OUT = Path(__file__).resolve().parents[2] / "fixtures" / "out"    # fixtures/make.py
CASES = [("quant_lib/mlx_affine_3bit_g32/model.safetensors", "model.layers.0.mlp.up_proj.weight"),
         ("quant_lib/quanto_qint4_grouped/model.safetensors", "0.weight"),
         ("torchao/intx_4bit_asym.pt", "0.weight")]


@pytest.mark.parametrize("case, name", CASES)
def test_the_page_shows_the_dequantised_weight_as_the_cli(app, case, name):
    model = OUT / case
    files = [model] + ([model.parent / "config.json"] if model.suffix == ".safetensors" else [])
    before = app.opened()
    app.open_with_input(*files)
    app.wait_model(model.name, before)
    app.select(name)
    (sampled,) = cli("stats", model, name)
    assert sampled["dequantised_from"]
    assert_stats_equal(app.stats(), sampled["stats"])
    assert app.page.inner_text("#stats-dequantised") == f"dequantised from {sampled['dequantised_from']}"
    quantisation = cli("inspect", model)["extras"]["quantisation"]
    app.tab("summary")
    card = app.page.locator("#quantisation")
    assert card.get_attribute("data-dequantised") == str(quantisation["dequantised"]) != "0"
    assert quantisation["source"] in card.inner_text()
    app.tab("tensor")
