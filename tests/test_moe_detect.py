"""MoE detection from names: the conventions in use, and failing closed on anything else."""

from tensorloupe.model import Checkpoint, Tensor
from tensorloupe.moe import detect


def ckpt(names_shapes, metadata=None):
    tensors = [Tensor(n, "F32", s, 0, 0) for n, s in names_shapes]
    return Checkpoint("test", "t", 0, tensors, metadata=metadata or {})


def test_qwen_style_with_shared_expert_and_config_top_k():
    names = []
    for layer in range(2):
        p = f"model.layers.{layer}.mlp"
        names.append((f"{p}.gate.weight", (4, 8)))
        names.append((f"{p}.shared_expert.up_proj.weight", (16, 8)))
        names.append((f"{p}.shared_expert_gate.weight", (1, 8)))
        for e in range(4):
            for leaf in ("gate_proj", "up_proj", "down_proj"):
                names.append((f"{p}.experts.{e}.{leaf}.weight", (16, 8)))
    found = detect(ckpt(names), config={"num_experts_per_tok": 3})
    assert found.detected and found.expert_count == 4 and found.top_k == 3
    assert found.top_k_source == "config.json num_experts_per_tok"
    layer = found.layers[1]
    assert layer.index == 1 and layer.router == ["model.layers.1.mlp.gate.weight"]
    assert layer.shared == ["model.layers.1.mlp.shared_expert.up_proj.weight"]
    assert all("shared" not in ref.tensor for leaves in layer.experts.values() for ref in leaves.values())


def test_deepseek_shared_experts_and_correction_bias():
    names = [("model.layers.3.mlp.gate.weight", (4, 8)), ("model.layers.3.mlp.gate.e_score_correction_bias", (4,)),
             ("model.layers.3.mlp.shared_experts.down_proj.weight", (8, 16))]
    names += [(f"model.layers.3.mlp.experts.{e}.down_proj.weight", (8, 16)) for e in range(4)]
    found = detect(ckpt(names))
    assert found.detected and found.top_k is None  # never guessed
    assert found.layers[0].router == ["model.layers.3.mlp.gate.weight", "model.layers.3.mlp.gate.e_score_correction_bias"]
    assert found.layers[0].shared == ["model.layers.3.mlp.shared_experts.down_proj.weight"]


def test_gguf_stacked_experts_with_metadata_top_k():
    names = [("blk.0.ffn_gate_inp.weight", (8, 64)), ("blk.0.ffn_gate_exps.weight", (8, 32, 64)),
             ("blk.0.ffn_up_exps.weight", (8, 32, 64)), ("blk.0.ffn_down_exps.weight", (8, 64, 32)),
             ("blk.0.ffn_up_shexp.weight", (32, 64)), ("blk.0.attn_q.weight", (64, 64))]
    found = detect(ckpt(names, {"qwen2moe.expert_used_count": 2, "qwen2moe.expert_count": 8}))
    assert found.detected and found.expert_count == 8 and found.top_k == 2
    layer = found.layers[0]
    assert layer.stacked and layer.router == ["blk.0.ffn_gate_inp.weight"]
    assert layer.shared == ["blk.0.ffn_up_shexp.weight"]
    assert layer.experts[5]["gate"].tensor == "blk.0.ffn_gate_exps.weight" and layer.experts[5]["gate"].expert == 5


def test_fused_hf_expert_tensors():
    names = [("model.layers.0.mlp.router.weight", (4, 8)),
             ("model.layers.0.mlp.experts.gate_up_proj", (4, 8, 32)),
             ("model.layers.0.mlp.experts.down_proj", (4, 16, 8))]
    found = detect(ckpt(names))
    assert found.detected and found.expert_count == 4 and found.layers[0].stacked
    assert found.layers[0].router == ["model.layers.0.mlp.router.weight"]


def test_dense_model_reports_no_moe():
    names = [(f"model.layers.{i}.mlp.{p}.weight", (16, 8)) for i in range(2) for p in ("gate_proj", "up_proj")]
    found = detect(ckpt(names))
    assert not found.detected and "no tensor names" in found.reason


def test_unusual_names_fail_closed():
    # expert numbers with gaps, a single expert, experts with different weights: not reported
    gaps = [(f"m.experts.{e}.w", (2, 2)) for e in (0, 1, 5)]
    assert not detect(ckpt(gaps)).detected
    assert not detect(ckpt([("m.experts.0.w", (2, 2))])).detected
    uneven = [("m.experts.0.w1", (2, 2)), ("m.experts.1.w2", (2, 2))]
    assert not detect(ckpt(uneven)).detected
    # a 2-D tensor named like a fused expert weight is not a stack of experts
    assert not detect(ckpt([("m.experts.proj", (4, 4))])).detected
