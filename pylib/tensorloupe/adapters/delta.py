"""An adapted weight's ΔW = scale · B · A as float32 rows, computed from A and B and never
materialised: a row of ΔW needs its r values of B (one short range) and all of A (read once,
whole, and kept as columns of r values); a transposed ΔW ((B·A)^T: embeddings, fan_in_fan_out)
needs the row's column of A (r short ranges) and all of B.

Each element is `scale · Σ_k B[i,k]·A[k,j]` with the sum correctly rounded (math.fsum: the
products of two float32 values are exact in float64), then rounded once to float32: the same
value on CPython and in Pyodide, and the value torch gives when it computes in float64
(`(scale * (B.double() @ A.double())).float()`). Sums fsum cannot take (an Inf meeting an Inf of
the other sign, an overflow on the way) are plain float sums, which give the Inf or NaN torch gives.
"""

from __future__ import annotations

import math
from array import array
from itertools import repeat
from math import fsum
from operator import mul

from ..dtypes import lookup
from ..errors import LOW_LEVEL_ERRORS, FormatError, TensorloupeError
from ..model import Tensor
from ..quant.logical import RowsSource
from .pairs import Pair


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
        self._columns: list[tuple] | None = None

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
        when transposed. Read whole, once."""
        if self._columns is None:
            p, r = self.pair, self.rank
            whole = p.up if p.transposed else p.down
            values = _decoded(whole, whole.source.read_data(whole.offset, whole.nbytes))
            if p.transposed:     # B [out, r]: row j is column j of B^T
                self._columns = [tuple(values[j * r:(j + 1) * r]) for j in range(len(values) // r)]
            else:                # A [r, cols]: column j is A[:, j]
                cols = len(values) // r
                self._columns = list(zip(*(values[k * cols:(k + 1) * cols] for k in range(r))))
        return self._columns

    def left(self, r0: int, r1: int) -> list[list]:
        """The r values each of ΔW's rows [r0, r1) combines the columns with: B's rows, or (when
        transposed) A's columns."""
        p, r = self.pair, self.rank
        if not p.transposed:
            item = p.up.nbytes // max(p.up.numel, 1)
            values = _decoded(p.up, p.up.source.read_data(p.up.offset + r0 * r * item, (r1 - r0) * r * item))
            return [values[i * r:(i + 1) * r] for i in range(r1 - r0)]
        a = p.down
        item, cols = a.nbytes // max(a.numel, 1), a.shape[1]
        pieces = a.source.read_many([(a.offset + (k * cols + r0) * item, (r1 - r0) * item) for k in range(r)])
        by_k = [_decoded(a, piece) for piece in pieces]
        return [[by_k[k][i] for k in range(r)] for i in range(r1 - r0)]

    def _compute(self, r0: int, r1: int) -> array:
        columns = self.columns()
        out = array("f")
        scale = self.scale
        for left in self.left(r0, r1):
            out.extend(map(mul, repeat(scale), map(_dot, repeat(left), columns)))
        return out
