"""The Compare tab's worker requests (tensorloupe.web.compare_ops) in CPython: B opened beside A,
the comparison as a job whose last step carries `tensorloupe diff --json`'s report, a cancelled
comparison that stops reading, and the A/B/A−B view of one pair drawn from compare.views' values
on one colour scale, with both histograms on the same bins."""

import json
from array import array
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe import colormap
from tensorloupe.comparison import views
from tensorloupe.errors import FormatError, UsageError
from tensorloupe.web.handlers import Session

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "fixtures" / "out" / "converted-src" / "llama" / "model.safetensors"
Q8 = ROOT / "fixtures" / "converted" / "tiny-llama.q8_0.gguf"


def session_of(a, b) -> Session:
    session = Session()
    session.op_open({"path": str(a)})
    session.op_compare_open({"paths": [str(b)]})
    return session


def run_job(session, **args) -> tuple[list[dict], dict]:
    start, _ = session.op_compare_start(args)
    steps = [start]
    while not steps[-1]["finished"]:
        steps.append(session.jobs.step(start["job"]))
    return steps, steps[-1]


def plain(value):
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("samples", [None, 1024])
def test_the_job_ends_with_the_diff_report(samples):
    session = session_of(HF, Q8)
    other, _ = session.op_compare_other({})
    assert (other["file"], other["pairs"], other["matched"], other["name_map"]) == ("tiny-llama.q8_0.gguf", 21, 21, "llama")
    steps, last = run_job(session, **({"samples": samples} if samples else {}))
    assert steps[0]["total"] == 21 and not steps[0]["finished"]
    assert [s["done"] for s in steps] == sorted(s["done"] for s in steps) and last["done"] == 21
    kwargs = {"samples": samples} if samples else {}
    with tensorloupe.compare(str(HF), str(Q8), **kwargs) as expected:
        want = plain(expected.to_json())
    got = plain(last["comparison"])
    assert {k: v for k, v in got.items() if k != "bytes_read"} == {k: v for k, v in want.items() if k != "bytes_read"}
    modes = {t["exact"] for t in got["tensors"] if t["compared"] is not None}
    assert modes == ({True} if samples is None else {False})     # 6,144-element tensors: 1,024 is a sample


def test_a_cancelled_comparison_reads_no_more(tmp_path):
    # larger than the blocks a header read caches: the comparison's reads reach the files
    rng = np.random.default_rng(5)
    a = {f"layers.{i}.weight": rng.normal(size=(512, 512)).astype(np.float32) for i in range(8)}
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file({k: v * np.float32(1.01) for k, v in a.items()}, str(tmp_path / "b.safetensors"))
    session = session_of(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    start, _ = session.op_compare_start({"exact": True})
    for _ in range(6):
        progress = session.jobs.step(start["job"])
    read = session.checkpoint.bytes_read() + session.other.bytes_read()
    assert progress["bytes_read"] > 0 and not progress["finished"]
    assert session.jobs.cancel(start["job"]) == {"cancelled": True}
    with pytest.raises(UsageError, match="not running"):
        session.jobs.step(start["job"])
    assert session.checkpoint.bytes_read() + session.other.bytes_read() == read
    with pytest.raises(UsageError, match="run it first"):
        session.op_compare_view({"name": "layers.0.weight"})


def test_the_view_is_the_librarys_tiles_on_one_scale():
    session = session_of(HF, Q8)
    run_job(session)
    result, buffers = session.op_compare_view({"name": "blk.0.attn_q.weight", "rows": 40, "cols": 30})
    assert result["name"] == "model.layers.0.self_attn.q_proj.weight"
    assert result["row"]["notes"] == ["Q/K rows un-permuted (convert_hf_to_gguf permutes them for rope)"]
    pair = session.comparison.row("blk.0.attn_q.weight").pair
    tiles = views.tiles(pair, 40, 30)
    scale = tiles["amax"]
    assert result["scale"] == scale > 0
    for k, key in enumerate(("a", "b", "diff")):
        meta = result["panels"][key]
        assert (meta["rows"], meta["cols"], meta["exact"]) == (40, 30, False)
        assert meta["row_index"] == tiles["row_index"] and meta["col_index"] == tiles["col_index"]
        assert meta["scale"] == scale
        assert buffers[2 * k] == bytes(colormap.rgba(tiles[key], scale))
        assert list(array("d", buffers[2 * k + 1])) == tiles[key]
    # the Q/K permutation is undone: A and B agree to Q8_0 rounding at every cell shown
    assert max(abs(v) for v in tiles["diff"]) < 2e-3
    # A − B on its own scale: the error of Q8_0, white on the weights' scale, in colour
    own, buffers = session.op_compare_view({"name": "blk.0.attn_q.weight", "rows": 40, "cols": 30, "diff_scale": "own"})
    diff_scale = max(abs(v) for v in tiles["diff"])
    assert own["panels"]["diff"]["scale"] == diff_scale < scale / 50 and own["panels"]["a"]["scale"] == scale
    assert buffers[4] == bytes(colormap.rgba(tiles["diff"], diff_scale))
    ha, hb = views.histograms(pair)
    assert result["histograms"] == {"a": ha.to_json(), "b": hb.to_json()}
    assert result["histograms"]["a"]["edges"] == result["histograms"]["b"]["edges"]


def test_pairs_without_a_counterpart_have_no_view_and_a_bad_b_keeps_the_old(tmp_path):
    rng = np.random.default_rng(3)
    a = {"x.weight": rng.normal(size=(8, 8)).astype(np.float32), "only.a": rng.normal(size=(4,)).astype(np.float32)}
    b = {"x.weight": a["x.weight"] * 2, "only.b": rng.normal(size=(4,)).astype(np.float32)}
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file(b, str(tmp_path / "b.safetensors"))
    (tmp_path / "bad.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"not json")
    session = session_of(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    with pytest.raises(FormatError):
        session.op_compare_open({"paths": [str(tmp_path / "bad.safetensors")]})
    assert session.op_compare_other({})[0]["file"] == "b.safetensors"
    _, last = run_job(session)
    counts = last["comparison"]["summary"]["counts"]
    assert (counts["only_in_a"], counts["only_in_b"], counts["values_differ"]) == (1, 1, 1)
    with pytest.raises(UsageError, match="no counterpart"):
        session.op_compare_view({"name": "only.a"})
    view, _ = session.op_compare_view({"name": "x.weight"})
    assert view["panels"]["diff"]["exact"] is True
    # another A: the finished comparison was of the old one; B stays and pairs anew
    session.op_open({"path": str(tmp_path / "b.safetensors")})
    with pytest.raises(UsageError, match="run it first"):
        session.op_compare_view({"name": "x.weight"})
    assert session.op_compare_other({})[0]["matched"] == 2


def test_nothing_to_compare_with_is_said():
    session = Session()
    session.op_open({"path": str(HF)})
    assert session.op_compare_other({}) == (None, [])
    with pytest.raises(UsageError, match="Compare with"):
        session.op_compare_start({})
    with pytest.raises(UsageError, match="at least 1"):
        session_of(HF, Q8).op_compare_start({"samples": 0})
