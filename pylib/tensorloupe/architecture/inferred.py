"""Architecture values read off tensor names and shapes, when no config says them.

Each value says which tensor (and shape) it was read from. Only what the names show for sure:
the layer count (the highest layer number + 1), vocabulary and hidden size (the token embedding
[vocab, hidden]), the MLP width (a layer's up projection), the experts, router and shared experts
(moe.detect), DeepSeek MLA's ranks (kv_a_layernorm is [kv_lora_rank], kv_a_proj_with_mqa
[kv_lora_rank + qk_rope_head_dim, hidden]) and whether the embedding doubles as the output head.
"""

from __future__ import annotations

from typing import NamedTuple

from .components import training_group, view_key
from ..display import counted
from ..model import Checkpoint
from ..moe import MoE
from ..roles import role_of

EMBEDDING_ROLES = ("embed_tokens", "wte", "word_embeddings", "token_embd", "tok_embeddings", "embed_in")
HEAD_ROLES = ("lm_head.weight", "output.weight", "embed_out.weight")
UP_ROLES = ("up_proj", "ffn_up", "fc1", "w1.", "intermediate.dense", "c_fc", "dense_h_to_4h")
# What DeepSeek MLA's kv_a_layernorm, kv_a_proj_with_mqa and q_a_layernorm are called (HF, GGUF).
MLA_WORDS = (("kv_a_layernorm", "attn_kv_a_norm"), ("kv_a_proj_with_mqa", "attn_kv_a_mqa"),
             ("q_a_layernorm", "attn_q_a_norm"))


class Known(NamedTuple):
    value: object


def infer(ckpt: Checkpoint, found_moe: MoE, hidden=None, model=None) -> dict[str, tuple]:
    """{field: (value, source)} for what the tensors tell; `hidden` is the hidden size already
    known (a Value), which picks out the MLP's other dimension; `model` the tensors that are not
    training state, if the caller has them (components.Breakdown.not_training)."""
    if model is None:
        model = [t for t in ckpt.tensors if training_group(t.name) is None]
    roles = [(t, role_of(t.name)) for t in model]
    found: dict[str, tuple] = {}

    def put(key, value, source):
        if key not in found and value is not None:
            found[key] = (value, source)

    indices = sorted({r.layer for _, r in roles if r.layer is not None})
    if indices:
        put("layers", indices[-1] + 1, f"inferred from tensor names (layer numbers {indices[0]:,}..{indices[-1]:,})")
    embed = next((t for t, r in roles if len(t.shape) == 2 and r.layer is None
                  and any(word in r.role for word in EMBEDDING_ROLES)), None)
    if embed is not None:
        shape = list(embed.shape)
        put("vocab_size", shape[0], f"inferred from tensor {embed.name} shape {shape}")
        put("hidden_size", shape[1], f"inferred from tensor {embed.name} shape {shape}")
    if hidden is None and "hidden_size" in found:
        hidden = Known(found["hidden_size"][0])
    if hidden is not None and isinstance(hidden.value, int):
        up = next((t for t, r in roles if r.layer is not None and r.expert is None and len(t.shape) == 2
                   and hidden.value in t.shape and "experts" not in t.name and "shexp" not in t.name
                   and any(w in r.role for w in UP_ROLES)), None)
        if up is not None:
            other = [d for d in up.shape if d != hidden.value] or [hidden.value]
            put("intermediate_size", other[0], f"inferred from tensor {up.name} shape {list(up.shape)}")
    if found_moe.detected:
        layers = found_moe.layers
        put("experts", found_moe.expert_count,
            f"inferred from tensor names ({counted(found_moe.expert_count, 'expert')} in {counted(len(layers), 'layer')})")
        if found_moe.top_k is not None:
            put("experts_per_token", found_moe.top_k, found_moe.top_k_source or "moe.detect")
        routers = [name for layer in layers for name in layer.router]
        if routers:
            put("router", role_of(routers[0]).role, f"inferred from tensor names ({len(routers):,} router tensors)")
        shared = [name for layer in layers for name in layer.shared]
        if shared:
            put("shared_experts", "present", f"inferred from tensor {shared[0]}")
    _infer_mla(put, roles)
    if embed is not None:
        head = next((t for t, r in roles if r.layer is None and r.role.endswith(HEAD_ROLES)
                     and t is not embed), None)
        same = head is not None and view_key(head) is not None and view_key(head) == view_key(embed)
        if same:
            put("tied_embeddings", True, f"inferred: {head.name} is stored as the same tensor as {embed.name}")
        elif head is None:
            # checkpoints of tied models store the shared matrix once (safetensors refuses
            # aliases); an encoder without an LM head also lands here, and the source says so
            put("tied_embeddings", True, f"inferred: no output head tensor beside {embed.name} "
                "(the embedding serves as the head, or there is no head)")
        else:
            put("tied_embeddings", False, f"inferred: {head.name} is stored apart from {embed.name}")
    return found


def _infer_mla(put, roles) -> None:
    """DeepSeek MLA: kv_a_proj_with_mqa is [kv_lora_rank + qk_rope_head_dim, hidden] and
    kv_a_layernorm is [kv_lora_rank] (GGUF: attn_kv_a_mqa, attn_kv_a_norm, attn_q_a_norm)."""
    norm, mqa, q_norm = _first_in_layers(roles, MLA_WORDS)
    if norm is not None and norm.shape:
        put("kv_lora_rank", norm.shape[0], f"inferred from tensor {norm.name} shape {list(norm.shape)}")
        if mqa is not None and len(mqa.shape) == 2:
            put("qk_rope_head_dim", mqa.shape[0] - norm.shape[0],
                f"inferred from tensor {mqa.name} shape {list(mqa.shape)} minus kv_lora_rank")
    if q_norm is not None and q_norm.shape:
        put("q_lora_rank", q_norm.shape[0], f"inferred from tensor {q_norm.name} shape {list(q_norm.shape)}")


def _first_in_layers(roles, wanted: tuple) -> list:
    """For each tuple of words, the first tensor inside a layer whose role contains one of them
    (or None): one pass over the tensors for all of them, which stops once all are found."""
    found = [None] * len(wanted)
    left = len(wanted)
    for t, r in roles:
        if r.layer is None:
            continue
        for i, words in enumerate(wanted):
            if found[i] is None and any(w in r.role for w in words):
                found[i] = t
                left -= 1
        if not left:
            break
    return found
