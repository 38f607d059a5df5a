"""`convert --hf-names`: a GGUF file's tensors under the Hugging Face names transformers loads,
with what llama.cpp's converter did to them undone (namemap/ says what it did):

  names      namemap.reverse.to_hf, per GGUF architecture;
  Q/K rows   `LlamaModel.permute` regrouped each head's rows for ggml's rope: HF row r is GGUF
             row namemap.row_permutation(...)[r], so the HF tensor is those rows in that order;
  experts    a `*_exps` stack [E, ...] becomes E tensors `…experts.{e}.leaf`, one slab each;
  +1 norms   gemma's converter stores norm.weight + 1: that needs arithmetic on the values, not
             a rearrangement, so those architectures are refused, saying so.

All of it is rows of the GGUF tensors (writing/rows.py): no value is changed, so a quantised
tensor is dequantised exactly as it would be under its GGUF name.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import NamedTuple

from .. import namemap
from ..errors import UsageError
from ..model import Checkpoint, Tensor
from ..namemap.reverse import to_hf
from .rows import rows_tensor

ARCH_KEY = "general.architecture"


class Renamed(NamedTuple):
    tensors: list[Tensor]
    unmatched: list[str]       # GGUF tensors with no HF name: written under their GGUF name


def hf_tensors(ckpt: Checkpoint) -> Renamed:
    if not ckpt.format.startswith("gguf"):
        raise UsageError(f"--hf-names maps GGUF names back to Hugging Face ones: "
                         f"{ckpt.name} is {ckpt.format}, whose names are its own")
    meta = ckpt.metadata or {}
    arch = meta.get(ARCH_KEY)
    if not isinstance(arch, str) or arch not in namemap.ARCHS:
        raise UsageError(f"{ckpt.name}: {ARCH_KEY} {arch!r} is not an architecture whose "
                         "Hugging Face names are known: --hf-names cannot map it")
    if arch in namemap.NORM_PLUS_ONE_ARCHS:
        raise UsageError(f"{ckpt.name}: llama.cpp's converter stores {arch}'s norm weights plus "
                         "one; --hf-names rearranges tensors but does not change values, so it "
                         "cannot give the Hugging Face norms")
    out: list[Tensor] = []
    unmatched: list[str] = []
    for t in ckpt.tensors:
        hf = to_hf(t.name, arch)
        if hf is None:
            unmatched.append(t.name)
            out.append(t)
        elif hf.stacked:
            out.extend(rows_tensor(t, hf.name.replace("{xid}", str(e)), [e], t.shape[1:])
                       for e in range(t.shape[0]))
        else:
            rows = namemap.row_permutation(hf.name, arch, meta, t.shape[0] if t.shape else 0)
            out.append(replace(t, name=hf.name) if rows is None else rows_tensor(t, hf.name, rows))
    names = [t.name for t in out]
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise UsageError(f"{ckpt.name}: two GGUF tensors map to the Hugging Face name {twice!r}")
    return Renamed(out, unmatched)


def metadata(renamed: Renamed) -> dict[str, str]:
    out = {"names": "Hugging Face names (tensorloupe --hf-names: GGUF names mapped back, Q/K rows "
                    "un-permuted, stacked experts split)"}
    if renamed.unmatched:
        out["gguf_names_kept"] = json.dumps(renamed.unmatched) + " (no Hugging Face name)"
    return out
