"""Sharded .bin checkpoints (transformers 4.x, fixtures/bin_shard_files.py) in the page: the
dropped folder opens as one model with the same numbers as `tensorloupe inspect --json`, and a
folder with a shard deleted leads its Health tab with that missing shard as an error."""

from __future__ import annotations

import shutil

import pytest

import bin_shard_files
import tensorloupe

from conftest import STEP_TIMEOUT_MS
from page_checks import assert_stats_equal, cli_inspect

SET = "pytorch_model-{00001..00003}-of-00003.bin"
GONE = "pytorch_model-00002-of-00003.bin"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    paths = bin_shard_files.write_all(tmp_path_factory.mktemp("bin-page"))
    broken = paths["bin_shards_folder"].parent / "bin-shards-broken"
    shutil.copytree(paths["bin_shards_folder"], broken)
    (broken / GONE).unlink()
    return paths["bin_shards_folder"], broken


def test_the_dropped_bin_folder_has_the_cli_s_numbers(app, folders):
    folder, _ = folders
    doc = cli_inspect(folder)
    before = app.opened()
    app.drop_paths(folder)
    app.wait_model(SET, before)
    app.tab("summary")
    assert app.fact("format") == doc["format"] == "pytorch-zip"
    assert app.fact("tensor_count") == str(doc["tensor_count"]) == "21"
    detail = app.page.inner_text("#panel-summary .fact[data-key=parameters] .fact-detail")
    assert detail == f"{doc['parameters']:,}"
    assert app.page.locator("#warnings").count() == 0
    rows = dict(app.page.eval_on_selector_all(
        "#architecture tbody tr[data-key]",
        "rows => rows.map(r => [r.dataset.key, [r.querySelector('.arch-value').textContent,"
        " r.querySelector('.arch-source').textContent]])"))
    family = next(f for f in doc["architecture"]["fields"] if f["key"] == "family")
    assert rows["family"] == [family["value"], family["source"]] == ["llama", "config.json: model_type"]
    name = "model.layers.1.mlp.down_proj.weight"          # in the second shard
    app.select(name)
    oracle = tensorloupe.open(str(folder))
    assert_stats_equal(app.stats(), tensorloupe.sample(oracle.tensor(name)).to_json()["stats"])


def test_a_missing_shard_leads_the_health_tab_as_an_error(app, folders):
    _, broken = folders
    before = app.opened()
    app.drop_paths(broken)
    app.wait_model("pytorch_model-{00001,00003}-of-00003.bin", before)
    app.tab("health")
    app.page.wait_for_selector("#health-cost[data-scan-bytes]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.page.click("#health-run")
    app.page.wait_for_selector("#health[data-state=done]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    first = app.page.eval_on_selector("#health-flags tr[data-kind]", "r => ({...r.dataset})")
    assert (first["kind"], first["severity"], first["tensor"]) == ("missing_part", "error", GONE)
