"""A 2:4-sparse FP8 model in the page (issue 24; fixtures/quant_sparse24q_files.py, written by
compressed-tensors 0.12.2's ModelCompressor): opened with its config.json, a 2:4 weight is shown
dequantised with the sampled and exact statistics `tensorloupe stats --json` prints (this
worktree's CLI, in a subprocess), the Tensor tab and the Summary name the scheme, both facts, and
the heatmap is drawn from the real values."""

from __future__ import annotations

from pathlib import Path

from page_checks import assert_stats_equal
from test_page_quant import cli

import quant_sparse24q_files

OUT = Path(__file__).resolve().parents[2] / "fixtures" / "out"    # fixtures/make.py
SCHEME = "compressed-tensors FP8 e4m3, per channel (float-quantized) + 2:4 sparse (bitmask)"
NAME = "model.layers.0.mlp.up_proj.weight"


def test_the_page_shows_the_24_fp8_weight_and_its_scheme(app):
    folder = OUT / "quant" / "sparse24q_fp8_channel"
    if not (folder / "config.json").exists():
        quant_sparse24q_files.write_all(OUT)
    model = folder / "model.safetensors"
    before = app.opened()
    app.open_with_input(model, folder / "config.json")
    app.wait_model(model.name, before)
    app.select(NAME)
    (sampled,) = cli("stats", model, NAME)
    assert sampled["dequantised_from"] == SCHEME and sampled["exact"]
    assert_stats_equal(app.stats(), sampled["stats"])
    page = app.page
    assert page.inner_text("#stats-dequantised") == f"dequantised from {SCHEME}"
    assert app.heatmap()["seq"]
    page.click("#exact-button")
    page.wait_for_selector("#exact-stats:not([hidden]) .stat[data-key=mean]", timeout=60_000)
    (exact,) = cli("stats", model, NAME, "--exact")
    assert_stats_equal(app.stats("#exact-stats"), exact["stats"])
    app.screenshot("tensor-quantised-sparse24q_fp8_channel")
    quantisation = cli("inspect", model)["extras"]["quantisation"]
    assert SCHEME in quantisation["schemes"]
    app.tab("summary")
    card = page.locator("#quantisation")
    assert card.get_attribute("data-dequantised") == str(quantisation["dequantised"]) == "7"
    text = card.inner_text()
    assert SCHEME in text and quantisation["source"] in text
