"""What each tensor is part of: a model component, or training state that is not the model.

Parameters are counted by component (embeddings, attention, MLP, experts, shared experts, router,
norms, output head, other) from tensor names alone. Experts, shared experts and routers are the
tensors moe.detect found (so the MoE naming rules live in one place); the rest is one ordered
table of name patterns matched against the tensor's role (roles.role_of: the name with its layer
and expert numbers taken out), first match wins.

Training state is recognised first and kept apart: a Lightning or hand-written training
checkpoint also stores optimizer moments (Adam's `exp_avg`, `exp_avg_sq`: two more copies of
every weight), EMA copies of the weights, scheduler and loss-scaler state. Counting them as
parameters triples a model's size (a resemblyzer `.pt` shows 4.27M "parameters", 2.85M of which
are Adam moments), so they are never counted as parameters and are reported as their own groups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from ..model import Checkpoint, Tensor
from ..moe import MoE
from ..progress import every
from ..roles import role_of

# (group, where, ignore case, words), first match wins: the name has one of the words as a whole
# path segment, anywhere, as its last segment or as its first.
ANY, LAST, FIRST, WHOLE = "any", "last", "first", "whole"
TRAINING_STATE = [
    ("optimizer", ANY, True, ("optimizer_state", "optimizer_states", "optimizer", "optimizers", "optim",
                              "optimizer_state_dict", "opt_state", "optim_state")),
    ("optimizer", LAST, False, ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                                "square_avg", "acc_delta")),
    ("ema", ANY, True, ("ema", "model_ema", "ema_model", "ema_state_dict", "ema_params", "ema_weights",
                        "shadow_params", "averaged_model", "swa_model", "module_ema")),
    ("scheduler", ANY, True, ("lr_scheduler", "lr_schedulers", "scheduler", "schedulers",
                              "lr_scheduler_state")),
    ("loss scaler", ANY, True, ("grad_scaler", "scaler", "amp_scaler")),
    ("trainer state", FIRST, False, ("callbacks", "loops")),
    # RNG states: torch.get_rng_state() is a 5,056-byte uint8 tensor, CUDA's one per device
    ("rng", ANY, True, ("rng_state", "rng_states", "random_state", "random_states", "rng",
                        "cpu_rng_state", "cuda_rng_state", "cuda_rng_states", "torch_rng_state",
                        "generator_state")),
    # a counter saved as a tensor at the top of a training dict ({"step": torch.tensor(7)})
    ("counters", WHOLE, False, ("step", "steps", "global_step", "global_steps", "epoch",
                                "iteration", "iter", "num_updates", "num_steps")),
]
_ANCHORS = {ANY: (r"(^|\.)(", r")(\.|$)"), LAST: (r"(^|\.)(", r")$"), FIRST: (r"^(", r")(\.|$)"),
            WHOLE: (r"^(", r")$")}
# The same rows as regular expressions, for names that are not ASCII (where re.IGNORECASE also
# matches a few non-ASCII letters, e.g. the Kelvin sign with k, that str.lower() does not give).
_TRAINING_RE = [(group, re.compile(_ANCHORS[where][0] + "|".join(words) + _ANCHORS[where][1],
                                   re.I if fold else 0))
                for group, where, fold, words in TRAINING_STATE]
_TRAINING_SETS = [(group, where, fold, frozenset(words)) for group, where, fold, words in TRAINING_STATE]

# Registered buffers that checkpoints store beside the weights but that are not parameters
# (torch's model.parameters() leaves them out): BERT's position_ids, BatchNorm's statistics, RoPE's
# inv_freq, GPT-2's causal mask, BART's final_logits_bias.
BUFFER = re.compile(r"(^|\.)(position_ids|token_type_ids|num_batches_tracked|running_mean|"
                    r"running_var|inv_freq|masked_bias|final_logits_bias)$")
# A pickled nn.Module lists which of its tensors are parameters and which buffers: that evidence
# wins over the names (a custom buffer of any name; a learned parameter named like a buffer).
SLOT_EVIDENCE = {"_buffers": "the pickled modules' _buffers", "_parameters": "the pickled modules' _parameters"}

COMPONENTS = ("embeddings", "attention", "mlp", "experts", "shared_experts", "router", "norms",
              "output_head", "other")
LABELS = {"embeddings": "Embeddings", "attention": "Attention", "mlp": "MLP",
          "experts": "Experts (routed)", "shared_experts": "Shared experts", "router": "Router",
          "norms": "Norms", "output_head": "Output head", "other": "Other"}

# (component, pattern on the role), first match wins. The output head is only a top-level tensor
# (BERT's `encoder.layer.N.output.dense` is its MLP, not a head).
HEAD = re.compile(r"(^|\.)(lm_head|output|embed_out|cls|classifier|score)(\.|$)")
BY_ROLE = [
    ("norms", re.compile(r"norm|(^|\.)ln(_\w+|\d+)?\.|layernorm|layer_norm", re.I)),
    ("embeddings", re.compile(r"embed|(^|\.)(wte|wpe|shared)\.|token_embd", re.I)),
    ("attention", re.compile(r"attn|attention|(^|\.|_)(q|k|v|o|qkv|kv_a|kv_b|q_a|q_b)_proj|"
                             r"(^|\.)(query|key|value|wq|wk|wv|wo|wqkv|c_attn)\.", re.I)),
    ("mlp", re.compile(r"mlp|ffn|feed_forward|intermediate|(^|\.)(fc1|fc2|c_fc|c_proj|w1|w2|w3|"
                       r"gate_proj|up_proj|down_proj|dense_h_to_4h|dense_4h_to_h)\.|"
                       r"(^|\.)output\.dense\.", re.I)),
]


def training_group(name: str) -> str | None:
    """The training-state group of a tensor name, or None if it is (part of) the model.

    ASCII names (all real ones) are split into segments and looked up in sets: six regular
    expressions per name cost ~0.4 s for 39,120 tensors in the browser. The others, and names
    with a newline (`$` matches before a final one), go through the regular expressions."""
    if not name.isascii() or "\n" in name:
        return next((group for group, pattern in _TRAINING_RE if pattern.search(name)), None)
    segments = name.split(".")
    folded = None
    for group, where, fold, words in _TRAINING_SETS:
        if fold and folded is None:
            folded = name.lower().split(".")
        parts = folded if fold else segments
        if where == ANY:
            if not words.isdisjoint(parts):
                return group
        elif where == WHOLE:
            if len(parts) == 1 and parts[0] in words:
                return group
        elif parts[-1 if where == LAST else 0] in words:
            return group
    return None


@dataclass
class Count:
    parameters: int = 0
    tensors: int = 0
    bytes: int = 0
    example: str | None = None

    def add(self, t: Tensor) -> None:
        self.parameters += t.numel
        self.tensors += 1
        self.bytes += t.stored_nbytes   # a dequantised weight: its packed parts, as stored
        if self.example is None:
            self.example = t.name

    def to_json(self) -> dict:
        return {"parameters": self.parameters, "tensors": self.tensors, "bytes": self.bytes,
                "example": self.example}


@dataclass
class Breakdown:
    components: dict[str, Count] = field(default_factory=dict)
    training: dict[str, Count] = field(default_factory=dict)
    buffers: Count = field(default_factory=Count)
    tied: Count = field(default_factory=Count)   # the same storage view as a tensor counted already
    evidence: set[str] = field(default_factory=set)   # what told buffers from parameters
    model_tensors: list[Tensor] = field(default_factory=list)
    not_training: list[Tensor] = field(default_factory=list)   # all but training state, in order

    @property
    def total(self) -> int:
        return sum(c.parameters for c in self.components.values())

    @property
    def model_bytes(self) -> int:
        return sum(c.bytes for c in self.components.values())

    def active(self, experts: int | None, top_k: int | None) -> tuple[int | None, str]:
        """Parameters used per token: every non-expert parameter plus top_k / experts of the
        routed experts' (shared experts always run)."""
        routed = self.components.get("experts")
        if routed is None or not routed.parameters:
            return self.total, "no routed experts: every parameter is used for every token"
        if not experts or not top_k:
            return None, "top-k is unknown (no config or metadata says), so active parameters are too"
        active = self.total - routed.parameters + routed.parameters * top_k // experts
        return active, (f"total {self.total:,} - routed experts {routed.parameters:,} "
                        f"+ routed experts x {top_k:,}/{experts:,}")

    def to_json(self) -> dict:
        return {"by_component": {k: c.to_json() for k, c in self.components.items()},
                "training_state": {k: c.to_json() for k, c in self.training.items()},
                "buffers": {**self.buffers.to_json(), "evidence": sorted(self.evidence)},
                "tied": self.tied.to_json()}


