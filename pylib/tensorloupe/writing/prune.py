"""Which tensors a checkpoint without some of its experts holds, from descriptors alone.

The MoE structure is moe.detect's (per-expert names, GGUF `*_exps` stacks, fused
`experts.gate_up_proj` [E, ...] tensors). For each layer that loses experts:

  per-expert   `{prefix}.experts.{e}.{leaf}`: dropped experts are left out, the rest renumbered
               densely in their old order (experts 0 1 2 3, drop 1 -> 0 2 3 become 0 1 2);
  stacked      every `[E, ...]` tensor of the layer's experts (weights and their biases) keeps
               the slabs of the remaining experts along axis 0 (writing/rows.py);
  router       the layer's `gate.weight` [E, hidden] (and its bias, a score-correction bias
               [E]) keeps the remaining experts' rows: a token's logits over the remaining
               experts are what they were, the dropped experts' removed.

config.json's expert count (moe.EXPERT_COUNT_KEYS) becomes the new count. Layers that would keep
different numbers of experts are written only for an architecture whose config holds a count per
layer (PER_LAYER_COUNTS); every other one has a single count for all layers, so that is refused
with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import NamedTuple

from ..errors import UsageError
from ..model import Checkpoint, Tensor
from ..moe import EXPERT_COUNT_KEYS, FUSED, GGUF_EXPS, PER_EXPERT, MoE, MoELayer
from .rows import rows_tensor

# model_type -> the config key that may be a list with one count per decoder layer
# (transformers' HunYuanMoEV1Moe: `config.num_experts[layer_idx]` when it is not an int).
PER_LAYER_COUNTS = {"hunyuan_v1_moe": "num_experts"}
# The stacked tensors of an expert layer besides its weights: gpt-oss style biases [E, ...]
STACKED_EXTRA = re.compile(r"^(?P<prefix>.+?)\.(?:experts\.[A-Za-z_]\w*|ffn_\w+_exps\.bias)$")
DROP_ITEM = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


class Pruned(NamedTuple):
    tensors: list[Tensor]          # what the output holds, in the source's order
    kept: dict[int, list[int]]     # layer -> the old numbers of its remaining experts, in order
    dropped: dict[int, list[int]]  # layer -> the experts left out
    config: dict | None            # config.json with the new expert count(s), or None


def parse_drops(text: str) -> dict[int, set[int]]:
    """`--drop-experts '0:4,0:5,1:7'`: layer:expert pairs."""
    out: dict[int, set[int]] = {}
    for item in (p for p in text.split(",") if p.strip()):
        found = DROP_ITEM.match(item)
        if not found:
            raise UsageError(f"--drop-experts item {item.strip()!r} is not LAYER:EXPERT (e.g. 0:5)")
        out.setdefault(int(found.group(1)), set()).add(int(found.group(2)))
    if not out:
        raise UsageError("--drop-experts names no expert: give LAYER:EXPERT pairs, e.g. 0:4,1:7")
    return out


def recommended(analysis) -> dict[int, set[int]]:
    """The Experts analysis' recommendation (moe/redundancy.py): each cluster but its keeper."""
    out: dict[int, set[int]] = {}
    for r in analysis.recommendations:
        out.setdefault(r.layer, set()).add(r.drop)
    if not out:
        raise UsageError(f"the Experts analysis finds no redundant expert at similarity "
                         f"{analysis.threshold}: nothing to prune (lower --threshold, or name "
                         "them with --drop-experts)")
    return out


def plan(ckpt: Checkpoint, config: dict | None, drop: str | dict | None = None,
         recommended_drops: bool = False, threshold: float | None = None) -> Pruned:
    """The pruned checkpoint: without the experts `drop` names ("L:E,..." or {layer: [experts]}),
    or, with `recommended_drops`, those the Experts analysis finds redundant at `threshold`."""
    from ..moe import detect
    from ..moe.redundancy import DEFAULT_THRESHOLD, analyse
    if recommended_drops:
        threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        if not -1.0 <= threshold <= 1.0:
            raise UsageError("--threshold must be within [-1, 1]")
        drops = recommended(analyse(ckpt, threshold, config=config))
    elif isinstance(drop, str):
        drops = parse_drops(drop)
    elif isinstance(drop, dict) and drop:
        drops = {int(k): {int(e) for e in v} for k, v in drop.items()}
    else:
        raise UsageError("say which experts to drop (LAYER:EXPERT pairs), or ask for the recommended ones")
    return prune(ckpt, detect(ckpt, config), drops, config)


