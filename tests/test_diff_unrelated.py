"""`diff` of two unrelated models says so, and a median SNR says how many tensors it is over
(issue 27): driven through the CLI as a user runs it, figures checked against numpy."""

import json
import math

import numpy as np
import pytest
from safetensors.numpy import save_file

import gguf_files
from tensorloupe.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bert_like(path):
    rng = np.random.default_rng(0)
    d = {"embeddings.word_embeddings.weight": rng.standard_normal((100, 32)).astype(np.float32),
         "embeddings.position_embeddings.weight": rng.standard_normal((64, 32)).astype(np.float32)}
    for i in range(2):
        for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            d[f"encoder.layer.{i}.{n}.weight"] = rng.standard_normal((32, 32)).astype(np.float32)
            d[f"encoder.layer.{i}.{n}.bias"] = rng.standard_normal(32).astype(np.float32)
        d[f"encoder.layer.{i}.intermediate.dense.weight"] = rng.standard_normal((64, 32)).astype(np.float32)
        d[f"encoder.layer.{i}.output.dense.weight"] = rng.standard_normal((32, 64)).astype(np.float32)
    save_file(d, str(path))
    return path


def test_a_bert_against_a_llama_gguf_looks_like_different_models(capsys, tmp_path):
    gguf_files.write_all(tmp_path)
    bert = bert_like(tmp_path / "bert.safetensors")
    code, out, _ = run(capsys, "diff", bert, tmp_path / "tiny-llama.gguf")
    assert code == 0
    assert "these look like different models: 0 comparable tensors" in out
    assert "no compared value differs" not in out and "SNR inf" not in out
    assert "layers changed most" not in out
    code, out, _ = run(capsys, "diff", bert, tmp_path / "tiny-llama.gguf", "--json")
    s = json.loads(out)["summary"]
    assert s["different_models"] is True and s["comparable"] == 0


def test_disjoint_shapes_under_the_same_names(capsys, tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"model.layers.0.self_attn.q_proj.weight": np.ones((8, 8), np.float32),
               "model.layers.0.mlp.up_proj.weight": np.ones((16, 8), np.float32)}, str(a))
    save_file({"model.layers.0.self_attn.q_proj.weight": np.ones((4, 4), np.float32),
               "model.layers.0.mlp.up_proj.weight": np.ones((6, 8), np.float32)}, str(b))
    code, out, _ = run(capsys, "diff", a, b)
    assert code == 0 and "these look like different models: 0 comparable tensors of 2" in out
    assert "inf" not in out


def test_a_median_snr_says_how_many_tensors_it_is_over(capsys, tmp_path):
    rng = np.random.default_rng(1)
    base = {f"model.layers.{i}.mlp.down_proj.weight": rng.standard_normal((16, 16)).astype(np.float32)
            for i in range(12)}
    changed = dict(base)
    name = "model.layers.3.mlp.down_proj.weight"
    changed[name] = base[name] + np.float32(0.01) * rng.standard_normal((16, 16)).astype(np.float32)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file(base, str(a))
    save_file(changed, str(b))
    x, y = base[name].astype(np.float64), changed[name].astype(np.float64)
    snr = 10 * math.log10(np.sum(x * x) / np.sum((x - y) ** 2))
    code, out, _ = run(capsys, "diff", a, b)
    assert code == 0
    assert f"median SNR {snr:.1f} dB over 1 differing tensor, worst {name} {snr:.1f} dB" in out
    assert "11 byte identical" in out and "different models" not in out
    # a layer where only shapes changed says so instead of "SNR inf"
    shaped = dict(base)
    shaped["model.layers.5.mlp.down_proj.weight"] = np.ones((4, 4), np.float32)
    save_file(shaped, str(b))
    code, out, _ = run(capsys, "diff", a, b)
    assert "layer    5: 1/1 tensor changed, shapes changed, no values compared" in out
    assert "SNR inf" not in out
