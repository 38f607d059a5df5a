"""A tensor's role: its name with the layer index (and expert index) taken out.

`model.layers.7.self_attn.q_proj.weight` and `model.layers.8.self_attn.q_proj.weight` play the same
role in different layers; grouping tensors by role is what lets health checks compare a tensor with
its siblings and lets a comparison chart a role layer by layer. The naming schemes covered:

    HF transformers    model.layers.N.…   transformer.h.N.…   encoder.layer.N.…   model.decoder.layers.N.…
    GGUF (llama.cpp)   blk.N.…
    Megatron / NeMo    decoder.layers.N.…   language_model.encoder.layers.N.…
    plain              layers.N.…   blocks.N.…   block.N.…
    experts            ….experts.E.…  (per-expert tensors; GGUF's stacked `*_exps` carry no index)

Only a number right after one of the container words counts as a layer index, so `conv.0.weight`
in a CNN keeps its number (it names a different module, not a repetition of one).
"""

from __future__ import annotations

import re
from typing import NamedTuple

LAYER_CONTAINERS = ("layers", "layer", "h", "blk", "blocks", "block")
EXPERT_CONTAINERS = ("experts",)

_LAYER = re.compile(r"(^|\.)(?P<word>" + "|".join(LAYER_CONTAINERS) + r")\.(?P<index>\d+)(?=\.|$)")
_EXPERT = re.compile(r"(^|\.)(?P<word>" + "|".join(EXPERT_CONTAINERS) + r")\.(?P<index>\d+)(?=\.|$)")


class Role(NamedTuple):
    role: str              # the name with `.N.` replaced by `.*.` where N was a layer/expert index
    layer: int | None      # the layer index, or None for tensors outside the repeated blocks
    expert: int | None     # the expert index for per-expert tensors


def role_of(name: str) -> Role:
    layer = expert = None
    role = name
    found = _LAYER.search(role)
    if found:
        layer = int(found.group("index"))
        role = role[:found.start("index")] + "*" + role[found.end("index"):]
    found = _EXPERT.search(role)
    if found:
        expert = int(found.group("index"))
        role = role[:found.start("index")] + "*" + role[found.end("index"):]
    return Role(role, layer, expert)


def group_by_role(names) -> dict[str, list[str]]:
    """Names grouped by role, in first-seen order (a role with one member has no siblings)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(role_of(name).role, []).append(name)
    return groups