def _layers(moe: MoE, drops: dict[int, set[int]]) -> dict[int, MoELayer]:
    if not moe.detected:
        raise UsageError(f"no experts to prune: {moe.reason}")
    by_index = {layer.index: layer for layer in moe.layers}
    out = {}
    for index, experts in sorted(drops.items()):
        layer = by_index.get(index)
        if layer is None:
            have = ", ".join(str(i) for i in sorted(i for i in by_index if i is not None))
            raise UsageError(f"layer {index} has no experts (layers with experts: {have})")
        missing = sorted(e for e in experts if e not in layer.experts)
        if missing:
            raise UsageError(f"layer {index} has experts 0..{layer.expert_count - 1}: there is "
                             f"no expert {missing[0]}")
        left = layer.expert_count - len(experts)
        if moe.top_k is not None and left < moe.top_k:
            raise UsageError(f"layer {index} would keep {left} expert(s), fewer than the "
                             f"{moe.top_k} each token is routed to ({moe.top_k_source})")
        if left < 1:
            raise UsageError(f"layer {index} would keep no expert")
        out[index] = layer
    return out


def prune(ckpt: Checkpoint, moe: MoE, drops: dict[int, set[int]], config: dict | None) -> Pruned:
    layers = _layers(moe, drops)
    kept = {i: [e for e in sorted(layer.experts) if e not in drops[i]] for i, layer in layers.items()}
    new_number = {i: {old: new for new, old in enumerate(k)} for i, k in kept.items()}
    by_prefix = {layer.prefix: i for i, layer in layers.items()}
    routers = {name: i for i, layer in layers.items() for name in layer.router}
    out: list[Tensor] = []
    for t in ckpt.tensors:
        if (found := PER_EXPERT.match(t.name)) and found["prefix"] in by_prefix:
            i = by_prefix[found["prefix"]]
            new = new_number[i].get(int(found["expert"]))
            if new is not None:
                out.append(replace(t, name=f"{found['prefix']}.experts.{new}.{found['leaf']}"))
            continue
        i = routers.get(t.name)
        if i is None:
            found = GGUF_EXPS.match(t.name) or FUSED.match(t.name) or STACKED_EXTRA.match(t.name)
            i = by_prefix.get(found["prefix"]) if found else None
            if i is not None and not (layers[i].stacked and t.shape and t.shape[0] == layers[i].expert_count):
                i = None
        if i is None:
            out.append(t)
            continue
        if not t.shape or t.shape[0] != layers[i].expert_count:
            raise UsageError(f"tensor {t.name!r} of shape {list(t.shape)} is layer {i}'s router, "
                             f"but it has no row per expert ({layers[i].expert_count}): it "
                             "cannot be pruned")
        out.append(rows_tensor(t, t.name, kept[i]))
    counts = {layer.index: len(kept.get(layer.index, layer.experts)) for layer in moe.layers}
    return Pruned(out, kept, {i: sorted(d) for i, d in sorted(drops.items())},
                  new_config(config, counts))


def new_config(config: dict | None, counts: dict[int | None, int]) -> dict | None:
    """config.json with its expert count(s) made `counts` (layer -> experts it keeps)."""
    if not isinstance(config, dict):
        return None
    keys = [k for k in EXPERT_COUNT_KEYS if isinstance(config.get(k), (int, list))]
    if not keys:
        raise UsageError("config.json has no expert count this tool knows "
                         f"({', '.join(EXPERT_COUNT_KEYS)}): it cannot be updated")
    out = dict(config)
    distinct = set(counts.values())
    model_type = str(config.get("model_type") or "?")
    per_layer = PER_LAYER_COUNTS.get(model_type)
    if len(distinct) == 1 and not isinstance(config.get(per_layer or ""), list):
        (count,) = distinct
        out.update({key: count for key in keys})
        return out
    if per_layer is None:
        said = ", ".join(f"layer {i}: {n}" for i, n in sorted(counts.items(), key=lambda kv: kv[0] or 0))
        raise UsageError(f"the layers would keep different numbers of experts ({said}), and "
                         f"config.json's {keys[0]} is one count for every layer of a "
                         f"{model_type!r} model: drop as many experts from each layer")
    layers = config.get("num_hidden_layers")
    old = config.get(per_layer)
    if not isinstance(layers, int) or layers < 1:
        raise UsageError("config.json has no num_hidden_layers: the per-layer expert counts "
                         "cannot be written")
    listed = list(old) if isinstance(old, list) else [old] * layers
    for i, n in counts.items():
        if i is None or not 0 <= i < len(listed):
            raise UsageError(f"expert layer {i} is not one of config.json's {layers:,} layers")
        listed[i] = n
    out[per_layer] = listed
    return out



def metadata(result: Pruned) -> dict[str, str]:
    """What the output's `__metadata__` says of the prune (string values, as the spec wants)."""
    return {"pruned_experts": json.dumps({str(i): d for i, d in result.dropped.items()}) +
            " (layer: the source's expert numbers left out; the rest renumbered densely)",
            "kept_experts": json.dumps({str(i): k for i, k in result.kept.items()}) +
            " (layer: the source's expert number of each new expert, in order)"}
