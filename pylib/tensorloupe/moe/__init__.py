"""Find the Mixture-of-Experts structure of a checkpoint from its tensor names.

No format has a field that says "this is an MoE": experts are a naming convention. We recognise
the conventions in use and fail closed on anything else (no MoE reported), because this output
feeds a recommendation of which experts to drop.

  per-expert   {prefix}.experts.{e}.{leaf}            Mixtral block_sparse_moe, Qwen/DeepSeek/OLMoE mlp
  shared       {prefix}.shared_expert(s).{leaf}        Qwen2-MoE, DeepSeek: always-on, kept apart
  router       {prefix}.gate.weight / .router.weight / .gate.e_score_correction_bias
  stacked      blk.{n}.ffn_{gate,up,down}_exps.weight  GGUF: experts are axis 0 (row-major)
               {prefix}.experts.{leaf} with >= 3 dims  fused HF tensors (gate_up_proj, down_proj)
               blk.{n}.ffn_*_shexp.weight, blk.{n}.ffn_gate_inp.weight (shared, router)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..model import Checkpoint
from ..display import counted
from ..progress import every

PER_EXPERT = re.compile(r"^(?P<prefix>.+)\.experts\.(?P<expert>\d+)\.(?P<leaf>.+)$")
SHARED = re.compile(r"^(?P<prefix>.+)\.(?:shared_experts?)\.(?P<leaf>.+)$")
FUSED = re.compile(r"^(?P<prefix>.+)\.experts\.(?P<leaf>[A-Za-z_]\w*(?:\.weight|\.bias)?)$")
ROUTER_LEAVES = ("gate.weight", "router.weight", "gate.e_score_correction_bias", "router.bias",
                 "gate.bias", "router.layer.weight")
GGUF_EXPS = re.compile(r"^(?P<prefix>blk\.\d+)\.ffn_(?P<leaf>\w+)_exps\.weight$")
GGUF_SHEXP = re.compile(r"^(?P<prefix>blk\.\d+)\.ffn_(?P<leaf>\w+)_shexp\.weight$")
GGUF_ROUTER = "ffn_gate_inp.weight"
ROUTER_ALL = tuple("." + leaf for leaf in ROUTER_LEAVES + (GGUF_ROUTER,))
# config.json keys that say how many experts each token is routed to (Mixtral/Qwen/DeepSeek/...).
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts",
              "experts_per_token", "num_experts_per_token", "moe_top_k")
LAYER_NUMBER = re.compile(r"(?:^|\.)(?:layers|layer|blk|h|blocks|block)\.(\d+)(?:\.|$)")


@dataclass
class ExpertRef:
    """One expert's part of a weight: a whole tensor, or index `expert` along axis 0 of a stack."""
    tensor: str
    expert: int | None = None

    def to_json(self) -> dict:
        return {"tensor": self.tensor, "expert": self.expert}


@dataclass
class MoELayer:
    prefix: str
    index: int | None
    experts: dict[int, dict[str, ExpertRef]]      # expert -> leaf ("w1", "gate_proj", ...) -> ref
    shared: list[str] = field(default_factory=list)
    router: list[str] = field(default_factory=list)
    stacked: bool = False

    @property
    def expert_count(self) -> int:
        return len(self.experts)

    def to_json(self) -> dict:
        return {"prefix": self.prefix, "index": self.index, "expert_count": self.expert_count,
                "stacked": self.stacked, "router": self.router, "shared": self.shared,
                "experts": {str(e): {leaf: ref.to_json() for leaf, ref in leaves.items()}
                            for e, leaves in sorted(self.experts.items())}}


@dataclass
class MoE:
    detected: bool
    reason: str
    expert_count: int = 0
    top_k: int | None = None
    top_k_source: str | None = None
    layers: list[MoELayer] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"detected": self.detected, "reason": self.reason, "expert_count": self.expert_count,
                "top_k": self.top_k, "top_k_source": self.top_k_source,
                "layers": [layer.to_json() for layer in self.layers]}


