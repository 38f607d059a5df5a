"""The exact pass's histogram of a float32 chunk from its bytes: `Binner.add`'s counts, number for
number, with no float made per element (rawstats._f32_add).

Binner's bin of v, min(floor((v * scale - lo) / width), last), never decreases as v grows, so bin k
starts at a threshold: the smallest float32 whose bin is k or more, found once per range by
bisection on the bit patterns with that very expression. A float32's order key (its bits with the
sign flipped, or all of them inverted for a negative) sorts as its value does, so a value's bin is
the number of thresholds at or below its key, and its top 16 bits (byte 3: the sign and the
exponent's top 7 bits; byte 2: the exponent's last bit and the mantissa's top 7) decide that for
every value but those whose top 16 bits are a threshold's own. So one translate table of the top
byte gives the bin of every value whose top byte holds no threshold; for each top byte that holds
one, a table of the second byte gives those values' bins, joined in through big-int masks; the
few values sharing a threshold's top 16 bits (~1% of a weight matrix's) are binned one by one,
with the same expression. Counting is one bytes.count per bin.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_right
from functools import lru_cache
from typing import NamedTuple

from .stats import Binner

# The code of a value binned one by one (so at most 255 bins take this path).
ONE_BY_ONE = 255
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def _key(bits: int) -> int:
    """The order key of float32 bits: keys sort as the values do (-0.0 just below +0.0)."""
    return bits ^ 0x80000000 if bits < 0x80000000 else 0xFFFFFFFF - bits


def _value(key: int) -> float:
    bits = key ^ 0x80000000 if key >= 0x80000000 else 0xFFFFFFFF - key
    return _F32.unpack(_U32.pack(bits))[0]


def _bits(x: float) -> int:
    return _U32.unpack(_F32.pack(x))[0]


class Plan(NamedTuple):
    top: bytes                                   # top byte -> bin, 0 where the next byte decides, ONE_BY_ONE
    second: tuple[tuple[bytes, bytes], ...]      # (top byte == a as 0xFF flags, second byte -> bin), per such a
    lo: float                                    # the range, for the values binned one by one
    hi: float


def plan(binner: Binner) -> Plan | None:
    """The tables for `binner`'s range; None where they cannot be made (a range that is not two
    float32 values, a constant, more bins than the codes hold)."""
    if binner.constant or binner.bins >= ONE_BY_ONE or not (math.isfinite(binner.lo) and math.isfinite(binner.hi)):
        return None
    lo_s, width, scale = binner._scaled()
    return _plan(binner.lo, binner.hi, binner.bins, lo_s, width, scale)


@lru_cache(maxsize=64)
def _plan(lo: float, hi: float, bins: int, lo_s: float, width: float, scale: float) -> Plan | None:
    try:
        if _F32.unpack(_F32.pack(lo))[0] != lo or _F32.unpack(_F32.pack(hi))[0] != hi:
            return None
    except OverflowError:    # beyond float32's range
        return None
    last = bins - 1

    def bin_of(key: int) -> int:   # Binner.add's expression (`within`: never below 0)
        v = _value(key)
        if scale != 1.0:
            v = v * scale
        index = math.floor((v - lo_s) / width)
        return index if index < last else last

    # the keys a value in [lo, hi] can have: a zero bound takes both zeros
    first = _key(_bits(-0.0)) if lo == 0.0 else _key(_bits(lo))
    end = _key(_bits(0.0)) if hi == 0.0 else _key(_bits(hi))
    thresholds = []
    for k in range(1, bins):
        low, high = thresholds[-1] if thresholds else first, end + 1
        while low < high:
            mid = (low + high) // 2
            if bin_of(mid) >= k:
                high = mid
            else:
                low = mid + 1
        thresholds.append(low)

    def code(start: int, stop: int) -> int:
        """The bin of every key in [start, stop], or ONE_BY_ONE if they differ or fall outside."""
        if start < first or stop > end:     # partly or wholly outside: never seen, unless the file changed
            return ONE_BY_ONE
        k = bisect_right(thresholds, start)
        return k if bisect_right(thresholds, stop) == k else ONE_BY_ONE

    top, second = bytearray(256), []
    for byte in range(256):
        high = (byte | 0x80) if byte < 0x80 else 0xFF - byte        # the key's top byte
        top[byte] = code(high << 24, high << 24 | 0xFFFFFF)
        if top[byte] == ONE_BY_ONE and first <= high << 24 | 0xFFFFFF and high << 24 <= end:
            table = bytes(code(key, key | 0xFFFF) for key in
                          ((high << 8 | (b if byte < 0x80 else 0xFF - b)) << 16 for b in range(256)))
            if table.count(ONE_BY_ONE) < 256:     # else leave the whole top byte to one by one
                top[byte] = 0
                second.append((bytes(0xFF if b == byte else 0 for b in range(256)), table))
    return Plan(bytes(top), tuple(second), lo, hi)


def bin_counts(binner: Binner, found: Plan, data: bytes) -> list[int] | None:
    """Counts per bin of the float32 values `data` holds (little-endian), as binner.add would
    make them; None if one lies outside the range (the file changed between the passes)."""
    n = len(data) // 4
    top = data[3::4]
    codes = top.translate(found.top)
    if found.second:
        joined = int.from_bytes(codes, "little")
        second = data[2::4]
        for flags, table in found.second:
            joined |= int.from_bytes(top.translate(flags), "little") & int.from_bytes(second.translate(table), "little")
        codes = joined.to_bytes(n, "little")
    counts = [codes.count(k) for k in range(binner.bins)]
    lo, width, scale = binner._scaled()
    last = binner.bins - 1
    floor, unpack = math.floor, _F32.unpack_from
    at = codes.find(ONE_BY_ONE)
    while at >= 0:
        v = unpack(data, 4 * at)[0]
        if not found.lo <= v <= found.hi:
            return None
        if scale != 1.0:
            v = v * scale
        index = floor((v - lo) / width)
        counts[index if index < last else last] += 1
        at = codes.find(ONE_BY_ONE, at + 1)
    return counts
