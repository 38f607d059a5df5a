"""Summary statistics and histograms of decoded values (pure Python, numerically stable).

Mean and variance are two-pass over a sample (math.fsum, exact sums), and combined across chunks
with Chan et al.'s pairwise formula when a whole tensor is streamed, so a 10^9-element tensor of
large values does not lose its variance to cancellation as the sum-of-squares identity would.
Non-finite values are counted apart and never enter min/max/mean/std.

Every per-value pass is one C-level builtin over the whole list (min, max, fsum over map,
list.count, a comprehension), never a generator feeding fsum: the exact pass over a 16M-element
tensor is bound by these (bench/exact_stats.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat
from operator import mul, sub

from ..dtypes import to_float
from ..jsonable import json_number

# |v| below this counts as "near zero": the cheapest sparsity probe (the original tool's threshold).
NEAR_ZERO = 1e-6
PERCENTILES = (1, 5, 25, 50, 75, 95, 99)


@dataclass
class Stats:
    count: int = 0            # values looked at (finite or not)
    finite: int = 0
    min: float = math.nan
    max: float = math.nan
    mean: float = math.nan
    std: float = math.nan     # population standard deviation (ddof=0, as numpy.std)
    zeros: float = 0.0        # fraction of values with |v| < NEAR_ZERO
    exact_zeros: int = 0
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    percentiles: dict[str, float] = field(default_factory=dict)
    m2: float = 0.0           # sum of squared deviations, kept so chunks can be merged

    def to_json(self) -> dict:
        out = {key: json_number(getattr(self, key)) for key in
               ("count", "finite", "min", "max", "mean", "std", "zeros", "exact_zeros",
                "nan", "posinf", "neginf")}
        out["percentiles"] = {k: json_number(v) for k, v in self.percentiles.items()}
        return out


def compute(raw_values, percentiles: bool = True, hypot_squares: bool = False) -> Stats:
    return summarize(raw_values, percentiles, hypot_squares)[0]


def summarize(raw_values, percentiles: bool = True,
              hypot_squares: bool = False) -> tuple[Stats, list[float] | None]:
    """`compute`'s statistics and, with percentiles, the finite values in ascending order.
    `hypot_squares`: the sum of squares from math.hypot (`hypot_sum_squares`), not the exact fsum.

    Percentiles need the values sorted; once they are, min, max, the near-zero count and a
    histogram (`sorted_histogram`) are a few bisections instead of a pass per value each, which
    is most of the time a 65,536-value sample takes in the browser. The numbers are the ones the
    per-value passes give."""
    values = [to_float(v) for v in raw_values] if _needs_conversion(raw_values) else list(raw_values)
    stats = Stats(count=len(values))
    finite = [v for v in values if math.isfinite(v)] if not _all_finite(values) else values
    if len(finite) != len(values):
        for v in values:
            if v != v:
                stats.nan += 1
            elif v == math.inf:
                stats.posinf += 1
            elif v == -math.inf:
                stats.neginf += 1
    stats.finite = n = len(finite)
    ordered = None
    if n:
        if percentiles:
            ordered = sorted(finite)
            # max() keeps the first of equal maxima (0.0 or -0.0): the first of them in a stable sort.
            stats.min, stats.max = ordered[0], ordered[bisect_left(ordered, ordered[-1])]
            near = bisect_left(ordered, NEAR_ZERO) - bisect_right(ordered, -NEAR_ZERO)
            stats.percentiles = {f"p{p}": _percentile(ordered, p) for p in PERCENTILES}
        else:
            stats.min, stats.max = min(finite), max(finite)
            near = sum(1 for v in finite if -NEAR_ZERO < v < NEAR_ZERO)
        stats.mean = mean = _mean(finite)
        stats.m2 = _m2(finite, mean, hypot_squares)
        stats.std = math.sqrt(stats.m2 / n)
        stats.exact_zeros = finite.count(0.0)
        stats.zeros = near / len(values)
    return stats, ordered


def _mean(finite: list[float]) -> float:
    """fsum raises OverflowError when a partial sum passes the float64 limit (two values of 1e308);
    the mean itself never does, so it is then taken of the values scaled by 2**-64."""
    try:
        return math.fsum(finite) / len(finite)
    except OverflowError:
        return math.fsum(v * SCALE_DOWN for v in finite) / len(finite) / SCALE_DOWN


SCALE_DOWN = 2.0 ** -64
# Sum of squares minus n * mean**2 cancels: above this ratio of the sum of squares to the result
# (8 bits of 53 lost) the squared deviations are summed instead.
CANCELLATION = 256.0


def _sum_squares(values) -> float:
    # fsum of the products, not math.sumprod (3.12+, so Pyodide's): sumprod is faster but not
    # always correctly rounded, and the page must show the CLI's numbers to the last bit.
    return math.fsum(map(mul, values, values))


def hypot_sum_squares(values) -> float:
    """sum(v * v) within 2 ulp, as the square of math.hypot: ~8x faster than `_sum_squares`.

    hypot (CPython's vector_norm) is one algorithm in 3.11 and in Pyodide's 3.14: scale by a
    power of two, square each value exactly (Dekker's split in one, fma in the other: the same
    product unless it underflows, which no float32 value's does), add the squares in double
    length, one correction. So the page shows the CLI's numbers (tests/test_sum_squares.py holds
    3.11's results as constants). Not math.sumprod: 3.12+ and not always correctly rounded. Where
    float64 values span more than ~2**1000, some squares underflow after the scaling: the result
    is still within 1 ulp, but its last bit may then differ between the two; so only float32
    values are given it (rawstats' F32 path). Not the default: the quantised fast paths promise
    the exact fsum from their block sums (from_block_sums)."""
    if not values:
        return 0.0
    norm = math.hypot(*values)
    return norm * norm


def from_block_sums(n: int, exact_zeros: int, near: int, lows: list, highs: list, sums: list,
                    squares: list) -> "Stats | None":
    """The Stats of n finite values from per-block partial results (rawstats' fast paths: exact
    sums and sums of squares, each block's extremes, counts), as `compute` would give them; None
    where that cannot be promised: a zero extreme (which zero min() keeps depends on the order),
    or a sum of squares that cancels (then `_m2` sums the squared deviations)."""
    stats = Stats(count=n, finite=n, exact_zeros=exact_zeros, zeros=near / n)
    stats.min, stats.max = min(lows), max(highs)
    if stats.min == 0.0 or stats.max == 0.0:
        return None
    stats.mean = mean = math.fsum(sums) / n
    total_squares = math.fsum(squares)
    m2 = total_squares - n * mean * mean
    if not (math.isfinite(total_squares) and m2 * CANCELLATION >= total_squares):
        return None
    stats.m2 = m2
    stats.std = math.sqrt(m2 / n)
    return stats


def _m2(finite: list[float], mean: float, hypot_squares: bool = False) -> float:
    """The sum of squared deviations from `mean`, within ~1e-13 (relative) of fsum((v - mean)**2):
    from the sum of squares where little cancels (weights, whose mean is near 0; a float32's
    square is exact in a double), else from the deviations themselves (a layer norm's ones)."""
    sum_squares = hypot_sum_squares if hypot_squares else _sum_squares
    try:
        squares = sum_squares(finite)
        if math.isfinite(squares):
            m2 = squares - len(finite) * mean * mean
            if m2 * CANCELLATION >= squares:
                return m2
        return max(0.0, sum_squares(list(map(sub, finite, repeat(mean, len(finite))))))
    except OverflowError:  # the spread of values near the float64 limit exceeds it
        return math.inf


def merge(a: Stats, b: Stats) -> Stats:
    """Statistics of two disjoint chunks together (percentiles are dropped: they do not merge)."""
    out = Stats(count=a.count + b.count, finite=a.finite + b.finite, nan=a.nan + b.nan,
                posinf=a.posinf + b.posinf, neginf=a.neginf + b.neginf,
                exact_zeros=a.exact_zeros + b.exact_zeros)
    if out.count:
        out.zeros = (a.zeros * a.count + b.zeros * b.count) / out.count
    if not a.finite or not b.finite:
        source = a if a.finite else b
        out.min, out.max, out.mean, out.std, out.m2 = (source.min, source.max, source.mean,
                                                        source.std, source.m2)
        return out
    out.min, out.max = min(a.min, b.min), max(a.max, b.max)
    n = out.finite
    delta = b.mean - a.mean
    out.mean = a.mean + delta * b.finite / n
    out.m2 = a.m2 + b.m2 + delta * delta * a.finite * b.finite / n
    out.std = math.sqrt(out.m2 / n)
    return out


def _percentile(ordered: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy.percentile's default method)."""
    position = (len(ordered) - 1) * p / 100
    lo = math.floor(position)
    hi = min(lo + 1, len(ordered) - 1)
    fraction = position - lo
    return ordered[lo] + (ordered[hi] - ordered[lo]) * fraction


def _needs_conversion(values) -> bool:
    return bool(values) and not isinstance(values[0], float)


def _all_finite(values) -> bool:
    # sum() of all-finite values is finite unless it overflows; fall back to the exact check then.
    total = sum(values)
    return math.isfinite(total) or all(math.isfinite(v) for v in values)


@dataclass
class Histogram:
    edges: list[float]        # bins + 1 edges, linear from the finite min to the finite max
    counts: list[int]
    log: bool = False         # show counts on a log scale (weight tails are invisible otherwise)

    @property
    def heights(self) -> list[float]:
        return [math.log10(1 + c) for c in self.counts] if self.log else [float(c) for c in self.counts]

    def to_json(self) -> dict:
        return {"edges": [json_number(e) for e in self.edges], "counts": self.counts, "log": self.log}


class Binner:
    """Counts of finite values in `bins` equal bins over [lo, hi], fed in chunks (so a streamed
    tensor's histogram covers every element). A constant (lo == hi) is one bin holding the value."""

    def __init__(self, lo: float, hi: float, bins: int):
        self.constant = hi == lo
        if hi < lo or not (math.isfinite(lo) and math.isfinite(hi)):
            lo, hi = 0.0, 1.0     # no finite value at all: empty bins over an arbitrary range
        self.lo, self.hi = lo, hi
        self.bins = 1 if self.constant else bins
        # A range wider than the largest float (-1e308 .. 1e308) is binned at half scale, where
        # it fits: halving is exact, so every value lands in the bin it would at full scale.
        self.half = not math.isfinite(hi - lo)
        self.width = (hi * 0.5 - lo * 0.5) / self.bins * 2 if self.half else (hi - lo) / self.bins
        self.counts = [0] * self.bins
        self.weight = 1     # elements each value added stands for (a stride-0 view's repeats)

    def _scaled(self):
        """(lo, width, scale) of the bin index int((v * scale - lo) / width)."""
        if self.half:
            return self.lo * 0.5, self.width * 0.5, 0.5
        return self.lo, self.width, 1.0

    def add(self, finite: list[float], within: bool = False) -> None:
        """Count finite values; `within`: the caller knows they all lie in [lo, hi] (the exact
        pass, whose range is their min and max), so they are not checked again."""
        lo, hi, counts, last = self.lo, self.hi, self.counts, self.bins - 1
        if self.constant:
            counts[0] += finite.count(lo) * self.weight
            return
        # Filtering and counting at C speed (one comprehension, then Counter or bytes.count):
        # a 65,536-value sample is binned ~3x faster than by a loop, which matters in the browser.
        given = finite
        if not within and finite and not (lo <= min(finite) and max(finite) <= hi):
            finite = [v for v in finite if lo <= v <= hi]
        lo, width, scale = self._scaled()
        if scale != 1.0:
            finite = [v * scale for v in finite]
        # floor, not int: the same for these non-negative quotients, and half the call's cost
        floor = math.floor
        found = _counted([floor((v - lo) / width) for v in finite], self.bins)  # 0 .. bins (hi: bins)
        if found is None:   # `within`, but a value lay outside (the file changed between passes)
            return self.add(given)
        weight = self.weight
        for index, n in found:
            counts[index if index < last else last] += n * weight

    def add_sorted(self, ordered: list[float]) -> None:
        """`add` for finite values in ascending order: the bin index int((v - lo) / width) never
        decreases along them, so each bin's first value is found by bisection on that same index
        (64 bins: ~1,000 index computations instead of one per value)."""
        start, stop = bisect_left(ordered, self.lo), bisect_right(ordered, self.hi)
        if self.constant:
            self.counts[0] += (stop - start) * self.weight
            return
        lo, width, scale = self._scaled()

        def index(v):
            return int((v * scale - lo) / width)
        bounds = [start, *(bisect_left(ordered, k, start, stop, key=index) for k in range(1, self.bins)), stop]
        for k in range(self.bins):
            self.counts[k] += (bounds[k + 1] - bounds[k]) * self.weight

    def result(self, log: bool = False) -> Histogram:
        lo, width, scale = self._scaled()
        edges = [(lo + width * i) / scale for i in range(self.bins)] + [self.hi]
        return Histogram(edges, self.counts, log)


def _counted(indices: list[int], bins: int) -> list[tuple[int, int]] | None:
    """(bin index, count) of bin indices 0 .. bins; None if one lies outside that range."""
    if bins < 256 and len(indices) > 64 * bins:
        # a byte per value, counted by bytes.count per bin: memchr speed, no hashing
        try:
            packed = bytes(indices)
        except ValueError:   # an index below 0 or above 255
            return None
        found = [(k, packed.count(k)) for k in range(bins + 1)]
        return found if sum(n for _, n in found) == len(indices) else None
    found = Counter(indices)
    return list(found.items()) if not found or (min(found) >= 0 and max(found) <= bins) else None


def histogram(raw_values, bins: int = 64, log: bool = False,
              value_range: tuple[float, float] | None = None) -> Histogram:
    finite = finite_floats(raw_values)
    if value_range is None:
        value_range = (min(finite), max(finite)) if finite else (math.nan, math.nan)
    binner = Binner(*value_range, bins)
    binner.add(finite)
    return binner.result(log)


def sorted_histogram(ordered: list[float], bins: int = 64, log: bool = False) -> Histogram:
    """`histogram` of values whose finite ones, ascending, are `ordered` (from `summarize`)."""
    # max() keeps the first of equal maxima (0.0 or -0.0): the first of them in a stable sort.
    top = ordered[bisect_left(ordered, ordered[-1])] if ordered else math.nan
    binner = Binner(ordered[0] if ordered else math.nan, top, bins)
    binner.add_sorted(ordered)
    return binner.result(log)


def finite_floats(raw_values) -> list[float]:
    values = [to_float(v) for v in raw_values] if _needs_conversion(raw_values) else raw_values
    return list(filter(math.isfinite, values))