def detect(checkpoint: Checkpoint, config: dict | None = None, progress=None) -> MoE:
    """The MoE structure of a checkpoint; `config` is a Hugging Face config.json if the user has one;
    `progress(done, total)`, if given, is told how many names have been looked at."""
    layers: dict[str, MoELayer] = {}
    shapes = {t.name: t.shape for t in checkpoint.tensors}
    names = [t.name for t in checkpoint.tensors]

    def layer(prefix: str) -> MoELayer:
        if prefix not in layers:
            number = LAYER_NUMBER.findall(prefix)
            layers[prefix] = MoELayer(prefix, int(number[-1]) if number else None, {})
        return layers[prefix]

    for name in every(names, progress, len(names)):
        if m := PER_EXPERT.match(name):
            layer(m["prefix"]).experts.setdefault(int(m["expert"]), {})[m["leaf"]] = ExpertRef(name)
        elif (m := GGUF_EXPS.match(name)) or ((m := FUSED.match(name)) and len(shapes[name]) >= 3):
            entry = layer(m["prefix"])
            entry.stacked = True
            for e in range(shapes[name][0]):
                entry.experts.setdefault(e, {})[m["leaf"]] = ExpertRef(name, e)
    for name in names:
        m = SHARED.match(name) or GGUF_SHEXP.match(name)
        if m and m["prefix"] in layers:
            layers[m["prefix"]].shared.append(name)
            continue
        # A router is `{prefix}.{leaf}`: look its prefix up (one dict lookup per leaf, not a
        # walk over every layer for every tensor: 39,120 tensors x 163 layers took seconds).
        for leaf in ROUTER_ALL:
            if name.endswith(leaf) and (entry := layers.get(name[:-len(leaf)])) is not None:
                entry.router.append(name)

    found = [entry for entry in layers.values() if entry.experts]
    problem = _inconsistent(found)
    if not found:
        declared = _declared_experts(checkpoint, config)
        if declared:
            count, where = declared
            return MoE(False, f"{where} declares {count:,} experts, but no tensor here is an "
                              "expert's (a shard or part without them? or a vocab-only file)")
        return MoE(False, "no tensor names follow a known expert naming scheme")
    if problem:
        return MoE(False, f"expert-like names found, but {problem}; not reporting an MoE")
    found.sort(key=lambda entry: (entry.index is None, entry.index or 0, entry.prefix))
    top_k, source = _top_k(checkpoint, config)
    counts = {entry.expert_count for entry in found}
    return MoE(True, f"{counted(len(found), 'layer')} with experts", max(counts), top_k, source, found)


def _inconsistent(layers: list[MoELayer]) -> str | None:
    for entry in layers:
        indices = sorted(entry.experts)
        if len(indices) < 2:
            return f"{entry.prefix} has a single expert"
        if indices != list(range(len(indices))):
            return f"{entry.prefix} has expert numbers {indices[:6]}... that are not 0..n-1"
        leaf_sets = {frozenset(leaves) for leaves in entry.experts.values()}
        if len(leaf_sets) != 1:
            return f"the experts of {entry.prefix} do not all have the same weights"
    return None


EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def _declared_experts(checkpoint: Checkpoint, config: dict | None) -> tuple[int, str] | None:
    """How many experts the metadata or config.json says the model has, and which key says it."""
    for key in EXPERT_COUNT_KEYS:
        if config and isinstance(config.get(key), int) and config[key] > 1:
            return config[key], f"config.json {key}"
    for key, value in (checkpoint.metadata or {}).items():
        if key.endswith(".expert_count") and isinstance(value, int) and value > 1:
            return value, key
    return None


def _top_k(checkpoint: Checkpoint, config: dict | None) -> tuple[int | None, str | None]:
    """Experts used per token, from metadata only: never guessed."""
    sources = []
    if config:
        sources.append(("config.json", config))
    meta = checkpoint.metadata or {}
    embedded = meta.get("config")
    if isinstance(embedded, str):
        try:
            sources.append(("__metadata__ config", json.loads(embedded)))
        except ValueError:
            pass
    for label, cfg in sources:
        for key in TOP_K_KEYS:
            if isinstance(cfg.get(key), int):
                return cfg[key], f"{label} {key}"
    for key, value in meta.items():
        if key.endswith(".expert_used_count") and isinstance(value, int):
            return value, key
    return None, None
