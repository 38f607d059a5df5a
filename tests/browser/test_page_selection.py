"""Selecting a tensor starts from a clean slate: the previous tensor's exact-statistics run is
cancelled and its late messages ignored; 3-D+ tensors open on a plane of axes longer than 1."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from conftest import STEP_TIMEOUT_MS

EXACT_IDLE = """() => {
  const q = (s) => document.querySelector(s);
  return q('#exact-progress').hidden && q('#exact-cancel').hidden && !q('#exact-button').disabled;
}"""


def test_exact_progress_is_reset_by_selection_and_late_messages_ignored(app, files):
    app.ensure_open(files["sparse"])
    page = app.page
    app.select("huge.weight")                     # 1,073,741,824 elements: minutes of exact stats
    app.tab("tensor")
    page.click("#exact-button")
    # The run is under way: at least one progress message has arrived.
    page.wait_for_function("() => document.getElementById('exact-progress').value > 0",
                           timeout=STEP_TIMEOUT_MS)
    app.select("tail.bias")                       # 16 elements
    assert page.evaluate(EXACT_IDLE)
    assert page.inner_text("#exact-note") == "reads all 64 B"      # the small tensor's own
    # The big run's cancellation (and any progress sent before it) arrives later: no effect.
    page.wait_for_function("() => document.body.dataset.pending === '0'", timeout=STEP_TIMEOUT_MS)
    assert page.evaluate(EXACT_IDLE) and page.inner_text("#exact-note") == "reads all 64 B"
    assert page.evaluate("document.getElementById('exact-stats').hidden")
    # The small tensor's own exact statistics run, and only they are shown.
    page.click("#exact-button")
    page.wait_for_selector("#exact-stats:not([hidden])", timeout=STEP_TIMEOUT_MS)
    assert page.inner_text("#exact-note") == "exact, over all 16 elements"
    assert page.get_attribute("#exact-stats", "data-count") == "16"
    assert page.evaluate(EXACT_IDLE)


def test_sampled_statistics_say_they_are_sampled(app, files):
    app.ensure_open(files["sparse"])
    app.select("huge.weight")
    app.tab("tensor")
    assert app.page.get_attribute("#stats", "data-kind") == "sampled"
    assert app.page.inner_text("#stats .stat-kind") == "SAMPLED"
    assert app.page.inner_text(".histogram-box .toolbar-title").lower() == "histogram (sampled)"
    app.select("tail.bias")
    assert app.page.get_attribute("#stats", "data-kind") == "exact"
    assert app.page.inner_text(".histogram-box .toolbar-title").lower() == "histogram"


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    path = tmp_path_factory.mktemp("conv") / "conv.safetensors"
    rng = np.random.default_rng(11)
    save_file({"conv1.weight": rng.normal(0, 1, (64, 1, 48, 1)).astype(np.float32),
               "row.weight": rng.normal(0, 1, (1, 1, 40)).astype(np.float32)}, str(path))
    return path


def test_size_one_axes_are_skipped_for_the_default_plane(app, conv):
    app.ensure_open(conv)
    page = app.page
    app.select("conv1.weight")                    # 64 x 1 x 48 x 1: a 64 x 48 picture, not 48 x 1
    app.tab("tensor")
    request = json.loads(page.get_attribute("#heatmap", "data-request"))
    assert request["plane"] == [0, 2] and request["index"] == {"1": 0, "3": 0}
    assert page.is_visible("#axis-picker")
    assert page.locator("#axis-picker input[type=range]").count() == 0    # no slider over 1 value
    app.select("row.weight")                      # 1 x 1 x 40: one row of 40
    request = json.loads(page.get_attribute("#heatmap", "data-request"))
    assert request["plane"] is None
    assert page.locator("#axis-picker input[type=range]").count() == 0
