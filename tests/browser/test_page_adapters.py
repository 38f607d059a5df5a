"""LoRA adapters in the page (issue 26): a PEFT adapter dropped with its adapter_config.json (and
a kohya file dropped alone) shows the Adapter card with what `inspect --json` says, and each
ΔW tensor's statistics equal `tensorloupe stats --json` and its heatmap the library's lattice
(run in CPython on the same files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import tensorloupe
from page_checks import assert_heatmap_matches, assert_stats_equal

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "out" / "adapters"


def cli(*args):
    """This worktree's CLI (not an installed one)."""
    out = subprocess.run([sys.executable, "-m", "tensorloupe.cli", *map(str, args), "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "pylib")})
    return json.loads(out.stdout)


def card_rows(app) -> dict:
    return dict(app.page.eval_on_selector_all(
        "#adapter tr", "rows => rows.map(r => [r.dataset.key, r.querySelector('td').textContent])"))


def test_a_dropped_peft_adapter_shows_its_card_and_delta_values(app):
    folder = OUT / "pattern"
    model, config = folder / "adapter_model.safetensors", folder / "adapter_config.json"
    before = app.opened()
    app.open_with_drop(model, config)
    app.wait_model(model.name, before)
    adapter = cli("inspect", model)["extras"]["adapter"]
    app.tab("summary")
    card = app.page.locator("#adapter")
    assert card.get_attribute("data-delta") == str(adapter["delta"]) == "6"
    rows = card_rows(app)
    assert rows["rank"] == "2, 4, 6" and rows["alpha"] == "3, 8"
    assert rows["scale"] == "0.75, 1.33333, 2, 4 (alpha/r)"
    assert rows["base model"] == adapter["base_model"] and rows["modules saved"] == "lm_head"
    assert rows["parameters"].startswith(f"{adapter['parameters']:,} stored in the adapter; 6 weights shown as ΔW")
    app.screenshot("adapter-summary")
    name = "model.layers.1.self_attn.q_proj.weight"
    app.select(name)
    (expected,) = cli("stats", model, name)
    assert expected["exact"] and expected["computed_as"].startswith("ΔW = 8/2")
    assert_stats_equal(app.stats(), expected["stats"])
    assert app.page.inner_text("#stats-dequantised") == expected["computed_as"]
    with tensorloupe.open(model) as ckpt:
        assert_heatmap_matches(app, ckpt)
    app.screenshot("adapter-delta")


def test_a_dropped_kohya_file_shows_its_conv_delta(app):
    model = OUT / "kohya.safetensors"
    app.open_file(model, "drop")
    app.tab("summary")
    assert app.page.get_attribute("#adapter", "data-layout") == "kohya-lora"
    assert card_rows(app)["rank"] == "2, 4"
    name = "lora_unet_down_blocks_0_resnets_0_conv1.weight"
    app.select(name)
    (expected,) = cli("stats", model, name)
    assert_stats_equal(app.stats(), expected["stats"])
    with tensorloupe.open(model) as ckpt:
        assert_heatmap_matches(app, ckpt)


def test_a_dropped_adapter_folder_opens_with_its_config(app):
    """The folder as save_pretrained wrote it (README.md, adapter_config.json beside the
    weights): one entry, the adapter, whose ΔW count is inspect's."""
    folder = OUT / "rslora"
    before = app.opened()
    app.drop_paths(folder)
    app.wait_model("adapter_model.safetensors", before)
    app.tab("summary")
    adapter = cli("inspect", folder)["extras"]["adapter"]
    assert app.page.get_attribute("#adapter", "data-delta") == str(adapter["delta"]) == "5"
    assert card_rows(app)["scale"] == "5.65685 (alpha/√r: rsLoRA)"
    name = "model.embed_tokens.weight"     # an embedding's ΔW is (B·A)ᵀ
    app.select(name)
    (expected,) = cli("stats", folder, name)
    assert_stats_equal(app.stats(), expected["stats"])
    with tensorloupe.open(folder) as ckpt:
        assert_heatmap_matches(app, ckpt)


def test_a_dropped_lycoris_file_shows_its_loha_and_lokr_deltas(app):
    """A kohya-named LyCORIS file (fixtures/lycoris_files.py): the card names the algorithms,
    and a LoHa's and a conv LoKr's ΔW statistics and heatmap are the CLI's and the library's."""
    model = ROOT / "fixtures" / "out" / "lycoris" / "kohya.safetensors"
    app.open_file(model, "drop")
    app.tab("summary")
    adapter = cli("inspect", model)["extras"]["adapter"]
    assert app.page.get_attribute("#adapter", "data-layout") == "kohya-lycoris"
    assert card_rows(app)["adapter"] == f"{adapter['kind']} (from {adapter['source']})"
    assert app.page.get_attribute("#adapter", "data-delta") == str(adapter["delta"]) == "4"
    for name in ("lora_unet_mid_block_attentions_0_proj_in.weight",
                 "lora_unet_up_blocks_0_resnets_0_conv2.weight"):
        app.select(name)
        (expected,) = cli("stats", model, name)
        assert_stats_equal(app.stats(), expected["stats"])
        assert app.page.inner_text("#stats-dequantised") == expected["computed_as"]
    with tensorloupe.open(model) as ckpt:
        assert_heatmap_matches(app, ckpt)
