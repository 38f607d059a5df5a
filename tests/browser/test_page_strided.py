"""A transposed torch tensor in the page: the Tensor tab shows its strides, its statistics are the
CLI's, its heatmap is the library's lattice, and selecting it reads no more than the sample and the
lattice state (the worker's cost_bytes, the plan gather reads), legacy and zip .pt alike; the
Health tab reads no more than it states. A TorchScript archive's Summary: one verdict, its classes
folded, its code files listed."""

from __future__ import annotations

import pytest

import tensorloupe
from tensorloupe.healthscan import health_cost

import strided_files
import torch_files
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


def test_a_torchscript_archive_gets_one_verdict_in_the_summary(app, tmp_path):
    path = torch_files.write_torchscript(tmp_path / "torchscript.jit")
    app.ensure_open(path)
    app.tab("summary")
    page = app.page
    assert app.fact("format") == "TorchScript (a pytorch-zip archive)"
    with tensorloupe.open(path) as ckpt:
        script = ckpt.extras["torchscript"]
    assert page.inner_text("#safety .verdict").startswith(f"A TorchScript archive: {script['headline']}.")
    details = page.eval_on_selector("#torchscript", "e => ({...e.dataset})")
    assert details == {"classes": str(len(script["classes"])), "codeFiles": str(script["code_files"])}
    shown = page.eval_on_selector_all("#torchscript .code-files li", "els => els.map(e => e.dataset.name)")
    assert shown == [f["name"] for f in script["code"]] == ["code/__torch__/torch_files.py"]
    # the classes are folded into the one line, not a DANGEROUS row each
    rows = page.eval_on_selector_all("#safety table.globals tr[data-global]", "els => els.map(e => e.dataset.global)")
    assert rows and not any(r in script["classes"] for r in rows)
    # in the collapsed <details>: its text, not what is drawn
    assert page.eval_on_selector("#torchscript .classes", "e => e.textContent") == ", ".join(script["classes"])
