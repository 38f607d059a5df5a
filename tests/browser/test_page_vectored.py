"""The page's vectored reads: with JSPI (Chromium) a heatmap's rows are read in one suspension
(every File slice, or every Range request of a URL, in flight together); with `?jspi=0` (browsers
without JSPI) they are read one at a time. Both draw exactly what the library computes, from the
same bytes."""

from __future__ import annotations

import json
import struct
import threading

import numpy as np
import pytest

import build
import tensorloupe

from page_checks import assert_heatmap_matches, assert_stats_equal, cli_stats

NAME = "dense.safetensors"
TENSOR = "w"


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """A dense 1024 x 1024 F16 tensor of random values: a 256-row lattice of 4 KiB-apart rows."""
    values = np.random.default_rng(9).standard_normal((1024, 1024)).astype(np.float16)
    header = json.dumps({TENSOR: {"dtype": "F16", "shape": [1024, 1024],
                                  "data_offsets": [0, values.nbytes]}}).encode()
    path = tmp_path_factory.mktemp("dense") / NAME
    path.write_bytes(struct.pack("<Q", len(header)) + header + values.tobytes())
    return path


@pytest.fixture(scope="module")
def site(dist, dense):
    server = build.make_server(dist, port=0, files={NAME: dense})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def io(app) -> dict:
    return app.page.eval_on_selector("#io", "e => ({...e.dataset})")


def check(app, dense):
    """Select the tensor: stats and heatmap are the library's; returns the page's io."""
    before = io(app)
    app.select(TENSOR)
    with tensorloupe.open(dense) as ckpt:
        assert_heatmap_matches(app, ckpt)
        assert_stats_equal(app.stats(), cli_stats(dense, TENSOR)["stats"])
    after = io(app)
    return int(after.get("batches", 0)) - int(before.get("batches", 0)), int(after["bytesRead"]) - int(before["bytesRead"])


@pytest.mark.parametrize("query, jspi", [("", "on"), ("?jspi=0", "off")])
def test_file_reads_all_at_once_or_one_at_a_time(page_factory, site, dense, query, jspi):
    context, app, requests, errors = page_factory(f"{site}/{query}")
    try:
        app.goto()
        assert app.page.evaluate("document.body.dataset.jspi") == jspi
        app.open_file(dense)
        batches, nbytes = check(app, dense)
        assert (batches > 0) == (jspi == "on")
        assert nbytes > 0
        assert not errors and not requests.foreign()
    finally:
        context.close()


@pytest.mark.parametrize("query, jspi", [("", "on"), ("&jspi=0", "off")])
def test_url_reads_all_at_once_or_one_at_a_time(page_factory, site, dense, query, jspi):
    context, app, requests, errors = page_factory(f"{site}/?url=files/{NAME}{query}")
    try:
        app.page.goto(app.base_url)
        app.wait_python()
        app.wait_model(NAME)
        assert app.page.evaluate("document.body.dataset.jspi") == jspi
        batches, nbytes = check(app, dense)
        assert (batches > 0) == (jspi == "on")
        assert not errors and not requests.foreign()
    finally:
        context.close()
