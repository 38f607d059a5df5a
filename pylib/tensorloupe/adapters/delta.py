"""An adapted weight's ΔW = scale · B · A as float32 values, computed from A and B and never
materialised: an element (i, j) needs row i's r values of B and column j of A (A is read once,
whole, and kept as columns of r values); a transposed ΔW ((B·A)^T: embeddings, fan_in_fan_out)
needs row i's column of A (r short ranges) and all of B. Only the elements a read covers are
computed (a sample's windows, an exact pass's chunks), and a heatmap lattice's cells alone
(`elements`, which the sampler's gather asks of a source that has it).

Each element is `scale · Σ_k B[i,k]·A[k,j]` with the sum correctly rounded (math.fsum: the
products of two float32 values are exact in float64), then rounded once to float32: the same
value on CPython and in Pyodide, and the value torch gives when it computes in float64
(`(scale * (B.double() @ A.double())).float()`). Sums fsum cannot take (an Inf meeting an Inf of
the other sign, an overflow on the way) are plain float sums, which give the Inf or NaN torch gives.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import OrderedDict
from itertools import repeat
from math import fsum
from operator import mul

from ..dtypes import lookup
from ..errors import LOW_LEVEL_ERRORS, FormatError, TensorloupeError
from ..model import Tensor
from ..quant.logical import RowsSource
from .pairs import Pair

# Factor rows a read spans at once (one read of the span, not a read per ΔW row it serves).
SPAN_BYTES = 1 << 20
# Right-hand factors kept as columns of Python floats, over all ΔW tensors (the last viewed
# first kept): a health scan of a 128-pair adapter must not hold every A at ~40 bytes a value.
KEPT_VALUES = 1 << 22
_KEPT: OrderedDict = OrderedDict()     # DeltaSource -> its columns


def _decoded(t: Tensor, data: bytes) -> list:
    return lookup(t.dtype).decode(data, t.big_endian)


def _dot(left: list, column: tuple) -> float:
    try:
        return fsum(map(mul, left, column))
    except (OverflowError, ValueError):   # Inf - Inf, or an intermediate overflow
        return sum(map(mul, left, column))


class DeltaSource(RowsSource):
    """The float32 bytes (row-major) of one pair's ΔW."""

    def __init__(self, pair: Pair, scale: float):
        super().__init__(pair.up, pair.shape, math.prod(pair.shape[1:]))   # rows: ΔW's dim 0
        self.pair, self.scale = pair, scale
        self.rank = pair.rank

    def _read(self, offset: int, n: int) -> bytes:
        return self._located(super()._read, offset, n)

    def _read_many(self, ranges):
        return self._located(super()._read_many, ranges)

    def _located(self, read, *args):
        try:
            return read(*args)
        except TensorloupeError as e:
            raise e.located(file=self.name)
        except LOW_LEVEL_ERRORS as e:
            raise FormatError(f"ΔW of {self.pair.module!r} cannot be computed: {e}", file=self.name) from e

    def columns(self) -> list[tuple]:
        """ΔW's columns as r-value tuples of the right-hand factor: A's columns, or B's rows
        when transposed. Read whole, and kept (while KEPT_VALUES allow)."""
        kept = _KEPT.get(self)
        if kept is not None:
            _KEPT.move_to_end(self)
            return kept
        p, r = self.pair, self.rank
        whole = p.up if p.transposed else p.down
        values = _decoded(whole, whole.source.read_data(whole.offset, whole.nbytes))
        if p.transposed:     # B [out, r]: row j is column j of B^T
            columns = [tuple(values[j * r:(j + 1) * r]) for j in range(len(values) // r)]
        else:                # A [r, cols]: column j is A[:, j]
            cols = len(values) // r
            columns = list(zip(*(values[k * cols:(k + 1) * cols] for k in range(r))))
        _KEPT[self] = columns
        while sum(len(c) * src.rank for src, c in _KEPT.items()) > KEPT_VALUES and len(_KEPT) > 1:
            _KEPT.popitem(last=False)
        return columns

    def left(self, rows: list[int]) -> dict[int, list]:
        """The r values each of ΔW's `rows` combines the columns with: B's rows, or (when
        transposed) A's columns. One read per factor row of the span they lie in when that is
        at most SPAN_BYTES, else one short read per row."""
        p, r = self.pair, self.rank
        lo, hi = min(rows), max(rows) + 1
        if not p.transposed:
            b = p.up
            item = b.nbytes // max(b.numel, 1)
            if (hi - lo) * r * item <= SPAN_BYTES:
                values = _decoded(b, b.source.read_data(b.offset + lo * r * item, (hi - lo) * r * item))
                return {i: values[(i - lo) * r:(i - lo + 1) * r] for i in rows}
            pieces = b.source.read_many([(b.offset + i * r * item, r * item) for i in rows])
            return {i: _decoded(b, piece) for i, piece in zip(rows, pieces)}
        a = p.down
        item, cols = a.nbytes // max(a.numel, 1), a.shape[1]
        if (hi - lo) * item * r <= SPAN_BYTES:
            pieces = a.source.read_many([(a.offset + (k * cols + lo) * item, (hi - lo) * item) for k in range(r)])
            by_k = [_decoded(a, piece) for piece in pieces]
            return {i: [by_k[k][i - lo] for k in range(r)] for i in rows}
        pieces = a.source.read_many([(a.offset + (k * cols + i) * item, item) for i in rows for k in range(r)])
        values = [_decoded(a, piece)[0] for piece in pieces]
        return {i: values[n * r:(n + 1) * r] for n, i in enumerate(rows)}

    def elements(self, positions: list[int]) -> list[float]:
        """ΔW's values at row-major element `positions`, each computed alone (the sampler's
        gather asks this of a source that has it: a heatmap lattice's cells, not its rows)."""
        return self._located(self._elements, positions)

    def _elements(self, positions: list[int]) -> list[float]:
        width = self.row_bytes // 4
        columns = self.columns()
        rows = sorted({p // width for p in positions})
        left = self.left(rows) if rows else {}
        scale = self.scale
        out = array("f", [scale * _dot(left[p // width], columns[p % width]) for p in positions])
        return out.tolist()

    def _ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Each byte range's float32 bytes, computing only the elements it covers."""
        width = self.row_bytes // 4
        columns = self.columns()
        spans = [(o // 4, -(-(o + n) // 4)) for o, n in ranges]
        rows = sorted({i for e0, e1 in spans for i in range(e0 // width, (e1 - 1) // width + 1) if e1 > e0})
        left = self.left(rows) if rows else {}
        scale = self.scale
        out = []
        for (o, n), (e0, e1) in zip(ranges, spans):
            values = array("f")
            e = e0
            while e < e1:
                i, j0 = divmod(e, width)
                j1 = min(width, j0 + e1 - e)
                values.extend(map(mul, repeat(scale), map(_dot, repeat(left[i]), columns[j0:j1])))
                e += j1 - j0
            if sys.byteorder == "big":
                values.byteswap()
            data = values.tobytes()
            out.append(data[o - e0 * 4:o - e0 * 4 + n])
        return out


class ScaledSource(RowsSource):
    """The float32 bytes of a stored float vector times a scale (lora_bias's Δb = scale ·
    lora_B.bias): each value's product in float64, rounded once."""

    def __init__(self, stored: Tensor, scale: float):
        super().__init__(stored, stored.shape, 1)
        self.stored, self.scale = stored, scale

    def _compute(self, r0: int, r1: int) -> array:
        t = self.stored
        try:
            item = t.nbytes // max(t.numel, 1)
            values = _decoded(t, t.source.read_data(t.offset + r0 * item, (r1 - r0) * item))
        except TensorloupeError as e:
            raise e.located(file=self.name)
        except LOW_LEVEL_ERRORS as e:
            raise FormatError(f"{t.name!r} times its scale cannot be computed: {e}", file=self.name) from e
        return array("f", map(mul, repeat(self.scale), values))
