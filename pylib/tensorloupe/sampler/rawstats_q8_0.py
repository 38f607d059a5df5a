"""Exact statistics and histogram counts of a chunk of Q8_0 blocks from its codes (rawstats.py's
contract: the numbers `compute(decode_window(...), percentiles=False)` gives, bit for bit, or None).

block_q8_0 (dtypes/ggml/legacy.py): x = d * q, an f16 scale d per 32 int8 codes q, and d * q is
exact in float32 (11 + 8 bits), so no float is made per element:

* sum(x) = fsum of d * S1 and sum(x*x) = fsum of d*d * S2 over the blocks, with S1 = sum(q) and
  S2 = sum(q*q) of each block (each product exact: 11 + 13 and 22 + 19 bits), so the fsums are
  the ones over the elements. S1 and S2 come from 16-bit lanes of one big int per chunk
  (`_block_sums`): a handful of C-speed operations, none per block.
* min and max: 128 * |d| bounds each block's magnitudes, so only the blocks whose bound beats
  the best of the blocks with the largest |d| have their codes looked at (`_extremes`).
* zeros and |x| < 1e-6: every q == 0, counted in one pass; only the blocks whose |d| is below
  2**-16 (a subnormal half: few or none) can hold other values that near 0 and are looked at.
* the histogram translates each block's codes to bin numbers through a table per distinct scale
  (cached across chunks: a tensor has a few thousand), all blocks in one C-level map.
"""

from __future__ import annotations

import math
from functools import lru_cache
from heapq import nlargest
from itertools import compress, repeat
from operator import add, gt, mul, sub, truediv

# imported by rawstats only where a Q8_0 block is read: a safetensors file never loads the
# ggml codecs (tests/test_lazy_imports.py)
from ..dtypes.ggml.columns import f16s
from ..dtypes.ggml.legacy import Q8_0, QK8_0
from .bytecounts import counts_in_pieces, positions
from .stats import NEAR_ZERO, Binner, Stats, from_block_sums

SIZE = Q8_0.size            # 34 bytes: the f16 scale, then 32 codes
PAIRS = SIZE // 2           # a block is 17 byte pairs (16-bit lanes), its codes pairs 1 .. 16

# Below this many blocks (a few hundred values) the chunk is decoded: the fixed costs of the
# fast path would match the decoding's. From 8 blocks up (the health scan's 4 KiB windows: 120)
# it is measured faster (stats 0.028 vs 0.038 ms at 8 blocks, 0.20 vs 0.49 ms at 120).
MIN_Q8_0_BLOCKS = 8

_OFFSET = bytes((b + 128) & 0xFF for b in range(256))   # int8 code -> q + 128 (0 .. 255, ordered)
# q * q = high * 256 + low, by stored byte
_SQUARE_LOW = bytes(((b - 256 if b > 127 else b) ** 2) & 0xFF for b in range(256))
_SQUARE_HIGH = bytes(((b - 256 if b > 127 else b) ** 2) >> 8 for b in range(256))
_F16_SPECIAL = bytes(1 if b & 0x7C == 0x7C else 0 for b in range(256))   # high byte of inf/NaN
# high byte of |d| < 2**-16 (a subnormal below 256 * 2**-24), the only scales where a q != 0
# can give |x| < NEAR_ZERO (1e-6 < 2**-16)
_F16_SMALL = bytes(1 if b & 0x7F == 0 else 0 for b in range(256))


def _scales(data: bytes) -> tuple[bytes, tuple[float, ...]] | None:
    """(the scales' bytes, the scales); None if one is Inf or NaN."""
    raw = Q8_0.col(data, "d")
    if raw[1::2].translate(_F16_SPECIAL).count(1):
        return None
    return raw, f16s(raw)


