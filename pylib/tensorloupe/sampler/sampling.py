"""What the views ask of a tensor: a spread-out sample, a lattice for the heatmap, exact values,
and whole-tensor statistics streamed in chunks.

Sampling reads contiguous windows spread evenly over the tensor (stratified), never single
elements on a stride: in the browser every read costs ~1.5 ms, so 4096 strided reads would take
6 s while 32 windows take 50 ms and see the same distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

from ..errors import UsageError
from .gather import dtype_of, gather, gather_range, gather_windows
from .layout import planned_bytes, storage_view, window_bytes
from ..model import Tensor
from ..jsonable import json_number
from .exact import (EXACT_CHUNK_ELEMS, exact_histogram, exact_stats, exact_stats_steps,  # noqa: F401
                    exact_summary)
from .stats import Histogram, Stats, histogram, sorted_histogram, summarize

__all__ = ["sample", "grid", "values", "exact_stats", "exact_histogram", "exact_summary", "histogram",
           "Sample", "Grid", "Stats", "Histogram"]

DEFAULT_SAMPLES = 1 << 16
MAX_WINDOWS = 32


@dataclass
class Sample:
    values: list
    stats: Stats
    # (first index, count) of each window read: in `order` when there is one (a dequantised
    # weight read along its stored rows), else in the tensor's storage order (layout.storage_view;
    # row-major if contiguous)
    windows: list[tuple[int, int]]
    numel: int
    first_look: bool = False         # a part of the sample's windows (staged.py), shown first
    ordered: list | None = field(default=None, repr=False, compare=False)   # finite values, sorted
    # None: windows of row-major logical indices; else the storage order they run in
    # (quant/order.py: its `logical(i)` is the logical index of element i of the order)
    order: object | None = None

    def indices(self) -> list[int]:
        """The row-major logical index of each value, in order: which elements the sample took
        (a strided view's windows are indices in its storage order instead: layout.storage_view)."""
        at = (lambda i: i) if self.order is None else self.order.logical
        return [at(i) for start, count in self.windows for i in range(start, start + count)]

    @property
    def exhaustive(self) -> bool:
        return len(self.values) == self.numel

    def histogram(self, bins: int = 64, log: bool = False) -> Histogram:
        """`histogram(self.values, bins)`, from the values the statistics sorted already."""
        if self.ordered is None:
            return histogram(self.values, bins, log)
        return sorted_histogram(self.ordered, bins, log)

    def to_json(self) -> dict:
        # "extremes": min and max are the tensor's ("exact", every element was read) or the
        # sample's ("sampled": the tensor's min is at most, its max at least these)
        out = {"stats": self.stats.to_json(), "samples": len(self.values), "numel": self.numel,
               "exhaustive": self.exhaustive, "extremes": "exact" if self.exhaustive else "sampled"}
        if self.first_look:
            out["first_look"] = True
        if self.order is not None:
            out["windows_along"] = self.order.label
        return out


def summarized(values: list, windows: list[tuple[int, int]], numel: int, first_look: bool = False,
               order=None) -> Sample:
    stats, ordered = summarize(values)
    return Sample(values, stats, windows, numel, first_look, ordered, order)


def plan_windows(numel: int, max_samples: int, block_elems: int = 1,
                 max_windows: int = MAX_WINDOWS) -> list[tuple[int, int]]:
    """Up to `max_windows` block-aligned windows spread evenly over [0, numel)."""
    if numel <= max_samples:
        return [(0, numel)] if numel else []
    windows = min(max_windows, max(1, max_samples // block_elems))
    length = max(block_elems, (max_samples // windows) // block_elems * block_elems)
    windows = min(windows, max(1, max_samples // length))
    slack = numel - length
    out = []
    for k in range(windows):
        start = (slack * k // (windows - 1)) if windows > 1 else slack // 2
        start = start // block_elems * block_elems
        out.append((start, min(length, numel - start)))
    return out


def sample_order(tensor: Tensor, max_samples: int = DEFAULT_SAMPLES):
    """The storage order a sample of this tensor runs in (quant/order.py: a dequantised weight
    whose logical rows cross its stored rows), or None: row-major. A tensor read whole is read
    in row-major order."""
    order = getattr(tensor.source, "sample_order", None)
    if order is None or tensor.numel <= max_samples or tensor.offset or not tensor.contiguous:
        return None
    return order


def sample_windows(tensor: Tensor, max_samples: int = DEFAULT_SAMPLES) -> list[tuple[int, int]]:
    """The windows `sample` reads: (first index, count) each, in `sample_order(tensor)` when it
    has one, else in the tensor's storage order (a strided view is sampled where its bytes lie:
    layout.storage_view)."""
    if max_samples < 1:
        raise UsageError("max_samples must be at least 1")
    order = sample_order(tensor, max_samples)
    if order is not None:
        return plan_windows(tensor.numel, max_samples, order.align)
    info = dtype_of(tensor)
    view = storage_view(tensor)
    return plan_windows(view.numel, max_samples, info.block_elems if view.contiguous else 1)


def read_windows(tensor: Tensor, windows: list[tuple[int, int]], order=None) -> Iterator[list]:
    """The values of each of `sample_windows`' windows in turn, every window's reads issued
    together."""
    if order is not None:
        return iter(tensor.source.read_sample(windows))
    view = storage_view(tensor)
    return gather_windows((view, start, count) for start, count in windows)


def sample_cost(tensor: Tensor, max_samples: int = DEFAULT_SAMPLES) -> int:
    """Bytes `sample(tensor, max_samples)` asks of the source, stated before anything is read
    (a tensor read from its own bytes: layout.costed)."""
    view = storage_view(tensor)
    return sum(window_bytes(view, start, count) for start, count in sample_windows(tensor, max_samples))


def sample(tensor: Tensor, max_samples: int = DEFAULT_SAMPLES) -> Sample:
    windows = sample_windows(tensor, max_samples)
    order = sample_order(tensor, max_samples)
    values: list = []
    for part in read_windows(tensor, windows, order):
        values += part
    return summarized(values, windows, tensor.numel, order=order)


def values(tensor: Tensor, start: int = 0, count: int = 100) -> list:
    """Exact elements in row-major order, like a debugger's view of the tensor."""
    if start < 0 or count < 0:
        raise UsageError("start and count must be >= 0")
    count = max(0, min(count, tensor.numel - start))
    return gather_range(tensor, start, count)


@dataclass
class Grid:
    rows: int                 # lattice size
    cols: int
    values: list              # rows * cols values, row-major
    row_index: list[int]      # the view row each lattice row shows
    col_index: list[int]
    view_shape: tuple[int, int]
    exact: bool               # every view element in the region is shown (one cell per element)
    first_look: bool = False  # a part of the lattice asked for, shown first (staged.py)

    @property
    def amax(self) -> float:
        floats = self.floats()
        # No NaN or Inf (their sum is finite): the largest |value| from max and min, which
        # Pyodide runs 5x faster than abs() and isfinite() called once per value.
        if math.isfinite(sum(floats)):
            return abs(max(max(floats), -min(floats))) if floats else 0.0
        return max(map(abs, filter(math.isfinite, floats)), default=0.0)

    def floats(self) -> list[float]:
        # One type per tensor: convert at C speed (complex values show their magnitude).
        if self.values and isinstance(self.values[0], complex):
            return [abs(v) for v in self.values]
        return list(map(float, self.values))

    def at(self, r: int, c: int):
        return self.values[r * self.cols + c]

    def to_json(self) -> dict:
        return {"rows": self.rows, "cols": self.cols, "row_index": self.row_index,
                "col_index": self.col_index, "view_shape": list(self.view_shape),
                "exact": self.exact, "values": [json_number(v) for v in self.values]}


class View:
    """A 2-D view of a tensor: view (r, c) -> storage element offset, linear in r and c."""

    def __init__(self, tensor: Tensor, plane: tuple[int, int] | None, index: dict[int, int] | None):
        shape, strides = tensor.shape, tensor.element_strides()
        ndim = len(shape)
        self.unravel_cols = None
        if plane is None:
            if ndim == 0:
                self.shape, self.base, self.steps = (1, 1), 0, (0, 0)
            elif ndim == 1:
                self.shape, self.base, self.steps = (1, shape[0]), 0, (0, strides[0])
            elif ndim == 2 or tensor.contiguous:
                # rows = shape[0], cols = product of the rest (contiguous, so one step of 1 element)
                self.shape = (shape[0], math.prod(shape[1:]))
                self.base, self.steps = 0, (strides[0], strides[-1] if ndim == 2 else 1)
            else:
                self.shape = (shape[0], math.prod(shape[1:]))
                self.base, self.steps = 0, (strides[0], 0)
                self.unravel_cols = (shape[1:], strides[1:])
            return
        a, b = plane
        if not (0 <= a < ndim and 0 <= b < ndim and a != b):
            raise UsageError(f"plane {plane} is not two distinct axes of a {ndim}-D tensor")
        index = dict(index or {})
        base = 0
        for axis in range(ndim):
            if axis in (a, b):
                continue
            i = index.get(axis, 0)
            if not 0 <= i < shape[axis]:
                raise UsageError(f"index {i:,} is outside axis {axis} of size {shape[axis]:,}")
            base += i * strides[axis]
        self.shape, self.base, self.steps = (shape[a], shape[b]), base, (strides[a], strides[b])

    def position(self, r: int, c: int) -> int:
        if self.unravel_cols is None:
            return self.base + r * self.steps[0] + c * self.steps[1]
        dims, strides = self.unravel_cols
        position = self.base + r * self.steps[0]
        for dim, stride in zip(reversed(dims), reversed(strides)):
            c, i = divmod(c, dim)
            position += i * stride
        return position


def lattice(lo: int, hi: int, n: int) -> list[int]:
    """n indices spread over [lo, hi), each the centre of its cell; every index when n >= hi - lo."""
    span = hi - lo
    n = min(n, span)
    return [lo + ((2 * i + 1) * span) // (2 * n) for i in range(n)]


@dataclass
class GridPlan:
    """Where the cells of a lattice lie: the view rows and columns shown, each lattice row's
    lowest and highest storage offset, and the storage offset of every cell (`row`, `positions`):
    row starts plus column offsets for a view linear in both, else listed (`flat`, row-major)."""
    row_index: list[int]
    col_index: list[int]
    view_shape: tuple[int, int]
    exact: bool
    spans: list[tuple[int, int]]
    starts: list[int] | None = None
    across: list[int] | None = None
    flat: list[int] | None = None

    def row(self, i: int) -> list[int]:
        if self.flat is None:
            start = self.starts[i]
            return [start + o for o in self.across]
        cols = len(self.col_index)
        return self.flat[i * cols:(i + 1) * cols]

    @property
    def positions(self) -> list[int]:
        if self.flat is None:
            return [start + o for start in self.starts for o in self.across]
        return self.flat

    def grid(self, cells: list) -> Grid:
        return Grid(len(self.row_index), len(self.col_index), cells, self.row_index, self.col_index,
                    self.view_shape, self.exact)


def grid(tensor: Tensor, rows: int = 256, cols: int = 256,
         region: tuple[int, int, int, int] | None = None,
         plane: tuple[int, int] | None = None, index: dict[int, int] | None = None) -> Grid:
    """A rows x cols lattice over a 2-D view of the tensor, or over `region` = (r0, r1, c0, c1)
    (half-open) of it. Once the region is no larger than the lattice, each cell is one element."""
    plan = plan_grid(tensor, rows, cols, region, plane, index)
    return plan.grid(gather(tensor, plan.positions))


def grid_cost(tensor: Tensor, plan: GridPlan) -> int:
    """Bytes the lattice `plan` asks of a stored tensor's source (its coalesced ranges), stated
    before anything is read."""
    return planned_bytes(tensor, plan.positions)


def plan_grid(tensor: Tensor, rows: int = 256, cols: int = 256,
              region: tuple[int, int, int, int] | None = None,
              plane: tuple[int, int] | None = None, index: dict[int, int] | None = None) -> GridPlan:
    """Where the cells of `grid(...)` lie, before anything is read."""
    dtype_of(tensor)
    view = View(tensor, plane, index)
    height, width = view.shape
    r0, r1, c0, c1 = region if region is not None else (0, height, 0, width)
    if not (0 <= r0 < r1 <= height and 0 <= c0 < c1 <= width):
        raise UsageError(f"region {(r0, r1, c0, c1)} is outside the {height:,} x {width:,} view")
    if rows < 1 or cols < 1:
        raise UsageError("a grid needs at least one row and one column")
    row_index, col_index = lattice(r0, r1, rows), lattice(c0, c1, cols)
    if view.unravel_cols is None:   # linear in r and c: add row and column offsets
        across = [c * view.steps[1] for c in col_index]
        starts = [view.base + r * view.steps[0] for r in row_index]
        lo, hi = min(across), max(across)
        spans = [(start + lo, start + hi) for start in starts]
        layout = {"starts": starts, "across": across}
    else:
        flat = [view.position(r, c) for r in row_index for c in col_index]
        n = len(col_index)
        spans = [(min(flat[k:k + n]), max(flat[k:k + n])) for k in range(0, len(flat), n)]
        layout = {"flat": flat}
    exact = len(row_index) == r1 - r0 and len(col_index) == c1 - c0
    return GridPlan(row_index, col_index, (height, width), exact, spans, **layout)

