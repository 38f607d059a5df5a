"""Element-wise difference statistics, and byte identity decided on the bytes.

Sums are kept (not means) so chunks of one tensor, the experts of one stacked tensor, or all
tensors of one layer can be pooled exactly: SNR of a group is 10·log10(Σa²/Σ(a−b)²) over its
elements, not an average of ratios. A is the reference (the signal); B is what is judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import mul, sub
from typing import TYPE_CHECKING

from ..dtypes import to_float
from ..sampler.gather import gather, gather_range, storage_positions
from ..jsonable import json_number
from ..model import Tensor

if TYPE_CHECKING:   # matching (namemap, roles) is imported by a comparison, not by `import tensorloupe`
    from .match import Side

# What a pair of tensors can turn out to be, in the order reports list them.
CATEGORIES = ("only_in_a", "only_in_b", "unreadable", "shape_changed", "byte_identical",
              "same_values", "values_differ")
BYTES_CHUNK = 1 << 20   # bounded memory: two chunks of this many bytes at a time


@dataclass
class Diff:
    count: int = 0          # element positions compared (both values finite)
    nonfinite: int = 0      # positions skipped: NaN or ±Inf on either side
    nonfinite_differ: int = 0   # of those, positions where the two sides are not the same NaN/Inf
    max_abs: float = 0.0
    sum_abs: float = 0.0
    sum_d2: float = 0.0     # Σ(a−b)²
    sum_a2: float = 0.0
    sum_b2: float = 0.0
    sum_ab: float = 0.0

    def add(self, a: list, b: list) -> None:
        if not (_all_finite(a) and _all_finite(b)):
            keep = [i for i, (x, y) in enumerate(zip(a, b)) if math.isfinite(x) and math.isfinite(y)]
            self.nonfinite_differ += sum(1 for x, y in zip(a, b) if not (math.isfinite(x) and math.isfinite(y))
                                         and not (x == y or (x != x and y != y)))
            self.nonfinite += len(a) - len(keep)
            a, b = [a[i] for i in keep], [b[i] for i in keep]
        if not a:
            return
        d = list(map(sub, a, b))
        absd = list(map(abs, d))
        self.count += len(a)
        self.max_abs = max(self.max_abs, max(absd))
        self.sum_abs += math.fsum(absd)
        self.sum_d2 += math.fsum(map(mul, d, d))
        self.sum_a2 += math.fsum(map(mul, a, a))
        self.sum_b2 += math.fsum(map(mul, b, b))
        self.sum_ab += math.fsum(map(mul, a, b))

    def merge(self, other: "Diff") -> None:
        self.count += other.count
        self.nonfinite += other.nonfinite
        self.nonfinite_differ += other.nonfinite_differ
        self.max_abs = max(self.max_abs, other.max_abs)
        for key in ("sum_abs", "sum_d2", "sum_a2", "sum_b2", "sum_ab"):
            setattr(self, key, getattr(self, key) + getattr(other, key))

    @property
    def mean_abs(self) -> float:
        return self.sum_abs / self.count if self.count else math.nan

    @property
    def rel_error(self) -> float:
        """‖a−b‖/‖a‖ (inf when A is all zero and B is not)."""
        if not self.count:
            return math.nan
        if self.sum_a2 == 0.0:
            return 0.0 if self.sum_d2 == 0.0 else math.inf
        return math.sqrt(self.sum_d2 / self.sum_a2)

    @property
    def cosine(self) -> float:
        denominator = math.sqrt(self.sum_a2) * math.sqrt(self.sum_b2)
        return self.sum_ab / denominator if denominator else math.nan

    @property
    def snr_db(self) -> float:
        """10·log10(Σa²/Σ(a−b)²); inf when no compared value differs."""
        if not self.count:
            return math.nan
        if self.sum_d2 == 0.0:
            return math.inf
        if self.sum_a2 == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.sum_a2 / self.sum_d2)

    def to_json(self) -> dict:
        return {"compared": self.count, "nonfinite": self.nonfinite, "nonfinite_differ": self.nonfinite_differ,
                **{key: json_number(getattr(self, key)) for key in
                   ("max_abs", "mean_abs", "rel_error", "cosine", "snr_db")}}


def _all_finite(values: list) -> bool:
    try:
        return math.isfinite(math.fsum(values))
    except (OverflowError, ValueError):  # fsum raises on inf - inf and on overflow
        return False


def floats(values: list, kind: str) -> list[float]:
    """Float and quant decoders already give floats; ints, bools and complex go through to_float."""
    return values if kind in ("float", "quant") else list(map(to_float, values))


def read_frame(side: Side, start: int, count: int, cols: int) -> list[float]:
    """Values at frame positions [start, start + count) of one side, shifted back."""
    t = side.tensor
    kind = t.dtype_info.kind
    if side.rows is None:
        values = floats(gather_range(t, start, count), kind)
    else:
        rows = side.rows
        flat = [rows[i // cols] * cols + i % cols for i in range(start, start + count)]
        values = floats(gather(t, storage_positions(t, flat)), kind)
    if side.shift:
        shift = side.shift
        values = [v - shift for v in values]
    return values


def first_difference(a: Tensor, b: Tensor) -> tuple[int | None, int]:
    """Byte offset (within the tensor) of the first differing byte, or None when every byte is
    equal; and the bytes read from each side. Reads both tensors in chunks, stops at the first
    difference."""
    read = 0
    for start in range(0, a.nbytes, BYTES_CHUNK):
        n = min(BYTES_CHUNK, a.nbytes - start)
        x = a.source.read_data(a.offset + start, n)
        y = b.source.read_data(b.offset + start, n)
        read += n
        if x != y:
            for i in range(n):
                if x[i] != y[i]:
                    return start + i, read
    return None, read


def bytes_comparable(a: Side, b: Side) -> bool:
    """Identity can be decided on the bytes: same dtype, shape, byte order and layout, no transform."""
    ta, tb = a.tensor, b.tensor
    return (a.plain and b.plain and ta.dtype == tb.dtype and ta.shape == tb.shape
            and ta.big_endian == tb.big_endian and ta.contiguous and tb.contiguous
            and ta.nbytes == tb.nbytes and ta.dtype_info is not None)
