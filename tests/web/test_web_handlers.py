"""The worker's Python handlers, in CPython: envelopes, buffers, errors, stepwise exact stats."""

from __future__ import annotations

import json
import math
from array import array

import numpy as np
import pytest
from safetensors.numpy import save_file

import tensorloupe
from tensorloupe.architecture import report as arch_report
from tensorloupe import colormap, report
from tensorloupe.jsonable import PREVIEW, bounded
from tensorloupe.web import moe_ops, page_table
from tensorloupe.web.handlers import Session, dispatch, exact_job


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


def records(result) -> list[dict]:
    """The page's tensor table as records (what web/model.js decodes)."""
    return page_table.records(result["tensors"], result["files"])


def test_open_reports_summary_tensors_and_moe(files):
    s = Session()
    result, buffers = call(s, "open", path=str(files / "a.safetensors"))
    assert buffers == []
    assert (result["file"], result["format"], result["tensor_count"]) == ("a.safetensors", "safetensors", 2)
    assert result["parameters"] == 300 * 500 + 3 * 20 * 30
    assert result["parameters_by_dtype"] == {"F32": 150000, "F16": 1800}
    assert result["bytes_by_dtype"] == {"F32": 600000, "F16": 3600}
    assert sorted((t["name"], t["dtype"], t["shape"], t["nbytes"]) for t in records(result)) == [
        ("cube", "F16", [3, 20, 30], 3600), ("x", "F32", [300, 500], 600000)]
    assert "moe" not in result                  # it comes next, with the architecture
    assert call(s, "model_details")[0]["moe"]["detected"] is False


def test_the_page_payload_is_inspect_json(files):
    # One serialisation of a checkpoint: the page gets `inspect --json`'s fields and tensor
    # records (less `info`, which the "tensor" reply carries), plus page-only fields; the
    # architecture block and the MoE structure come in the next reply (model_details).
    s = Session()
    result, _ = call(s, "open", path=str(files / "a.safetensors"))
    details, _ = call(s, "model_details")
    ckpt = tensorloupe.open(str(files / "a.safetensors"))
    listing = {**report.inspect_json(ckpt), **arch_report.describe(ckpt)}  # what inspect --json prints
    columns = set(records(result)[0])
    assert records(result) == [{k: t.get(k) for k in columns} for t in listing["tensors"]]
    assert all(set(t) - {"info"} <= columns for t in listing["tensors"])
    page_only = {"bytes_by_dtype", "tokenizer"}
    assert set(result) | {"architecture", "memory"} == set(listing) | page_only
    assert {k: v for k, v in {**result, **details}.items() if k not in page_only | {"tensors", "moe"}} == {
        k: v for k, v in listing.items() if k != "tensors"}
    assert details["moe"] == json.loads(json.dumps(tensorloupe.moe.detect(ckpt).to_json()))


def test_open_demo_detects_experts():
    s = Session()
    result, _ = call(s, "open_demo")
    assert result["file"] == "demo-moe.safetensors"
    found = call(s, "model_details")[0]["moe"]
    assert found["detected"] and found["expert_count"] == 8 and found["top_k"] == 2


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
    job = exact_job(t, chunk_elems=4096)     # many steps, as for a large tensor
    steps = 0
    while not job.finished:
        job.step()
        steps += 1
    assert steps == math.ceil(150000 / 4096)
    assert job.result()["stats"] == tensorloupe.exact_stats(t, chunk_elems=4096).to_json()


def test_exact_stats_messages_and_cancel(files):
    s = Session()
    call(s, "open", path=str(files / "a.safetensors"))
    started, _ = call(s, "exact_start", name="x")
    step, _ = call(s, "job_step", job=started["job"])
    assert step["finished"] and step["done"] == step["total"] == 150000
    assert step["stats"]["nan"] == 1
    started, _ = call(s, "exact_start", name="x")
    assert call(s, "job_cancel", job=started["job"])[0] == {"cancelled": True}
    assert call(s, "job_cancel", job=started["job"])[0] == {"cancelled": False}
    with pytest.raises(tensorloupe.TensorloupeError, match="not running"):
        s.handle("job_step", {"job": started["job"]})


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
    out = bounded(value, PREVIEW)
    assert len(out["tokens"]) == PREVIEW.items + 1 and out["tokens"][-1].endswith("(100,000 items)")
    assert out["text"].endswith("(10,000 characters)") and out["n"] == 5


