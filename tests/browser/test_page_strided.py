"""A transposed torch tensor in the page: the Tensor tab shows its strides, its statistics are the
CLI's, its heatmap is the library's lattice, and selecting it reads no more than the sample and the
lattice state (the worker's cost_bytes, the plan gather reads), legacy and zip .pt alike; the
Health tab reads no more than it states."""

from __future__ import annotations

import pytest

import tensorloupe
from tensorloupe.healthscan import health_cost

import strided_files
from page_checks import assert_heatmap_matches, assert_stats_equal, cli_stats
from conftest import STEP_TIMEOUT_MS


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return strided_files.write_all(tmp_path_factory.mktemp("strided-page"))


def bytes_read(app) -> int:
    return int(app.page.eval_on_selector("#io", "e => e.dataset.bytesRead"))


@pytest.mark.parametrize("kind", ["strided_legacy", "strided_zip"])
def test_a_transposed_tensor_reads_within_its_stated_cost(app, files, kind):
    path = files[kind]
    app.ensure_open(path)
    app.wait_idle()
    before = bytes_read(app)
    app.select("transposed")
    app.wait_heatmap()
    page = app.page
    assert page.inner_text("#tensor-strides") == "strides 1, 512 (non-contiguous)"
    stated = int(page.get_attribute("#stats", "data-cost-bytes")) + int(page.get_attribute("#heatmap", "data-cost-bytes"))
    read = bytes_read(app) - before
    # a zip's storage is positioned from its local header on first use: one cache block of it
    assert read <= stated + (64 << 10 if kind == "strided_zip" else 0), (read, stated)
    assert read < 2 * (512 * 384 * 4)
    expected = cli_stats(path, "transposed")
    assert int(page.get_attribute("#stats", "data-cost-bytes")) == expected["sample_bytes"]
    assert_stats_equal(app.stats(), expected["stats"])
    with tensorloupe.open(path) as ckpt:
        assert_heatmap_matches(app, ckpt)
        cost = health_cost(ckpt)
    app.tab("health")
    page.wait_for_selector("#health-cost[data-scan-bytes]", state="attached", timeout=STEP_TIMEOUT_MS)
    assert int(page.get_attribute("#health-cost", "data-scan-bytes")) == cost.scan_bytes
    before = bytes_read(app)
    page.click("#health-run")
    page.wait_for_selector("#health[data-state=done]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()
    assert bytes_read(app) - before <= cost.scan_bytes
    app.tab("tensor")
