"""What a view of one compared pair shows: A, B and A−B over the same tile of the frame on one
colour scale, and both value histograms on the same bins.

The positions come from A's 2-D view (rows × the rest, as the heatmap shows a tensor); B's
positions are the same frame positions mapped through the pair's row map (the converter's Q/K
permutation) and its value shift, so the three lattices show the same elements.
"""

from __future__ import annotations

import math

from ..errors import UsageError
from ..sampler.gather import gather
from ..sampler.sampling import View, lattice, plan_windows
from ..sampler.stats import Histogram, histogram
from .match import Pair, Side
from .metrics import floats, read_frame


def _cells(side: Side, positions: list[tuple[int, int]]) -> list[float]:
    view = View(side.tensor, None, None)
    rows = side.rows
    if rows is None:
        at = [view.position(r, c) for r, c in positions]
    elif len(side.tensor.shape) == 1:  # a permuted bias: its elements are the frame's rows
        at = [view.position(r, rows[c]) for r, c in positions]
    else:
        at = [view.position(rows[r], c) for r, c in positions]
    values = floats(gather(side.tensor, at), side.tensor.dtype_info.kind)
    return [v - side.shift for v in values] if side.shift else values


def tiles(pair: Pair, rows: int = 64, cols: int = 64,
          region: tuple[int, int, int, int] | None = None) -> dict:
    """{"rows", "cols", "row_index", "col_index", "a", "b", "diff", "amax"}: the lattice over
    `region` (r0, r1, c0, c1) of the frame's 2-D view, every list row-major; `amax` is the one
    colour scale of all three (the largest finite |value| among them)."""
    if pair.a is None or pair.b is None or pair.a.tensor.shape != pair.b.tensor.shape:
        raise UsageError(f"{pair.name!r} has no counterpart of the same shape to show beside it")
    height, width = View(pair.a.tensor, None, None).shape
    r0, r1, c0, c1 = region if region is not None else (0, height, 0, width)
    if not (0 <= r0 < r1 <= height and 0 <= c0 < c1 <= width) or rows < 1 or cols < 1:
        raise UsageError(f"region {(r0, r1, c0, c1)} is outside the {height:,} x {width:,} view")
    row_index, col_index = lattice(r0, r1, rows), lattice(c0, c1, cols)
    positions = [(r, c) for r in row_index for c in col_index]
    a, b = _cells(pair.a, positions), _cells(pair.b, positions)
    diff = [x - y for x, y in zip(a, b)]
    finite = [abs(v) for v in a + b + diff if math.isfinite(v)]
    return {"rows": len(row_index), "cols": len(col_index), "row_index": row_index, "col_index": col_index,
            "a": a, "b": b, "diff": diff, "amax": max(finite) if finite else 0.0}


def histograms(pair: Pair, samples: int = 1 << 14, bins: int = 64) -> tuple[Histogram, Histogram]:
    """Histograms of A and B over the same sampled frame positions and the same bins."""
    if pair.a is None or pair.b is None or pair.a.tensor.shape != pair.b.tensor.shape:
        raise UsageError(f"{pair.name!r} has no counterpart of the same shape to show beside it")
    numel = pair.a.tensor.numel
    cols = math.prod(pair.a.tensor.shape[1:]) if pair.a.tensor.shape else 1
    a: list[float] = []
    b: list[float] = []
    for start, count in plan_windows(numel, samples):
        a += read_frame(pair.a, start, count, cols)
        b += read_frame(pair.b, start, count, cols)
    finite = [v for v in a + b if math.isfinite(v)]
    value_range = (min(finite), max(finite)) if finite else None
    return histogram(a, bins, value_range=value_range), histogram(b, bins, value_range=value_range)