def test_hello_sends_the_palette():
    result, (palette,) = call(Session(), "hello")
    assert palette == colormap.palette_rgba()
    assert result["palette_levels"] == colormap.GRADIENT_LEVELS
    assert result["jobs"] == ["compare", "exact", "health", "moe"]   # the worker steps these (jobs.py)


# --- the Experts tab: the redundancy analysis as a job, the threshold, experts side by side -------

def run_moe(s: Session, **args) -> tuple[list[dict], dict]:
    """Start and step an analysis to its end, as the worker does; (progress replies, last reply)."""
    started, _ = call(s, "moe_start", **args)
    assert started["done"] == 0 and not started["finished"]
    replies = []
    while True:
        step, _ = call(s, "job_step", job=started["job"])
        if step["finished"]:
            return replies, step
        replies.append(step)


def test_moe_analysis_in_steps_equals_analyse(monkeypatch):
    monkeypatch.setattr(moe_ops, "STEP_SECONDS", 0.0)     # every small step is a job step
    s = Session()
    call(s, "open_demo")
    plan, _ = call(s, "moe_plan")
    assert (plan["bytes_per_expert"], plan["total_bytes"], plan["experts"]) == (49152, 32 * 49152, 32)
    assert plan["matrices"] == ["w1.weight", "w2.weight", "w3.weight"] and plan["exact"]
    before = s.checkpoint.bytes_read()
    progress, last = run_moe(s)
    # Per layer: one step per expert, one per block of similarity rows (8 experts: one), one
    # with the matrix, one to finish the layer.
    assert len(progress) + 1 == 4 * (8 + 1 + 1 + 1)
    assert [p["done"] for p in progress][:8] == list(range(1, 9))
    assert all(a["bytes_read"] <= b["bytes_read"] for a, b in zip(progress, progress[1:]))
    assert progress[7]["bytes_read"] == 8 * 49152 and progress[7]["layers_done"] == 0
    from tensorloupe.synthetic import demo_bytes
    expected = tensorloupe.moe.redundancy.analyse(tensorloupe.open(demo_bytes())).to_json()
    del expected["moe"]
    assert last["analysis"] == json.loads(json.dumps(expected))
    assert s.checkpoint.bytes_read() - before == plan["total_bytes"] == last["bytes_read"]


def test_moe_job_steps_take_a_time_slice_each(monkeypatch):
    # Small steps are run together for STEP_SECONDS per job step: fewer messages, the same result.
    s = Session()
    call(s, "open_demo")
    monkeypatch.setattr(moe_ops, "STEP_SECONDS", 0.0)
    each, want = run_moe(s)
    monkeypatch.setattr(moe_ops, "STEP_SECONDS", 3600.0)
    none, last = run_moe(s)
    assert none == [] and last["analysis"] == want["analysis"] and len(each) == 43
    monkeypatch.setattr(moe_ops, "STEP_SECONDS", 0.05)
    some, last = run_moe(s)
    assert len(some) < len(each) and last["analysis"] == want["analysis"]
    assert [p["done"] for p in some] == sorted(p["done"] for p in some)


def test_within_yields_the_last_step_of_each_time_slice(monkeypatch):
    ticks = iter([0.0, 0.1, 0.2, 1.0, 1.0, 1.5, 1.6, 9.0])   # perf_counter() as within reads it
    monkeypatch.setattr(moe_ops.time, "perf_counter", lambda: next(ticks))
    # a..c: c is done 1.0 after the start (>= 0.9); d and e: the steps run out 0.6 after c
    assert list(moe_ops.within(iter("abcde"), 0.9)) == ["c", "e"]
    assert list(moe_ops.within(iter([]), 0.9)) == []


def test_moe_threshold_reclusters_without_reading():
    s = Session()
    call(s, "open_demo")
    with pytest.raises(tensorloupe.TensorloupeError, match="no expert analysis"):
        s.handle("moe_threshold", {"threshold": 0.5})
    run_moe(s)
    before = s.checkpoint.bytes_read()
    strict, _ = call(s, "moe_threshold", threshold=0.999)
    assert strict["recommendations"] == [] and all(l["clusters"] == [] for l in strict["layers"])
    again, _ = call(s, "moe_threshold", threshold=0.9)
    assert len(again["recommendations"]) == 16
    assert all(sorted(l["clusters"]) == [[0, 4], [1, 5], [2, 6], [3, 7]] for l in again["layers"])
    assert s.checkpoint.bytes_read() == before
    with pytest.raises(tensorloupe.TensorloupeError, match="within"):
        s.handle("moe_threshold", {"threshold": 1.5})


