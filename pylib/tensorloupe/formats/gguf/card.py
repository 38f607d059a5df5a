"""The model card of a GGUF checkpoint: the handful of numbers people look for first.

Built from the metadata keys llama.cpp defines (gguf-py `gguf/constants.py`, class Keys; most are
`{arch}.`-prefixed with the value of `general.architecture`) plus what only the tensors can tell
(parameter count, dominant quantization, bits per weight). The result is an ordered dict of human
label -> str/int/float that the CLI and the page render as they are; rows whose keys are absent are
left out.
"""

from __future__ import annotations

from ...model import Tensor

# (label, key template), in display order; "{arch}" is general.architecture.
ARCH_ROWS = (
    ("Layers", "{arch}.block_count"),
    ("Embedding length", "{arch}.embedding_length"),
    ("Attention heads", "{arch}.attention.head_count"),
    ("KV heads", "{arch}.attention.head_count_kv"),
    ("Head dim", "{arch}.attention.key_length"),
    ("FFN size", "{arch}.feed_forward_length"),
    ("Expert FFN size", "{arch}.expert_feed_forward_length"),
    ("Context length", "{arch}.context_length"),
    ("RoPE base", "{arch}.rope.freq_base"),
    ("Experts", "{arch}.expert_count"),
    ("Experts used", "{arch}.expert_used_count"),
)

# llama_ftype (llama.h; gguf-py LlamaFileType): the value of general.file_type. Removed ids are absent.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4",
    40: "Q1_0", 1024: "guessed",
}
VOCAB_KEY = "tokenizer.ggml.tokens"
EMBEDDING_TENSOR = "token_embd.weight"


def model_card(metadata: dict, tensors: list[Tensor], file_size: int) -> dict:
    card: dict = {}
    arch = metadata.get("general.architecture")
    if isinstance(arch, str):
        card["Architecture"] = arch
    if isinstance(metadata.get("general.name"), str):
        card["Name"] = metadata["general.name"]
    if isinstance(arch, str):
        for label, template in ARCH_ROWS:
            shown = _shown(metadata.get(template.format(arch=arch)))
            if shown is None and label == "Head dim":
                shown = _head_dim(metadata, arch)
            if shown is not None:
                card[label] = shown
        vocab = _vocab_size(metadata, arch, tensors)
        if vocab is not None:
            card["Vocab size"] = vocab
    card["File size"] = f"{file_size:,} bytes ({_human_bytes(file_size)})"
    card["Tensors"] = len(tensors)
    card["Parameters"] = sum(t.numel for t in tensors)
    by_type: dict[str, int] = {}
    for t in tensors:
        by_type[t.dtype] = by_type.get(t.dtype, 0) + t.numel
    if by_type:
        card["Quantization"] = max(by_type, key=by_type.get)
    file_type = metadata.get("general.file_type")
    if _is_int(file_type):
        card["File type"] = FILE_TYPES.get(file_type, f"unknown ({file_type})")
    known = [t for t in tensors if t.problem is None]
    weights = sum(t.numel for t in known)
    if weights:
        card["Bits per weight"] = round(sum(t.nbytes for t in known) * 8 / weights, 2)
    return card


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value):
    """A scalar as it is; a per-layer list as one number or a 'min-max' range."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and value and all(_is_int(v) or isinstance(v, float) for v in value):
        low, high = min(value), max(value)
        return low if low == high else f"{low}-{high} (per layer)"
    return None


def _head_dim(metadata: dict, arch: str):
    """Without attention.key_length, llama.cpp takes embedding_length / head_count."""
    heads = metadata.get(f"{arch}.attention.head_count")
    width = metadata.get(f"{arch}.embedding_length")
    if _is_int(heads) and _is_int(width) and heads > 0 and width % heads == 0:
        return width // heads
    return None


def _vocab_size(metadata: dict, arch: str, tensors: list[Tensor]):
    tokens = metadata.get(VOCAB_KEY)
    if isinstance(tokens, list):
        return len(tokens)
    if isinstance(tokens, dict) and _is_int(tokens.get("length")):
        return tokens["length"]
    if _is_int(metadata.get(f"{arch}.vocab_size")):
        return metadata[f"{arch}.vocab_size"]
    for t in tensors:
        if t.name == EMBEDDING_TENSOR and t.shape:
            return t.shape[0]
    return None


def _human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
