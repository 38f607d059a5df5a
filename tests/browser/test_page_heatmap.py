"""The heatmap and the histogram as a new user met them (issue 27): after a wheel zoom the
readout under a still pointer is the new tile's exact element, inside the view; one wheel notch
is one zoom step, however large its delta; elements are drawn square where the panel allows and
a picture that is not to scale says so; the colour bar is on screen at 1400x900 for a tall
tensor; the histogram has a count axis and value ticks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe

ZOOM_STEP = 1.6          # web/heatmap.js


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    rng = np.random.default_rng(27)
    path = tmp_path_factory.mktemp("heatmap") / "shapes.safetensors"
    save_file({"wide.weight": rng.normal(0, 0.02, (2048, 4096)).astype(np.float32),
               "flat.weight": rng.normal(0, 1, (256, 4096)).astype(np.float32),
               "tall.weight": rng.normal(0, 1, (4096, 64)).astype(np.float32),
               "square.weight": rng.normal(0, 1, (96, 192)).astype(np.float32)}, str(path))
    return path


def settled(app):
    app.wait_idle()
    return app.heatmap()


def region_of(info) -> list[float]:
    return json.loads(info["view"])


def test_readout_follows_the_tile_under_a_still_pointer(app, shapes):
    app.ensure_open(shapes)
    page = app.page
    app.select("wide.weight")
    box = page.locator("#heatmap").bounding_box()
    x, y = box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.6
    page.mouse.move(x, y)
    page.wait_for_selector("#readout[data-value]")
    assert page.get_attribute("#readout", "data-exact") == "false"     # a sampled cell first
    for _ in range(12):                          # zoom in by wheel without moving the pointer
        if settled(app)["exact"] == "true":
            break
        page.mouse.wheel(0, -100)
    info = settled(app)
    assert info["exact"] == "true"
    # the readout was redrawn for the new, exact tile, though the pointer never moved
    page.wait_for_selector("#readout[data-exact=true]")
    readout = page.eval_on_selector("#readout", "r => ({...r.dataset, text: r.textContent})")
    r0, r1, c0, c1 = json.loads(info["region"])
    row, col = int(readout["row"]), int(readout["col"])
    assert r0 <= row < r1 and c0 <= col < c1, (row, col, info["region"])
    [value] = tensorloupe.values(tensorloupe.open(str(shapes)).tensor("wide.weight"), row * 4096 + col, 1)
    assert float(readout["value"]) == value and "exact element" in readout["text"]
    page.click("#zoom-reset")
    app.wait_idle()


def test_one_wheel_notch_is_one_step_whatever_its_delta(app, shapes):
    app.ensure_open(shapes)
    page = app.page
    app.select("wide.weight")
    before = region_of(settled(app))
    box = page.locator("#heatmap").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -1200)                   # one notch of a browser that reports big deltas
    after = region_of(settled(app))
    width_before, width_after = before[3] - before[2], after[3] - after[2]
    assert width_after == pytest.approx(width_before / ZOOM_STEP, rel=1e-6)
    page.click("#zoom-reset")
    app.wait_idle()


def test_elements_drawn_square_or_said_to_be_stretched(app, shapes):
    app.ensure_open(shapes)
    page = app.page
    # 4,096 rows of 64 columns cannot be drawn to scale 512 px tall: widened, and said; 256
    # rows of 4,096 would be ~37 px tall, below the least height (and a pixel a row): heightened
    for name, drawn in (("wide.weight", "square"), ("square.weight", "square"),
                        ("tall.weight", "wider than tall"), ("flat.weight", "taller than wide")):
        app.select(name)
        info = settled(app)
        stretch = float(info["stretch"])
        note = page.inner_text("#region-label")
        if drawn == "square":
            assert stretch == pytest.approx(1, rel=0.1), (name, stretch)
            assert "not to scale" not in note
        else:
            assert (stretch < 1 / 1.1) if drawn == "wider than tall" else (stretch > 1.1), (name, stretch)
            assert "not to scale" in note and drawn in note, note


def test_colour_bar_on_screen_for_a_tall_tensor(app, shapes):
    app.ensure_open(shapes)
    page = app.page
    assert page.viewport_size == {"width": 1400, "height": 900}
    app.select("tall.weight")
    settled(app)
    heat = page.locator("#heatmap").bounding_box()
    bar = page.locator("#colorbar").bounding_box()
    assert heat["height"] >= 500                 # as tall as the panel allows
    assert 0 <= bar["y"] and bar["y"] + bar["height"] <= 900, bar
    assert bar["y"] < heat["y"]                  # the legend above the picture


def test_histogram_has_a_count_axis_and_value_ticks(app, shapes):
    app.ensure_open(shapes)
    page = app.page
    app.select("square.weight")
    page.wait_for_function("() => document.getElementById('histogram').dataset.yTicks")
    data = page.eval_on_selector("#histogram", "c => ({...c.dataset})")
    y_ticks, x_ticks = json.loads(data["yTicks"]), json.loads(data["xTicks"])
    whole = tensorloupe.open(str(shapes)).tensor("square.weight")
    sample = tensorloupe.sample(whole)
    hist = sample.histogram()
    biggest = max(hist.counts)
    assert y_ticks[0] == 0 and len(y_ticks) >= 2 and max(y_ticks) <= biggest
    lo, hi = float(hist.edges[0]), float(hist.edges[-1])
    assert len(x_ticks) >= 2 and all(lo <= t <= hi for t in x_ticks)
    steps = {round(b - a, 12) for a, b in zip(x_ticks, x_ticks[1:])}
    assert len(steps) == 1                       # evenly spaced round values
    step = steps.pop()
    assert math.log10(step) % 1 == pytest.approx(0, abs=1e-9) or any(
        math.log10(step / m) % 1 == pytest.approx(0, abs=1e-9) for m in (2, 5))
    page.check("#hist-log")
    log_ticks = json.loads(page.get_attribute("#histogram", "data-y-ticks"))
    assert log_ticks[0] == 0 and all(t == 10 ** k for k, t in enumerate(log_ticks[1:]))
    page.uncheck("#hist-log")
