"""The Experts tab's redundancy analysis, in the page, against tensorloupe.moe.redundancy in CPython:
the demo model's planted pairs and nothing else, the same similarities, scores and recommendation
lines; the threshold moved without reading again; two experts side by side (per-expert tensors and
stacked GGUF slices); the similarity matrix's pixels; the cost stated before it runs; cancel mid-way
on a model with 64 experts per layer."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe import colormap
from tensorloupe.moe import redundancy
from tensorloupe.sampler.sampling import Grid
from tensorloupe.synthetic import demo_bytes

from page_checks import assert_lattice_pixels

PAIRS = [[0, 4], [1, 5], [2, 6], [3, 7]]
STEP_TIMEOUT_MS = 30_000
TALL_HEIGHT = 2000             # the whole tab in one screenshot
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


@pytest.fixture(scope="module")
def demo():
    return tensorloupe.open(demo_bytes(), name="demo-moe.safetensors")


@pytest.fixture(scope="module")
def expected(demo):
    """The analysis the CLI and the API give, computed here in CPython."""
    return redundancy.analyse(demo)


def write_wide_moe(path, layers: int = 4, experts: int = 64, d: int = 32, ff: int = 64):
    """Qwen-style names, 64 experts a layer, F16; experts 32..39 are 0..7 plus 10 % noise, and
    61 is 20 plus noise: 9 planted pairs a layer. Matrices of 2,048 elements are read whole."""
    rng = np.random.default_rng(64)
    tensors = {}
    for layer in range(layers):
        prefix = f"model.layers.{layer}.mlp"
        tensors[f"{prefix}.gate.weight"] = rng.standard_normal((experts, d)).astype(np.float16)
        for leaf, shape in (("gate_proj", (ff, d)), ("up_proj", (ff, d)), ("down_proj", (d, ff))):
            w = rng.standard_normal((experts, *shape)) * 0.05
            for k in range(8):
                w[32 + k] = w[k] + rng.standard_normal(shape) * 0.005
            w[61] = w[20] + rng.standard_normal(shape) * 0.005
            for e in range(experts):
                tensors[f"{prefix}.experts.{e}.{leaf}.weight"] = w[e].astype(np.float16)
    save_file(tensors, str(path))
    return path


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    return write_wide_moe(tmp_path_factory.mktemp("moe") / "wide-moe.safetensors")


# --- driving the tab -------------------------------------------------------------------------------

def open_tab(app) -> None:
    app.tab("moe")
    app.page.wait_for_selector("#moe-cost[data-total-bytes]", timeout=STEP_TIMEOUT_MS)


def run_analysis(app) -> None:
    page = app.page
    page.click("#moe-run")
    page.wait_for_selector("#redundancy[data-state=done]", timeout=STEP_TIMEOUT_MS)
    page.wait_for_selector("#moe-similarity[data-seq]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()


def ensure_analysed(app) -> None:
    """The demo's analysis on show in the Experts tab (tests can run alone, in any order)."""
    if app.page.get_attribute("#redundancy", "data-state") != "done":
        open_tab(app)
        run_analysis(app)


def show_layer(app, position: int, prefix: str) -> dict:
    """Pick a layer with the selector; what the page shows for it."""
    page = app.page
    page.select_option("#moe-layer", str(position))
    page.wait_for_function("prefix => document.getElementById('moe-similarity').dataset.layer === prefix",
                           arg=prefix, timeout=STEP_TIMEOUT_MS)
    return page.evaluate("""() => ({
        similarity: JSON.parse(document.getElementById('moe-similarity').dataset.values),
        scores: JSON.parse(document.getElementById('moe-scores').dataset.scores),
        clusters: [...document.querySelectorAll('#moe-clusters li[data-cluster]')]
            .map((li) => li.dataset.cluster.split(',').map(Number)),
        recommendations: [...document.querySelectorAll('#moe-recs li[data-drop]')].map((li) => li.textContent),
    })""")


def summary_rows(app) -> list[dict]:
    return app.page.eval_on_selector_all("#moe-summary tbody tr", """rows => rows.map((r) => ({
        layer: r.dataset.layer,
        clusters: [...r.querySelectorAll('.cluster-chip')].map((c) => c.dataset.cluster.split(',').map(Number)),
    }))""")


def all_recommendations(app) -> list[str]:
    return app.page.eval_on_selector_all("#moe-all-recs-list li", "items => items.map((li) => li.textContent)")


