"""HF transformers <-> GGUF tensor names, and what llama.cpp's converter does to the data on the way.

The names come from gguf-py's own table (copied into `table.py` by tools/gen_namemap.py, kept in
step by tests/test_namemap.py). The data changes come from reading the converter,
convert_hf_to_gguf.py and its `conversion/` package (llama.cpp as vendored in llama-cpp-python
0.3.36):

- dimension order: GGUF stores ggml's `ne` (fastest first); our reader already reports shapes
  outermost-first, so an HF [out, in] weight and its GGUF tensor have the same shape;
- stacked experts: per-expert HF tensors `….experts.E.w1.weight` [I, H] become one GGUF tensor
  `blk.N.ffn_gate_exps.weight` [experts, I, H] (`torch.stack(..., dim=0)` in llama.py/qwen.py);
- Q/K rows: `LlamaModel.permute` (llama.py, also DeepseekModel in deepseek.py) regroups each
  head's rows from HF's rotate-half order into ggml's interleaved rope order (only for HF-style
  `self_attn.q_proj/k_proj` names; Meta/Mistral-native `attention.wq` is already interleaved);
- gemma norms: GemmaModel/Gemma2Model/Gemma3Model store `norm.weight + 1` (gemma.py).

Tensors the converter splits or fuses (DeepSeek-V2's kv_b_proj into attn_k_b/attn_v_b, for
example) have no one-to-one counterpart and are reported as unmatched.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..roles import role_of
from .table import ARCH_BLOCK_OVERRIDES, ARCH_TENSORS, BLOCK, GLOBAL

ARCHS = tuple(ARCH_TENSORS)
SUFFIXES = ("weight", "bias")

# convert_hf_to_gguf: which GGUF architectures had Q/K rows permuted (undo_permute = True), and
# the HF names it applies to (`name.endswith(("q_proj.weight", "q_proj.bias"))` in llama.py).
PERMUTED_ARCHS = ("llama", "deepseek")
PERMUTED_Q = ("self_attn.q_proj.weight", "self_attn.q_proj.bias")
PERMUTED_K = ("self_attn.k_proj.weight", "self_attn.k_proj.bias")
# gemma.py: `if name.endswith("norm.weight"): data_torch = data_torch + 1`
NORM_PLUS_ONE_ARCHS = ("gemma", "gemma2", "gemma3")

_NUMBER = re.compile(r"^\d+$")


def templates(arch: str) -> dict[str, str]:
    """HF name template -> GGUF name template for `arch`, built the way gguf-py's TensorNameMap
    builds its mapping (later rows win when two tensors list the same HF name)."""
    allowed = set(ARCH_TENSORS[arch])
    block = {row[0]: row for row in BLOCK}
    for row in ARCH_BLOCK_OVERRIDES.get(arch, ()):
        block[row[0]] = row  # dict.update in gguf-py: an existing key keeps its place
    out: dict[str, str] = {}
    for kind, gguf_name, hf_names in list(GLOBAL) + list(block.values()):
        if kind not in allowed:
            continue
        out[gguf_name] = gguf_name
        for hf in hf_names:
            out[hf] = gguf_name
    return out


_CACHE: dict[str, dict[str, str]] = {}


def _table(arch: str) -> dict[str, str]:
    if arch not in _CACHE:
        _CACHE[arch] = templates(arch)
    return _CACHE[arch]


class Target(NamedTuple):
    gguf: str               # the GGUF tensor name
    expert: int | None      # the slice of a stacked-experts GGUF tensor, for a per-expert HF tensor


def to_gguf(name: str, arch: str) -> Target | None:
    """The GGUF tensor an HF tensor becomes when `arch` is converted, or None if none does."""
    if arch not in ARCH_TENSORS:
        return None
    found = _lookup(name, _table(arch))
    if found is not None:
        return Target(found, None)
    expert = role_of(name).expert
    if expert is not None:
        # per-expert HF names are listed in gguf-py by their stacked form, without the index
        parts = name.split(".")
        for i in range(1, len(parts)):
            if parts[i - 1] == "experts" and parts[i] == str(expert):
                found = _lookup(".".join(parts[:i] + parts[i + 1:]), _table(arch))
                if found is not None:
                    return Target(found, expert)
    return None


def _lookup(name: str, table: dict[str, str]) -> str | None:
    parts = name.split(".")
    suffix = ""
    if len(parts) > 1 and parts[-1] in SUFFIXES:
        suffix = "." + parts.pop()
    stem = ".".join(parts)
    if stem in table and "{bid}" not in table[stem]:
        return table[stem] + suffix
    for i, part in enumerate(parts):  # try each number as the block index
        if _NUMBER.match(part):
            key = ".".join(parts[:i] + ["{bid}"] + parts[i + 1:])
            if key in table:
                return table[key].format(bid=int(part)) + suffix
    return None


def row_permutation(hf_name: str, arch: str, metadata: dict, rows: int) -> list[int] | None:
    """For each HF row r, the GGUF row that holds it after the converter's Q/K permutation, or
    None when the converter leaves the rows alone."""
    if arch not in PERMUTED_ARCHS:
        return None
    if hf_name.endswith(PERMUTED_Q):
        heads = metadata.get(f"{arch}.attention.head_count")
    elif hf_name.endswith(PERMUTED_K):
        # permute(w, n_head, n_head_kv) uses n_head_kv when it differs
        heads = metadata.get(f"{arch}.attention.head_count_kv") or metadata.get(f"{arch}.attention.head_count")
    else:
        return None
    if not isinstance(heads, int) or heads < 1 or rows % (2 * heads):
        return None
    return qk_permutation(rows, heads)


def qk_permutation(rows: int, heads: int) -> list[int]:
    """LlamaModel.permute as an index map: w.reshape(heads, 2, half, …).swapaxes(1, 2) puts HF row
    h*dim + j*half + i at GGUF row h*dim + 2*i + j."""
    dim = rows // heads
    half = dim // 2
    out = [0] * rows
    for h in range(heads):
        for j in range(2):
            for i in range(half):
                out[h * dim + j * half + i] = h * dim + 2 * i + j
    return out


def value_offset(gguf_name: str, arch: str) -> float:
    """What the converter added to every value of this tensor (gemma's norms store weight + 1)."""
    if arch in NORM_PLUS_ONE_ARCHS and gguf_name.endswith("norm.weight"):
        return 1.0
    return 0.0
