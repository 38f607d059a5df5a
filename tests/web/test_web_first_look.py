"""The page's first looks, in CPython: `tensor` and `heatmap` with `first_look` answer a labelled
part of the view, the request after it answers exactly what the CLI / API computes, and the two
together read exactly the bytes (and as many reads) as the one request of before."""

from __future__ import annotations

import json
from array import array

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe import colormap
from tensorloupe.sampler.sampling import grid, histogram, sample, sample_cost
from tensorloupe.web.handlers import Session


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    rng = np.random.default_rng(5)
    p = tmp_path_factory.mktemp("first") / "m.safetensors"
    save_file({"w": (rng.standard_normal((512, 34_000)) * 0.02).astype(np.float16),
               "b": rng.standard_normal((64,)).astype(np.float32)}, str(p))
    return p


def call(session, op, **args):
    result, buffers = session.handle(op, json.loads(json.dumps(args)))
    json.dumps(result, allow_nan=False)
    return result, buffers


def opened(path):
    s = Session()
    call(s, "open", path=str(path))
    return s


def io(s):
    return s.io()["bytes_read"], s.io()["reads"]


def delta(s, fn):
    before = io(s)
    out = fn()
    after = io(s)
    return out, (after[0] - before[0], after[1] - before[1])


def test_stats_first_look_then_the_cli_sample_reading_its_bytes_once(path):
    one = opened(path)
    whole, whole_io = delta(one, lambda: call(one, "tensor", name="w")[0])
    s = opened(path)
    (look, full), staged_io = delta(s, lambda: (call(s, "tensor", name="w", first_look=True)[0],
                                                call(s, "tensor", name="w")[0]))
    assert staged_io == whole_io
    assert look["sample"]["first_look"] is True and look["sample"]["samples"] == 65536 // 8
    assert "first_look" not in full["sample"]
    t = tensorloupe.open(path).tensor("w")
    api = sample(t)
    # the reply also states what the sample costs, before it is read (sampler/layout.py)
    assert full["sample"].pop("cost_bytes") == whole["sample"].pop("cost_bytes") == sample_cost(t)
    assert full["sample"] == whole["sample"] == api.to_json()
    assert full["histogram"] == histogram(api.values, 64).to_json()


def test_a_one_window_sample_answers_in_full_at_once(path):
    s = opened(path)
    result, _ = call(s, "tensor", name="b", first_look=True)
    assert "first_look" not in result["sample"] and result["sample"]["exhaustive"]


def test_heatmap_first_look_then_the_grid_reading_its_bytes_once(path):
    one = opened(path)
    _, whole_io = delta(one, lambda: call(one, "heatmap", name="w", rows=256, cols=256))
    s = opened(path)
    ((look, _), (full, (pixels, cells))), staged_io = delta(s, lambda: (
        call(s, "heatmap", name="w", rows=256, cols=256, first_look=True),
        call(s, "heatmap", name="w", rows=256, cols=256)))
    assert staged_io == whole_io
    assert look["first_look"] is True and (look["rows"], look["cols"]) == (32, 32)
    assert "first_look" not in full
    g = grid(tensorloupe.open(path).tensor("w"), 256, 256)
    values = array("d")
    values.frombytes(cells)
    assert list(values) == g.floats() and full["row_index"] == g.row_index
    assert bytes(pixels) == bytes(colormap.rgba(g.floats(), g.amax))


def test_another_view_between_the_stages_is_not_mixed_in(path):
    s = opened(path)
    call(s, "heatmap", name="w", rows=256, cols=256, first_look=True)
    result, (_, cells) = call(s, "heatmap", name="w", rows=256, cols=256, region=[0, 512, 0, 1000])
    values = array("d")
    values.frombytes(cells)
    assert list(values) == grid(tensorloupe.open(path).tensor("w"), 256, 256, (0, 512, 0, 1000)).floats()
