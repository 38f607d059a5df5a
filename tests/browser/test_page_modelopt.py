"""A ModelOpt export whose scheme is only in hf_quant_config.json (fixtures/quant_modelopt_files.py),
dropped with its config.json: the page dequantises it as the CLI does, names hf_quant_config.json
as the scheme's source, and does not list the file as a model of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from page_checks import assert_stats_equal, cli_inspect, cli_stats

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "out" / "quant"


@pytest.mark.parametrize("algo", ["fp8", "nvfp4"])
def test_an_export_with_only_hf_quant_config_is_dequantised_as_the_cli(app, algo):
    folder = OUT / f"modelopt_export_{algo}_hf_only"
    model = folder / "model.safetensors"
    assert model.exists(), "run fixtures/make.py first"
    name = "model.layers.1.mlp.down_proj.weight"
    before = app.opened()
    app.open_with_input(model, folder / "config.json", folder / "hf_quant_config.json")
    app.wait_model(model.name, before)
    app.select(name)
    sampled = cli_stats(model, name)
    assert_stats_equal(app.stats(), sampled["stats"])
    page = app.page
    assert page.inner_text("#stats-dequantised") == f"dequantised from {sampled['dequantised_from']}"
    quantisation = cli_inspect(model)["extras"]["quantisation"]
    assert quantisation["source"] == "hf_quant_config.json quantization"
    app.tab("summary")
    card = page.locator("#quantisation")
    assert card.get_attribute("data-dequantised") == str(quantisation["dequantised"]) == "14"
    assert quantisation["source"] in card.inner_text()
    assert "hf_quant_config.json" not in app.entries()    # it goes with the model
