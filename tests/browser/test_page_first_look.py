"""Selecting a large tensor: the statistics and the heatmap are first shown as a labelled first look
(staged.py), then replaced in place by the CLI's numbers and the library's full lattice; the two
stages read exactly the bytes, in as many reads, as the sample and the lattice read in one go.
With JSPI (all ranges of a stage in one Blob read) and without (`?jspi=0`, one read at a time)."""

from __future__ import annotations

import json
import struct
import threading

import numpy as np
import pytest

import build
import tensorloupe
from tensorloupe.sampler.sampling import grid, sample
from tensorloupe.sampler.staged import StagedGrid, StagedSample

from page_checks import assert_heatmap_matches, assert_stats_equal, cli_stats, json_value, same

NAME = "wide.safetensors"
TENSOR = "w"
ROWS, COLS = 512, 34_000      # F16 rows of 68 KB: the 256 lattice rows are separate reads


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    rng = np.random.default_rng(21)
    first = np.arange(16, dtype=np.float32).reshape(4, 4)          # what the page selects on open
    values = (rng.standard_normal((ROWS, COLS)) * 0.02).astype(np.float16)
    header = json.dumps({"a": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
                         TENSOR: {"dtype": "F16", "shape": [ROWS, COLS],
                                  "data_offsets": [64, 64 + values.nbytes]}}).encode()
    path = tmp_path_factory.mktemp("wide") / NAME
    path.write_bytes(struct.pack("<Q", len(header)) + header + first.tobytes() + values.tobytes())
    return path


@pytest.fixture(scope="module")
def site(dist, wide):
    server = build.make_server(dist, port=0, files={NAME: wide})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# Every state the stats line and the heatmap go through after the click, in order.
RECORD = """() => {
  const seen = window.__seen = {stats: [], heatmap: []};
  const stats = document.getElementById('stats');
  const canvas = document.getElementById('heatmap');
  let lastSeq = canvas.dataset.seq;
  new MutationObserver(() => {
    const kind = stats.querySelector('.stat-kind');
    if (document.getElementById('tensor-name').textContent === 'w' && kind) {
      const values = Object.fromEntries([...stats.querySelectorAll('.stat')].map(e => [e.dataset.key, e.dataset.value]));
      const state = {firstLook: stats.dataset.firstLook, kind: kind.textContent, samples: stats.dataset.samples,
                     sub: document.getElementById('stats-sub').textContent, values};
      const last = seen.stats[seen.stats.length - 1];
      if (!last || JSON.stringify(last) !== JSON.stringify(state)) seen.stats.push(state);
    }
    if (canvas.dataset.seq !== lastSeq) {
      lastSeq = canvas.dataset.seq;
      const state = {firstLook: canvas.dataset.firstLook, rows: canvas.dataset.rows, cols: canvas.dataset.cols,
                     label: document.getElementById('region-label').textContent};
      const last = seen.heatmap[seen.heatmap.length - 1];
      if (!last || JSON.stringify(last) !== JSON.stringify(state)) seen.heatmap.push(state);
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def io(app) -> tuple[int, int]:
    data = app.page.eval_on_selector("#io", "e => e.dataset.bytesRead")
    reads = app.page.inner_text("#io-detail").split(" reads")[0].replace(",", "").replace("\u202f", "").strip()
    return int(data), int(reads or 0)


def api_reads(path) -> tuple[int, int]:
    """What the sample and the 256 x 256 lattice read in CPython, each in one go."""
    with tensorloupe.open(path) as ckpt:
        before = ckpt.bytes_read(), ckpt.reads()
        sample(ckpt.tensor(TENSOR))
        grid(ckpt.tensor(TENSOR), 256, 256)
        return ckpt.bytes_read() - before[0], ckpt.reads() - before[1]


@pytest.mark.parametrize("query", ["", "?jspi=0"])
def test_first_looks_are_labelled_then_replaced_by_the_library_numbers(page_factory, site, wide, query):
    context, app, requests, errors = page_factory(f"{site}/{query}")
    try:
        app.goto()
        app.open_file(wide)
        app.wait_idle()
        before = io(app)
        app.page.fill("#filter", TENSOR)
        app.page.evaluate(RECORD)
        app.page.locator(f'.tree-row[data-name="{TENSOR}"]').click()
        app.page.wait_for_function("() => window.__seen.stats.some(s => s.firstLook === 'false')"
                                   " && window.__seen.heatmap.some(h => h.firstLook === 'false')")
        app.wait_idle()
        seen = app.page.evaluate("window.__seen")
        with tensorloupe.open(wide) as ckpt:
            t = ckpt.tensor(TENSOR)
            look, look_grid = StagedSample(t).first_look(), StagedGrid(t, 256, 256).first_look()
            # The stats line: the first look first, labelled, with the API's first-look numbers ...
            first, final = seen["stats"][0], seen["stats"][-1]
            assert first["firstLook"] == "true" and first["kind"] == "sampled: 8,192, a first look"
            assert "a first look at 8,192 of" in first["sub"] and first["samples"] == "8192"
            for key, value in look.stats.to_json().items():
                if key in first["values"]:
                    assert same(float(first["values"][key]), json_value(value)), key
            # ... then replaced in place by the CLI's numbers over the full sample.
            assert final["firstLook"] == "false" and final["kind"] == "sampled" and final["samples"] == "65536"
            assert "first look" not in final["sub"]
            expected = cli_stats(wide, TENSOR)
            assert_stats_equal(app.stats(), expected["stats"])
            # a sample's extremes are bounds of the tensor's, labelled so, as the CLI says them
            assert app.page.get_attribute("#stats", "data-extremes") == expected["extremes"] == "sampled"
            labels = app.page.eval_on_selector_all("#stats .stat", "els => els.map(e => e.querySelector('.stat-label').textContent)")
            assert labels[:3] == ["min ≤", "max ≥", "mean"]
            # The heatmap: a labelled 32 x 32 first look, then the full lattice of tensorloupe.grid.
            assert seen["heatmap"][0]["firstLook"] == "true"
            assert (int(seen["heatmap"][0]["rows"]), int(seen["heatmap"][0]["cols"])) == (look_grid.rows, look_grid.cols) == (32, 32)
            assert "a first look" in seen["heatmap"][0]["label"]
            last = seen["heatmap"][-1]
            assert last["firstLook"] == "false" and (last["rows"], last["cols"]) == ("256", "256")
            assert "first look" not in last["label"]
            assert_heatmap_matches(app, ckpt)
        # Both stages together read what the sample and the lattice read in one go: no more.
        after = io(app)
        assert (after[0] - before[0], after[1] - before[1]) == api_reads(wide)
        assert not errors and not requests.foreign()
    finally:
        context.close()
