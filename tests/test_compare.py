"""`tensorloupe diff` and tensorloupe.compare, driven as a user would, checked against numpy
(and gguf-py's dequantisation for the real converter's GGUF files)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file as save_np
from safetensors.torch import save_file as save_torch

import tensorloupe
from tensorloupe.cli import main
from tensorloupe.errors import Cancelled

ROOT = Path(__file__).resolve().parent.parent
CONVERTED = ROOT / "fixtures" / "converted"
SOURCES = ROOT / "fixtures" / "out" / "converted-src"


def diff_json(capsys, *argv):
    code = main(["diff", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def numpy_metrics(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    d = a - b
    return {"max_abs": np.abs(d).max(), "mean_abs": np.abs(d).mean(),
            "rel_error": np.linalg.norm(d) / np.linalg.norm(a),
            "cosine": a @ b / (np.linalg.norm(a) * np.linalg.norm(b)),
            "snr_db": 10 * np.log10((a @ a) / (d @ d))}


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(7)
    tensors = {f"model.layers.{n}.{k}.weight": rng.normal(0, 0.02, shape).astype(np.float32)
               for n in range(3) for k, shape in (("self_attn.q_proj", (64, 64)), ("mlp.up_proj", (96, 64)),
                                                  ("input_layernorm", (64,)))}
    tensors["model.embed_tokens.weight"] = rng.normal(0, 1, (300, 700)).astype(np.float32)
    path = tmp_path / "a.safetensors"
    save_np(tensors, str(path))
    return path, tensors


def test_a_model_against_itself_is_byte_identical_everywhere(capsys, model):
    path, tensors = model
    out = diff_json(capsys, path, path)
    assert out["summary"]["counts"]["byte_identical"] == len(tensors)
    assert all(t["category"] == "byte_identical" and t["bytes_checked"] for t in out["tensors"])
    # identity decided on the bytes: every byte of both was read (those that opening the file
    # already brought into the block cache come from there, not from the file again)
    with tensorloupe.open(path) as opened:
        total, cached = sum(t.nbytes for t in opened.tensors), opened.bytes_read()
    assert out["bytes_read"]["a"] >= total - cached and out["bytes_read"]["b"] >= total - cached


def test_a_gguf_against_itself(capsys):
    out = diff_json(capsys, CONVERTED / "tiny-llama.q8_0.gguf", CONVERTED / "tiny-llama.q8_0.gguf")
    assert {t["category"] for t in out["tensors"]} == {"byte_identical"}
    assert out["summary"]["counts"]["byte_identical"] == 21


def test_one_changed_element_is_found_and_reported_alone(capsys, model, tmp_path):
    path, tensors = model
    changed = dict(tensors)
    emb = changed["model.embed_tokens.weight"].copy()
    # far from the sampler's evenly spread windows: only the byte comparison can point at it
    emb.flat[123_457] += 0.5
    changed["model.embed_tokens.weight"] = emb
    other = tmp_path / "b.safetensors"
    save_np(changed, str(other))
    out = diff_json(capsys, path, other, "--samples", "512")
    differ = [t for t in out["tensors"] if t["category"] != "byte_identical"]
    assert [t["name"] for t in differ] == ["model.embed_tokens.weight"]
    row = differ[0]
    assert row["category"] == "values_differ" and not row["exact"]
    assert row["first_difference"] == 123_457 * 4 + 0  # little-endian f32: the first byte that differs
    assert row["first_difference"] // 4 == 123_457
    assert row["max_abs"] == pytest.approx(0.5, abs=1e-6)
    assert out["summary"]["ranked"] == ["model.embed_tokens.weight"]
    assert out["summary"]["counts"]["byte_identical"] == len(tensors) - 1


def test_fp32_against_its_bf16_cast_matches_numpy(tmp_path):
    rng = np.random.default_rng(3)
    f32 = {f"layers.{n}.w.weight": rng.normal(0, 0.05, (128, 96)).astype(np.float32) for n in range(2)}
    save_np(f32, str(tmp_path / "f32.safetensors"))
    bf16 = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in f32.items()}
    save_torch(bf16, str(tmp_path / "bf16.safetensors"))
    result = tensorloupe.compare(tmp_path / "f32.safetensors", tmp_path / "bf16.safetensors", exact=True)
    assert result.summary["label"] == "BF16 vs F32"
    for name, a in f32.items():
        row = result.row(name).to_json()
        assert row["category"] == "values_differ" and row["dtype_changed"] and row["exact"]
        assert row["compared"] == a.size
        expected = numpy_metrics(a, bf16[name].float().numpy())
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-9), key
        # bf16 keeps 8 significant bits: round-to-nearest leaves a relative error of ~2^-9/sqrt(3)
        assert 0.5 * 2 ** -9 < row["rel_error"] < 2 * 2 ** -9


def converted_pairs():
    return [(m, q) for m in ("llama", "mixtral") for q in ("f16", "q8_0")]


def gguf_arrays(path):
    """Every tensor of a GGUF file dequantised by gguf-py, shaped outermost-first."""
    reader = gguf.GGUFReader(str(path))
    return {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(tuple(reversed(t.shape.tolist())))
            for t in reader.tensors}


def converter_permute(w, n_head):
    # LlamaModel.permute from llama.cpp's conversion/llama.py, as the converter applied it
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("model_name, outtype", converted_pairs())
def test_real_converter_outputs_match_numpy_on_dequantised_values(model_name, outtype):
    hf = load_file(str(SOURCES / model_name / "model.safetensors"))
    gg = gguf_arrays(CONVERTED / f"tiny-{model_name}.{outtype}.gguf")
    result = tensorloupe.compare(SOURCES / model_name / "model.safetensors",
                                 CONVERTED / f"tiny-{model_name}.{outtype}.gguf")
    counts = result.summary["counts"]
    assert counts["only_in_a"] == counts["only_in_b"] == counts["shape_changed"] == counts["unreadable"] == 0
    assert result.summary["matched"] == len(hf) and result.name_map == "llama"
    config = json.loads((SOURCES / model_name / "config.json").read_text())
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    for row in result.rows:
        b_name, _, expert = row.pair.b.label.partition("[")
        b = gg[b_name] if not expert else gg[b_name][int(expert[:-1])]
        a = hf[row.name]
        # undo the converter's permutation with numpy: b holds permute(a)
        kind = row.name.split(".")[-2]
        if kind in heads:
            b = b[np.argsort(converter_permute(np.arange(a.shape[0]), heads[kind]))]
        if row.category == "byte_identical":
            assert (a == b).all()
            continue
        expected = numpy_metrics(a, b)
        assert row.diff.count == a.size  # these tensors are smaller than the sample: every element
        assert abs(row.diff.snr_db - expected["snr_db"]) < 0.1, row.name
        assert row.diff.rel_error == pytest.approx(expected["rel_error"], rel=1e-6)
        assert row.diff.max_abs == pytest.approx(expected["max_abs"], rel=1e-6)
        # f16 is only rounding (~74 dB here): a wrong row order would give ~0 dB
        assert row.diff.snr_db > (65 if outtype == "f16" else 40), row.name


def test_without_the_permutation_q_and_k_would_not_match():
    # the control for the test above: the GGUF rows really are permuted
    hf = load_file(str(SOURCES / "llama" / "model.safetensors"))
    gg = gguf_arrays(CONVERTED / "tiny-llama.f16.gguf")
    raw = numpy_metrics(hf["model.layers.0.self_attn.q_proj.weight"], gg["blk.0.attn_q.weight"])
    assert raw["snr_db"] < 3


def test_stacked_experts_are_compared_one_expert_at_a_time(capsys):
    out = diff_json(capsys, SOURCES / "mixtral" / "model.safetensors", CONVERTED / "tiny-mixtral.q8_0.gguf")
    rows = {t["name"]: t for t in out["tensors"]}
    row = rows["model.layers.1.block_sparse_moe.experts.2.w3.weight"]
    assert row["b"] == "blk.1.ffn_up_exps.weight[2]" and row["b_shape"] == row["a_shape"] == [32, 32]
    assert "expert 2 of the stacked blk.1.ffn_up_exps.weight" in row["notes"]
    # and the other way round: A is the GGUF, its stacked tensor's slices are matched to HF tensors
    back = diff_json(capsys, CONVERTED / "tiny-mixtral.q8_0.gguf", SOURCES / "mixtral" / "model.safetensors")
    names = {t["name"]: t for t in back["tensors"]}
    assert names["blk.1.ffn_up_exps.weight[2]"]["b"] == "model.layers.1.block_sparse_moe.experts.2.w3.weight"
    # the reference changed sides (Σb² instead of Σa² over the same Σ(a−b)²): close, not equal
    assert names["blk.1.ffn_up_exps.weight[2]"]["snr_db"] == pytest.approx(row["snr_db"], abs=0.1)
    assert names["blk.1.ffn_up_exps.weight[2]"]["snr_db"] != row["snr_db"]
    assert back["summary"]["counts"]["only_in_a"] == back["summary"]["counts"]["only_in_b"] == 0


def test_summary_roles_by_layer_and_the_layers_a_merge_changed(tmp_path, model):
    path, tensors = model
    merged = {k: (v * 1.01 if k.startswith("model.layers.1.") else v) for k, v in tensors.items()}
    save_np(merged, str(tmp_path / "merged.safetensors"))
    result = tensorloupe.compare(path, tmp_path / "merged.safetensors")
    s = result.summary
    assert s["layers"][0]["layer"] == 1 and s["layers"][0]["changed"] == 3
    assert [e["changed"] for e in s["layers"][1:]] == [0, 0]
    q = s["roles"]["model.layers.*.self_attn.q_proj.weight"]
    assert [p["layer"] for p in q] == [0, 1, 2]
    assert q[0]["snr_db"] == math.inf and q[2]["identical"] == 1
    # b = 1.01 a: SNR = 10 log10(1 / 0.01^2) = 40 dB exactly
    assert q[1]["snr_db"] == pytest.approx(40.0, abs=1e-3)
    assert "median SNR 40.0 dB" in s["headline"]


def test_only_in_one_and_shape_changes(capsys, tmp_path, model):
    path, tensors = model
    other = dict(tensors)
    other["model.layers.0.mlp.up_proj.weight"] = tensors["model.layers.0.mlp.up_proj.weight"][:64]
    other["extra.weight"] = other.pop("model.layers.2.input_layernorm.weight")
    save_np(other, str(tmp_path / "b.safetensors"))
    out = diff_json(capsys, path, tmp_path / "b.safetensors")
    by = {t["name"]: t for t in out["tensors"]}
    assert by["model.layers.0.mlp.up_proj.weight"]["category"] == "shape_changed"
    assert by["model.layers.0.mlp.up_proj.weight"]["message"] == "shape [96, 64] in A, [64, 64] in B"
    assert by["model.layers.2.input_layernorm.weight"]["category"] == "only_in_a"
    assert by["extra.weight"]["category"] == "only_in_b"
    assert by["extra.weight"]["a"] is None and by["extra.weight"]["max_abs"] is None


def test_exact_reports_progress_and_can_be_cancelled(model, tmp_path):
    path, tensors = model
    save_np({k: v + 1e-3 for k, v in tensors.items()}, str(tmp_path / "b.safetensors"))
    seen = []
    result = tensorloupe.compare(path, tmp_path / "b.safetensors", exact=True,
                                 progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (len(tensors), len(tensors)) and all(r.exact for r in result.rows)
    with pytest.raises(Cancelled):
        tensorloupe.compare(path, tmp_path / "b.safetensors", exact=True, progress=lambda d, t: d < 2)


def test_sampled_compares_the_same_positions_and_says_so(model, tmp_path):
    path, tensors = model
    emb = tensors["model.embed_tokens.weight"]
    noisy = emb + np.random.default_rng(1).normal(0, 0.01, emb.shape).astype(np.float32)
    save_np({"model.embed_tokens.weight": noisy}, str(tmp_path / "b.safetensors"))
    result = tensorloupe.compare(path, tmp_path / "b.safetensors", samples=4096,
                                 tensors=["model.embed_tokens.weight"])
    row = result.rows[0]
    assert [r.name for r in result.rows] == ["model.embed_tokens.weight"]
    assert row.diff.count == 4096 and not row.exact
    # the SNR of a 4096-element sample is close to the whole tensor's
    assert row.diff.snr_db == pytest.approx(numpy_metrics(emb, noisy)["snr_db"], abs=0.5)
    assert result.to_json()["mode"] == "sampled" and result.to_json()["samples_per_tensor"] == 4096


def test_cli_text_and_errors(model):
    path, _ = model
    run = [sys.executable, "-m", "tensorloupe.cli", "diff"]
    env = {"PYTHONPATH": str(ROOT / "pylib")}
    done = subprocess.run(run + [str(path), str(CONVERTED / "tiny-llama.f16.gguf")], capture_output=True,
                          text=True, env=env)
    # an unrelated model: some names still map (same HF names), the rest is only in one or the other
    assert done.returncode == 0 and "matched 7 pairs through the llama name map" in done.stdout
    assert "shape changed: 1" in done.stdout and "only in b: 14" in done.stdout
    done = subprocess.run(run + [str(path), str(path), "--tensor", "nope"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stderr.strip() == "tensorloupe: no tensor named 'nope' in either checkpoint"
    done = subprocess.run(run + [str(path), str(ROOT / "README.md")], capture_output=True, text=True, env=env)
    assert done.returncode in (2, 3) and "Traceback" not in done.stderr and "README.md" in done.stderr


def test_nan_in_the_same_place_is_not_a_difference_but_a_new_nan_is(tmp_path):
    a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    a[2, 3] = np.nan
    same_nan = a.copy()
    same_nan[0, 0] += 0.25          # one finite difference so the bytes differ
    new_nan = a.copy()
    new_nan[5, 5] = np.nan
    save_np({"w": a}, str(tmp_path / "a.safetensors"))
    save_np({"w": same_nan}, str(tmp_path / "b.safetensors"))
    save_np({"w": new_nan}, str(tmp_path / "c.safetensors"))
    row = tensorloupe.compare(tmp_path / "a.safetensors", tmp_path / "b.safetensors").row("w").to_json()
    assert (row["compared"], row["nonfinite"], row["nonfinite_differ"]) == (63, 1, 0)
    assert row["max_abs"] == pytest.approx(0.25)
    row = tensorloupe.compare(tmp_path / "a.safetensors", tmp_path / "c.safetensors").row("w").to_json()
    assert row["category"] == "values_differ" and row["max_abs"] == 0.0
    assert (row["nonfinite"], row["nonfinite_differ"]) == (2, 1)


def test_integer_tensors_and_empty_tensors(tmp_path):
    save_np({"i": np.arange(10, dtype=np.int32), "e": np.zeros((0, 4), np.float32)}, str(tmp_path / "a.safetensors"))
    save_np({"i": np.arange(10, dtype=np.int64) * 2, "e": np.zeros((0, 4), np.float32)},
            str(tmp_path / "b.safetensors"))
    result = tensorloupe.compare(tmp_path / "a.safetensors", tmp_path / "b.safetensors", exact=True)
    i = result.row("i").to_json()
    assert i["dtype_changed"] and i["max_abs"] == 9.0 and i["compared"] == 10
    assert i["rel_error"] == pytest.approx(1.0)
    assert result.row("e").category == "byte_identical"


def test_tiles_show_the_same_elements_of_a_b_and_a_minus_b_on_one_scale():
    from tensorloupe.comparison import views
    hf = load_file(str(SOURCES / "llama" / "model.safetensors"))
    gg = gguf_arrays(CONVERTED / "tiny-llama.q8_0.gguf")
    result = tensorloupe.compare(SOURCES / "llama" / "model.safetensors", CONVERTED / "tiny-llama.q8_0.gguf")
    pair = result.row("model.layers.1.self_attn.q_proj.weight").pair
    t = views.tiles(pair, 16, 16, region=(8, 40, 0, 64))
    rows, cols = np.array(t["row_index"]), np.array(t["col_index"])
    a = hf["model.layers.1.self_attn.q_proj.weight"]
    b = gg["blk.1.attn_q.weight"][np.argsort(converter_permute(np.arange(64), 4))]  # back in HF row order
    assert np.array_equal(np.array(t["a"]).reshape(16, 16), a[np.ix_(rows, cols)])
    assert np.array_equal(np.array(t["b"]).reshape(16, 16), b[np.ix_(rows, cols)])
    assert np.allclose(np.array(t["diff"]), (a - b)[np.ix_(rows, cols)].ravel(), atol=1e-12)
    assert t["amax"] == pytest.approx(max(np.abs(a[np.ix_(rows, cols)]).max(), np.abs(b[np.ix_(rows, cols)]).max()))
    ha, hb = views.histograms(pair, bins=16)
    assert ha.edges == hb.edges and sum(ha.counts) == sum(hb.counts) == a.size
    expected, _ = np.histogram(a.astype(np.float64), bins=np.array(ha.edges))
    assert ha.counts == expected.tolist()
