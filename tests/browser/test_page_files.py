"""Opening real files in the page: safetensors, torch and GGUF by file input and by drop, the
numbers against the CLI, the heatmap against the library, zoom to exact elements, a 4 GiB sparse
file, a hostile pickle, files that are not checkpoints, and several files at once."""

from __future__ import annotations

import json
import math

import pytest

import tensorloupe

from page_checks import assert_heatmap_matches, assert_stats_equal, cancel_at_the_first_progress, cli_stats


@pytest.fixture(scope="module")
def opened(files):
    """Checkpoints opened in CPython: the oracle for what the page shows."""
    cache = {}

    def get(kind):
        if kind not in cache:
            cache[kind] = tensorloupe.open(files[kind])
        return cache[kind]
    yield get
    for ckpt in cache.values():
        ckpt.close()


def test_safetensors_by_file_input(app, files, opened):
    app.open_file(files["safetensors"], "input")
    assert app.fact("tensor_count") == "4"
    assert app.fact("format") == "safetensors"
    assert app.page.inner_text("#file-list .file.current .entry-name") == "browser.safetensors"
    name = "wide.weight"
    app.select(name)
    expected = cli_stats(files["safetensors"], name)
    assert_stats_equal(app.stats(), expected["stats"])
    assert app.page.get_attribute("#stats", "data-samples") == str(expected["samples"]) == "65536"
    assert_heatmap_matches(app, opened("safetensors"))
    app.screenshot("tensor-safetensors")


def test_zoom_reads_only_the_tile_and_shows_exact_values(app, files, opened):
    app.ensure_open(files["safetensors"])
    page = app.page
    tensor = opened("safetensors").tensor("wide.weight")       # 2048 x 4096 F32, 32 MiB
    app.select(tensor.name)
    box = page.locator("#heatmap").bounding_box()
    x, y = box["x"] + box["width"] * 0.7, box["y"] + box["height"] * 0.4
    page.mouse.move(x, y)
    before = app.bytes_read()
    for _ in range(12):
        if page.get_attribute("#heatmap", "data-exact") == "true":
            break
        before = app.bytes_read()
        page.mouse.wheel(0, -100)
        app.wait_idle()
    info = app.heatmap()
    assert info["exact"] == "true"
    r0, r1, c0, c1 = json.loads(info["region"])
    assert (r1 - r0) <= 256 and (c1 - c0) <= 256
    # The last zoom step fetched at most the rows the tile spans (plus cache-block rounding),
    # a small part of the 32 MiB tensor.
    tile_bytes = app.bytes_read() - before
    assert tile_bytes <= (r1 - r0) * 4096 * 4 + (256 << 10)
    assert tile_bytes < tensor.nbytes // 8
    # The readout under the pointer is the exact element at that row and column.
    page.mouse.move(x + 3, y + 2)
    page.wait_for_selector("#readout[data-value]")
    readout = page.eval_on_selector("#readout", "r => ({...r.dataset, text: r.textContent})")
    view = json.loads(info["view"])
    fx = (x + 3 - box["x"]) / box["width"]
    fy = (y + 2 - box["y"]) / box["height"]
    row = math.floor(view[0] + fy * (view[1] - view[0]))
    col = math.floor(view[2] + fx * (view[3] - view[2]))
    assert (int(readout["row"]), int(readout["col"])) == (row, col)
    assert readout["exact"] == "true" and "exact element" in readout["text"]
    [value] = tensorloupe.values(tensor, row * 4096 + col, 1)
    assert float(readout["value"]) == value
    assert readout["value"] in readout["text"]
    app.screenshot("tensor-zoomed")
    page.click("#zoom-reset")
    app.wait_idle()
    assert page.get_attribute("#heatmap", "data-exact") == "false"


def test_non_finite_values_have_their_own_colours(app, files, opened):
    app.ensure_open(files["safetensors"])
    app.select("special.weight")              # 16 x 16 with NaN, +Inf, -Inf in row 0
    stats = app.stats()
    assert (stats["nan"], stats["posinf"], stats["neginf"]) == (1, 1, 1)
    assert_heatmap_matches(app, opened("safetensors"), extra_cells=[(0, 0), (0, 1), (0, 2)])
    alerts = app.page.eval_on_selector_all("#stats .stat.alert", "els => els.map(e => e.dataset.key)")
    assert alerts == ["nan", "posinf", "neginf"]


