"""The Compare tab, in the page, against `tensorloupe diff A B --json` run as a subprocess on the
converter fixtures (the HF tiny-llama checkpoint and llama.cpp's own GGUF conversions of it): two
files dropped together are compared at once; "Compare with…" picks B for the open A; the counts,
headline, every row's statistics and the SNR-by-layer chart are the CLI's; the table sorts; a
selected row shows A, B and A−B drawn from compare.views' values on one colour scale, and both
histograms on the same bins; Cancel stops a long comparison."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import build
import tensorloupe
from tensorloupe import colormap
from page_checks import cancel_at_the_first_progress
from tensorloupe.comparison import views

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "fixtures" / "out" / "converted-src" / "llama" / "model.safetensors"
Q8 = ROOT / "fixtures" / "converted" / "tiny-llama.q8_0.gguf"
F16 = ROOT / "fixtures" / "converted" / "tiny-llama.f16.gguf"
STEP_TIMEOUT_MS = 60_000
LATTICE = 256                    # web/canvas.js: what the page asks for
SAMPLED = 1024                   # fewer than a tensor's 6,144 elements: the rows are sampled
Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
TALL_HEIGHT = 1500


def diff_json(a: Path, b: Path, *options: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "diff", str(a), str(b), "--json", *options],
                          capture_output=True, text=True, cwd=ROOT, check=True,
                          env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def cli_q8():
    return diff_json(HF, Q8)


@pytest.fixture(scope="module")
def cli_f16_sampled():
    return diff_json(HF, F16, "--samples", str(SAMPLED))


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """1,500 tensors and a copy with every value moved: a comparison long enough to cancel."""
    rng = np.random.default_rng(11)
    a = {f"model.layers.{i}.block{r}.weight": rng.standard_normal((16, 16)).astype(np.float32)
         for i in range(30) for r in range(50)}
    folder = tmp_path_factory.mktemp("many")
    save_file(a, str(folder / "many-a.safetensors"))
    save_file({k: v * np.float32(1.01) for k, v in a.items()}, str(folder / "many-b.safetensors"))
    return folder / "many-a.safetensors", folder / "many-b.safetensors"


def number(text: str):
    return None if text == "null" else float(text)


def cli_number(value):
    return None if value is None else float(value)


def wait_done(app):
    app.page.wait_for_selector("#compare[data-state=done]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()


def check_report(app, cli):
    page = app.page
    counts = dict(page.eval_on_selector_all("#compare-counts .chip", "cs => cs.map(c => [c.dataset.category, Number(c.dataset.count)])"))
    assert counts == cli["summary"]["counts"]
    assert page.inner_text("#compare-headline") == cli["summary"]["headline"]
    rows = {r["name"]: r for r in page.eval_on_selector_all("#compare-rows tr", "rs => rs.map(r => ({...r.dataset}))")}
    assert set(rows) == {t["name"] for t in cli["tensors"]}
    for t in cli["tensors"]:
        row = rows[t["name"]]
        assert row["category"] == t["category"]
        for key, data in (("rel_error", "relError"), ("snr_db", "snrDb"), ("max_abs", "maxAbs"), ("cosine", "cosine")):
            assert number(row[data]) == cli_number(t[key]), (t["name"], key)
        assert row["exact"] == str(t["exact"]).lower()
    charts = page.eval_on_selector_all("#compare-chart canvas",
                                       "cs => cs.map(c => ({role: c.dataset.role, points: JSON.parse(c.dataset.points)}))")
    # a role identical in every layer is named on one line, not drawn as an empty chart
    identical = [role for role, points in cli["summary"]["roles"].items()
                 if all(p["snr_db"] == "inf" for p in points)]
    assert [c["role"] for c in charts] == [r for r in cli["summary"]["roles"] if r not in identical]
    if identical:
        assert json.loads(page.get_attribute("#compare-identical-roles", "data-roles")) == identical
    else:
        assert page.query_selector("#compare-identical-roles") is None
    for chart in charts:
        want = cli["summary"]["roles"][chart["role"]]
        assert [(p["layer"], p["value"], p["tensors"], p["identical"]) for p in chart["points"]] == [
            (p["layer"], p["snr_db"], p["tensors"], p["identical"]) for p in want]


def open_pair(app, cli, how) -> None:
    """HF and Q8 given together (`how`: the App's open_with_drop or open_with_input): A opens and
    the Compare tab compares it with B, as `diff` does."""
    before = app.opened()
    how(HF, Q8)
    app.wait_model(HF.name, before)
    wait_done(app)
    page = app.page
    assert page.get_attribute("#tab-compare", "aria-selected") == "true"
    assert page.get_attribute("#compare", "data-b") == Q8.name
    assert page.inner_text("#compare-a-name") == HF.name
    check_report(app, cli)


def test_two_files_dropped_together_are_compared(app, cli_q8):
    open_pair(app, cli_q8, app.open_with_drop)
    page = app.page
    assert cli_q8["summary"]["counts"]["byte_identical"] == 5 and cli_q8["name_map"] == "llama"
    # the two norms are identical in every layer: named once, the seven others charted
    assert page.query_selector_all("#compare-chart canvas").__len__() == 7
    assert "input_layernorm" in page.inner_text("#compare-identical-roles")
    # every row of this model is small enough to be compared whole: "exact", as the CLI says
    reads = page.eval_on_selector_all("#compare-rows tr td:last-child", "tds => tds.map(t => t.textContent)")
    assert sorted(set(reads)) == ["bytes", "exact"]


def test_two_files_picked_together_are_compared(page_factory, server, cli_q8):
    # "Open files…" with two checkpoints chosen: the same comparison as a drop of the two
    # (a page of its own: the module's page has these files open already)
    context, app, requests, errors = page_factory(server)
    try:
        app.goto()
        open_pair(app, cli_q8, app.open_with_input)
        assert all(url.startswith(server) for url in requests.urls)
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def test_the_table_sorts(app, cli_q8):
    page = app.page
    if page.get_attribute("#compare", "data-state") != "done":
        test_two_files_dropped_together_are_compared(app, cli_q8)
    order = lambda: json.loads(page.get_attribute("#compare-rows", "data-order"))
    compared = [t for t in cli_q8["tensors"] if t["snr_db"] is not None]
    unsorted = [t["name"] for t in cli_q8["tensors"] if t["snr_db"] is None]
    # first shown: largest relative error first (the CLI's ranking), then the rest
    assert order()[:len(cli_q8["summary"]["ranked"])] == cli_q8["summary"]["ranked"]
    page.click('#compare-table button.sort[data-key="snr_db"]')
    assert order() == [t["name"] for t in sorted(compared, key=lambda t: -float(t["snr_db"]))] + unsorted
    page.click('#compare-table button.sort[data-key="snr_db"]')
    assert order() == [t["name"] for t in sorted(compared, key=lambda t: float(t["snr_db"]))] + unsorted
    assert page.get_attribute('#compare-table th:has(button[data-key="snr_db"])', "aria-sort") == "ascending"
    page.click('#compare-table button.sort[data-key="name"]')
    assert order() == sorted(t["name"] for t in cli_q8["tensors"])


def cell_centre(size, rows, cols, i, j):
    width, height = size
    return (j + 0.5) * width / cols, (i + 0.5) * height / rows


def test_a_row_shows_a_b_and_their_difference(app, cli_q8):
    page = app.page
    if page.get_attribute("#compare", "data-state") != "done":
        test_two_files_dropped_together_are_compared(app, cli_q8)
    page.click(f'#compare-rows tr[data-name="{Q_PROJ}"]')
    page.wait_for_selector("#compare-pair[data-seq][data-loading=false]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    # the detail was brought into view (it is below the table and the charts)
    box = page.locator("#compare-pair").bounding_box()
    assert 0 <= box["y"] < page.viewport_size["height"] / 2, box
    with tensorloupe.compare(str(HF), str(Q8)) as cmp:
        pair = cmp.row(Q_PROJ).pair
        tiles = views.tiles(pair, LATTICE, LATTICE)
        ha, hb = views.histograms(pair)
    assert page.inner_text("#compare-pair-title") == Q_PROJ
    assert "Q/K rows un-permuted" in page.inner_text("#compare-pair-notes")
    rows, cols = tiles["rows"], tiles["cols"]
    assert (rows, cols) == (64, 64)
    for key, selector in (("a", "#compare-a"), ("b", "#compare-b"), ("diff", "#compare-diff")):
        canvas = page.eval_on_selector(selector, "c => ({...c.dataset})")
        assert (int(canvas["rows"]), int(canvas["cols"]), canvas["exact"]) == (rows, cols, "true")
        assert float(canvas["scale"]) == tiles["amax"]            # one scale for all three
    size = json.loads(page.get_attribute("#compare-a", "data-css"))
    # The pointer on one element: the readout gives A, B and A−B there, as the library reads them.
    for i, j in ((3, 5), (40, 61)):
        x, y = cell_centre(size, rows, cols, i, j)
        page.locator("#compare-b").hover(position={"x": x, "y": y})
        page.wait_for_function(f"() => document.getElementById('compare-readout').dataset.row === '{i}'"
                               f" && document.getElementById('compare-readout').dataset.col === '{j}'")
        readout = page.eval_on_selector("#compare-readout", "r => ({...r.dataset})")
        k = i * cols + j
        assert (float(readout["a"]), float(readout["b"]), float(readout["diff"])) == (
            tiles["a"][k], tiles["b"][k], tiles["diff"][k])
        # ... and each canvas's pixel there has the colour of that value on the shared scale
        for key, selector in (("a", "#compare-a"), ("b", "#compare-b"), ("diff", "#compare-diff")):
            (pixel,) = app.pixels([(int(x), int(y))], selector)
            assert pixel == colormap.colour(tiles[key][k], tiles["amax"])
    screenshots(app, ("#compare", "compare-table-chart"), ("#compare-pair", "compare-a-b-diff"))
    # A − B on its own scale: the same values, coloured on max|A − B|
    seq = int(page.get_attribute("#compare-pair", "data-seq"))
    page.check("#compare-diff-own")
    page.wait_for_function(f"() => Number(document.getElementById('compare-pair').dataset.seq) > {seq}"
                           " && document.getElementById('compare-pair').dataset.loading === 'false'", timeout=STEP_TIMEOUT_MS)
    own = max(abs(v) for v in tiles["diff"])
    assert float(page.get_attribute("#compare-diff", "data-scale")) == own
    assert float(page.get_attribute("#compare-a", "data-scale")) == tiles["amax"]
    assert f"its own scale ±" in page.inner_text("#compare-pair")
    (pixel,) = app.pixels([(int(x), int(y))], "#compare-diff")
    assert pixel == colormap.colour(tiles["diff"][k], own) != colormap.colour(tiles["diff"][k], tiles["amax"])
    hist = page.eval_on_selector("#compare-histogram", "c => ({...c.dataset})")
    assert json.loads(hist["a"]) == ha.counts and json.loads(hist["b"]) == hb.counts
    assert json.loads(hist["edges"]) == ha.to_json()["edges"] == hb.to_json()["edges"]
    assert page.is_visible("#compare-histogram")
    screenshots(app, ("#compare-pair", "compare-a-b-diff-own-scale"))


def screenshots(app, *shots):
    """What a user sees, in a tall window: each element scrolled to the top, then a picture."""
    page = app.page
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": TALL_HEIGHT})
    try:
        for selector, name in shots:
            page.eval_on_selector(selector, "c => c.scrollIntoView()")
            page.eval_on_selector_all(".compare-table-wrap", "ws => ws.forEach(w => { w.scrollTop = 0; })")
            app.screenshot(name)
    finally:
        page.set_viewport_size(size)


def test_compare_with_picks_b_for_the_open_file_and_samples(app, cli_f16_sampled):
    app.ensure_open(HF)
    app.tab("compare")
    page = app.page
    page.set_input_files("#compare-input", [str(F16)])
    page.wait_for_selector(f'#compare[data-b="{F16.name}"]', state="attached", timeout=STEP_TIMEOUT_MS)
    assert "21 pairs with A through the llama name map" in page.inner_text("#compare-b-name")
    page.fill("#compare-samples", str(SAMPLED))
    page.click("#compare-run")
    wait_done(app)
    check_report(app, cli_f16_sampled)
    assert page.get_attribute("#compare", "data-mode") == "sampled"
    reads = page.eval_on_selector_all("#compare-rows tr td:last-child", "tds => tds.map(t => t.textContent)")
    assert sorted(set(reads)) == ["bytes", "sampled"]
    assert f"up to {SAMPLED:,} sampled elements per tensor" in page.inner_text("#compare-facts")
    # f16 of the same weights: the permutation undone, hardly any error (proves the name map)
    assert all(float(t["snr_db"]) > 60 for t in cli_f16_sampled["tensors"] if t["snr_db"] not in (None, "inf"))


def test_another_opened_file_can_be_b(app, cli_q8):
    app.ensure_open(HF)
    page = app.page
    if Q8.name not in app.entries():
        app.open_file(Q8)
        app.open_file(HF)
    app.tab("compare")
    page.focus("#compare-entry")
    options = page.eval_on_selector_all("#compare-entry option", "os => os.map(o => o.textContent)")
    assert Q8.name in options and HF.name not in options and "demo-moe.safetensors" not in options
    page.select_option("#compare-entry", label=Q8.name)
    page.wait_for_selector(f'#compare[data-b="{Q8.name}"]', state="attached", timeout=STEP_TIMEOUT_MS)
    page.fill("#compare-samples", "16384")          # diff's default (the last run sampled 1,024)
    page.uncheck("#compare-exact")
    page.click("#compare-run")
    wait_done(app)
    check_report(app, cli_q8)


@pytest.fixture(scope="module")
def served(dist):
    """The app, with the q8_0 GGUF served beside it under /files/ (as `build.py serve FILE`)."""
    server = build.make_server(dist, port=0, files={Q8.name: Q8})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_b_read_by_url(page_factory, served, cli_q8):
    """A file opened by URL, then another from the disk: the URL one is B, read by Range requests."""
    context, app, requests, errors = page_factory(served + "/")
    try:
        app.page.goto(f"{served}/?url=files/{Q8.name}")
        app.wait_python()
        app.wait_model(Q8.name)
        app.open_file(HF)
        app.tab("compare")
        page = app.page
        page.select_option("#compare-entry", label=Q8.name)
        page.wait_for_selector(f'#compare[data-b="{Q8.name}"]', state="attached", timeout=STEP_TIMEOUT_MS)
        page.click("#compare-run")
        wait_done(app)
        check_report(app, cli_q8)
        ranged = [url for url in requests.urls if url.endswith(f"/files/{Q8.name}")]
        assert ranged and all(url.startswith(served) for url in requests.urls)
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def test_cancel_mid_way(app, many):
    a, b = many
    app.open_file(a)
    app.tab("compare")
    page = app.page
    page.set_input_files("#compare-input", [str(b)])
    page.wait_for_selector(f'#compare[data-b="{b.name}"]', state="attached", timeout=STEP_TIMEOUT_MS)
    page.check("#compare-exact")
    # cancelled at the first progress, from inside the page: a click from the test could come
    # after the last pair (the comparison got faster than Playwright's round trip)
    cancel_at_the_first_progress(page, "compare", "done", "compare-run", "compare-cancel")
    page.wait_for_selector("#compare[data-state=cancelled]", state="attached", timeout=STEP_TIMEOUT_MS)
    card = page.eval_on_selector("#compare", "c => ({...c.dataset})")
    done, total = int(card["done"]), int(card["total"])
    assert 1 <= done < total == 1500
    assert page.inner_text("#compare-outcome") == f"Cancelled after {done:,} of 1,500 pairs."
    assert page.is_hidden("#compare-results") and page.is_enabled("#compare-run")
