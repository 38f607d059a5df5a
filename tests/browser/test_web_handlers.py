"""The worker's Python handlers, in CPython: envelopes, buffers, errors, stepwise exact stats."""

from __future__ import annotations

import json
import math
from array import array

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe import colormap
from tensorloupe.web.handlers import MAX_LIST_ITEMS, ExactJob, Session, dispatch, preview


def call(session: Session, op: str, **args):
    result, buffers = session.handle(op, json.loads(json.dumps(args)))
    json.dumps(result, allow_nan=False)     # every reply must survive JSON without NaN
    return result, buffers


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (300, 500)).astype(np.float32)
    x[0, 0] = np.nan
    save_file({"x": x, "cube": rng.normal(0, 1, (3, 20, 30)).astype(np.float16)},
              str(tmp_path / "a.safetensors"), metadata={"tokens": json.dumps(list(range(10)))})
    (tmp_path / "pointer.safetensors").write_bytes(
        b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 10\n")
    return tmp_path


def test_open_reports_summary_tensors_and_moe(files):
    s = Session()
    result, buffers = call(s, "open", path=str(files / "a.safetensors"))
    assert buffers == []
    summary = result["summary"]
    assert (summary["name"], summary["format"], summary["tensor_count"]) == ("a.safetensors", "safetensors", 2)
    assert summary["parameters"] == 300 * 500 + 3 * 20 * 30
    assert summary["parameters_by_dtype"] == [["F32", 150000, 600000], ["F16", 1800, 3600]]
    assert sorted(row[:4] for row in result["tensors"]) == [["cube", "F16", [3, 20, 30], 3600], ["x", "F32", [300, 500], 600000]]
    assert result["moe"]["detected"] is False


def test_open_demo_detects_experts():
    s = Session()
    result, _ = call(s, "open_demo")
    assert result["summary"]["name"] == "demo-moe.safetensors"
    assert result["moe"]["detected"] and result["moe"]["expert_count"] == 8 and result["moe"]["top_k"] == 2


def test_tensor_stats_are_the_cli_sample(files):
    s = Session()
    call(s, "open", path=str(files / "a.safetensors"))
    result, _ = call(s, "tensor", name="x")
    t = tensorloupe.open(files / "a.safetensors").tensor("x")
    assert result["sample"]["stats"] == tensorloupe.sample(t).stats.to_json()
    assert result["sample"]["stats"]["nan"] == 1
    assert len(result["histogram"]["counts"]) == 64


def test_heatmap_returns_pixels_and_values_for_the_region(files):
    s = Session()
    call(s, "open", path=str(files / "a.safetensors"))
    result, (pixels, cells) = call(s, "heatmap", name="x", rows=64, cols=64, region=[10, 50, 100, 140])
    assert (result["rows"], result["cols"], result["exact"]) == (40, 40, True)
    values = array("d")
    values.frombytes(cells)
    t = tensorloupe.open(files / "a.safetensors").tensor("x")
    assert values[0] == tensorloupe.values(t, 10 * 500 + 100, 1)[0]
    assert len(pixels) == 4 * 40 * 40
    assert bytes(pixels[:4]) == bytes(colormap.colour(values[0], result["scale"]))


def test_heatmap_plane_and_index(files):
    s = Session()
    call(s, "open", path=str(files / "a.safetensors"))
    result, (_, cells) = call(s, "heatmap", name="cube", rows=256, cols=256, plane=[1, 2], index={"0": 2})
    values = array("d")
    values.frombytes(cells)
    t = tensorloupe.open(files / "a.safetensors").tensor("cube")
    assert result["view_shape"] == [20, 30]
    assert list(values[:5]) == tensorloupe.values(t, 2 * 600, 5)


def test_stepwise_exact_stats_equal_exact_stats(files):
    t = tensorloupe.open(files / "a.safetensors").tensor("x")
    job = ExactJob(t, chunk_elems=4096)     # many steps, as for a large tensor
    steps = 0
    while not job.finished:
        job.step()
        steps += 1
    assert steps == math.ceil(150000 / 4096)
    assert job.stats.to_json() == tensorloupe.exact_stats(t, chunk_elems=4096).to_json()


def test_exact_stats_messages_and_cancel(files):
    s = Session()
    call(s, "open", path=str(files / "a.safetensors"))
    started, _ = call(s, "exact_start", name="x")
    step, _ = call(s, "exact_step", job=started["job"])
    assert step["finished"] and step["done"] == step["total"] == 150000
    assert step["stats"]["nan"] == 1
    started, _ = call(s, "exact_start", name="x")
    assert call(s, "exact_cancel", job=started["job"])[0] == {"cancelled": True}
    with pytest.raises(tensorloupe.TensorloupeError, match="not running"):
        s.handle("exact_step", {"job": started["job"]})


def test_a_failed_open_keeps_the_previous_checkpoint(files, monkeypatch):
    from tensorloupe.web import handlers
    s = Session()
    monkeypatch.setattr(handlers, "session", s)
    ok, _ = dispatch("open", json.dumps({"path": str(files / "a.safetensors")}))
    assert json.loads(ok)["ok"]
    text, buffers = dispatch("open", json.dumps({"path": str(files / "pointer.safetensors")}))
    reply = json.loads(text)
    assert reply["ok"] is False and buffers == []
    assert reply["error"]["kind"] == "UnknownFormatError" and "Git LFS pointer" in reply["error"]["message"]
    assert s.checkpoint.name == "a.safetensors"
    again, _ = dispatch("tensor", json.dumps({"name": "x"}))
    assert json.loads(again)["ok"]


def test_errors_are_envelopes_never_exceptions(monkeypatch):
    from tensorloupe.web import handlers
    monkeypatch.setattr(handlers, "session", Session())
    for op, args in [("tensor", {"name": "x"}), ("nonsense", {}), ("open", {"path": "/no/such/file"}),
                     ("heatmap", {})]:
        reply = json.loads(dispatch(op, json.dumps(args))[0])
        assert reply["ok"] is False and reply["error"]["message"]
    assert json.loads(dispatch("heatmap", "{}")[0])["error"]["kind"] in ("UsageError", "InternalError")


def test_preview_bounds_long_metadata():
    value = {"tokens": [str(i) for i in range(100_000)], "text": "x" * 10_000, "n": 5}
    out = preview(value)
    assert len(out["tokens"]) == MAX_LIST_ITEMS + 1 and out["tokens"][-1].endswith("(100,000 items)")
    assert out["text"].endswith("(10,000 characters)") and out["n"] == 5


def test_hello_sends_the_palette():
    result, (palette,) = call(Session(), "hello")
    assert palette == colormap.palette_rgba()
    assert result["palette_levels"] == colormap.GRADIENT_LEVELS