def test_axis_picker_for_stacked_experts(app, files, opened):
    app.ensure_open(files["safetensors"])
    page = app.page
    app.select("stacked.experts")             # 4 x 64 x 48
    assert page.is_visible("#axis-picker")
    request = json.loads(page.get_attribute("#heatmap", "data-request"))
    assert request["plane"] == [1, 2] and request["index"] == {"0": 0}
    assert_heatmap_matches(app, opened("safetensors"))
    page.fill("#axis-picker input[type=number]", "2")
    page.press("#axis-picker input[type=number]", "Enter")
    page.wait_for_function("() => JSON.parse(document.getElementById('heatmap').dataset.request).index['0'] === 2")
    app.wait_idle()
    assert_heatmap_matches(app, opened("safetensors"))
    page.select_option("#axis-rows", "0")       # experts x columns of row 0
    page.wait_for_function("() => JSON.parse(document.getElementById('heatmap').dataset.request).plane.join() === '0,2'")
    app.wait_idle()
    assert_heatmap_matches(app, opened("safetensors"))
    app.screenshot("tensor-stacked-experts")
    page.select_option("#axis-mode", "flat")    # 4 rows x (64 * 48) columns
    page.wait_for_function("() => JSON.parse(document.getElementById('heatmap').dataset.request).plane === null")
    app.wait_idle()
    assert json.loads(page.get_attribute("#heatmap", "data-region")) == [0, 4, 0, 64 * 48]
    assert_heatmap_matches(app, opened("safetensors"))


def test_exact_stats_progress_and_cancel(app, files, opened):
    app.ensure_open(files["safetensors"])
    page = app.page
    app.select("wide.weight")                 # 8M elements: eight chunks of 1M
    # At the first progress, from inside the page (a click from the test could come after the
    # last chunk: the exact pass got faster than Playwright's round trips): the page stays
    # responsive while Python streams the tensor (the filter still filters), and Cancel stops it.
    assert cancel_at_the_first_progress(page, "exact-progress", None, "exact-button", "exact-cancel",
                                        filter="special")
    page.wait_for_function("() => document.getElementById('exact-note').textContent === 'cancelled'")
    assert page.inner_text("#tree-count") == "1 of 4 tensors match"
    assert page.is_hidden("#exact-stats")
    page.click("#exact-button")
    page.wait_for_selector("#exact-stats:not([hidden])", timeout=120_000)
    expected = tensorloupe.exact_stats(opened("safetensors").tensor("wide.weight")).to_json()
    assert_stats_equal(app.stats("#exact-stats"), expected)


def test_torch_by_drop(app, files, opened):
    app.open_file(files["torch"], "drop")
    assert app.fact("format") == "pytorch-zip"
    assert app.fact("tensor_count") == "4"
    assert "Only allow-listed globals" in app.page.inner_text("#safety")
    name = "encoder.layer.1.weight"           # BF16
    app.select(name)
    assert_stats_equal(app.stats(), cli_stats(files["torch"], name)["stats"])
    assert_heatmap_matches(app, opened("torch"))


def test_gguf_by_file_input(app, files, opened):
    app.open_file(files["gguf"], "input")
    assert app.fact("format") == "gguf"
    assert app.fact("tensor_count") == "21"
    card = app.page.inner_text("#panel-summary")
    assert "Model card" in card.replace("MODEL CARD", "Model card") and "tiny-llama-test" in card
    name = "blk.0.attn_q.weight"              # Q4_K
    app.select(name)
    assert_stats_equal(app.stats(), cli_stats(files["gguf"], name)["stats"])
    assert_heatmap_matches(app, opened("gguf"))
    app.screenshot("tensor-gguf")
    app.tab("summary")
    app.screenshot("summary-gguf")


def test_gguf_stacked_experts_in_the_moe_panel(app, files, opened):
    page = app.page
    app.open_file(files["gguf_moe"], "drop")
    app.tab("moe")
    assert page.inner_text("#panel-moe .fact[data-key=top_k] .fact-value") == "2"
    assert "llama.expert_used_count" in page.inner_text("#panel-moe .fact[data-key=top_k]")
    assert page.inner_text("#panel-moe .fact[data-key=stacked] .fact-value") == "stacked"
    assert page.locator("#moe-grid tbody tr").count() == 2
    page.locator("#moe-grid tbody tr").nth(1).locator('button.expert-cell[data-expert="3"]').click()
    page.wait_for_function("() => document.getElementById('tensor-name').textContent === 'blk.1.ffn_gate_exps.weight'")
    app.wait_heatmap()
    request = json.loads(page.get_attribute("#heatmap", "data-request"))
    assert request["plane"] == [1, 2] and request["index"] == {"0": 3}
    assert_heatmap_matches(app, opened("gguf_moe"))
    app.screenshot("tensor-gguf-expert-slice")


def test_safetensors_by_drop(app, files):
    app.open_file(files["safetensors"], "drop")
    assert app.fact("tensor_count") == "4"


def test_sparse_4gib_file_opens_reading_almost_nothing(app, files):
    app.tab("summary")                         # the heatmap (Tensor tab) is drawn only when shown
    app.open_file(files["sparse"], "input")
    assert app.fact("size").startswith("4.00 GiB")
    assert app.page.locator('.tree-row[data-name="huge.weight"]').count() == 1
    assert app.page.locator('.tree-row[data-name="tail.bias"]').count() == 1
    # Opening read the header; showing the first tensor sampled 32 windows: still tiny.
    assert int(app.page.evaluate("document.body.dataset.openBytes")) <= 256 << 10
    assert app.bytes_read() <= 8 << 20
    app.select("huge.weight")
    assert app.stats()["max"] == 0 and app.stats()["zeros"] == 1
    assert app.bytes_read() <= 40 << 20


