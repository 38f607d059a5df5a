"""Will it fit: weights at several precisions, the KV cache, and weights + cache against common
memory sizes. Every number comes with the formula that produced it.

Weights: as stored (the bytes of the model's tensors, training state left out) and what the same
parameters would take at other precisions, at the bits per element of the dtypes table (bf16 16,
fp8 8, Q8_0 8.5, Q4_K 4.5: ggml blocks carry their scales).

KV cache, per token, as llama.cpp lays it out: for every layer, a K row of kv_heads x head_dim
elements and a V row of kv_heads x value_head_dim, each stored in the cache type's blocks (f16, or
the Q8_0 / Q4_0 blocks of `--cache-type-k/-v`). GQA is the kv_heads factor. A sliding-window layer
never holds more than `window` tokens, so at context C it costs min(C, window) tokens; models
that mix sliding and global layers (Gemma 2/3) are summed layer by layer. DeepSeek's MLA caches
one compressed row per layer, kv_lora_rank + qk_rope_head_dim elements (no separate V).
An encoder-decoder model (stacks.py) caches in its decoder: self-attention K and V per decoder
token, and cross-attention K and V per source token, for every decoder layer (transformers'
EncoderDecoderCache); the source is max_source_positions tokens where the config fixes it
(Whisper's 1,500 audio frames), else as long as the context. An encoder-only model keeps none.

The fits table counts weights + KV cache only; compute buffers, activations and the runtime's own
memory come on top (typically a few hundred MB to a GB), so a "fits" with little room to spare is
a maybe.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import Architecture, stacks
from ..dtypes import lookup
from ..display import human_bytes

WEIGHT_PRECISIONS = (("bf16", "BF16"), ("fp8", "F8_E4M3"), ("q8_0", "Q8_0"), ("q4_k", "Q4_K"))
CACHE_TYPES = (("f16", "F16"), ("q8_0", "Q8_0"), ("q4_0", "Q4_0"))
CONTEXTS = (4096, 32768)
DEFAULT_CONTEXT = 4096
MEMORY_SIZES_GB = (8, 12, 16, 24, 48, 80)
GIB = 1 << 30
NOTE = ("weights + KV cache only: compute buffers, activations and the runtime itself need more "
        "(often 0.5-1 GB); GB here are GiB (2^30 bytes), as GPU memory is sized")


@dataclass(frozen=True)
class LayerGroup:
    """Layers whose cache rows are alike: `count` layers, each caching `k` + `v` elements per
    token, holding at most `window` tokens (None: every token)."""
    count: int
    k: int
    v: int
    window: int | None


@dataclass
class KvShape:
    kind: str                    # "MLA", "GQA", "MHA", "MQA" or "encoder-decoder"
    groups: list[LayerGroup]
    describe: dict               # the architecture values used, for formulas
    cross: LayerGroup | None = None   # an encoder-decoder's cross-attention rows, per source token
    source: int | None = None         # its source tokens (None: as many as the context)

    def row_bytes(self, group: LayerGroup, cache_dtype: str) -> int:
        dtype = lookup(cache_dtype)
        return dtype.nbytes(group.k) + (dtype.nbytes(group.v) if group.v else 0)

    def per_token(self, cache: str, cache_dtype: str) -> tuple[int, str]:
        """Bytes per token while the context is within every window."""
        total = sum(g.count * self.row_bytes(g, cache_dtype) for g in self.groups)
        bits = lookup(cache_dtype).bits
        terms = [self._term(g, bits) for g in self.groups]
        if self.cross is None:
            return total, f"{' + '.join(terms)} = {total:,} B per token ({cache})"
        cross = self.cross.count * self.row_bytes(self.cross, cache_dtype)
        if self.source is None:    # a source token for each context token
            return total + cross, (f"self-attention {terms[0]} + cross-attention "
                                   f"{self._term(self.cross, bits)} (a source token per token) "
                                   f"= {total + cross:,} B per token ({cache})")
        return total, (f"self-attention {terms[0]} = {total:,} B per token ({cache}); "
                       f"cross-attention {cross:,} B per source token × {self.source:,}")

    def _layers(self, g: LayerGroup) -> str:
        mixed = any(other.window for other in self.groups)
        kind = "sliding " if g.window else ("global " if mixed else "")
        return f"{g.count:,} {kind}layers"

    def _term(self, g: LayerGroup, bits: float) -> str:
        unit = f"{bits:g} bits / 8" if bits != 16 else "2 bytes"
        if self.kind == "MLA":
            d = self.describe
            return (f"{self._layers(g)} × (kv_lora_rank {d['kv_lora_rank']} + qk_rope_head_dim "
                    f"{d['qk_rope_head_dim']}) × {unit}")
        kv, dk, dv = self.describe["kv_heads_by_k"].get(g.k, "?"), self.describe["head_dim"], self.describe["value_head_dim"]
        if dk == dv:
            return f"{self._layers(g)} × {kv} KV heads × {dk} head dim × 2 (K and V) × {unit}"
        return f"{self._layers(g)} × {kv} KV heads × ({dk} K + {dv} V head dim) × {unit}"

    def at(self, context: int, cache: str, cache_dtype: str) -> tuple[int, str]:
        total, parts = 0, []
        for g in self.groups:
            tokens = context if g.window is None else min(context, g.window)
            row = self.row_bytes(g, cache_dtype)
            total += g.count * row * tokens
            held = f"{tokens:,} tokens" if g.window is None else f"min({context:,}, window {g.window:,}) tokens"
            parts.append(f"{self._layers(g)} × {row:,} B × {held}")
        if self.cross is not None:
            tokens = context if self.source is None else self.source
            row = self.row_bytes(self.cross, cache_dtype)
            total += self.cross.count * row * tokens
            parts.append(f"cross-attention {self._layers(self.cross)} × {row:,} B × "
                         f"{tokens:,} source tokens")
        return total, f"{' + '.join(parts)} = {total:,} B ({cache})"


def kv_shape(arch: Architecture) -> tuple[KvShape | None, str | None]:
    """The cache layout, or (None, why it cannot be estimated)."""
    if arch.get("stacks") == stacks.ENCODER_ONLY:
        return None, (f"an encoder-only model ({arch.get('family') or 'no family named'}) keeps no "
                      "KV cache: it reads its input whole and generates no tokens")
    if arch.get("stacks") == stacks.ENCODER_DECODER:
        return _decoder_cache(arch)
    layers = arch.get("layers")
    if not isinstance(layers, int) or layers <= 0:
        return None, "the layer count is unknown"
    window = arch.get("sliding_window")
    sliding = set(arch.get("sliding_layers") or []) if window else set()
    rank, rope = arch.get("kv_lora_rank"), arch.get("qk_rope_head_dim")
    if isinstance(rank, int) and isinstance(rope, int):
        return KvShape("MLA", [LayerGroup(layers, rank + rope, 0, None)],
                       {"kv_lora_rank": rank, "qk_rope_head_dim": rope}), None
    heads, kv_heads, head_dim = arch.get("heads"), arch.get("kv_heads"), arch.get("head_dim")
    value_dim = arch.get("value_head_dim") or head_dim
    if not isinstance(head_dim, int) or kv_heads is None:
        return None, "the attention shape (KV heads, head dim) is unknown"
    per_layer = kv_heads if isinstance(kv_heads, list) else [kv_heads] * layers
    if len(per_layer) != layers or not all(isinstance(n, int) for n in per_layer):
        return None, "the per-layer KV head counts do not match the layer count"
    counts: dict[LayerGroup, int] = {}
    for i, n in enumerate(per_layer):
        if n == 0:
            continue  # llama.cpp writes 0 KV heads for layers without attention (hybrid models)
        key = LayerGroup(0, n * head_dim, n * value_dim, window if i in sliding else None)
        counts[key] = counts.get(key, 0) + 1
    groups = [LayerGroup(c, g.k, g.v, g.window) for g, c in counts.items()]
    unique = {n for n in per_layer if n}
    kind = ("MHA" if unique == {heads} else "MQA" if unique == {1} else "GQA")
    return KvShape(kind, groups, {"head_dim": head_dim, "value_head_dim": value_dim,
                                  "kv_heads_by_k": {n * head_dim: n for n in unique}}), None


def _decoder_cache(arch: Architecture) -> tuple[KvShape | None, str | None]:
    """An encoder-decoder model's decoder: self- and cross-attention rows per layer (these
    families have no GQA: as many KV heads as attention heads)."""
    layers = arch.get("decoder_layers")
    heads = arch.get("decoder_heads") or arch.get("heads")
    head_dim = arch.get("head_dim")
    if not isinstance(layers, int) or layers <= 0:
        return None, "the decoder's layer count is unknown"
    if not isinstance(heads, int) or not isinstance(head_dim, int):
        return None, "the decoder's attention shape (heads, head dim) is unknown"
    row = LayerGroup(layers, heads * head_dim, heads * head_dim, None)
    source = arch.get("source_length")
    return KvShape("encoder-decoder", [row], {"head_dim": head_dim, "value_head_dim": head_dim,
                                              "kv_heads_by_k": {heads * head_dim: heads}},
                   cross=row, source=source if isinstance(source, int) else None), None


def estimate(arch: Architecture, context: int | None = None, cache_type: str = "f16") -> dict:
    """The memory report as JSON (see README, "JSON output")."""
    params = arch.parameters.total
    stored = arch.parameters.model_bytes
    tensors = sum(c.tensors for c in arch.parameters.components.values())
    weights = [{"precision": "stored", "bytes": stored,
                "formula": f"sum of the {tensors:,} model tensors' bytes as stored = {stored:,} B"}]
    for name, dtype in WEIGHT_PRECISIONS:
        dt = lookup(dtype)
        bits = dt.bits
        size = params * dt.block_bytes // dt.block_elems  # integers: a hostile count overflows floats
        weights.append({"precision": name, "bits": bits, "bytes": size,
                        "formula": f"{params:,} parameters × {bits:g} bits / 8 = {size:,} B"})
    max_context = arch.get("context_length")
    max_context = max_context if isinstance(max_context, int) and max_context > 0 else None
    if context is None:
        context = min(DEFAULT_CONTEXT, max_context) if max_context else DEFAULT_CONTEXT
    contexts = sorted(set(CONTEXTS + ((max_context,) if max_context else ()) + (context,)))
    if max_context and arch.get("stacks") is not None:
        # learned positions (BERT's, Whisper's decoder, BART's): nothing beyond the maximum
        contexts = [n for n in contexts if n <= max_context]
    shape, reason = kv_shape(arch)
    kv: dict = {"available": shape is not None, "reason": reason, "contexts": contexts,
                "max_context": max_context, "none": arch.get("stacks") == stacks.ENCODER_ONLY}
    cache = dict(CACHE_TYPES)
    if cache_type not in cache:
        cache_type = "f16"
    if shape is not None:
        kv["kind"] = shape.kind
        kv["layers"] = [{"count": g.count, "k": g.k, "v": g.v, "window": g.window} for g in shape.groups]
        kv["per_token"] = [dict(zip(("cache_type", "bytes", "formula"), (c, *shape.per_token(c, d))))
                           for c, d in CACHE_TYPES]
        kv["at"] = [dict(zip(("context", "cache_type", "bytes", "formula"), (n, c, *shape.at(n, c, d))))
                    for n in contexts for c, d in CACHE_TYPES]
    kv_bytes = shape.at(context, cache_type, cache[cache_type])[0] if shape is not None else 0
    rows = []
    for gb in MEMORY_SIZES_GB:
        cells = [{"precision": w["precision"], "total": w["bytes"] + kv_bytes,
                  "fits": w["bytes"] + kv_bytes <= gb * GIB} for w in weights]
        rows.append({"memory_gb": gb, "memory_bytes": gb * GIB, "cells": cells})
    fits = {"context": context, "cache_type": cache_type, "kv_bytes": kv_bytes,
            "kv_included": shape is not None, "rows": rows,
            "no_kv": "encoder-only" if arch.get("stacks") == stacks.ENCODER_ONLY else "unknown"}
    return {"weights": weights, "kv_cache": kv, "fits": fits, "note": NOTE}


def human(n: int) -> str:
    if n >= 1 << 60:
        return human_bytes(n)  # integer arithmetic: a hostile header's count overflows floats
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
