"""The HF <-> GGUF name map against gguf-py's own TensorNameMap, and the converter's Q/K
permutation as an index map against the converter's formula."""

import gguf
import numpy as np
import pytest
from gguf.tensor_mapping import TensorNameMap

from tensorloupe import namemap
from tensorloupe.namemap import table
from tools import gen_namemap

ARCH_IDS = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}
BLOCKS = 3


def test_the_generated_table_is_what_the_installed_gguf_py_generates():
    # fails after a gguf upgrade until `python3 tools/gen_namemap.py` is rerun and committed
    assert table.GGUF_PY_VERSION == gen_namemap._version()
    assert gen_namemap.OUT.read_text() == gen_namemap.build()


@pytest.mark.parametrize("arch", namemap.ARCHS)
def test_templates_expand_to_gguf_pys_mapping(arch):
    ours = {}
    for hf, target in namemap.templates(arch).items():
        if "{bid}" in hf or "{bid}" in target:
            for bid in range(BLOCKS):
                ours[hf.format(bid=bid)] = target.format(bid=bid)
        else:
            ours[hf] = target
    theirs = {key: name for key, (_, name) in TensorNameMap(ARCH_IDS[arch], BLOCKS).mapping.items()}
    assert ours == theirs


@pytest.mark.parametrize("arch", namemap.ARCHS)
def test_every_hf_name_gguf_py_knows_maps_as_gguf_py_maps_it(arch):
    names = TensorNameMap(ARCH_IDS[arch], BLOCKS)
    for key in names.mapping:
        for suffix in (".weight", ".bias"):
            expected = names.get_name(key + suffix, try_suffixes=(".weight", ".bias"))
            assert namemap.to_gguf(key + suffix, arch) == (expected, None), key + suffix


@pytest.mark.parametrize("arch, hf, gguf_name, expert", [
    ("llama", "model.layers.3.block_sparse_moe.experts.5.w1.weight", "blk.3.ffn_gate_exps.weight", 5),
    ("llama", "model.layers.0.block_sparse_moe.experts.0.w2.weight", "blk.0.ffn_down_exps.weight", 0),
    ("qwen2moe", "model.layers.2.mlp.experts.7.down_proj.weight", "blk.2.ffn_down_exps.weight", 7),
    ("qwen3moe", "model.layers.11.mlp.experts.127.up_proj.weight", "blk.11.ffn_up_exps.weight", 127),
    ("deepseek2", "model.layers.4.mlp.experts.63.gate_proj.weight", "blk.4.ffn_gate_exps.weight", 63),
    ("qwen2moe", "model.layers.2.mlp.shared_expert.gate_proj.weight", "blk.2.ffn_gate_shexp.weight", None),
    ("llama", "model.layers.10.self_attn.q_proj.weight", "blk.10.attn_q.weight", None),
    ("phi3", "model.layers.1.self_attn.qkv_proj.weight", "blk.1.attn_qkv.weight", None),
    ("gemma2", "model.layers.1.post_feedforward_layernorm.weight", "blk.1.post_ffw_norm.weight", None),
    ("qwen2", "model.layers.0.self_attn.k_proj.bias", "blk.0.attn_k.bias", None),
])
def test_per_expert_and_common_names(arch, hf, gguf_name, expert):
    assert namemap.to_gguf(hf, arch) == (gguf_name, expert)


def test_unknown_names_and_architectures_map_to_nothing():
    assert namemap.to_gguf("model.layers.0.self_attn.q_proj.weight", "no-such-arch") is None
    assert namemap.to_gguf("model.layers.0.something_new.weight", "llama") is None
    assert namemap.to_gguf("model.layers.0.mlp.experts.3.unknown.weight", "qwen2moe") is None


def converter_permute(weights, n_head, n_head_kv):
    # LlamaModel.permute from llama.cpp's conversion/llama.py (llama-cpp-python 0.3.36), verbatim
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


@pytest.mark.parametrize("rows, heads, kv_heads", [(64, 4, 4), (32, 4, 2), (4096, 32, 8), (12, 3, None)])
def test_qk_permutation_is_the_converters_permute(rows, heads, kv_heads):
    hf = np.arange(rows * 3).reshape(rows, 3)
    converted = converter_permute(hf, heads, kv_heads)
    perm = namemap.qk_permutation(rows, kv_heads if kv_heads and kv_heads != heads else heads)
    # HF row r sits at GGUF row perm[r]
    assert (converted[perm] == hf).all()
    assert sorted(perm) == list(range(rows))


def test_row_permutation_only_for_hf_q_and_k_of_permuted_architectures():
    meta = {"llama.attention.head_count": 4, "llama.attention.head_count_kv": 2}
    assert namemap.row_permutation("model.layers.0.self_attn.q_proj.weight", "llama", meta, 64) == \
        namemap.qk_permutation(64, 4)
    assert namemap.row_permutation("model.layers.0.self_attn.k_proj.weight", "llama", meta, 32) == \
        namemap.qk_permutation(32, 2)
    assert namemap.row_permutation("model.layers.0.self_attn.v_proj.weight", "llama", meta, 32) is None
    # Meta/Mistral-native names are already in ggml's order: the converter leaves them alone
    assert namemap.row_permutation("layers.0.attention.wq.weight", "llama", meta, 64) is None
    # qwen2 uses NEOX rope: no permutation in its converter
    assert namemap.row_permutation("model.layers.0.self_attn.q_proj.weight", "qwen2",
                                   {"qwen2.attention.head_count": 4}, 64) is None


def test_gemma_norms_carry_the_converters_plus_one():
    assert namemap.value_offset("blk.0.attn_norm.weight", "gemma2") == 1.0
    assert namemap.value_offset("output_norm.weight", "gemma3") == 1.0
    assert namemap.value_offset("blk.0.attn_q.weight", "gemma") == 0.0
    assert namemap.value_offset("blk.0.attn_norm.weight", "llama") == 0.0