def test_moe_cancel_and_errors(files):
    s = Session()
    call(s, "open", path=str(files / "a.safetensors"))
    with pytest.raises(tensorloupe.TensorloupeError, match="no Mixture-of-Experts"):
        s.handle("moe_start", {})
    call(s, "open_demo")
    started, _ = call(s, "moe_start")
    call(s, "job_step", job=started["job"])
    exact, _ = call(s, "exact_start", name="lm_head.weight")
    assert exact["job"] != started["job"]           # two jobs at once, each by its own number
    assert call(s, "job_cancel", job=started["job"])[0] == {"cancelled": True}
    with pytest.raises(tensorloupe.TensorloupeError, match="not running"):
        s.handle("job_step", {"job": started["job"]})
    assert s.analysis is None                       # a cancelled analysis is not kept
    assert call(s, "job_step", job=exact["job"])[0]["finished"]
    # Opening another checkpoint drops the jobs of the one before.
    started, _ = call(s, "moe_start")
    call(s, "open_demo")
    with pytest.raises(tensorloupe.TensorloupeError, match="not running"):
        s.handle("job_step", {"job": started["job"]})


def test_moe_similarity_pixels():
    s = Session()
    call(s, "open_demo")
    _, last = run_moe(s)
    layer = last["analysis"]["layers"][2]
    result, (pixels,) = call(s, "moe_similarity", layer=layer["prefix"])
    assert result["experts"] == 8 and result["scale"] == 1.0
    flat = [v for row in layer["similarity"] for v in row]
    assert bytes(pixels) == bytes(colormap.rgba(flat, 1.0))


def test_expert_heatmaps_share_one_scale_and_slice_stacked_experts(tmp_path):
    import gguf_files
    path = gguf_files.write_moe(tmp_path / "moe.gguf")
    s = Session()
    call(s, "open", path=str(path))
    prefix = s.moe.layers[1].prefix
    result, buffers = call(s, "expert_heatmaps", layer=prefix, experts=[1, 5], leaf="gate", rows=256, cols=256)
    assert [p["tensor"] for p in result["panels"]] == ["blk.1.ffn_gate_exps.weight[1]", "blk.1.ffn_gate_exps.weight[5]"]
    assert len(buffers) == 6                      # pixels and values of each expert, then of the difference
    ckpt = tensorloupe.open(path)
    layer = tensorloupe.moe.redundancy.detect(ckpt).layers[1]
    grids = [tensorloupe.grid(tensorloupe.moe.redundancy.expert_tensor(ckpt, layer, e, "gate"), 256, 256) for e in (1, 5)]
    assert result["scale"] == max(g.amax for g in grids)
    for k, g in enumerate(grids):
        values = array("d")
        values.frombytes(buffers[2 * k + 1])
        assert list(values) == g.floats() and g.exact
        assert buffers[2 * k] == bytes(colormap.rgba(g.floats(), result["scale"]))
    diff = array("d")
    diff.frombytes(buffers[5])
    assert set(diff) == {0.0}, "expert 5 is a copy of expert 1"
    # The stacked expert's slice is the tensor's plane at that index: the Tensor tab's view.
    whole, (_, cells) = call(s, "heatmap", name="blk.1.ffn_gate_exps.weight", plane=[1, 2], index={"0": 5})
    assert cells == buffers[3]
    for bad, message in [({"experts": [1, 99]}, "are not 1 to 4 experts"), ({"leaf": "nope"}, "no matrix 'nope'"),
                         ({"layer": "blk.9"}, "no MoE layer")]:
        args = {"layer": prefix, "experts": [1, 5], "leaf": "gate", **bad}
        with pytest.raises(tensorloupe.TensorloupeError, match=message):
            s.handle("expert_heatmaps", args)