def set_threshold(app, value: str) -> None:
    app.page.fill("#moe-threshold", value)
    app.page.wait_for_selector(f'#moe-results[data-threshold="{value}"]', state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()


def cell_point(app, i: int, j: int, at=(0.2, 0.8)) -> tuple[float, float]:
    """CSS position (in the canvas) of a spot in cell (i, j) of the similarity matrix, by default
    its clean lower-left part (away from the printed number and the cluster outline)."""
    g = app.page.eval_on_selector("#moe-similarity", "c => ({...c.dataset})")
    cell = int(g["cell"])
    return int(g["left"]) + (j + at[0]) * cell, int(g["top"]) + (i + at[1]) * cell


def click_cell(app, i: int, j: int) -> None:
    page = app.page
    seq = page.get_attribute("#moe-pair", "data-seq") or "0"
    x, y = cell_point(app, i, j, (0.5, 0.5))
    page.locator("#moe-similarity").click(position={"x": x, "y": y})
    page.wait_for_function("seq => document.getElementById('moe-pair').dataset.seq !== seq",
                           arg=seq, timeout=STEP_TIMEOUT_MS)
    app.wait_idle()


def tall_screenshot(app, name: str, hover: str | None = None, at=None) -> None:
    """The whole Experts tab; `hover`: a canvas to point at, at CSS position `at` or inside it
    (its readout shows in the picture)."""
    page = app.page
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": TALL_HEIGHT})
    try:
        page.eval_on_selector("#redundancy", "c => c.scrollIntoView()")
        if hover:
            box = page.locator(hover).bounding_box()
            x, y = at or (box["width"] * 0.4, box["height"] * 0.3)
            page.locator(hover).hover(position={"x": x, "y": y})
        app.screenshot(name)
    finally:
        page.set_viewport_size(size)


def assert_pair_matches(app, checkpoint, prefix: str, experts: list[int], leaf: str) -> list:
    """Both heatmaps show the experts' matrix `leaf`, on one colour scale; returns the grids."""
    found = redundancy.detect(checkpoint)
    layer = next(l for l in found.layers if l.prefix == prefix)
    grids = []
    for e in experts:
        t = redundancy.expert_tensor(checkpoint, layer, e, leaf)
        grids.append(tensorloupe.grid(t, 256, 256))
    scale = max(g.amax for g in grids)
    for k, (e, g) in enumerate(zip(experts, grids)):
        selector = f"#moe-pair-{'ab'[k]}"
        info = app.page.eval_on_selector(selector, "c => ({...c.dataset})")
        assert int(info["expert"]) == e
        assert (int(info["rows"]), int(info["cols"])) == (g.rows, g.cols)
        assert float(info["scale"]) == scale
        assert_lattice_pixels(app, selector, g, scale)
    if len(grids) == 2:
        a, b = grids
        diff = Grid(a.rows, a.cols, [y - x for x, y in zip(a.floats(), b.floats())],
                    a.row_index, a.col_index, a.view_shape, a.exact)
        assert_lattice_pixels(app, "#moe-pair-diff", diff, scale)
    return grids


# --- the demo model --------------------------------------------------------------------------------

def test_the_cost_is_said_before_it_runs(app, demo):
    open_tab(app)
    plan = redundancy.cost(demo, redundancy.detect(demo))
    assert plan.bytes_per_expert == 3 * 4096 * 4 and plan.total_bytes == 32 * plan.bytes_per_expert
    cost = app.page.locator("#moe-cost")
    assert int(cost.get_attribute("data-total-bytes")) == plan.total_bytes
    assert cost.inner_text().startswith(
        "Reads 4,096 elements of each matrix of every expert (w1.weight, w2.weight, w3.weight): "
        "48.0 KiB per expert, 1.50 MiB in all for 32 experts in 4 layers")
    assert app.page.is_hidden("#moe-results")


def test_the_page_finds_exactly_the_planted_pairs_as_cpython_does(app, expected):
    page = app.page
    open_tab(app)
    before = app.bytes_read()
    run_analysis(app)
    card = page.eval_on_selector("#redundancy", "c => ({...c.dataset})")
    assert (card["done"], card["total"]) == ("32", "32")
    # What the analysis read, to the byte: the bound stated before it ran, and nothing else.
    assert int(card["bytesRead"]) == expected.bytes_read == app.bytes_read() - before == 32 * 3 * 4096 * 4
    assert page.inner_text("#moe-outcome").startswith("Measured 32 experts in 4 layers: read 1.50 MiB (48.0 KiB per expert) in ")
    print(f"\ndemo analysis in the browser: {card['ms']} ms")
    assert all(row["clusters"] == PAIRS for row in summary_rows(app))
    assert all_recommendations(app) == [r.text for r in expected.recommendations]
    assert len(all_recommendations(app)) == 16
    assert page.inner_text("#moe-verdict") == "16 of 32 experts could be dropped"
    for position, layer in enumerate(expected.layers):
        shown = show_layer(app, position, layer.prefix)
        assert shown["clusters"] == layer.clusters and sorted(shown["clusters"]) == PAIRS
        assert shown["recommendations"] == [r.text for r in layer.recommendations]
        assert sorted(int(t.split()[2]) for t in shown["recommendations"]) == [4, 5, 6, 7]
        for got_row, want_row in zip(shown["similarity"], layer.similarity, strict=True):
            assert got_row == want_row      # bit for bit: integer similarities (gram.py)
        assert shown["scores"] == [p.score for p in layer.experts]
    assert "drop expert 6 of layer 3: 0.99 similar to expert 2; keep 2" in all_recommendations(app)
    # The experts grid above marks the dropped experts.
    dropped = page.eval_on_selector_all("#moe-grid button.expert-cell.drop", "b => b.map((x) => x.dataset.expert)")
    assert sorted(dropped) == sorted(["4", "5", "6", "7"] * 4)


def test_similarity_matrix_pixels_and_readout(app, expected):
    page = app.page
    layer = expected.layers[3]
    show_layer(app, 3, layer.prefix)
    n = len(layer.similarity)
    cells = [(0, 0), (2, 6), (6, 2), (1, 3), (3, 7), (5, 0), (7, 7), (4, 1)]
    canvas = page.eval_on_selector("#moe-similarity", "c => [c.width, c.getBoundingClientRect().width]")
    ratio = canvas[0] / canvas[1]
    points = [tuple(int(v * ratio) for v in cell_point(app, i, j)) for i, j in cells]
    got = app.pixels(points, "#moe-similarity")
    for (i, j), pixel in zip(cells, got):
        assert pixel == colormap.colour(layer.similarity[i][j], 1.0), (i, j, layer.similarity[i][j])
    assert int(page.get_attribute("#moe-similarity", "data-n")) == n
    # The readout names the pair and its exact cosine.
    x, y = cell_point(app, 2, 6, (0.5, 0.5))
    page.locator("#moe-similarity").hover(position={"x": x, "y": y})
    page.wait_for_selector('#moe-sim-readout[data-i="2"][data-j="6"]')
    text = page.inner_text("#moe-sim-readout")
    assert text.startswith("expert 2 × expert 6: cosine ") and text.endswith("· cluster {2, 6}")
    assert float(text.split("cosine ")[1].split()[0]) == pytest.approx(layer.similarity[2][6], abs=1e-12)
    # From the keyboard: arrows move over the cells, Enter opens the pair.
    page.focus("#moe-similarity")
    for key in ("ArrowRight", "ArrowRight", "ArrowRight", "ArrowDown"):
        page.keyboard.press(key)
    page.wait_for_selector('#moe-sim-readout[data-i="1"][data-j="3"]')
    seq = page.get_attribute("#moe-pair", "data-seq") or "0"
    page.keyboard.press("Enter")
    page.wait_for_function("seq => document.getElementById('moe-pair').dataset.seq !== seq", arg=seq)
    assert page.inner_text("#moe-pair-title").startswith("Expert 1 and expert 3 of layer 3 · cosine ")
    app.wait_idle()


def test_threshold_moves_without_reading_again(app, expected):
    page = app.page
    before = app.bytes_read()
    set_threshold(app, "0.999")
    assert expected.with_threshold(0.999).recommendations == []
    assert all_recommendations(app) == []
    assert page.inner_text("#moe-verdict") == "no expert is redundant at this threshold"
    assert all(row["clusters"] == [] for row in summary_rows(app))
    assert page.inner_text("#moe-recs") == "no expert is redundant at this threshold"
    assert page.eval_on_selector_all("#moe-grid button.expert-cell.drop", "b => b.length") == 0
    # The slider, from the keyboard: its top end, then back by the number box.
    page.focus("#moe-threshold-range")
    page.keyboard.press("End")
    page.wait_for_selector('#moe-results[data-threshold="1"]', state="attached")
    assert page.input_value("#moe-threshold") == "1"
    assert all_recommendations(app) == []
    set_threshold(app, "-1")
    loose = expected.with_threshold(-1.0)
    assert all_recommendations(app) == [r.text for r in loose.recommendations]
    assert len(all_recommendations(app)) == 4 * 7
    set_threshold(app, "0.9")
    assert all_recommendations(app) == [r.text for r in expected.recommendations]
    assert all(row["clusters"] == PAIRS for row in summary_rows(app))
    assert app.bytes_read() == before, "moving the threshold read the file again"


def test_clicking_a_cell_shows_both_experts_on_one_scale(app, demo, expected):
    page = app.page
    layer = expected.layers[3]
    show_layer(app, 3, layer.prefix)
    click_cell(app, 2, 6)
    title = page.inner_text("#moe-pair-title")
    assert title.startswith("Expert 2 and expert 6 of layer 3 · cosine ")
    assert float(title.split("cosine ")[1]) == pytest.approx(layer.similarity[2][6], abs=5e-5)
    assert page.input_value("#moe-leaf") == "w1.weight"
    captions = page.eval_on_selector_all("#moe-pair figcaption", "f => f.map((x) => x.textContent)")
    assert captions[0].startswith("expert 2 model.layers.3.block_sparse_moe.experts.2.w1.weight · F32 · 192 × 96")
    assert captions[1].startswith("expert 6 model.layers.3.block_sparse_moe.experts.6.w1.weight")
    grids = assert_pair_matches(app, demo, layer.prefix, [2, 6], "w1.weight")
    assert all(g.exact for g in grids)
    # The readout gives both experts' exact values at the cell under the pointer.
    box = page.locator("#moe-pair-b").bounding_box()
    page.locator("#moe-pair-b").hover(position={"x": box["width"] * 0.5 + 1, "y": box["height"] * 0.25 + 1})
    page.wait_for_function("() => document.getElementById('moe-pair-readout').textContent.startsWith('row ')")
    readout = page.inner_text("#moe-pair-readout")
    row, col, _, a, _, b = (float(v) for v in NUMBER.findall(readout)[:6])
    assert readout.startswith(f"row {int(row)}, col {int(col)}: expert 2 = ")
    assert [a, b] == [g.at(int(row), int(col)) for g in grids]
    tall_screenshot(app, "moe-side-by-side", hover="#moe-pair-diff")
    # Another matrix of the same two experts: the picker.
    seq = page.get_attribute("#moe-pair", "data-seq")
    page.select_option("#moe-leaf", "w2.weight")
    page.wait_for_function("seq => document.getElementById('moe-pair').dataset.seq !== seq", arg=seq)
    app.wait_idle()
    assert_pair_matches(app, demo, layer.prefix, [2, 6], "w2.weight")
    # An expert opens in the Tensor tab from its caption.
    page.click("#moe-pair figure:nth-child(2) figcaption button.link")
    page.wait_for_function("() => document.getElementById('tensor-name').textContent"
                           " === 'model.layers.3.block_sparse_moe.experts.6.w2.weight'")
    app.wait_heatmap()
    app.tab("moe")


def test_screenshot_of_the_analysis(app, demo, expected):
    # What the picture shows is checked: the pair on show, its weights, the readout under the pointer.
    page = app.page
    layer = expected.layers[0]
    ensure_analysed(app)
    show_layer(app, 0, layer.prefix)
    click_cell(app, 0, 4)
    page.select_option("#moe-leaf", "w1.weight")
    page.wait_for_selector('#moe-pair-a[data-tensor$=".experts.0.w1.weight"]', state="attached")
    app.wait_idle()
    title = page.inner_text("#moe-pair-title")
    assert title.startswith("Expert 0 and expert 4 of layer 0 · cosine ")
    assert float(title.split("cosine ")[1]) == pytest.approx(layer.similarity[0][4], abs=5e-5)
    assert_pair_matches(app, demo, layer.prefix, [0, 4], "w1.weight")
    at = cell_point(app, 4, 0, (0.5, 0.5))
    page.locator("#moe-similarity").hover(position={"x": at[0], "y": at[1]})
    page.wait_for_selector('#moe-sim-readout[data-i="4"][data-j="0"]')
    readout = page.inner_text("#moe-sim-readout")
    assert readout.startswith("expert 4 × expert 0: cosine ") and readout.endswith(" · cluster {0, 4}")
    assert float(readout.split("cosine ")[1].split()[0]) == pytest.approx(layer.similarity[4][0], abs=1e-12)
    tall_screenshot(app, "moe-analysis", hover="#moe-similarity", at=at)


# --- stacked GGUF experts: the side-by-side heatmaps are slices -------------------------------------

def test_gguf_stacked_experts_side_by_side(app, files):
    page = app.page
    app.open_file(files["gguf_moe"])
    ckpt = tensorloupe.open(files["gguf_moe"])
    want = redundancy.analyse(ckpt)
    open_tab(app)
    run_analysis(app)
    assert all(row["clusters"] == [[1, 5], [2, 6]] for row in summary_rows(app))
    assert all_recommendations(app) == [r.text for r in want.recommendations]
    layer = want.layers[1]
    shown = show_layer(app, 1, layer.prefix)
    for got_row, want_row in zip(shown["similarity"], layer.similarity, strict=True):
        assert got_row == want_row      # bit for bit: integer similarities (gram.py)
    click_cell(app, 1, 5)
    page.select_option("#moe-leaf", "gate")
    page.wait_for_function("() => document.querySelector('#moe-pair-a').dataset.tensor === 'blk.1.ffn_gate_exps.weight[1]'")
    app.wait_idle()
    a, b = assert_pair_matches(app, ckpt, layer.prefix, [1, 5], "gate")
    assert a.values == b.values, "expert 5 is a byte copy of expert 1"
    same = page.evaluate("""() => {
        const [a, b] = ['#moe-pair-a', '#moe-pair-b'].map((s) => document.querySelector(s));
        return a.toDataURL() === b.toDataURL();
    }""")
    assert same, "equal weights on one colour scale must look the same"
    ckpt.close()


# --- 64 experts a layer: progress, cancel, and the layout -------------------------------------------

CANCEL_AFTER_THE_FIRST_EXPERT = """() => new Promise((resolve) => {
    const card = document.getElementById('redundancy');
    const observer = new MutationObserver(() => {
      if (Number(card.dataset.done || 0) >= 1) {
        observer.disconnect();
        const visible = (id) => document.getElementById(id).getClientRects().length > 0;
        const shown = visible('moe-progress') && visible('moe-cancel');
        document.getElementById('moe-cancel').click();
        resolve(shown);
      }
    });
    observer.observe(card, {attributes: true});
    document.getElementById('moe-run').click();
})"""


def test_cancel_mid_way_then_run_to_the_end(app, wide):
    page = app.page
    app.open_file(wide)
    open_tab(app)
    plan = int(page.get_attribute("#moe-cost", "data-bytes-per-expert"))
    assert plan == 3 * 2048 * 2
    assert "12.0 KiB per expert, 3.00 MiB in all for 256 experts in 4 layers" in page.inner_text("#moe-cost")
    start = app.bytes_read()
    # Cancel as soon as the first expert is done, from the page itself: a round trip through
    # Playwright after seeing it let a fast run finish all 256 before the click landed.
    shown = page.evaluate(CANCEL_AFTER_THE_FIRST_EXPERT)
    assert shown is True      # the progress bar and Cancel were on show
    page.wait_for_selector("#redundancy[data-state=cancelled]", timeout=STEP_TIMEOUT_MS)
    card = page.eval_on_selector("#redundancy", "c => ({...c.dataset})")
    done, total = int(card["done"]), int(card["total"])
    assert 1 <= done < total == 256
    assert page.inner_text("#moe-outcome").startswith(f"Cancelled after {done} of 256 experts (")
    assert page.is_hidden("#moe-results") and page.is_hidden("#moe-progress-row")
    assert page.is_enabled("#moe-run")
    # The worker stopped: a request made now reports no byte read beyond the cancelled steps.
    page.evaluate("() => window.tensorloupe.request('moe_plan', {}, {quiet: true}).then(() => null)")
    app.wait_idle()
    # (bytes the file's first cache block already held are not read again: source.CachedSource)
    assert app.bytes_read() - start == int(card["bytesRead"])
    # ... and at most the next two layers besides, read ahead while a finished one was compared
    assert done * plan - (1 << 16) <= int(card["bytesRead"]) <= (done + redundancy.PREFETCH_LAYERS * 64) * plan

    prefetches = int(page.get_attribute("#io", "data-prefetches"))
    run_analysis(app)
    # Layers 2-4 were read while the layer before them was compared (JSPI: blobs.py prefetch).
    assert int(page.get_attribute("#io", "data-prefetches")) == prefetches + 3
    want = redundancy.analyse(tensorloupe.open(wide))
    planted = [[k, 32 + k] for k in range(8)] + [[20, 61]]
    assert all(sorted(row["clusters"]) == sorted(planted) for row in summary_rows(app))
    assert all_recommendations(app) == [r.text for r in want.recommendations]
    assert len(all_recommendations(app)) == 4 * 9
    shown = show_layer(app, 2, want.layers[2].prefix)
    assert int(page.get_attribute("#moe-similarity", "data-n")) == 64
    for got_row, want_row in zip(shown["similarity"], want.layers[2].similarity, strict=True):
        assert got_row == want_row      # bit for bit: integer similarities (gram.py)
    assert shown["scores"] == [p.score for p in want.layers[2].experts]
    # Any layer from the summary table, or the next/previous buttons.
    page.click('#moe-summary tbody tr[data-index="3"]')
    page.wait_for_selector(f'#moe-similarity[data-layer="{want.layers[3].prefix}"]', state="attached")
    assert page.input_value("#moe-layer") == "3"
    page.click("#moe-layer-prev")
    page.wait_for_selector(f'#moe-similarity[data-layer="{want.layers[2].prefix}"]', state="attached")
    assert page.get_attribute('#moe-summary tbody tr[data-index="2"]', "class") == "shown"
    width = page.eval_on_selector("#moe-similarity", "c => c.getBoundingClientRect().width")
    assert width <= 480, "64 experts still fit beside the recommendations"
    tall_screenshot(app, "moe-64-experts")
    assert math.isclose(want.threshold, float(page.get_attribute("#moe-results", "data-threshold")))


def check_helped_run(app, wide) -> None:
    """Once the second Python is ready (web/compute.mjs, started by the first run), it compares
    the layers it is handed while the worker goes on (layers 0 and 1 of 4, and 2 as well if one
    of them is back by then: never the last), and everything shown is what CPython computes,
    bit for bit."""
    page = app.page
    app.open_file(wide)
    open_tab(app)
    run_analysis(app)                # starts the second Python, if no run has yet
    assert page.evaluate("document.body.dataset.helper") in ("starting", "ready")
    page.wait_for_selector("body[data-helper=ready]", state="attached", timeout=120_000)
    run_analysis(app)
    assert page.get_attribute("#redundancy", "data-helped") in ("2", "3")
    want = redundancy.analyse(tensorloupe.open(wide))
    assert all_recommendations(app) == [r.text for r in want.recommendations]
    for position, layer in enumerate(want.layers):
        shown = show_layer(app, position, layer.prefix)
        for got_row, want_row in zip(shown["similarity"], layer.similarity, strict=True):
            assert got_row == want_row
        assert shown["scores"] == [p.score for p in layer.experts]
        assert shown["clusters"] == layer.clusters


def test_a_second_python_compares_every_other_layer(app, wide):
    check_helped_run(app, wide)


@pytest.mark.parametrize("query, booted", [("", "snapshot"), ("?snapshot=0", "fresh")])
def test_the_second_python_boots_from_the_stored_snapshot_or_from_scratch(page_factory, server, wide,
                                                                          query, booted):
    """From the memory snapshot the first visit stored (made in the background once the page is
    idle: worker.mjs), or from scratch where there is none."""
    context, app, requests, errors = page_factory(f"{server}{query}")
    try:
        app.goto()
        if booted == "snapshot":
            app.page.wait_for_selector("body[data-snapshot=stored]", state="attached", timeout=120_000)
        open_tab(app)       # an MoE model on show, its cost stated: no second Python until a run
        assert app.page.evaluate("document.body.dataset.helper") is None
        check_helped_run(app, wide)
        assert app.page.evaluate("document.body.dataset.helperBoot") == booted
        assert not errors and not requests.foreign()
    finally:
        context.close()


def test_without_the_second_python_one_compares_every_layer(page_factory, server, wide):
    context, app, requests, errors = page_factory(f"{server}?helper=0")
    try:
        app.goto()
        app.open_file(wide)
        open_tab(app)
        run_analysis(app)
        page = app.page
        assert page.get_attribute("#redundancy", "data-helped") == "0"
        assert page.evaluate("document.body.dataset.helper") is None     # never started
        want = redundancy.analyse(tensorloupe.open(wide))
        assert all_recommendations(app) == [r.text for r in want.recommendations]
        shown = show_layer(app, 3, want.layers[3].prefix)
        assert shown["similarity"] == want.layers[3].similarity
        assert not errors and not requests.foreign()
    finally:
        context.close()
