"""Pair the tensors of two checkpoints: by name, and across formats through the name map.

A pair compares two tensors element by element in one frame: the HF tensor's row-major order.
Each side says how its own elements line up with that frame (a row map for the converter's Q/K
permutation, a value shift for gemma's norms, a slice of a stacked-experts tensor), so the
comparison reads the SAME element positions of both files without copying or reordering data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .. import namemap
from ..model import Checkpoint, Tensor

GGUF = "gguf"


@dataclass
class Side:
    tensor: Tensor
    rows: list[int] | None = None   # frame row r is this tensor's row rows[r]
    shift: float = 0.0              # the converter added this to every value: subtract it
    label: str = ""                 # the tensor as the user knows it ("blk.0.ffn_gate_exps.weight[3]")

    @property
    def plain(self) -> bool:
        return self.rows is None and self.shift == 0.0


@dataclass
class Pair:
    name: str                       # A's tensor name (B's for a tensor only in B)
    a: Side | None
    b: Side | None
    how: str = "name"               # "name" or "name map (<arch>)"
    notes: list[str] = field(default_factory=list)  # what the converter did that the pair undoes
    regrouped: bool = False         # the shapes differ only as a file's grouped storage (regrouped)


def regrouped(a: Tensor, b: Tensor) -> str | None:
    """A note when the two shapes differ only because one file keeps the weight grouped, in
    row-major order, and does not record its shape: optimum-quanto stores a weight quantised in
    groups of g along its rows as [rows*cols/g, g] (quant/quanto.py), and the dense side has the
    weight's real [rows, cols]. Then the elements pair one for one in row-major order."""
    for grouped, other, side in ((a, b, "A"), (b, a, "B")):
        facts = grouped.info.get("scheme", {}).get("from", {}) if grouped.parts else {}
        if not str(facts.get("shape", "")).startswith("as stored") or len(grouped.shape) != 2:
            continue
        g = grouped.shape[1]
        if other.shape and other.numel == grouped.numel and other.shape[-1] % g == 0 and other.shape != grouped.shape:
            return (f"{side} keeps this weight grouped by {g:,} as {list(grouped.shape)} (its file does "
                    f"not record the shape {list(other.shape)}): compared in row-major order")
    return None


def expert_slice(t: Tensor, expert: int) -> Tensor | None:
    """A descriptor of expert `expert` of a stacked [experts, ...] tensor (no bytes read), or None
    when the slice does not start on a block boundary."""
    info = t.dtype_info
    if info is None or t.problem or not t.contiguous or not t.shape or not 0 <= expert < t.shape[0]:
        return None
    per = math.prod(t.shape[1:])
    if per % info.block_elems:
        return None
    nbytes = per // info.block_elems * info.block_bytes
    return replace(t, name=f"{t.name}[{expert}]", shape=tuple(t.shape[1:]),
                   offset=t.offset + expert * nbytes, nbytes=nbytes, strides=None,
                   info=dict(t.info))


def match(a: Checkpoint, b: Checkpoint) -> tuple[list[Pair], str | None]:
    """Pairs in A's order, then tensors only in B. Also returns the architecture whose name map
    was used (None when names matched directly)."""
    pairs: list[Pair] = []
    b_left = {t.name: t for t in b.tensors}
    a_left: list[Tensor] = []
    for t in a.tensors:
        other = b_left.pop(t.name, None)
        if other is None:
            a_left.append(t)
        else:
            note = regrouped(t, other)
            pairs.append(Pair(t.name, Side(t, label=t.name), Side(other, label=other.name),
                              notes=[note] if note else [], regrouped=bool(note)))
    arch = None
    if a_left and b_left and (a.format == GGUF) != (b.format == GGUF):
        gguf_ckpt = a if a.format == GGUF else b
        arch = gguf_ckpt.metadata.get("general.architecture")
        if arch in namemap.ARCHS:
            gguf_is_a = gguf_ckpt is a
            hf = list(b_left.values()) if gguf_is_a else a_left
            gguf = a_left if gguf_is_a else list(b_left.values())
            mapped, used = _map_across(hf, gguf, gguf_ckpt.metadata, arch, gguf_is_a)
            pairs += mapped
            a_left = [t for t in a_left if t.name not in used]
            b_left = {n: t for n, t in b_left.items() if n not in used}
        else:
            arch = None
    order = {t.name: i for i, t in enumerate(a.tensors)}
    pairs += [Pair(t.name, Side(t, label=t.name), None) for t in a_left]
    # A's file order for everything A has (a stacked GGUF tensor's experts stay together)
    pairs.sort(key=lambda p: _file_position(order, p.a.tensor.name) if p.a else 0)
    pairs += [Pair(t.name, None, Side(t, label=t.name)) for t in b_left.values()]
    return pairs, arch


def _file_position(order: dict[str, int], name: str) -> int:
    """Where A's tensor `name` is in A's file; an expert taken out of a stacked tensor
    (`blk.0.ffn_up_exps.weight[3]`) sits where its stacked tensor is. A name may hold `[` itself."""
    if name in order:
        return order[name]
    stacked, bracket, rest = name.rpartition("[")
    return order.get(stacked, len(order)) if bracket and rest[:-1].isdigit() else len(order)


def _map_across(hf_tensors: list[Tensor], gguf_tensors: list[Tensor], metadata: dict, arch: str,
                gguf_is_a: bool) -> tuple[list[Pair], set[str]]:
    """Pair HF tensors with the GGUF tensors the converter made of them; also returns the names
    (on both sides) now paired."""
    by_name = {t.name: t for t in gguf_tensors}
    pairs: list[Pair] = []
    used: set[str] = set()
    experts_seen: dict[str, set[int]] = {}
    for hf in hf_tensors:
        target = namemap.to_gguf(hf.name, arch)
        stacked = by_name.get(target.gguf) if target is not None else None
        if stacked is None or (target.expert is None and stacked.name in used):
            continue
        notes = []
        g = stacked if target.expert is None else expert_slice(stacked, target.expert)
        if g is None:
            continue
        if target.expert is not None:
            notes.append(f"expert {target.expert} of the stacked {stacked.name}")
            experts_seen.setdefault(stacked.name, set()).add(target.expert)
        else:
            used.add(stacked.name)
        rows = namemap.row_permutation(hf.name, arch, metadata, hf.shape[0] if hf.shape else 0)
        if rows is not None:
            notes.append("Q/K rows un-permuted (convert_hf_to_gguf permutes them for rope)")
        shift = namemap.value_offset(stacked.name, arch)
        if shift:
            notes.append(f"the converter's {shift:+g} on every value taken off")
        g_side, hf_side = Side(g, rows, shift, g.name), Side(hf, label=hf.name)
        a_side, b_side = (g_side, hf_side) if gguf_is_a else (hf_side, g_side)
        pairs.append(Pair(a_side.label, a_side, b_side, f"name map ({arch})", notes))
        used.add(hf.name)
    # a stacked tensor counts as matched only when every one of its experts is
    for name, seen in experts_seen.items():
        if seen == set(range(by_name[name].shape[0])):
            used.add(name)
    return pairs, used
