"""Where each parameter's elements are in a DeepSpeed ZeRO checkpoint's flat fp32 partitions.

The arithmetic of deepspeed/utils/zero_to_fp32.py (0.19.8), element counts only (no bytes):
  - ZeRO 1/2 (`_zero2_merge_trainable_params`): group g's flat vector is the ranks' partitions
    `single_partition_of_fp32_groups[g]` joined in rank order; its parameters (param_shapes[g],
    in order) follow one another from element 0, each followed by its alignment padding
    (`param_alignment_paddings[g][i]`, 0 when the writer had none). The vector ends with padding
    to a multiple of 2 x world size, so the elements used, rounded up to that multiple, must be
    the vector's length, rounded likewise.
  - ZeRO 3 (`_zero3_merge_trainable_params`): every rank holds ceil(numel / world) elements of
    every parameter (the last rank's padded), one parameter after another over all of param_shapes
    (the groups merged, in order), in its `fp32_flat_groups` joined (the group boundaries are rank
    0's group lengths); a parameter is its ranks' slices joined in rank order, cut to numel. The
    per-rank elements used, times the world size, must be the ranks' elements in all.
A Span is `count` elements from element `start` of rank `rank`'s flat group `group`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ...errors import FormatError


class Span(NamedTuple):
    rank: int
    group: int
    start: int
    count: int


def _cut(bounds: list[int], start: int, count: int, name: str) -> list[tuple[int, int, int]]:
    """(index, start within it, count) over consecutive runs whose starts are `bounds` (plus
    the end as the last bound) covering `count` elements from `start`, of parameter `name`."""
    if start + count > bounds[-1]:
        raise FormatError(f"parameter {name!r} reaches past the end of the flat partitions: its "
                          f"elements {start:,}..{start + count:,} of {bounds[-1]:,}",
                          format="deepspeed-zero", expected=f"at most {bounds[-1]:,} elements",
                          found=start + count)
    out = []
    i = 0
    while count > 0:
        while i + 1 < len(bounds) and bounds[i + 1] <= start:
            i += 1
        take = min(count, bounds[i + 1] - start)
        out.append((i, start - bounds[i], take))
        start += take
        count -= take
    return out


def _bounds(lengths: list[int]) -> list[int]:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def zero2(groups: list[list], lengths: list[list[int]], paddings: list[list[int]] | None
          ) -> dict[str, list[Span]]:
    """{parameter name: spans} for ZeRO 1/2. `groups[g]` is [[name, shape], ...];
    `lengths[r][g]` the elements of rank r's partition of group g."""
    world = len(lengths)
    out: dict[str, list[Span]] = {}
    for g, shapes in enumerate(groups):
        pads = paddings[g] if paddings is not None else [0] * len(shapes)
        if len(pads) != len(shapes):
            raise FormatError(f"group {g:,} has {len(shapes):,} parameters but {len(pads):,} alignment "
                              "paddings", format="deepspeed-zero")
        bounds = _bounds([lengths[r][g] for r in range(world)])
        offset = 0
        for (name, shape), pad in zip(shapes, pads):
            numel = math.prod(shape)
            out[name] = [Span(r, g, s, n) for r, s, n in _cut(bounds, offset, numel, name)]
            offset += numel + pad
        align = 2 * world
        used, avail = (align * math.ceil(x / align) for x in (offset, bounds[-1]))
        if used != avail:
            raise FormatError(f"the parameters of group {g:,} use {offset:,} elements of its "
                              f"{bounds[-1]:,}-element flat partitions (zero_to_fp32's check: "
                              "something is wrong)", format="deepspeed-zero",
                              expected=avail, found=used)
    return out


def zero3(shapes: list, lengths: list[list[int]]) -> dict[str, list[Span]]:
    """{parameter name: spans} for ZeRO 3; `shapes` is [[name, shape], ...] over every group."""
    world = len(lengths)
    bounds = _bounds(lengths[0])
    out: dict[str, list[Span]] = {}
    offset = 0
    for name, shape in shapes:
        numel = math.prod(shape)
        per_rank = math.ceil(numel / world)
        spans, left = [], numel
        for r in range(world):
            for g, s, n in _cut(bounds, offset, per_rank, name):
                take = min(n, left)
                if take:
                    spans.append(Span(r, g, s, take))
                left -= take
        out[name] = spans
        offset += per_rank
    if offset * world != bounds[-1] * world:
        raise FormatError(f"the parameters use {offset * world:,} elements of the ranks' "
                          f"{bounds[-1] * world:,} (zero_to_fp32's check: something is wrong)",
                          format="deepspeed-zero", expected=bounds[-1] * world,
                          found=offset * world)
    return out
