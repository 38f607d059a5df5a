"""Checkpoints in several files, in the page: shards dropped or picked together, or a dropped
model folder, open as ONE checkpoint (tensorloupe.open([...])) with a missing part named, and a
config.json that comes with them gives the Experts tab its top-k. The oracle is the library in
CPython on the same set of files."""

from __future__ import annotations

import pytest

import tensorloupe

from page_checks import assert_heatmap_matches, assert_stats_equal

SET_NAME = "model-*-of-00003.safetensors"
FIRST = "model-{00001..00003}-of-00003.safetensors"   # the set, named as a set
IN_SHARD_2 = "model.layers.1.mlp.experts.2.up_proj.weight"


@pytest.fixture(scope="module")
def merged(shards):
    """The sharded MoE opened in CPython, the way the CLI and the API open it."""
    ckpt = tensorloupe.open([str(shards[k]) for k in ("shard_1", "shard_2", "shard_3", "shard_index")])
    yield ckpt
    ckpt.close()


def top_k(app) -> tuple[str, str]:
    app.tab("moe")
    fact = app.page.locator("#panel-moe .fact[data-key=top_k]")
    detail = fact.locator(".fact-detail")
    return fact.locator(".fact-value").inner_text(), detail.inner_text() if detail.count() else ""


def test_shards_dropped_as_files_open_as_one_checkpoint(app, shards, merged):
    before = app.opened()
    # In no particular order, with their index and config.json, as a user selects them.
    app.drop_paths(shards["shard_3"], shards["shard_config"], shards["shard_1"],
                   shards["shard_index"], shards["shard_2"])
    app.wait_model(FIRST, before)
    app.tab("summary")
    assert app.fact("tensor_count") == str(len(merged.tensors)) == "48"
    assert app.page.locator("#warnings").count() == 0
    entries = app.entries()
    assert entries[1] == SET_NAME and not any(n.startswith("model-0000") or n == "config.json" for n in entries)
    assert "3 shards" in app.page.inner_text(f'#file-list .file[data-file="{SET_NAME}"]')
    app.select(IN_SHARD_2)
    expected = tensorloupe.sample(merged.tensor(IN_SHARD_2)).to_json()
    assert_stats_equal(app.stats(), expected["stats"])
    assert app.page.get_attribute("#stats", "data-samples") == str(expected["samples"])
    assert_heatmap_matches(app, merged)
    assert top_k(app) == ("3", "config.json num_experts_per_tok")


def test_a_dropped_folder_opens_as_one_checkpoint_with_its_config(app, shards, merged):
    before = app.opened()
    app.drop_paths(shards["sharded_folder"])
    app.wait_model(FIRST, before)
    assert app.fact("tensor_count") == "48"
    # tokenizer.json and README.md are not checkpoints: not listed.
    assert app.entries()[1] == SET_NAME and "tokenizer.json" not in app.entries()
    assert "config.json" in app.page.inner_text(f'#file-list .file[data-file="{SET_NAME}"]')
    assert top_k(app) == ("3", "config.json num_experts_per_tok")
    app.screenshot("experts-sharded-folder")
    name = "lm_head.weight"                    # in the third shard
    app.select(name)
    assert_stats_equal(app.stats(), tensorloupe.sample(merged.tensor(name)).to_json()["stats"])
    app.tab("summary")
    app.screenshot("summary-sharded-folder")


def test_a_missing_shard_is_named(app, shards):
    before = app.opened()
    app.open_with_input(shards["shard_1"], shards["shard_3"])       # picked, without part 2
    app.wait_model("model-{00001,00003}-of-00003.safetensors", before)
    app.tab("summary")
    oracle = tensorloupe.open([str(shards["shard_1"]), str(shards["shard_3"])])
    assert app.fact("tensor_count") == str(len(oracle.tensors))
    warnings = app.page.inner_text("#warnings")
    assert "part 2 of 3 (model-00002-of-00003.safetensors) is missing" in warnings
    assert oracle.warnings[0] in warnings
    assert top_k(app)[0] == "not in metadata"          # no config.json this time
    # the header and the file list say the same count (they said "2 files" and "3 files")
    assert "2 of 3 shards" in app.page.inner_text("#current-file")
    assert "2 of 3 shards" in app.page.inner_text("#file-list .file.current")
    app.tab("summary")
    app.screenshot("summary-missing-shard")


def test_split_gguf_parts_open_as_one_checkpoint(app, shards):
    parts = [shards[f"gguf_split_{no}"] for no in (2, 3, 1)]
    before = app.opened()
    app.open_with_input(*parts)
    app.wait_model("tiny-split-{00001..00003}-of-00003.gguf", before)
    oracle = tensorloupe.open([str(p) for p in parts])
    assert app.fact("format") == "gguf" and app.fact("tensor_count") == str(len(oracle.tensors)) == "7"
    assert app.entries()[1] == "tiny-split-*-of-00003.gguf"
    name = "blk.1.attn_q.weight"               # Q8_0, in the second part
    app.select(name)
    assert_stats_equal(app.stats(), tensorloupe.sample(oracle.tensor(name)).to_json()["stats"])
    assert_heatmap_matches(app, oracle)
    oracle.close()


def test_unrelated_files_dropped_together_stay_separate(app, files, shards):
    before = app.opened()
    app.drop_paths(files["torch"], shards["shard_2"], files["gguf"])
    app.wait_model("model.pt", before)
    assert app.entries()[1:4] == ["model.pt", "model-00002-of-00003.safetensors", "tiny-llama.gguf"]
    before = app.opened()
    app.page.click('#file-list .file[data-file="model-00002-of-00003.safetensors"]')
    app.wait_model("model-00002-of-00003.safetensors", before)
    # One shard alone still says what is missing.
    assert "part 1 of 3 (model-00001-of-00003.safetensors) is missing" in app.page.inner_text("#warnings")


def test_a_folder_picked_with_open_folder(app, shards):
    """"Open folder…" (an input with webkitdirectory): the files arrive with their paths in the
    folder, and the parts of the split GGUF open as one checkpoint."""
    before = app.opened()
    app.page.set_input_files("#folder-input", str(shards["gguf_split_folder"]))
    app.wait_model("tiny-split-{00001..00003}-of-00003.gguf", before)
    assert app.fact("tensor_count") == "7"
    assert app.entries()[1] == "tiny-split-*-of-00003.gguf"
    assert "3 shards" in app.page.inner_text('#file-list .file[data-file="tiny-split-*-of-00003.gguf"]')
