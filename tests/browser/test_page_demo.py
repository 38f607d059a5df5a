"""The page with its built-in demo model, as a user sees it before giving it any file."""

from __future__ import annotations

import pytest

import tensorloupe
from tensorloupe.synthetic import demo_bytes

from page_checks import assert_heatmap_matches, assert_stats_equal, cli_stats

EXPERT = "model.layers.2.block_sparse_moe.experts.5.w1.weight"


@pytest.fixture(scope="module")
def demo():
    return tensorloupe.open(demo_bytes(), name="demo-moe.safetensors")


def test_demo_model_is_open_with_its_summary(app):
    page = app.page
    assert app.fact("format") == "safetensors"
    assert app.fact("tensor_count") == "127"
    assert app.fact("parameters") == "1.92M"
    assert "1,920,864" in page.inner_text("#panel-summary .fact[data-key=parameters]")
    dtypes = page.eval_on_selector_all("table.dtypes tbody tr", "rows => rows.map(r => r.dataset.dtype)")
    assert dtypes == ["F32", "BF16", "F16"]
    assert "MixtralForCausalLM" in page.inner_text("#metadata")
    assert page.inner_text("#current-file").startswith("demo-moe.safetensors")
    app.screenshot("summary-demo")


def test_the_demo_is_the_shipped_file_read_in_place(page_factory, server):
    # dist/ holds the demo's bytes (build.py): the page fetches that file once (the service
    # worker's cache offline) and opens it like a dropped file, reading its header, instead of
    # building the model in Python on every visit
    context, app, requests, errors = page_factory(server)
    try:
        app.goto()
        assert [u for u in requests.urls if u.endswith("/demo-moe.safetensors")]
        assert app.fact("tensor_count") == "127"
        opened = int(app.page.evaluate("document.body.dataset.openBytes"))
        assert 0 < opened < len(demo_bytes()) // 20
    finally:
        context.close()
    assert not errors


def test_outline_tree_groups_names_and_layer_numbers(app):
    page = app.page
    page.fill("#filter", "")
    layers = page.locator('.tree-row[data-group="model.layers"]')
    assert layers.get_attribute("aria-expanded") == "false"
    assert layers.locator(".range").inner_text() == "0–3"
    assert "124 · " in layers.locator(".meta").inner_text()
    layers.locator(".caret").click()
    assert layers.get_attribute("aria-expanded") == "true"
    numbers = page.eval_on_selector_all('.tree-row[aria-level="3"]', "rows => rows.map(r => r.querySelector('.label').textContent)")
    assert numbers == ["0", "1", "2", "3"]
    leaf = page.locator('.tree-row[data-name="model.embed_tokens.weight"]')
    assert leaf.locator(".dtype").inner_text() == "F16"
    assert "256 × 96" in leaf.locator(".meta").inner_text()
    assert page.inner_text("#tree-count") == "127 tensors"


def test_filter_by_substring_and_regex(app):
    page = app.page
    page.fill("#filter", "experts.7.w2")
    assert page.inner_text("#tree-count") == "4 of 127 tensors match"
    assert page.locator(".tree-row.leaf").count() == 4
    page.fill("#filter", r"/layers\.[02]\..*gate\.weight$/")
    assert page.inner_text("#tree-count") == "2 of 127 tensors match"
    names = page.eval_on_selector_all(".tree-row.leaf", "rows => rows.map(r => r.dataset.name)")
    assert names == ["model.layers.0.block_sparse_moe.gate.weight", "model.layers.2.block_sparse_moe.gate.weight"]
    page.fill("#filter", "/([/")
    assert page.get_attribute("#filter", "aria-invalid") == "true"
    page.fill("#filter", r"^model\.norm")
    page.check("#filter-regex")
    assert page.inner_text("#tree-count") == "1 of 127 tensors match"
    page.uncheck("#filter-regex")
    page.fill("#filter", "")
    assert page.inner_text("#tree-count") == "127 tensors"