def breakdown(checkpoint: Checkpoint, moe: MoE | None = None, progress=None) -> Breakdown:
    """Every tensor counted once: in a training-state group or in a model component
    (`progress(done, total)`, if given, is told how many)."""
    special: dict[str, str] = {}
    if moe is not None and moe.detected:
        for layer in moe.layers:
            for leaves in layer.experts.values():
                for ref in leaves.values():
                    special[ref.tensor] = "experts"
            special.update({name: "shared_experts" for name in layer.shared})
            special.update({name: "router" for name in layer.router})
    out = Breakdown({k: Count() for k in COMPONENTS})
    views: dict[tuple, str] = {}
    for t in every(checkpoint.tensors, progress, len(checkpoint.tensors)):
        group = training_group(t.name)
        if group is not None:
            out.training.setdefault(group, Count()).add(t)
            continue
        out.not_training.append(t)
        # A pickled module's own _buffers / _parameters decide (formats/pytorch/moduleslots.py);
        # else the file's word (a ZeRO buffer), else the name.
        slot = t.info.get("module_slot")
        evidence = (SLOT_EVIDENCE.get(slot) if slot else
                    "the file" if t.info.get("buffer") else "names" if BUFFER.search(t.name) else None)
        if slot in SLOT_EVIDENCE:
            out.evidence.add(SLOT_EVIDENCE[slot])
        if evidence and slot != "_parameters":
            out.buffers.add(t)
            out.evidence.add(evidence)
            continue
        key = view_key(t)
        if key is not None and key in views:
            # torch saves a tied weight (lm_head = embed_tokens) once, with both names viewing the
            # same storage the same way; like torch's parameters(), count it once
            out.tied.add(t)
            continue
        if key is not None:
            views[key] = t.name
        out.components[special.get(t.name) or component_of(t.name)].add(t)
        out.model_tensors.append(t)
    out.components = {k: c for k, c in out.components.items() if c.tensors}
    return out


def view_key(t: Tensor) -> tuple | None:
    """What makes two torch tensors the same weight: one storage viewed at the same offset, shape,
    strides and dtype. None for formats whose tensors never share bytes."""
    storage = t.info.get("storage")
    if storage is None:
        return None
    return (id(t.source.root()) if t.source is not None else None, storage, t.offset, t.shape,
            t.strides, t.dtype)


def component_of(name: str) -> str:
    role = role_of(name)
    return _component_of_role(role.role, role.layer is None)


@lru_cache(maxsize=1 << 14)
def _component_of_role(role: str, outside_layers: bool) -> str:
    # by role, not by name: the layers of a model repeat a few dozen roles, and the patterns
    # below cost 9 regex searches a name (1.7 s per 100k tensors)
    if outside_layers and HEAD.search(role):
        return "output_head"
    for component, pattern in BY_ROLE:
        if pattern.search(role):
            return component
    return "other"
