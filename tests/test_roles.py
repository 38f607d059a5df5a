"""Roles: a tensor's name with its layer (and expert) index taken out, across naming schemes."""

import pytest

from tensorloupe.roles import Role, group_by_role, role_of


@pytest.mark.parametrize("name, role, layer, expert", [
    ("model.layers.7.self_attn.q_proj.weight", "model.layers.*.self_attn.q_proj.weight", 7, None),
    ("blk.12.attn_q.weight", "blk.*.attn_q.weight", 12, None),
    ("blk.3.ffn_gate_exps.weight", "blk.*.ffn_gate_exps.weight", 3, None),
    ("model.layers.3.block_sparse_moe.experts.5.w1.weight",
     "model.layers.*.block_sparse_moe.experts.*.w1.weight", 3, 5),
    ("model.layers.0.mlp.experts.17.down_proj.weight", "model.layers.*.mlp.experts.*.down_proj.weight", 0, 17),
    ("transformer.h.11.attn.c_attn.weight", "transformer.h.*.attn.c_attn.weight", 11, None),
    ("bert.encoder.layer.4.attention.self.query.weight", "bert.encoder.layer.*.attention.self.query.weight", 4, None),
    ("model.decoder.layers.2.self_attention.linear_qkv.weight",
     "model.decoder.layers.*.self_attention.linear_qkv.weight", 2, None),
    ("language_model.encoder.layers.30.mlp.dense_h_to_4h.weight",
     "language_model.encoder.layers.*.mlp.dense_h_to_4h.weight", 30, None),
    ("layers.9.feed_forward.w2.weight", "layers.*.feed_forward.w2.weight", 9, None),
    ("blocks.1.norm1.weight", "blocks.*.norm1.weight", 1, None),
    # Not layer indexes: a module's position in a Sequential, and names outside the blocks.
    ("features.conv.0.weight", "features.conv.0.weight", None, None),
    ("model.embed_tokens.weight", "model.embed_tokens.weight", None, None),
    ("token_embd.weight", "token_embd.weight", None, None),
    ("output_norm.weight", "output_norm.weight", None, None),
])
def test_role_of(name, role, layer, expert):
    assert role_of(name) == Role(role, layer, expert)


def test_group_by_role_keeps_first_seen_order():
    names = ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.1.attn_q.weight", "token_embd.weight"]
    assert group_by_role(names) == {"blk.*.attn_q.weight": ["blk.0.attn_q.weight", "blk.1.attn_q.weight"],
                                     "blk.*.attn_k.weight": ["blk.0.attn_k.weight"],
                                     "token_embd.weight": ["token_embd.weight"]}
