"""Exact statistics and histogram counts of a chunk from its raw bytes, faster than element by element.

`chunk_stats(window)` is `element_stats(window)` (the decoded values' `compute`) and
`add_chunk(binner, window, every_finite)` is `binner.add(<the window's finite values>, within=True)`, number for
number, for the types in FAST; they return None / False where they cannot promise that (the
caller then decodes the chunk as before). The exact pass (exact.py) is bound by these:

* F32: one float per element still, 64K at a time (`pieces`: they stay in cache), summed by fsum
  and squared by hypot (stats.hypot_sum_squares, for the element path too); the sum decides that
  no NaN or Inf is there (a finite fsum of float32 values proves it), so the pass that counts
  them is skipped; |v| < 1e-6, the zeros, the minimum and the maximum are looked for only among
  the few values the top bytes single out (within a sign the float32 order is the byte order);
  the histogram is counted from the top two bytes of each value (rawstats_float_bins.py), no float
  made but for the ~2% of values that share a bin edge's top 16 bits.
* BF16: the statistics are the F32 path's over the float32 values it stands for (its two bytes
  as a float32's top half: exact); faster than counting its element codes (codes.py). The
  histogram is counted from its own two bytes by the F32 path's tables, as F16's.
* F16: the statistics are the F32 path's over the float32 values it stands for (widened exactly
  by byte tables and one shift: ~9 ms per million, where struct's '<e' takes ~36), summed by
  builtin sum where a double adds them without rounding (half fsum's cost); the histogram is
  counted from its own two bytes by the F32 path's tables, which decide every value's bin.
* Q8_0 (rawstats_q8_0.py, imported where a Q8_0 block is read): x = d * q (an f16 scale per 32
  int8 codes) and no float is made per element: sum(x) and sum(x*x) are fsums of exact products
  of each block's code sums (from big-int lanes), the extremes come from the few blocks whose
  scale could hold them; the histogram translates codes to bins by a table per distinct scale.
* Q4_K (rawstats_q4_k.py, imported where a Q4_K block is read): x = d*sc*q - dmin*m per 32-element
  sub-block; where float32 rounds nothing (most blocks: the exponents of d and dmin decide), a
  sub-block's sum(x) and sum(x*x) are exact products of its code sums, taken from big-int byte
  lanes; the other blocks are decoded. The histogram bins each sub-block's 16 possible values once.
A chunk whose result would need the element order (a zero extreme, whose sign min() takes from
the first of equal values), a non-finite scale, or the sum of squared deviations (a mean far
from 0) is left to the element path.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from functools import lru_cache

from ..dtypes import lookup
from ..model import Tensor
from . import rawstats_float_bins
from .bytecounts import positions
from .gather import WindowBytes, decode_window, dtype_of
from .stats import NEAR_ZERO, Binner, Stats, _m2, compute

# Chunks above this many elements are left to the element path (the exact-product bounds below).
MAX_CHUNK_ELEMS = 1 << 24


def supported(tensor: Tensor) -> bool:
    """Whether `tensor`'s chunks can be summarised from their bytes here."""
    return (tensor.dtype in FAST and tensor.contiguous and not tensor.parts and not tensor.big_endian
            and sys.byteorder == "little" and dtype_of(tensor).name == tensor.dtype)


# Dtypes whose element path sums the squares by math.hypot (stats.hypot_sum_squares): F32, BF16
# and F16, whose fast path (the F32 one) does so too. The quantised ones keep the exact fsum their block sums give.
HYPOT_SQUARES = frozenset({"F32", "BF16", "F16"})


def values_stats(values: list, dtype: str) -> Stats:
    """The element path: the statistics of a chunk's decoded values of `dtype`, with the sum of
    squares its fast path takes (what chunk_stats gives)."""
    return compute(values, percentiles=False, hypot_squares=dtype in HYPOT_SQUARES)


def element_stats(window: WindowBytes) -> Stats:
    """`values_stats` of the window's decoded values."""
    return values_stats(decode_window(*window), window.dtype)


def chunk_stats(window: WindowBytes, kept: dict | None = None) -> Stats | None:
    """`kept`, a dict, receives what the pass decoded of the window that add_chunk can take for
    the same window instead of decoding it again (Q4_K's scales and codes; exact.py)."""
    if not _whole(window):
        return None
    return FAST[window.dtype][0](window.data, kept)