@lru_cache(maxsize=8)
def _low_bytes_mask(size: int) -> int:
    return int.from_bytes(b"\xff\x00" * (size // 2), "little")


def _block_sums(data: bytes, table: bytes) -> list[int]:
    """Per block, the sum of table[byte] over its 32 codes (each 0 .. 255): the bytes become
    16-bit lanes (even and odd ones added), then adding the int shifted by 1, 2, 4 and 8 lanes
    leaves in lane j the sum of lanes j .. j + 15 (at most 16 * 510: no carry into the next
    lane), and lane 17 * b + 1 covers block b's codes exactly (its scale lies outside)."""
    x = int.from_bytes(data.translate(table), "little")
    mask = _low_bytes_mask(len(data))
    x = (x & mask) + ((x >> 8) & mask)
    for shift in (16, 32, 64, 128):
        x += x >> shift
    return memoryview(x.to_bytes(len(data), "little")).cast("H")[1::PAIRS].tolist()


def _codes(data: bytes, b: int) -> bytes:
    """Block b's codes as q + 128 (ordered like q)."""
    return data[b * SIZE + 2:(b + 1) * SIZE].translate(_OFFSET)


def _extremes(data: bytes, d: tuple[float, ...]) -> tuple[float, float]:
    """(min, max) of d * q over every block. |x| <= 128 * |d|, so once the best of the blocks
    with the largest |d| is known, only the blocks whose 128 * |d| beats it can hold a better
    one (typically a few: quantisers put each block's largest magnitude at |q| = 127)."""
    size = list(map(abs, d))

    def value(b: int, highest: bool) -> float:
        c, step = _codes(data, b), d[b]
        return step * ((max(c) if (step > 0) == highest else min(c)) - 128)
    top = nlargest(FIRST_LOOK, range(len(size)), key=size.__getitem__)
    out = []
    for highest in (False, True):
        pick = max if highest else min
        best = pick(value(b, highest) for b in top)
        # 128 * |d| > |best| exactly when |d| > |best| / 128 (a power of two: exact); a best of
        # the wrong sign (or 0) can be beaten by any block: all are looked at then
        bound = abs(best) / 128 if (best > 0) == highest and best != 0.0 else -1.0
        others = compress(range(len(size)), map(gt, size, repeat(bound)))
        out.append(pick([best, *(value(b, highest) for b in others)]))
    return out[0], out[1]


# blocks of the largest |d| looked at first, for a bound that leaves few others to look at
FIRST_LOOK = 64


def _near(data: bytes, raw: bytes, d: tuple[float, ...]) -> tuple[int, int]:
    """(elements == 0, elements with |x| < NEAR_ZERO): the q == 0 everywhere, then in the
    blocks of small |d| (`_F16_SMALL`) the rest of their near values (all 32 where d == 0)."""
    zeros = data.translate(_OFFSET).count(128) - raw.count(0)   # the scale bytes that were 0
    near = zeros
    for b in positions(raw[1::2].translate(_F16_SMALL), 1):
        c, step = _codes(data, b), abs(d[b])
        if step == 0.0:                     # every value is a zero
            zeros += QK8_0 - c.count(128)
            near += QK8_0 - c.count(128)
            continue
        k = 0                               # |q| <= k is near (the products are exact)
        while k < 128 and step * (k + 1) < NEAR_ZERO:
            k += 1
        if k:
            near += c.translate(_within(k)).count(1) - c.count(128)
    return zeros, near


@lru_cache(maxsize=130)
def _within(k: int) -> bytes:
    """Translate table: 1 for the offset codes of |q| <= k, else 0."""
    return bytes(1 if abs(u - 128) <= k else 0 for u in range(256))


def q8_0_stats(data: bytes) -> Stats | None:
    if len(data) < MIN_Q8_0_BLOCKS * SIZE:
        return None
    scales = _scales(data)
    if scales is None:
        return None
    raw, d = scales
    s1 = map(sub, _block_sums(data, _OFFSET), repeat(128 * QK8_0))
    s2 = map(add, map(mul, _block_sums(data, _SQUARE_HIGH), repeat(256)), _block_sums(data, _SQUARE_LOW))
    sums = list(map(mul, d, s1))
    squares = list(map(mul, map(mul, d, d), s2))
    low, high = _extremes(data, d)
    zeros, near = _near(data, raw, d)
    return from_block_sums(len(d) * QK8_0, zeros, near, [low], [high], sums, squares)


# a bin index must fit a byte beside 255 (outside the range)
MAX_BINS = 255
# int8 code by stored byte
_CODES = tuple(range(128)) + tuple(range(-128, 0))


@lru_cache(maxsize=1 << 13)
def _bin_table(code: int, scale: float, lo: float, width: float, bins: int) -> bytes:
    """Translate table: stored byte -> the index Binner.add computes for d * q (at its scale):
    0 .. bins, the top edge's bins folded into the last bin, and 255 for a value outside
    [lo, hi] (no element has one unless the file changed between the passes). Cached: a
    tensor has a few thousand distinct scales, each in many chunks."""
    d = f16s(code.to_bytes(2, "little"))[0]
    scaled = map(mul, repeat(d * scale), _CODES)
    index = map(math.floor, map(truediv, map(sub, scaled, repeat(lo)), repeat(width)))
    return bytes(min(k, bins - 1) if 0 <= k <= bins else 255 for k in index)


@lru_cache(maxsize=8)
def _code_slices(blocks: int) -> list[slice]:
    return [slice(o + 2, o + SIZE) for o in range(0, blocks * SIZE, SIZE)]


def q8_0_add(binner: Binner, data: bytes) -> bool:
    """binner.add(<the chunk's values>, within=True) with a float made per distinct scale and
    code rather than per element."""
    if len(data) < MIN_Q8_0_BLOCKS * SIZE:
        return False
    scales = _scales(data)
    if scales is None:
        return False
    blocks = len(data) // SIZE
    if binner.bins > MAX_BINS:
        return False
    if binner.constant:
        binner.counts[0] += blocks * QK8_0 * binner.weight
        return True
    lo, width, scale = binner._scaled()
    codes = memoryview(scales[0]).cast("H").tolist()
    tables = {code: _bin_table(code, scale, lo, width, binner.bins) for code in set(codes)}
    joined = b"".join(map(bytes.translate, map(data.__getitem__, _code_slices(blocks)),
                          map(tables.__getitem__, codes)))
    last = binner.bins - 1
    found = counts_in_pieces(joined, list(range(last)), last)
    if any(255 in table for table in tables.values()):
        outside = joined.count(255)
        if outside:
            return False   # the caller bins the decoded values (Binner.add's own fallback)
    else:
        outside = 0
    found.append(len(joined) - outside - sum(found))
    for k, n in enumerate(found):
        binner.counts[k] += n * binner.weight
    return True
