"""The seeded demo model: a small Mixtral-shaped MoE written as real safetensors bytes.

4 layers, 8 experts per layer, d_model 96, d_ff 192, attention, norms, a router per layer and
embeddings. Experts 0-3 of each layer are distinct archetypes; expert j >= 4 is archetype j mod 4
plus 16 % uniform noise, so a working redundancy analysis finds exactly the pairs (0,4), (1,5),
(2,6), (3,7) in every layer.

The random numbers come from BLAKE2b in counter mode rather than `random`, whose algorithms may
change between Python versions: the bytes are the same on every platform and every release (a test
pins their hash). BLAKE2b also runs at C speed, which keeps building the demo under a second in the
browser.
"""

from __future__ import annotations

import hashlib
import json
import sys
from array import array

from .writing import encode

LAYERS = 4
EXPERTS = 8
ARCHETYPES = 4
D_MODEL = 96
D_FF = 192
VOCAB = 256
HEADS, KV_HEADS = 6, 2
HEAD_DIM = D_MODEL // HEADS
TOP_K = 2
NOISE = 0.16
FILE_NAME = "demo-moe.safetensors"
CONFIG = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": D_MODEL,
    "intermediate_size": D_FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS, "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K,
    "vocab_size": VOCAB,
}


def uniform(seed: str, n: int) -> list[float]:
    """n deterministic uniform values in [-1, 1) from a named stream."""
    out = bytearray()
    counter = 0
    key = seed.encode()
    while len(out) < 4 * n:
        out += hashlib.blake2b(counter.to_bytes(8, "little"), key=key[:64], digest_size=64).digest()
        counter += 1
    words = array("I" if array("I").itemsize == 4 else "L")
    words.frombytes(bytes(out[:4 * n]))
    if sys.byteorder == "big":
        words.byteswap()
    scale = 2.0 ** -31
    return [w * scale - 1.0 for w in words]


_f32_bytes = encode.f32     # little-endian float32, at C speed


def _bf16_bytes(values: list[float]) -> bytes:
    # The top half of each float32 (truncation): a valid bfloat16 tensor, built at C speed.
    f32 = _f32_bytes(values)
    out = bytearray(len(f32) // 2)
    out[0::2] = f32[2::4]
    out[1::2] = f32[3::4]
    return bytes(out)


def _f16_bytes(values: list[float]) -> bytes:
    import struct
    return struct.pack("<%de" % len(values), *values)


ENCODERS = {"F32": _f32_bytes, "BF16": _bf16_bytes, "F16": _f16_bytes}


def _tensor(seed: str, shape: tuple[int, ...], scale: float) -> list[float]:
    n = 1
    for d in shape:
        n *= d
    return [v * scale for v in uniform(seed, n)]


def _expert(layer: int, expert: int, which: int, shape: tuple[int, int]) -> list[float]:
    scale = shape[1] ** -0.5
    archetype = uniform(f"layer{layer}.archetype{expert % ARCHETYPES}.w{which}", shape[0] * shape[1])
    if expert < ARCHETYPES:
        return [a * scale for a in archetype]
    noise = uniform(f"layer{layer}.expert{expert}.w{which}.noise", len(archetype))
    return [(a + NOISE * e) * scale for a, e in zip(archetype, noise)]


def tensors():
    """(name, dtype, shape, values) in file order."""
    yield "model.embed_tokens.weight", "F16", (VOCAB, D_MODEL), _tensor("embed", (VOCAB, D_MODEL), 1.0)
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        yield f"{p}.input_layernorm.weight", "F32", (D_MODEL,), [1.0 + 0.05 * v for v in uniform(f"{p}.ln1", D_MODEL)]
        for proj, rows in (("q", HEADS * HEAD_DIM), ("k", KV_HEADS * HEAD_DIM),
                           ("v", KV_HEADS * HEAD_DIM), ("o", D_MODEL)):
            cols = D_MODEL if proj != "o" else HEADS * HEAD_DIM
            yield (f"{p}.self_attn.{proj}_proj.weight", "BF16", (rows, cols),
                   _tensor(f"{p}.{proj}", (rows, cols), cols ** -0.5))
        yield f"{p}.post_attention_layernorm.weight", "F32", (D_MODEL,), [1.0 + 0.05 * v for v in uniform(f"{p}.ln2", D_MODEL)]
        yield (f"{p}.block_sparse_moe.gate.weight", "F32", (EXPERTS, D_MODEL),
               _tensor(f"{p}.router", (EXPERTS, D_MODEL), D_MODEL ** -0.5))
        for e in range(EXPERTS):
            for which, (leaf, shape) in enumerate((("w1", (D_FF, D_MODEL)), ("w2", (D_MODEL, D_FF)),
                                                   ("w3", (D_FF, D_MODEL)))):
                yield (f"{p}.block_sparse_moe.experts.{e}.{leaf}.weight", "F32", shape,
                       _expert(i, e, which, shape))
    yield "model.norm.weight", "F32", (D_MODEL,), [1.0 + 0.05 * v for v in uniform("norm", D_MODEL)]
    yield "lm_head.weight", "F16", (VOCAB, D_MODEL), _tensor("lm_head", (VOCAB, D_MODEL), D_MODEL ** -0.5)


def safetensors_bytes(entries, metadata: dict[str, str]) -> bytes:
    """Serialise (name, dtype, shape, raw bytes) entries as a safetensors file."""
    header: dict = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # pad so tensor data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def demo_bytes() -> bytes:
    entries = [(name, dtype, shape, ENCODERS[dtype](values)) for name, dtype, shape, values in tensors()]
    metadata = {"format": "pt", "generator": "tensorloupe synthetic demo v1",
                "config": json.dumps(CONFIG, separators=(",", ":"))}
    return safetensors_bytes(entries, metadata)
