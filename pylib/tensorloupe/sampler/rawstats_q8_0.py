"""Exact statistics and histogram counts of a chunk of Q8_0 blocks from its codes (rawstats.py's
contract: the numbers `compute(decode_window(...), percentiles=False)` gives, bit for bit, or None).

x = d * q (an f16 scale per 32 int8 codes) and no float is made per element: the blocks are
grouped by their scale and each group's codes are summed at C speed (sum of the bytes, sum of q*q
through two translate tables), so every figure is a few exact products per distinct scale:
sum(x) = fsum(d * sum(q)) (each product exact, so the fsum is the one over the elements), sum(x*x)
likewise, min and max from each group's extreme codes. The histogram translates each group's codes
to bin numbers through a table per scale.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from functools import lru_cache
from itertools import repeat
from operator import mul, sub, truediv


# imported by rawstats only where a Q8_0 block is read: a safetensors file never loads the
# ggml codecs (tests/test_lazy_imports.py)
from ..dtypes.ggml.legacy import Q8_0, QK8_0
from .stats import NEAR_ZERO, Binner, Stats, from_block_sums


def _q8_0():
    return Q8_0


_OFFSET = bytes((b + 128) & 0xFF for b in range(256))   # int8 code -> q + 128 (0 .. 255, ordered)
# q * q = high * 256 + low, by offset code
_SQUARE_LOW = bytes(((u - 128) ** 2) & 0xFF for u in range(256))
_SQUARE_HIGH = bytes(((u - 128) ** 2) >> 8 for u in range(256))
_F16_SPECIAL = bytes(1 if b & 0x7C == 0x7C else 0 for b in range(256))   # high byte of inf/NaN
_SPLIT = 1 << 26


def _f16(code: int) -> float:
    return struct.unpack("<e", code.to_bytes(2, "little"))[0]


@lru_cache(maxsize=130)
def _within(k: int) -> bytes:
    """Translate table: 1 for the offset codes of |q| <= k, else 0."""
    return bytes(1 if abs(u - 128) <= k else 0 for u in range(256))


def _groups(data: bytes):
    """(scale code, the codes of its blocks as q + 128) per distinct scale, ascending; None if a
    scale is Inf or NaN."""
    layout = _q8_0()
    scales = layout.col(data, "d")
    if scales[1::2].translate(_F16_SPECIAL).count(1):
        return None
    start = layout.fields["qs"].offset
    rows = [data[o:o + QK8_0] for o in range(start, len(data), layout.size)]
    by_scale = defaultdict(list)
    for code, row in zip(memoryview(scales).cast("H").tolist(), rows):
        by_scale[code].append(row)
    return [(code, b"".join(blocks).translate(_OFFSET)) for code, blocks in sorted(by_scale.items())]


# Below this many blocks a chunk has nearly a scale per block: grouping costs more than it saves
# (the health scan's 4 KiB windows).
MIN_Q8_0_BLOCKS = 1 << 11


def q8_0_stats(data: bytes) -> Stats | None:
    groups = _groups(data) if len(data) >= MIN_Q8_0_BLOCKS * _q8_0().size else None
    if groups is None:
        return None
    sums, squares, lows, highs = [], [], [], []
    zeros = near = 0
    for code, u in groups:
        d, m = _f16(code), len(u)
        first = next(c for c in range(256) if c in u) - 128
        last = next(c for c in range(255, -1, -1) if c in u) - 128
        if d == 0.0:                                # every value is a zero
            zeros += m
            near += m
            lows.append(d * first)
            highs.append(d * first)
            continue
        s1 = sum(u) - 128 * m
        s2 = sum(u.translate(_SQUARE_LOW)) + 256 * sum(u.translate(_SQUARE_HIGH))
        d2 = d * d                                  # 22 bits: exact
        sums.append(d * s1)                         # |s1| < 2**31: exact
        squares += [d2 * (s2 // _SPLIT) * _SPLIT, d2 * (s2 % _SPLIT)]   # each part exact
        ends = (d * first, d * last) if d > 0 else (d * last, d * first)
        lows.append(ends[0])
        highs.append(ends[1])
        zeros += u.count(128)
        k = 0
        while k < 128 and abs(d) * (k + 1) < NEAR_ZERO:
            k += 1
        near += u.translate(_within(k)).count(1) if k else u.count(128)
    n = len(data) // _q8_0().size * QK8_0
    return from_block_sums(n, zeros, near, lows, highs, sums, squares)


_CODES = tuple(range(-128, 128))


@lru_cache(maxsize=1 << 13)
def _bin_table(code: int, scale: float, lo: float, width: float, bins: int) -> bytes:
    """Translate table: offset code -> the bin of d * q, as Binner.add bins it (at its scale,
    the last bin holding the top edge; codes outside [lo, hi], which no value has, clamped).
    Cached: a tensor has a few thousand distinct scales, each in many chunks."""
    scaled = map(mul, repeat(_f16(code) * scale), _CODES)
    index = map(math.floor, map(truediv, map(sub, scaled, repeat(lo)), repeat(width)))
    return bytes(map(min, repeat(bins - 1), map(max, repeat(0), index)))


def q8_0_add(binner: Binner, data: bytes) -> bool:
    groups = _groups(data) if len(data) >= MIN_Q8_0_BLOCKS * _q8_0().size else None
    if groups is None:
        return False
    if binner.constant:
        binner.counts[0] += len(data) // _q8_0().size * QK8_0 * binner.weight
        return True
    lo, width, scale = binner._scaled()
    joined = b"".join([u.translate(_bin_table(code, scale, lo, width, binner.bins)) for code, u in groups])
    for k in range(binner.bins):
        binner.counts[k] += joined.count(k) * binner.weight
    return True