def add_chunk(binner: Binner, window: WindowBytes, every_finite: bool, kept: dict | None = None) -> bool:
    if not _whole(window):
        return False
    return FAST[window.dtype][1](binner, window.data, every_finite, kept)


# An F32 chunk's statistics are taken over pieces of this many elements, merged (stats.merge), by
# the fast path and the element path alike: a piece's list of floats stays in the CPU's cache,
# which makes it ~3x cheaper to make and to sum than a million-element one (bench/exact_stats.py).
PIECE_ELEMS = {"F32": 1 << 16, "BF16": 1 << 16, "F16": 1 << 16}


def pieces(window: WindowBytes) -> list[WindowBytes]:
    """The windows whose statistics, merged, are the exact pass's for `window`: an F32, BF16 or
    F16 window cut into PIECE_ELEMS pieces (the element path cuts its values alike: exact.py), any
    other whole."""
    step = PIECE_ELEMS.get(window.dtype)
    size = lookup(window.dtype).block_bytes
    if step is None or window.skip or window.count <= step or len(window.data) != window.count * size:
        return [window]
    data = window.data
    return [WindowBytes(window.dtype, window.big_endian, 0, min(step, window.count - at),
                        data[size * at:size * (at + step)])
            for at in range(0, window.count, step)]


def _whole(window: WindowBytes) -> bool:
    """Whole blocks, every element of them wanted, little-endian, a size the bounds allow."""
    info = lookup(window.dtype)
    elems, size = info.block_elems, info.block_bytes
    return (not window.skip and not window.big_endian and 0 < window.count <= MAX_CHUNK_ELEMS
            and len(window.data) == window.count // elems * size and window.count % elems == 0)


# --- F32 ---------------------------------------------------------------------------------------

def _smallest_f32_at_least(x: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return bits if struct.unpack("<f", struct.pack("<I", bits))[0] >= x else bits + 1


# |v| < NEAR_ZERO  <=>  the magnitude's bits are below those of the smallest float32 >= NEAR_ZERO;
# by the magnitude's top byte: below NEAR_TOP surely, above it surely not, equal: look closer.
_NEAR_BITS = _smallest_f32_at_least(NEAR_ZERO)
_NEAR_TOP = _NEAR_BITS >> 24
_TOP_CLASS = bytes(0 if b & 0x7F < _NEAR_TOP else 1 if b & 0x7F == _NEAR_TOP else 2 for b in range(256))


def _near_zero_f32(top: bytes, values: list[float]) -> int:
    classes = top.translate(_TOP_CLASS)
    unsure = classes.count(1)
    if unsure > len(values) // FEW:      # many values near the threshold: look at each
        return sum(1 for v in values if -NEAR_ZERO < v < NEAR_ZERO)
    return classes.count(0) + sum(1 for i in positions(classes, 1) if -NEAR_ZERO < values[i] < NEAR_ZERO)


# Where the top bytes single out fewer than len // FEW values, those are looked at one by one.
FEW = 16
_MAGNITUDE_TOP = bytes(b & 0x7F for b in range(256))


@lru_cache(maxsize=None)
def _table(kind: str, byte: int) -> bytes:
    """Translate tables of 0/1 flags: "beyond" a top byte (the same sign, further from zero:
    within a sign the float32 order of magnitudes is the byte order), "equal" to it, or "from"
    a second byte on."""
    test = {"beyond": lambda b: b & 0x80 == byte & 0x80 and b > byte, "equal": lambda b: b == byte,
            "from": lambda b: b >= byte}[kind]
    return bytes(1 if test(b) else 0 for b in range(256))


def _extreme_f32(top: bytes, second: bytes, values: list[float], highest: bool) -> float:
    """max(values) (or min), looking only at the values at least as far from zero as the top 16
    bits of the extreme of every 64th value; the builtin over all of them where those are many,
    or where the extreme may be a zero (the sign of an equal extreme zero is the first one's)."""
    pick = max if highest else min
    bound = pick(values[::64])
    if (bound > 0) != highest or not struct.pack("<f", bound)[3] & 0x7F:
        return pick(values)
    next_byte, first = struct.pack("<f", bound)[2:]
    beyond = top.translate(_table("beyond", first))
    level = (int.from_bytes(top.translate(_table("equal", first)), "little")
             & int.from_bytes(second.translate(_table("from", next_byte)), "little"))
    level_flags = level.to_bytes(len(top), "little")
    if beyond.count(1) + level_flags.count(1) > len(values) // FEW:
        return pick(values)
    return pick(values[i] for flags in (beyond, level_flags) for i in positions(flags, 1))


@lru_cache(maxsize=1024)
def _extreme_tables(low: bytes, high: bytes) -> tuple[bytes, bytes, bytes]:
    """Tables that flag, in one pass, the candidates for the maximum (1: positive, top 16 bits at
    least `high`, a positive bound's top two bytes, little-endian) and for the minimum (2:
    negative, magnitude's top 16 bits at least `low`'s): a class of the top byte (1 beyond the
    bound's top byte, 2 equal to it; 3 and 4 for the minimum's) plus 16 and 32 for a second byte
    at least the bounds', a lane sum that never carries, then the flag of each sum."""
    second_low, top_low, second_high, top_high = low[0], low[1], high[0], high[1]
    top = bytes(1 if b < 0x80 and b > top_high else 2 if b == top_high else
                3 if b >= 0x80 and b > top_low else 4 if b == top_low else 0 for b in range(256))
    second = bytes(16 * (b >= second_high) + 32 * (b >= second_low) for b in range(256))
    flag = bytes(1 if c & 15 == 1 or (c & 15 == 2 and c & 16) else
                 2 if c & 15 == 3 or (c & 15 == 4 and c & 32) else 0 for c in range(256))
    return top, second, flag


def _extremes_f32(top: bytes, second: bytes, values: list[float]) -> tuple[float, float]:
    """(min(values), max(values)) as `_extreme_f32` finds them, both in one pass over the bytes
    where the bounds of every 64th value allow (a negative minimum and a positive maximum)."""
    sample = values[::64]
    low, high = struct.pack("<f", min(sample)), struct.pack("<f", max(sample))
    if not (low[3] > 0x80 and 0 < high[3] < 0x80):   # a bound of the other sign, or near a zero
        return _extreme_f32(top, second, values, False), _extreme_f32(top, second, values, True)
    top_table, second_table, flag_table = _extreme_tables(low[2:], high[2:])   # cached: few distinct
    n = len(top)
    lanes = int.from_bytes(top.translate(top_table), "little") + int.from_bytes(second.translate(second_table), "little")
    flags = lanes.to_bytes(n, "little").translate(flag_table)
    lowest = min(values) if flags.count(2) > n // FEW else min(values[i] for i in positions(flags, 2))
    highest = max(values) if flags.count(1) > n // FEW else max(values[i] for i in positions(flags, 1))
    return lowest, highest


def _zeros_f32(top: bytes, values: list[float]) -> int:
    """values.count(0.0): only values whose magnitude's top byte is 0 can be zeros."""
    small = top.translate(_MAGNITUDE_TOP)
    if small.count(0) > len(values) // FEW:
        return values.count(0.0)
    return sum(1 for i in positions(small, 0) if values[i] == 0.0)


@lru_cache(maxsize=16)
def _values_of(code: str, n: int) -> struct.Struct:
    """struct's reader of n little-endian values of `code` ("f": float32, "e": float16)."""
    return struct.Struct(f"<{n}{code}")


def _f32_stats(data: bytes, kept: dict | None = None) -> Stats | None:
    # kept: nothing decoded here is worth keeping (the bytes are the values)
    return _float32_stats(data, data[3::4], data[2::4])


def _float32_stats(data: bytes, top: bytes, second: bytes, float16: bool = False) -> Stats | None:
    """The statistics of the float32 values `data` holds, given each one's top byte (its sign and
    top 7 exponent bits) and the next (widening F16 makes them on the way); `float16`: each is a
    float16's value (whose sum a double may hold exactly: `_exact_plain_sum`)."""
    # a tuple, not a list: math.hypot(*values) then takes it as it is (a list is first copied
    # into one, touching every float: that doubled hypot's cost)
    values = _values_of("f", len(data) // 4).unpack(data)
    n = len(values)
    if not float16:   # (widening F16 lets no infinity or NaN through)
        try:
            total = math.fsum(values)
        except (OverflowError, ValueError):   # never for float32 values; inf - inf raises ValueError
            return None
        if not math.isfinite(total):          # a NaN or an infinity among them: counted elsewhere
            return None
    stats = Stats(count=n, finite=n)
    stats.min, stats.max = _extremes_f32(top, second, values)
    if float16:
        total = sum(values) if _exact_plain_sum(n, stats.min, stats.max) else math.fsum(values)
    stats.mean = mean = total / n
    stats.m2 = _m2(values, mean, hypot_squares=True)
    stats.std = math.sqrt(stats.m2 / n)
    stats.exact_zeros = _zeros_f32(top, values)
    stats.zeros = _near_zero_f32(top, values) / n
    return stats


def _float_add(binner: Binner, data: bytes, every_finite: bool, fmt: rawstats_float_bins.Format) -> bool:
    found = rawstats_float_bins.plan(binner, fmt) if every_finite else None
    counts = rawstats_float_bins.bin_counts(binner, found, data) if found is not None else None
    if counts is not None:
        for k, n in enumerate(counts):
            binner.counts[k] += n * binner.weight
        return True
    if fmt is rawstats_float_bins.F16:
        values = _values_of("e", len(data) // 2).unpack(data)
    else:
        values = array("f", data if fmt is rawstats_float_bins.F32 else _widen_bf16(data))
    binner.add(values if every_finite else list(filter(math.isfinite, values)), within=True)
    return True


def _f32_add(binner: Binner, data: bytes, every_finite: bool, kept: dict | None = None) -> bool:
    return _float_add(binner, data, every_finite, rawstats_float_bins.F32)


# --- BF16: the float32 values it stands for ------------------------------------------------------

def _widen_bf16(data: bytes) -> bytes:
    """Each bfloat16 as the float32 it is, exactly: its two bytes become the float32's top half."""
    out = bytearray(2 * len(data))
    out[2::4] = data[0::2]
    out[3::4] = data[1::2]
    return bytes(out)


def _bf16_stats(data: bytes, kept: dict | None = None) -> Stats | None:
    return _f32_stats(_widen_bf16(data))


def _bf16_add(binner: Binner, data: bytes, every_finite: bool, kept: dict | None = None) -> bool:
    return _float_add(binner, data, every_finite, rawstats_float_bins.BF16)


# --- F16: the float32 values it stands for, for the statistics ----------------------------------

def _exponent(b: int) -> int:
    return b >> 2 & 0x1F      # of a float16's top byte: the sign, 5 exponent bits, 2 mantissa bits


# A float16 (sign s, exponent e, mantissa m) of e in 1..30 is the float32 of sign s, exponent
# e + 112 and mantissa m << 13: its top byte is s and (e + 112) >> 1 (_F16_TOP, from the float16's
# top byte), the next one the float16's bits 3..10 (the last exponent bit, as e + 112 keeps it, and
# the mantissa's top 7: those of the whole float16 shifted by 3), the next its last 3 bits
# (_F16_THIRD), the last 0. So is ±0 (its top byte s, then zeros); a subnormal (e 0, m not 0: m *
# 2**-24) is a float32 of another exponent, made by struct; e 31 is an infinity or a NaN.
_F16_TOP = bytes(b & 0x80 | (_exponent(b) + 112 >> 1 if _exponent(b) else 0) for b in range(256))
_F16_THIRD = bytes((b & 7) << 5 for b in range(256))
_F16_CLASS = bytes(2 if _exponent(b) == 31 else 1 if _exponent(b) == 0 else 0 for b in range(256))
# Which float16s are subnormal, from a sum of byte lanes: of the top byte, 2 where the exponent is 0
# and the mantissa's top bits are not (a subnormal), 1 where both are 0 (a zero or a subnormal, as
# the low byte says); of the low byte, 1 if not 0. The sum is at least 2 for a subnormal only.
_SUBNORMAL_HIGH = bytes(0 if _exponent(b) else 2 if b & 3 else 1 for b in range(256))
_NOT_ZERO = bytes(1 if b else 0 for b in range(256))
_AT_LEAST_2 = bytes(1 if c >= 2 else 0 for c in range(256))


def _widen_f16(data: bytes) -> tuple[bytes, bytes, bytes] | None:
    """The float32 bytes of each float16 in `data`, exactly, with each float32's top byte and the
    next (made on the way, so the F32 path need not cut them out again); None if one is an
    infinity or a NaN."""
    high, low = data[1::2], data[0::2]
    classes = high.translate(_F16_CLASS)
    if classes.find(2) >= 0:
        return None
    n = len(high)
    candidates = classes
    if classes.count(1) > n // FEW:      # many zeros (a pruned tensor): which of them are subnormals
        candidates = _subnormal_flags(high, low)
        if candidates.count(1) > n // FEW:   # too many to patch one by one: convert them all
            wide = _values_of("f", n).pack(*_values_of("e", n).unpack(data))
            return wide, wide[3::4], wide[2::4]
    out = bytearray(2 * len(data))
    out[3::4] = top = bytearray(high.translate(_F16_TOP))
    out[2::4] = second = bytearray((int.from_bytes(data, "little") >> 3).to_bytes(len(data), "little")[0::2])
    out[1::4] = low.translate(_F16_THIRD)
    one_f32, one_f16 = _values_of("f", 1), _values_of("e", 1)
    for i in positions(candidates, 1):
        if low[i] or high[i] & 0x7F:          # a subnormal, not a zero
            one_f32.pack_into(out, 4 * i, one_f16.unpack_from(data, 2 * i)[0])
            second[i], top[i] = out[4 * i + 2:4 * i + 4]
    return bytes(out), bytes(top), bytes(second)


def _subnormal_flags(high: bytes, low: bytes) -> bytes:
    """1 for each float16 (of these top and low bytes) that is subnormal, else 0."""
    lanes = int.from_bytes(high.translate(_SUBNORMAL_HIGH), "little") + int.from_bytes(low.translate(_NOT_ZERO), "little")
    return lanes.to_bytes(len(high), "little").translate(_AT_LEAST_2)


def _f16_stats(data: bytes, kept: dict | None = None) -> Stats | None:
    parts = _widen_f16(data)
    return _float32_stats(*parts, float16=True) if parts is not None else None


# Every float16 is a multiple of 2**-24 (the least subnormal). n of them, each below 2**13 in
# magnitude, have partial sums below 2**(13 + log2 n) that are multiples of 2**-24: for n up to
# 2**16 those need at most 53 bits, so a double adds them without rounding once (builtin sum: the
# exact sum, which fsum rounds to itself, at half fsum's cost).
_PLAIN_SUM_ELEMS = 1 << 16
_PLAIN_SUM_BELOW = 2.0 ** 13


def _exact_plain_sum(n: int, lowest: float, highest: float) -> bool:
    """Whether builtin sum() adds n float16 values in [lowest, highest] exactly."""
    return n <= _PLAIN_SUM_ELEMS and -_PLAIN_SUM_BELOW < lowest and highest < _PLAIN_SUM_BELOW


def _f16_add(binner: Binner, data: bytes, every_finite: bool, kept: dict | None = None) -> bool:
    return _float_add(binner, data, every_finite, rawstats_float_bins.F16)


# --- Q8_0 and Q4_K: their own modules, imported where a block is read (a safetensors file never
# loads the ggml codecs: tests/test_lazy_imports.py) -----------------------------------------

def _q8_0_stats(data: bytes, kept: dict | None = None) -> Stats | None:
    from .rawstats_q8_0 import q8_0_stats
    return q8_0_stats(data)


def _q8_0_add(binner: Binner, data: bytes, every_finite: bool, kept: dict | None = None) -> bool:
    from .rawstats_q8_0 import q8_0_add
    return q8_0_add(binner, data)


def _q4_k_stats(data: bytes, kept: dict | None = None) -> Stats | None:
    from .rawstats_q4_k import q4_k_stats
    return q4_k_stats(data, kept)


def _q4_k_add(binner: Binner, data: bytes, every_finite: bool, kept: dict | None = None) -> bool:
    from .rawstats_q4_k import q4_k_add
    return q4_k_add(binner, data, kept)


FAST = {"F32": (_f32_stats, _f32_add), "BF16": (_bf16_stats, _bf16_add), "F16": (_f16_stats, _f16_add),
        "Q8_0": (_q8_0_stats, _q8_0_add), "Q4_K": (_q4_k_stats, _q4_k_add)}
