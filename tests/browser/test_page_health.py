"""The Health tab, in the page, against `tensorloupe health FILE --json` run as a subprocess: the cost
stated before it runs, the planted faults' flags with the same evidence, the layer profile's
points with the same numbers, a click on a flag or on a flagged point opening that tensor, and
Cancel mid-way on a model of 2,000 tensors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import health_files
import tensorloupe
from page_checks import cancel_at_the_first_progress
from tensorloupe.healthscan import health_cost

ROOT = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_MS = 60_000
TALL_HEIGHT = 1700


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return health_files.write_all(tmp_path_factory.mktemp("health"))["health_faults"]


@pytest.fixture(scope="module")
def cli(faults):
    done = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "health", str(faults), "--json"],
                          capture_output=True, text=True, cwd=ROOT, check=True,
                          env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """2,000 small tensors (40 layers x 50 roles): a scan long enough to cancel."""
    rng = np.random.default_rng(7)
    tensors = {f"model.layers.{i}.block{r}.weight": (rng.standard_normal((16, 16)) * 0.02).astype(np.float32)
               for i in range(40) for r in range(50)}
    path = tmp_path_factory.mktemp("many") / "many-tensors.safetensors"
    save_file(tensors, str(path))
    return path


def open_health(app, path):
    app.ensure_open(path)
    app.tab("health")
    app.page.wait_for_selector("#health-cost[data-scan-bytes]", state="attached", timeout=STEP_TIMEOUT_MS)


def run(app):
    app.page.click("#health-run")
    app.page.wait_for_selector("#health[data-state=done]", state="attached", timeout=STEP_TIMEOUT_MS)
    app.wait_idle()


def test_the_cost_is_said_before_it_runs(app, faults):
    open_health(app, faults)
    with tensorloupe.open(faults) as ckpt:
        cost = health_cost(ckpt)
    assert int(app.page.get_attribute("#health-cost", "data-scan-bytes")) == cost.scan_bytes
    assert app.page.inner_text("#health-cost").startswith("Reads 931 KiB (")
    assert "at most 32.0 KiB of each of 57 tensors" in app.page.inner_text("#health-cost")


def test_flags_and_profile_are_the_cli_json(app, faults, cli):
    open_health(app, faults)
    run(app)
    page = app.page
    rows = page.eval_on_selector_all("#health-flags tr", "rows => rows.map(r => ({...r.dataset}))")
    assert [(r["severity"], r["kind"], r["tensor"]) for r in rows] == [
        (f["severity"], f["kind"], f["tensor"]) for f in cli["flags"]]
    for row, flag in zip(rows, cli["flags"]):
        assert row["value"] == str(flag["evidence"]["value"]) or float(row["value"]) == flag["evidence"]["value"]
        siblings = flag["evidence"]["siblings_median"]
        assert (row["siblings"] == "null") if siblings is None else float(row["siblings"]) == siblings
    assert {(f["tensor"], f["kind"]) for f in cli["flags"]} == set(health_files.PLANTED.items())
    card = page.eval_on_selector("#health", "c => ({...c.dataset})")
    assert int(card["bytesRead"]) == cli["bytes_read"]
    assert (int(card["errors"]), int(card["warnings"])) == (cli["counts"]["error"], cli["counts"]["warning"])
    charts = page.eval_on_selector_all("#health-profile canvas",
                                       "cs => cs.map(c => ({role: c.dataset.role, points: JSON.parse(c.dataset.points)}))")
    assert [c["role"] for c in charts] == [p["role"] for p in cli["profile"]]
    for chart, role in zip(charts, cli["profile"]):
        for series in ("rms", "max_abs"):
            got = [(p["tensor"], p["layer"], p["value"], p["flagged"]) for p in chart["points"] if p["series"] == series]
            want = [(p["tensor"], p["layer"], p[series], bool(p["flags"])) for p in role["points"]]
            assert got == want


def test_a_flag_and_a_flagged_point_open_their_tensor(app, faults):
    open_health(app, faults)
    if app.page.get_attribute("#health", "data-state") != "done":
        run(app)
    page = app.page
    page.click('#health-flags tr[data-kind=dead] button.link')
    page.wait_for_function("() => document.getElementById('tensor-name').textContent === "
                           "'model.layers.1.mlp.down_proj.weight'", timeout=STEP_TIMEOUT_MS)
    app.wait_heatmap()
    app.tab("health")
    selector = '#health-profile figure[data-role="model.layers.*.self_attn.v_proj.weight"] canvas'
    points = json.loads(page.get_attribute(selector, "data-points"))
    (flagged,) = [p for p in points if p["flagged"] and p["series"] == "rms"]
    assert flagged["tensor"] == "model.layers.3.self_attn.v_proj.weight"
    page.locator(selector).click(position={"x": flagged["x"], "y": flagged["y"]})
    page.wait_for_function("() => document.getElementById('tensor-name').textContent === "
                           "'model.layers.3.self_attn.v_proj.weight'", timeout=STEP_TIMEOUT_MS)
    app.wait_heatmap()
    # The layer profile as a user sees it: the whole tab in one picture.
    app.tab("health")
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": TALL_HEIGHT})
    try:
        page.eval_on_selector("#health-profile", "c => c.scrollIntoView()")
        app.screenshot("health-layer-profile")
        page.eval_on_selector("#health", "c => c.scrollIntoView()")
        app.screenshot("health-flags")
    finally:
        page.set_viewport_size(size)


def test_cancel_mid_way_then_run_to_the_end(app, many):
    open_health(app, many)
    page = app.page
    # cancelled at the first progress, from inside the page: a click from the test could come
    # after the last tensor (the scan got faster than Playwright's round trip)
    assert cancel_at_the_first_progress(page, "health", "done", "health-run", "health-cancel")
    page.wait_for_selector("#health[data-state=cancelled]", state="attached", timeout=STEP_TIMEOUT_MS)
    card = page.eval_on_selector("#health", "c => ({...c.dataset})")
    done, total = int(card["done"]), int(card["total"])
    assert 1 <= done < total == 2000
    assert page.inner_text("#health-outcome").startswith(f"Cancelled after {done} of 2,000 tensors (")
    assert page.is_hidden("#health-results") and page.is_enabled("#health-run")
    run(app)
    assert page.eval_on_selector_all("#health-flags tr[data-kind]", "rows => rows.length") == 0
    assert page.eval_on_selector_all("#health-profile canvas", "cs => cs.length") == 50
