"""Tensor subclasses in a torch pickle (torchao's quantised weights): each one listed under its
own name, its inner tensors (qdata, scale, zero_point) as its stored parts, and its values
dequantised where quant/torchao.py knows the layout. A subclass it does not know stays listed,
"not read: <why>", counted in the parameters once (as the unquantised weight), never dropped.
"""

from __future__ import annotations

import dataclasses

from ...model import Tensor
from .allowlist import TORCH_DTYPES

SOURCE = "the pickle's tensor subclasses"
ROLES = {"qdata": "codes", "scale": "scale", "zero_point": "zero_point"}


def rebuild(tensors: list[Tensor]) -> tuple[list[Tensor], dict | None]:
    """The tensors with every subclass and its inner tensors as one tensor, and the summary
    (`extras["quantisation"]`), or None when there is no subclass."""
    out: list[Tensor] = []
    made = unread = 0
    schemes: set[str] = set()
    i = 0
    while i < len(tensors):
        t = tensors[i]
        i += 1
        if t.info.get("kind") != "subclass":
            out.append(t)
            continue
        names = {f"{t.name}.{key}" for key in t.info.get("inner", ())}
        inner = []
        while i < len(tensors) and tensors[i].name in names:    # find_tensors puts them right after
            inner.append(tensors[i])
            i += 1
        tensor = _one(t, inner)
        if tensor.problem is None:
            made += 1
            schemes.add(tensor.info["dequantised from"])
        else:
            unread += 1
        out.append(tensor)
    if not made + unread:
        return tensors, None
    return out, {"method": "torchao", "source": SOURCE, "schemes": sorted(schemes),
                 "dequantised": made, "packed": unread}


def _one(wrapper: Tensor, inner: list[Tensor]) -> Tensor:
    # imported here: only a pickle with a tensor subclass needs the quantisation decoders
    from ...quant import torchao
    from ...quant.logical import as_tensor
    from ...quant.records import Part
    prefix = wrapper.name + "."
    unreadable = next((p for p in inner if p.problem or not p.contiguous or p.source is None), None)
    mine = {ROLES.get(p.name[len(prefix):], p.name[len(prefix):]): Part(p.name, p.dtype, p.shape) for p in inner}
    torch_dtype = wrapper.info.get("torch_dtype")
    out_dtype = (TORCH_DTYPES.get(torch_dtype) or (torch_dtype,))[0]
    logical = torchao.build(wrapper.name, wrapper.shape, str(wrapper.info.get("subclass")),
                            wrapper.info.get("attributes") or {}, out_dtype, mine)
    reason = logical.reason or (f"not read: its part {unreadable.name!r} cannot be read" if unreadable else None)
    if reason is None:
        tensor = as_tensor(logical, tuple(inner))
        tensor.info = {**tensor.info, "subclass": wrapper.info.get("subclass")}
        return tensor
    return dataclasses.replace(wrapper, problem=reason, parts=tuple(inner))