def test_keyboard_navigation_selects_a_tensor(app):
    page = app.page
    page.fill("#filter", "")
    for group in ("model.layers.0", "model.layers"):   # start from a collapsed tree
        row = page.locator(f'.tree-row[data-group="{group}"]')
        if row.count() and row.get_attribute("aria-expanded") == "true":
            row.locator(".caret").click()
    page.focus("#tree")
    page.keyboard.press("Home")
    focused = lambda: page.eval_on_selector("#tree .tree-row.focused", "r => r.dataset.name || r.dataset.group")
    assert focused() == "model"
    page.keyboard.press("ArrowDown")
    assert focused() == "model.embed_tokens.weight"
    page.keyboard.press("ArrowDown")
    assert focused() == "model.layers"
    page.keyboard.press("ArrowRight")          # expand
    page.keyboard.press("ArrowRight")          # into the first child
    assert focused() == "model.layers.0"
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    assert focused() == "model.layers.0.input_layernorm.weight"
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.getElementById('tensor-name').textContent === 'model.layers.0.input_layernorm.weight'")
    assert page.get_attribute("#tab-tensor", "aria-selected") == "true"
    page.keyboard.press("ArrowLeft")           # to the parent row
    assert focused() == "model.layers.0"
    page.keyboard.press("ArrowLeft")           # collapse it
    assert page.get_attribute('.tree-row[data-group="model.layers.0"]', "aria-expanded") == "false"
    app.wait_idle()


def test_stats_equal_the_cli_and_heatmap_shows_the_values(app, demo, demo_path):
    name = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
    app.select(name)
    expected = cli_stats(demo_path, name)
    assert_stats_equal(app.stats(), expected["stats"])
    assert app.page.get_attribute("#stats", "data-samples") == str(expected["samples"])
    assert app.page.inner_text("#stats-sub") == "all 18,432 elements"
    # every element was sampled: the extremes are the tensor's, labelled plainly
    assert app.page.get_attribute("#stats", "data-extremes") == expected["extremes"] == "exact"
    assert app.page.text_content("#stats .stat[data-key=max] .stat-label") == "max"
    assert app.page.inner_text("#stats .stat[data-key=mean] .stat-value") != ""
    assert_heatmap_matches(app, demo)
    app.screenshot("tensor-demo")


def test_histogram_log_toggle(app):
    page = app.page
    app.select("model.embed_tokens.weight")
    before = page.eval_on_selector("#histogram", "c => c.toDataURL()")
    assert page.get_attribute("#histogram", "data-bins") == "64"
    page.check("#hist-log")
    assert page.get_attribute("#histogram", "data-log") == "true"
    assert page.eval_on_selector("#histogram", "c => c.toDataURL()") != before
    page.uncheck("#hist-log")
    assert page.get_attribute("#histogram", "data-log") == "false"


def test_exact_stats_button(app, demo):
    name = "lm_head.weight"
    app.select(name)
    app.page.click("#exact-button")
    app.page.wait_for_selector("#exact-stats:not([hidden])")
    expected = tensorloupe.exact_stats(demo.tensor(name)).to_json()
    assert_stats_equal(app.stats("#exact-stats"), expected)
    assert app.page.inner_text("#exact-note") == "exact, over all 24,576 elements"


def test_moe_panel_shows_layers_experts_and_routers(app):
    page = app.page
    app.tab("moe")
    assert page.is_visible("#tab-moe")
    assert app.page.inner_text("#panel-moe .fact[data-key=expert_count] .fact-value") == "8"
    assert app.page.inner_text("#panel-moe .fact[data-key=top_k] .fact-value") == "2"
    assert app.page.inner_text("#panel-moe .fact[data-key=moe_layers] .fact-value") == "4"
    rows = page.locator("#moe-grid tbody tr")
    assert rows.count() == 4
    assert rows.nth(0).locator("button.expert-cell").count() == 8
    assert rows.nth(3).locator("td.router").inner_text() == "gate.weight"
    app.screenshot("experts-demo")
    rows.nth(2).locator('button.expert-cell[data-expert="5"]').click()
    page.wait_for_function("name => document.getElementById('tensor-name').textContent === name", arg=EXPERT)
    assert page.get_attribute("#tab-tensor", "aria-selected") == "true"
    assert page.get_attribute(f'.tree-row[data-name="{EXPERT}"]', "aria-selected") == "true"
    app.wait_heatmap()
    rows_router = page.locator("#moe-grid tbody tr").nth(0).locator("td.router button")
    app.tab("moe")
    rows_router.click()
    page.wait_for_function("() => document.getElementById('tensor-name').textContent === 'model.layers.0.block_sparse_moe.gate.weight'")
    app.wait_heatmap()
