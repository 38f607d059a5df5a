"""GGUF tensor names back to the Hugging Face names transformers loads, per GGUF architecture.

gguf-py's table maps many HF spellings onto one GGUF name (every model family that converts to
it), so the way back needs a choice: the HF name transformers' own model class of that
architecture uses. The rule: the first of gguf-py's HF templates under `model.` (the decoder
stack of every causal LM class), `lm_head` for the output head, except where PREFERRED says
otherwise (gguf-py lists a template of another family first). A stacked `*_exps` tensor comes
back as one HF tensor per expert: `…experts.{E}.leaf`, the expert number after `experts`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from . import ARCH_TENSORS, SUFFIXES, templates

# GGUF template -> HF template, where the general rule picks another family's spelling.
# llama: Mixtral converts to arch "llama" (transformers' MixtralForCausalLM names);
# qwen2moe / qwen3moe: Qwen2MoeForCausalLM / Qwen3MoeForCausalLM.
_MIXTRAL = {"blk.{bid}.ffn_gate_inp": "model.layers.{bid}.block_sparse_moe.gate",
            "blk.{bid}.ffn_gate_exps": "model.layers.{bid}.block_sparse_moe.experts.w1",
            "blk.{bid}.ffn_down_exps": "model.layers.{bid}.block_sparse_moe.experts.w2",
            "blk.{bid}.ffn_up_exps": "model.layers.{bid}.block_sparse_moe.experts.w3"}
_QWEN_MOE = {"blk.{bid}.ffn_gate_inp": "model.layers.{bid}.mlp.gate"}
PREFERRED = {"llama": _MIXTRAL, "qwen2moe": _QWEN_MOE, "qwen3moe": _QWEN_MOE}
GLOBAL_PREFERRED = {"output": "lm_head"}
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


class HFName(NamedTuple):
    name: str                # the HF name; with "{xid}" where each expert's number goes
    stacked: bool            # a GGUF `*_exps` stack: one HF tensor per slab along axis 0


def reverse_table(arch: str) -> dict[str, str]:
    """GGUF template -> the HF template transformers uses, for `arch`."""
    out: dict[str, str] = {}
    for hf, gguf in templates(arch).items():
        if hf != gguf and gguf not in out and (hf.startswith("model.") or hf == GLOBAL_PREFERRED.get(gguf)):
            out[gguf] = hf
    out.update(GLOBAL_PREFERRED)
    out.update(PREFERRED.get(arch, {}))
    return out


_CACHE: dict[str, dict[str, str]] = {}


def to_hf(gguf_name: str, arch: str) -> HFName | None:
    """The HF name of GGUF tensor `gguf_name` in an `arch` file, or None if it has none."""
    if arch not in ARCH_TENSORS:
        return None
    if arch not in _CACHE:
        _CACHE[arch] = reverse_table(arch)
    table = _CACHE[arch]
    stem, _, suffix = gguf_name.rpartition(".")
    if suffix not in SUFFIXES:
        stem, suffix = gguf_name, ""
    block = _BLOCK.match(stem)
    key, bid = (f"blk.{{bid}}.{block.group(2)}", int(block.group(1))) if block else (stem, None)
    hf = table.get(key)
    if hf is None:
        return None
    name = hf.format(bid=bid) if bid is not None else hf
    stacked = key.endswith("_exps")
    if stacked:
        head, sep, tail = name.rpartition(".experts.")
        if not sep:
            return None
        name = f"{head}.experts.{{xid}}.{tail}"
    return HFName(name + (f".{suffix}" if suffix else ""), stacked)
