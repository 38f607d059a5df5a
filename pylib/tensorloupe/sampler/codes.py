"""Exact statistics of an 8- or 16-bit float tensor from the counts of its element codes.

F16, BF16 and the float8 types have at most 65,536 distinct values, so one pass that counts
each code (Counter over the raw bytes, at C speed) gives every figure `exact_stats` and
`exact_histogram` give, without decoding an element: each distinct value is decoded once and
weighted by its count. The sums are the same ones: fsum of value * count is the exact sum
(a value of at most 11 significant bits times a count below 2**40 is exact in a double), and
each distinct value lands in the bin int((v - lo) / width) puts it in element by element.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from math import floor
from typing import Iterator

from ..dtypes import DType
from ..model import Tensor
from .gather import dtype_of, read_windows
from .stats import NEAR_ZERO, Binner, Stats

# Element codes of this many bytes are counted as memoryview items of this format.
CODE_FORMATS = {1: "B", 2: "H"}


def countable(tensor: Tensor) -> bool:
    """Whether the tensor's stored elements are codes we can count: a plain float type of one
    or two bytes an element, read as stored (not a dequantised or strided view)."""
    info = dtype_of(tensor)
    return (info.kind == "float" and info.block_elems == 1 and info.block_bytes in CODE_FORMATS
            and tensor.contiguous and not tensor.parts)


def count_steps(tensor: Tensor, chunk_elems: int) -> Iterator[tuple[int, int, Counter]]:
    """Count the codes of every element, one chunk at a time: yields (done, total, counts)."""
    info = dtype_of(tensor)
    fmt = CODE_FORMATS[info.block_bytes]
    total = tensor.numel
    starts = range(0, total, chunk_elems)
    counts: Counter = Counter()
    windows = read_windows((tensor, start, min(chunk_elems, total - start)) for start in starts)
    for start, window in zip(starts, windows):
        counts.update(memoryview(window.data).cast("B").cast(fmt))
        yield min(start + chunk_elems, total), total, counts


def distinct_values(info: DType, counts: Counter, big_endian: bool) -> list[tuple[float, int]]:
    """(value, count) of every code counted, each decoded once."""
    codes = list(counts)
    raw = b"".join(code.to_bytes(info.block_bytes, sys.byteorder) for code in codes)
    return list(zip(info.decode(raw, big_endian), (counts[c] for c in codes)))


def counted_stats(pairs: list[tuple[float, int]]) -> Stats:
    """`compute(values, percentiles=False)` of values given as (value, count) pairs."""
    stats = Stats(count=sum(c for _, c in pairs))
    finite = []
    for v, c in pairs:
        if v != v:
            stats.nan += c
        elif v == math.inf:
            stats.posinf += c
        elif v == -math.inf:
            stats.neginf += c
        else:
            finite.append((v, c))
    stats.finite = n = sum(c for _, c in finite)
    if not n:
        return stats
    values = [v for v, _ in finite]
    # of equal extremes (0.0 and -0.0) the one that sorts first, as max() and min() keep the first
    stats.min, stats.max = min(values), max(values)
    stats.mean = mean = math.fsum(v * c for v, c in finite) / n
    stats.m2 = math.fsum(c * (v - mean) * (v - mean) for v, c in finite)
    stats.std = math.sqrt(stats.m2 / n)
    stats.exact_zeros = sum(c for v, c in finite if v == 0.0)
    stats.zeros = sum(c for v, c in finite if -NEAR_ZERO < v < NEAR_ZERO) / stats.count
    return stats


def counted_histogram(binner: Binner, pairs: list[tuple[float, int]]) -> None:
    """`binner.add` of values given as (value, count) pairs (finite ones are binned)."""
    lo, width, scale = binner._scaled()
    last = binner.bins - 1
    for v, c in pairs:
        if not (binner.lo <= v <= binner.hi):   # NaN, the infinities
            continue
        if binner.constant:
            binner.counts[0] += c * binner.weight
            continue
        index = floor((v * scale - lo) / width)
        binner.counts[index if index < last else last] += c * binner.weight