def test_hostile_pickle_is_reported_and_never_run(app, files):
    app.open_file(files["hostile"], "input")
    app.tab("summary")
    page = app.page
    assert page.get_attribute("#safety", "data-dangerous") == "1"
    row = page.locator("#safety tr.verdict-dangerous")
    assert row.count() == 1 and "system" in row.inner_text()
    assert "runs a shell command" in row.locator("td.reason").inner_text()  # the verdict's reason
    assert "would run code" in page.inner_text("#safety .verdict")
    # what the call carried, never made
    assert page.inner_text("#safety .safety-calls li") == 'posix.system("echo this must never run")'
    assert "dangerous globals" in page.inner_text("#warnings")
    app.screenshot("summary-hostile-pickle")
    app.select("weight")                       # the tensors are still there to look at


@pytest.mark.parametrize("kind, message", [
    ("lfs", "Git LFS pointer"),
    ("truncated", "truncated.safetensors"),
    ("unknown", "not a checkpoint"),
])
def test_bad_files_show_a_message_and_keep_the_model(app, files, kind, message):
    page = app.page
    model = page.evaluate("document.body.dataset.model")
    tensors = app.fact("tensor_count")
    opened_before = app.opened()
    app.open_with_input(files[kind])
    text = app.wait_error()
    assert message in text and "is still open" in text
    if kind == "lfs":
        app.screenshot("error-lfs-pointer")
    assert page.evaluate("document.body.dataset.model") == model and app.opened() == opened_before
    assert app.fact("tensor_count") == tensors
    page.click("#error-close")
    assert page.is_hidden("#error")
    assert page.locator(f'#file-list .file.failed[data-file="{files[kind].name}"]').count() == 1


def test_the_previous_model_stays_usable_after_an_error(app, files, opened):
    page = app.page
    app.ensure_open(files["torch"])
    if page.is_visible("#error"):
        page.click("#error-close")                  # an earlier test's message: dismissed
    app.open_with_input(files["lfs"])
    message = app.wait_error()
    assert message.startswith(f"Could not open {files['lfs'].name}.") and "Git LFS pointer" in message
    assert page.inner_text("#error-note") == f"{files['torch'].name} is still open."
    # The torch checkpoint is still the one on show, and the failed file is marked in the list.
    assert page.inner_text("#current-file").startswith(files["torch"].name)
    assert "failed" in page.get_attribute(f'#file-list .file[data-file="{files["lfs"].name}"]', "class")
    assert app.fact("format") == "pytorch-zip"
    # ... and usable: a tensor picked now shows the library's numbers and pixels.
    name = page.eval_on_selector(".tree-row.leaf", "r => r.dataset.name")
    app.select(name)
    assert_stats_equal(app.stats(), tensorloupe.sample(opened("torch").tensor(name)).stats.to_json())
    assert_heatmap_matches(app, opened("torch"))


def test_several_files_are_listed_and_each_can_be_opened(app, files):
    before = app.opened()
    app.open_with_drop(files["torch"], files["gguf"])
    app.wait_model(files["torch"].name, before)
    names = app.page.eval_on_selector_all("#file-list .file .entry-name", "els => els.map(e => e.textContent)")
    assert names[:3] == ["Demo model", "model.pt", "tiny-llama.gguf"]
    before = app.opened()
    app.page.click('#file-list .file[data-file="tiny-llama.gguf"]')
    app.wait_model("tiny-llama.gguf", before)
    assert app.fact("tensor_count") == "21"


def test_slow_work_shows_the_progress_indicator(app, files):
    """Exact statistics of a 32 MiB tensor take a while in Pyodide: a progress bar shows how
    far it is, and the page keeps painting frames meanwhile (Python runs off the main thread)."""
    page = app.page
    app.ensure_open(files["safetensors"])
    app.select("wide.weight")
    result = page.evaluate("""() => new Promise(resolve => {
        const bar = document.getElementById('exact-progress');
        const done = document.getElementById('exact-stats');
        const values = new Set();
        let frames = 0;
        const started = performance.now();
        const tick = () => {
          frames += 1;
          if (!bar.hidden) values.add(bar.value);
          if (!done.hidden || performance.now() - started > 60000) {
            resolve({frames, values: [...values], finished: !done.hidden});
          } else requestAnimationFrame(tick);
        };
        requestAnimationFrame(tick);
        document.getElementById('exact-button').click();
    })""")
    assert result["finished"]
    assert any(0 < v < 1 for v in result["values"]), result      # it moved while it ran
    assert result["frames"] >= 10
    app.wait_idle()