def test_torch_offsets_are_found_on_first_use(tmp_path):
    # Opening a torch ZIP reads no storage's local header: the listing has no offset for them,
    # and the tensor reply gives the absolute offset once its bytes are read.
    import struct
    import zipfile

    import torch
    path = tmp_path / "m.pt"
    torch.save({"a": torch.arange(6.0), "b": torch.ones(3, 4)}, path)
    s = Session()
    result, _ = call(s, "open", path=str(path))
    assert [t["offset"] for t in records(result)] == [None, None]
    reply, _ = call(s, "tensor", name="b")
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data/1"))
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    assert reply["tensor"]["offset"] == info.header_offset + 30 + name_len + extra_len
    assert reply["sample"]["stats"]["mean"] == 1.0


def test_open_carries_the_architecture_and_memory_the_cli_prints(capsys, demo_path, tmp_path):
    from tensorloupe.cli import main
    (tmp_path / "demo-moe.safetensors").write_bytes(demo_path.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({"num_experts_per_tok": 3}))
    s = Session()
    call(s, "open", path=str(tmp_path / "demo-moe.safetensors"), config=str(tmp_path / "config.json"))
    result, _ = call(s, "model_details")
    assert main(["inspect", str(tmp_path / "demo-moe.safetensors"), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert result["architecture"] == cli["architecture"]
    assert result["memory"] == cli["memory"]
    assert cli["architecture"]["moe"]["experts_per_token"] == 3
    again, _ = call(s, "architecture", context=32768, cache_type="q8_0")
    assert main(["inspect", str(tmp_path / "demo-moe.safetensors"), "--json", "--context", "32768",
                 "--cache-type", "q8_0"]) == 0
    assert again["memory"]["fits"] == json.loads(capsys.readouterr().out)["memory"]["fits"]
    assert again["memory"]["fits"]["kv_bytes"] == 32768 * 4 * 2 * (32 // 32 * 34)
    with pytest.raises(tensorloupe.TensorloupeError, match="whole number of tokens"):
        call(s, "architecture", context=0)


def test_tokens_pages_match_the_cli(capsys, tmp_path):
    import gguf_files
    from tensorloupe.cli import main
    path = gguf_files.write_llama(tmp_path / "tiny-llama.gguf")
    s = Session()
    call(s, "open", path=str(path))
    page, _ = call(s, "tokens", start=256, count=10)
    assert main(["tokens", str(path), "--start", "256", "--count", "10", "--json"]) == 0
    assert page == json.loads(capsys.readouterr().out) | {"file": page["file"]}
    found, _ = call(s, "tokens", find="ab", count=5)
    assert main(["tokens", str(path), "--find", "ab", "--count", "5", "--json"]) == 0
    assert found["matches"] == json.loads(capsys.readouterr().out)["matches"]
    call(s, "open_demo")
    with pytest.raises(tensorloupe.TensorloupeError, match="no tokenizer"):
        call(s, "tokens")


def test_where_the_tokenizer_is_decides_the_tokens_tab(capsys, tmp_path, demo_path):
    import gguf_files
    import tokenizer_files
    from tensorloupe.cli import main
    s = Session()
    assert call(s, "open", path=str(gguf_files.write_llama(tmp_path / "tiny.gguf")))[0]["tokenizer"] == "gguf"
    assert call(s, "open", path=str(demo_path))[0]["tokenizer"] is None
    assert call(s, "open_demo")[0]["tokenizer"] is None
    model = tokenizer_files.write_model_with_tokenizer(tmp_path / "hf")
    result, _ = call(s, "open", paths=[str(model)])
    assert result["tokenizer"] == "tokenizer.json"
    page, _ = call(s, "tokens", start=10, count=60)
    assert main(["tokens", str(model), "--start", "10", "--count", "60", "--json"]) == 0
    assert page == json.loads(capsys.readouterr().out)
    assert page["count"] == page["size"] - 10 == 53 and page["special"]["eos"]["token"] == "<|im_end|>"
    (tmp_path / "hf" / "tokenizer.json").unlink()       # parsed once per model: still served
    assert call(s, "tokens", find="<|im_end|>")[0]["matches"][0]["id"] == page["special"]["eos"]["id"]
    for bad in ({"start": -1}, {"count": "9"}, {"start": True}):
        with pytest.raises(tensorloupe.TensorloupeError, match="whole number"):
            call(s, "tokens", **bad)
