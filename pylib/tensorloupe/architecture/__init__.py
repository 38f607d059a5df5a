"""What model a checkpoint is: its architecture, each value with where it came from.

Values are taken from what the checkpoint carries, in this order (first that has it wins):
  1. `config.json` beside the file (Hugging Face; found by opening/beside.py, or given by the user)
  2. a config embedded in the file: safetensors `__metadata__["config"]` (JSON text), torch
     checkpoint extras such as Lightning's `hyper_parameters`
  3. GGUF keys (`{arch}.block_count`, ...; gguf-py `constants.py`, class Keys)
  4. inferred from tensor names and shapes (inferred.py: layer count, hidden size, vocabulary,
     expert count, MLA ranks, tied embeddings), labelled "inferred"
A few values are derived from others (head dim = hidden / heads) or defaults the format states
(KV heads = heads when the config has no num_key_value_heads); those say so too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .. import moe as moe_detect
from . import inferred, stacks
from .components import Breakdown, breakdown
from ..model import Checkpoint
from ..progress import Passes


class Spec(NamedTuple):
    key: str
    label: str
    kind: str                   # "int", "number", "str", "bool", "any"
    config: tuple[str, ...]     # config.json / embedded config keys, first present wins
    gguf: tuple[str, ...]       # GGUF key templates ({arch} = general.architecture)


FIELDS = [
    Spec("family", "Family", "str", ("model_type", "architectures"), ("general.architecture",)),
    # encoder-decoder and encoder-only models (stacks.py): set by _stacks, never read directly
    Spec("stacks", "Stacks", "str", (), ()),
    Spec("encoder_layers", "Encoder layers", "int", (), ()),
    Spec("decoder_layers", "Decoder layers", "int", (), ()),
    Spec("encoder_heads", "Encoder attention heads", "int", (), ()),
    Spec("decoder_heads", "Decoder attention heads", "int", (), ()),
    Spec("encoder_intermediate_size", "Encoder intermediate size", "int", (), ()),
    Spec("decoder_intermediate_size", "Decoder intermediate size", "int", (), ()),
    Spec("source_length", "Encoder positions", "int", (), ()),
    Spec("layers", "Layers", "int", ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
         ("{arch}.block_count",)),
    Spec("hidden_size", "Hidden size", "int",
         ("hidden_size", "d_model", "n_embd", "dim", "hidden_dim", "hidden"), ("{arch}.embedding_length",)),
    Spec("intermediate_size", "Intermediate size", "int",
         ("intermediate_size", "ffn_dim", "n_inner", "d_ff", "ffn_hidden_size"), ("{arch}.feed_forward_length",)),
    Spec("heads", "Attention heads", "int", ("num_attention_heads", "n_head", "num_heads", "n_heads"),
         ("{arch}.attention.head_count",)),
    Spec("kv_heads", "KV heads", "int",
         ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num", "kv_n_heads"),
         ("{arch}.attention.head_count_kv",)),
    Spec("head_dim", "Head dim", "int", ("head_dim", "kv_channels", "d_kv"), ("{arch}.attention.key_length",)),
    Spec("value_head_dim", "Value head dim", "int", ("v_head_dim",), ("{arch}.attention.value_length",)),
    Spec("vocab_size", "Vocabulary", "int", ("vocab_size", "n_vocab", "padded_vocab_size"),
         ("{arch}.vocab_size",)),
    Spec("context_length", "Context length", "int",
         ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx",
          "max_sequence_length", "max_target_positions"), ("{arch}.context_length",)),
    Spec("rope_theta", "RoPE base", "number", ("rope_theta", "rotary_emb_base"), ("{arch}.rope.freq_base",)),
    Spec("rope_scaling", "RoPE scaling", "any", ("rope_scaling",), ()),
    Spec("sliding_window", "Sliding window", "int", ("sliding_window",), ("{arch}.attention.sliding_window",)),
    Spec("sliding_layers", "Sliding-window layers", "any", (), ()),
    Spec("experts", "Experts", "int", ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
                                       "num_experts_routed"),
         ("{arch}.expert_count",)),
    Spec("experts_per_token", "Experts per token", "int", moe_detect.TOP_K_KEYS, ("{arch}.expert_used_count",)),
    Spec("shared_experts", "Shared experts", "int", ("n_shared_experts", "num_shared_experts"),
         ("{arch}.expert_shared_count",)),
    Spec("expert_intermediate_size", "Expert intermediate size", "int", ("moe_intermediate_size",),
         ("{arch}.expert_feed_forward_length",)),
    Spec("router", "Router", "str", (), ()),
    Spec("q_lora_rank", "MLA q_lora_rank", "int", ("q_lora_rank",), ("{arch}.attention.q_lora_rank",)),
    Spec("kv_lora_rank", "MLA kv_lora_rank", "int", ("kv_lora_rank",), ("{arch}.attention.kv_lora_rank",)),
    Spec("qk_rope_head_dim", "MLA qk_rope_head_dim", "int", ("qk_rope_head_dim",), ()),
    Spec("qk_nope_head_dim", "MLA qk_nope_head_dim", "int", ("qk_nope_head_dim",), ()),
    Spec("tied_embeddings", "Tied embeddings", "bool", ("tie_word_embeddings",), ()),
    Spec("lm_head", "LM head", "str", (), ()),
]
SPECS = {s.key: s for s in FIELDS}
# Multimodal and wrapper configs keep the language model's numbers one level down.
NESTED = ("text_config", "llm_config", "language_config", "config", "model_config",
          "ffn_config", "attn_config")   # the last two: DBRX
# Torch checkpoint extras that hold a model config (Lightning, fairseq-style, hand-written).
TORCH_CONFIG_KEYS = ("hyper_parameters", "hparams", "config", "model_config", "model_args", "args", "cfg")
# llama.cpp's per-family sliding-window patterns where the GGUF has no pattern key: every Nth layer
# is global (llama_model.cpp, hparams.set_swa_pattern).
SWA_PATTERN_DEFAULTS = {"gemma2": 2, "gemma3": 6, "cohere2": 4}
# Larger counts than these are not a model but a broken or hostile config: they are ignored, not
# expanded into per-layer lists.
MAX_LAYERS = 100_000
MAX_INT = 1 << 48
KIND_CHECK = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str) and v != "",
    "bool": lambda v: isinstance(v, bool),
    "any": lambda v: v is not None,
}


class Value(NamedTuple):
    value: Any
    source: str


@dataclass
class Architecture:
    fields: dict[str, Value]
    parameters: Breakdown
    moe: moe_detect.MoE
    sources: list[str] = field(default_factory=list)   # the configs that were consulted

    def get(self, key: str, default=None):
        found = self.fields.get(key)
        return default if found is None else found.value

    @property
    def active(self) -> tuple[int | None, str]:
        return self.parameters.active(self.get("experts") or self.moe.expert_count or None,
                                      self.get("experts_per_token"))

    def to_json(self) -> dict:
        active, how = self.active
        return {"sources": self.sources,
                "moe": {"detected": self.moe.detected, "experts": self.get("experts"),
                        "experts_per_token": self.get("experts_per_token"),
                        "moe_layers": len(self.moe.layers)},
                "fields": [{"key": k, "label": SPECS[k].label, "value": v.value, "source": v.source}
                           for k, v in self.fields.items()],
                "parameters": {"total": self.parameters.total, "active": active, "active_formula": how,
                               **self.parameters.to_json()}}


def summarize(checkpoint: Checkpoint, config: dict | None = None, config_where: str = "config.json",
              found_moe: moe_detect.MoE | None = None, progress=None) -> Architecture:
    """`found_moe`: moe_detect.detect(checkpoint, config), if the caller has it already;
    `progress(done, total)`: the two passes over the tensors (the MoE scan, the count by
    component), as 2 * n tensors."""
    passes = Passes(progress, len(checkpoint.tensors), 2)
    configs = []
    if isinstance(config, dict):
        configs.append(("config.json", config))
    configs += embedded_configs(checkpoint)
    if found_moe is None:
        found_moe = moe_detect.detect(checkpoint, config, passes.part(0))
    parameters = breakdown(checkpoint, found_moe, passes.part(1))
    fields: dict[str, Value] = {}
    arch = checkpoint.metadata.get("general.architecture") if checkpoint.format == "gguf" else None
    for spec in FIELDS:
        got = _from_configs(spec, configs)
        if got is None and isinstance(arch, str):
            got = _from_gguf(spec, checkpoint.metadata, arch)
        if got is not None:
            fields[spec.key] = got
    _disable_sliding(fields, configs)
    for key, (value, source) in inferred.infer(checkpoint, found_moe, fields.get("hidden_size"),
                                               parameters.not_training).items():
        fields.setdefault(key, Value(value, source))
    _derive(fields, configs, checkpoint.metadata, arch)
    _stacks(fields, configs, parameters)
    ordered = {s.key: fields[s.key] for s in FIELDS if s.key in fields}
    sources = ([config_where] if isinstance(config, dict) else []) + [label for label, _ in configs
                                                                      if label != "config.json"]
    return Architecture(ordered, parameters, found_moe, sources)


def embedded_configs(checkpoint: Checkpoint) -> list[tuple[str, dict]]:
    meta = checkpoint.metadata or {}
    out = []
    if checkpoint.format == "safetensors" and isinstance(meta.get("config"), str):
        try:
            parsed = json.loads(meta["config"])
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            out.append(("embedded config (__metadata__ config)", parsed))
    if checkpoint.format.startswith("pytorch"):
        for key in TORCH_CONFIG_KEYS:
            if isinstance(meta.get(key), dict):
                out.append((f"embedded config ({key})", meta[key]))
    return out


def _valid(spec: Spec, value) -> Any:
    if spec.key == "family" and isinstance(value, list) and value and isinstance(value[0], str):
        value = value[0]  # "architectures": ["LlamaForCausalLM"]
    if spec.key == "layers" and KIND_CHECK["int"](value) and value > MAX_LAYERS:
        return None
    return value if KIND_CHECK[spec.kind](value) else None


def _from_configs(spec: Spec, configs) -> Value | None:
    for label, cfg in configs:
        for path, where in [((), cfg)] + [((n,), cfg[n]) for n in NESTED if isinstance(cfg.get(n), dict)]:
            for key in spec.config:
                value = _valid(spec, where.get(key))
                if value is not None:
                    return Value(value, f"{label}: {'.'.join(path + (key,))}")
    return None


def _from_gguf(spec: Spec, meta: dict, arch: str) -> Value | None:
    for template in spec.gguf:
        key = template.format(arch=arch)
        value = meta.get(key)
        if isinstance(value, list) and value and all(KIND_CHECK[spec.kind](v) for v in value):
            return Value(value[0] if len(set(value)) == 1 else value, f"GGUF key {key}")
        value = _valid(spec, value)
        if value is not None:
            return Value(value, f"GGUF key {key}")
    if spec.key == "vocab_size":
        tokens = meta.get("tokenizer.ggml.tokens")
        length = (len(tokens) if isinstance(tokens, list)
                  else tokens.get("length") if isinstance(tokens, dict) else None)
        if isinstance(length, int):
            return Value(length, "GGUF key tokenizer.ggml.tokens (array length)")
    if spec.key == "rope_scaling":
        kind = meta.get(f"{arch}.rope.scaling.type")
        if isinstance(kind, str) and kind != "none":
            scaling = {"type": kind}
            for name in ("factor", "original_context_length"):
                if f"{arch}.rope.scaling.{name}" in meta:
                    scaling[name] = meta[f"{arch}.rope.scaling.{name}"]
            return Value(scaling, f"GGUF keys {arch}.rope.scaling.*")
    if spec.key == "qk_rope_head_dim" and f"{arch}.attention.kv_lora_rank" in meta:
        value = meta.get(f"{arch}.rope.dimension_count")
        if KIND_CHECK["int"](value):
            return Value(value, f"GGUF key {arch}.rope.dimension_count")
    if spec.key == "sliding_layers":
        return _gguf_sliding_layers(meta, arch)
    return None


def _gguf_sliding_layers(meta: dict, arch: str) -> Value | None:
    layers, window = meta.get(f"{arch}.block_count"), meta.get(f"{arch}.attention.sliding_window")
    if not KIND_CHECK["int"](layers) or layers > MAX_LAYERS or not KIND_CHECK["int"](window) or window == 0:
        return None
    key = f"{arch}.attention.sliding_window_pattern"
    pattern = meta.get(key)
    if isinstance(pattern, list) and len(pattern) == layers:
        return Value([i for i, s in enumerate(pattern) if s], f"GGUF key {key}")
    if KIND_CHECK["int"](pattern) and pattern > 0:
        return Value(_every_nth_global(layers, pattern), f"GGUF key {key} ({pattern})")
    if arch in SWA_PATTERN_DEFAULTS:
        n = SWA_PATTERN_DEFAULTS[arch]
        return Value(_every_nth_global(layers, n),
                     f"llama.cpp's {arch} default: every {n}th layer global, the others sliding")
    return Value(list(range(layers)), f"GGUF key {arch}.attention.sliding_window (every layer)")


def _every_nth_global(layers: int, n: int) -> list[int]:
    """Layers that use the sliding window when every n-th (1-based) is global (HF and llama.cpp)."""
    return [i for i in range(layers) if (i + 1) % n != 0]


def _disable_sliding(fields: dict[str, Value], configs) -> None:
    """Configs that name a window but switch it off (Qwen2: use_sliding_window false)."""
    for label, cfg in configs:
        if cfg.get("use_sliding_window") is False and "sliding_window" in fields:
            fields["sliding_window"] = Value(None, f"{label}: use_sliding_window false")
            return


def _sliding_layers_from_config(fields, configs) -> Value | None:
    layers = fields.get("layers")
    window = fields.get("sliding_window")
    if layers is None or window is None or not window.value:
        return None
    n = layers.value if isinstance(layers.value, int) else None
    for label, cfg in configs:
        for where in [cfg] + [cfg[k] for k in NESTED if isinstance(cfg.get(k), dict)]:
            types = where.get("layer_types")
            if isinstance(types, list) and all(isinstance(t, str) for t in types):
                return Value([i for i, t in enumerate(types) if "sliding" in t], f"{label}: layer_types")
            pattern = where.get("sliding_window_pattern")
            if n and KIND_CHECK["int"](pattern) and pattern > 0:
                return Value(_every_nth_global(n, pattern), f"{label}: sliding_window_pattern ({pattern})")
            first = where.get("max_window_layers")
            if n and where.get("use_sliding_window") is True and KIND_CHECK["int"](first):
                return Value(list(range(first, n)), f"{label}: max_window_layers ({first})")
    family = fields.get("family")
    if n and family is not None and family.value in SWA_PATTERN_DEFAULTS:
        k = SWA_PATTERN_DEFAULTS[family.value]
        return Value(_every_nth_global(n, k), f"{family.value} default: every {k}th layer global")
    return Value(list(range(n)) if n else None, f"{window.source} (every layer)") if n else None


def _stacks(fields: dict[str, Value], configs, parameters: Breakdown) -> None:
    """Both stacks of an encoder-decoder model, or an encoder-only model (stacks.py)."""
    kind, where = stacks.kind(fields, configs, parameters.not_training)
    if kind is None:
        return
    fields["stacks"] = Value(kind, where)
    if kind == stacks.ENCODER_DECODER:
        for key, (value, source) in stacks.stack_fields(configs, parameters.not_training).items():
            fields.setdefault(key, Value(value, source))
        fields.pop("layers", None)     # one stack's count (T5's num_layers) or the other's (inferred)
        for generic, pair in (("intermediate_size", "intermediate_size"), ("heads", "heads"),
                              ("kv_heads", "heads")):
            if f"encoder_{pair}" in fields and f"decoder_{pair}" in fields:
                fields.pop(generic, None)   # each stack says its own
        heads, hidden = fields.get("decoder_heads"), fields.get("hidden_size")
        if "head_dim" not in fields and heads is not None and hidden is not None and \
                isinstance(hidden.value, int) and heads.value:
            fields["head_dim"] = Value(hidden.value // heads.value, "derived: hidden size / decoder "
                                       f"heads ({hidden.value} / {heads.value})")
    has_head = "output_head" in parameters.components
    value, source = stacks.lm_head(kind, has_head, fields.get("tied_embeddings"))
    fields["lm_head"] = Value(value, source)
    if kind == stacks.ENCODER_ONLY and not has_head:
        fields.pop("tied_embeddings", None)   # nothing to tie: the config's default says nothing


def _derive(fields: dict[str, Value], configs, meta: dict, arch) -> None:
    heads, hidden = fields.get("heads"), fields.get("hidden_size")
    if "kv_heads" not in fields and heads is not None:
        where = "config" if configs else ("GGUF" if arch else "the checkpoint")
        fields["kv_heads"] = Value(heads.value, f"default: = attention heads ({where} gives no KV head count)")
    if ("head_dim" not in fields and heads is not None and hidden is not None
            and isinstance(heads.value, int) and heads.value and isinstance(hidden.value, int)):
        fields["head_dim"] = Value(hidden.value // heads.value,
                                   f"derived: hidden size / heads ({hidden.value} / {heads.value})")
    if "sliding_layers" not in fields:
        got = _sliding_layers_from_config(fields, configs)
        if got is not None:
            fields["sliding_layers"] = got
    window = fields.get("sliding_window")
    if window is not None and not window.value:
        fields.pop("sliding_layers", None)
