"""Exact statistics and histogram counts of a chunk from its raw bytes, faster than element by element.

`chunk_stats(window)` is `compute(decode_window(*window), percentiles=False)` and
`add_chunk(binner, window, every_finite)` is `binner.add(<the window's finite values>, within=True)`, number for
number, for the types in FAST; they return None / False where they cannot promise that (the
caller then decodes the chunk as before). The exact pass (exact.py) is bound by these:

* F32: one float per element still, but the sum decides that no NaN or Inf is there (a finite
  fsum of float32 values proves it), so the pass that counts them is skipped; |v| < 1e-6, the
  zeros, the minimum and the maximum are looked for only among the few values the top bytes
  single out (within a sign the float32 order is the byte order); the histogram bins the array
  itself (no list of floats made for it).
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
from .gather import WindowBytes, dtype_of
from .stats import NEAR_ZERO, Binner, Stats, _m2

# Chunks above this many elements are left to the element path (the exact-product bounds below).
MAX_CHUNK_ELEMS = 1 << 24


def supported(tensor: Tensor) -> bool:
    """Whether `tensor`'s chunks can be summarised from their bytes here."""
    return (tensor.dtype in FAST and tensor.contiguous and not tensor.parts and not tensor.big_endian
            and sys.byteorder == "little" and dtype_of(tensor).name == tensor.dtype)


def chunk_stats(window: WindowBytes) -> Stats | None:
    if not _whole(window):
        return None
    return FAST[window.dtype][0](window.data)


def add_chunk(binner: Binner, window: WindowBytes, every_finite: bool) -> bool:
    if not _whole(window):
        return False
    return FAST[window.dtype][1](binner, window.data, every_finite)


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
    return classes.count(0) + sum(1 for i in _where(classes, 1) if -NEAR_ZERO < values[i] < NEAR_ZERO)


# Where the top bytes single out fewer than len // FEW values, those are looked at one by one.
FEW = 16
_MAGNITUDE_TOP = bytes(b & 0x7F for b in range(256))


def _where(classes: bytes, byte: int):
    """Positions of `byte` in `classes`."""
    at = classes.find(byte)
    while at >= 0:
        yield at
        at = classes.find(byte, at + 1)


@lru_cache(maxsize=None)
def _table(kind: str, byte: int) -> bytes:
    """Translate tables of 0/1 flags: "beyond" a top byte (the same sign, further from zero:
    within a sign the float32 order of magnitudes is the byte order), "equal" to it, or "from"
    a second byte on."""
    test = {"beyond": lambda b: b & 0x80 == byte & 0x80 and b > byte, "equal": lambda b: b == byte,
            "from": lambda b: b >= byte}[kind]
    return bytes(1 if test(b) else 0 for b in range(256))


def _extreme_f32(data: bytes, top: bytes, values: list[float], highest: bool) -> float:
    """max(values) (or min), looking only at the values at least as far from zero as the top 16
    bits of the extreme of every 64th value; the builtin over all of them where those are many,
    or where the extreme may be a zero (the sign of an equal extreme zero is the first one's)."""
    pick = max if highest else min
    bound = pick(values[::64])
    if (bound > 0) != highest or not struct.pack("<f", bound)[3] & 0x7F:
        return pick(values)
    second, first = struct.pack("<f", bound)[2:]
    beyond = top.translate(_table("beyond", first))
    level = (int.from_bytes(top.translate(_table("equal", first)), "little")
             & int.from_bytes(data[2::4].translate(_table("from", second)), "little"))
    level_flags = level.to_bytes(len(top), "little")
    if beyond.count(1) + level_flags.count(1) > len(values) // FEW:
        return pick(values)
    return pick(values[i] for flags in (beyond, level_flags) for i in _where(flags, 1))


def _zeros_f32(top: bytes, values: list[float]) -> int:
    """values.count(0.0): only values whose magnitude's top byte is 0 can be zeros."""
    small = top.translate(_MAGNITUDE_TOP)
    if small.count(0) > len(values) // FEW:
        return values.count(0.0)
    return sum(1 for i in _where(small, 0) if values[i] == 0.0)


def _f32_stats(data: bytes) -> Stats | None:
    values = array("f", data).tolist()
    n = len(values)
    try:
        total = math.fsum(values)
    except (OverflowError, ValueError):   # never for float32 values; inf - inf raises ValueError
        return None
    if not math.isfinite(total):          # a NaN or an infinity among them: counted elsewhere
        return None
    top = data[3::4]                      # each value's sign and top 7 exponent bits
    stats = Stats(count=n, finite=n)
    stats.min, stats.max = _extreme_f32(data, top, values, False), _extreme_f32(data, top, values, True)
    stats.mean = mean = total / n
    stats.m2 = _m2(values, mean)
    stats.std = math.sqrt(stats.m2 / n)
    stats.exact_zeros = _zeros_f32(top, values)
    stats.zeros = _near_zero_f32(top, values) / n
    return stats


def _f32_add(binner: Binner, data: bytes, every_finite: bool) -> bool:
    values = array("f", data)
    binner.add(values if every_finite else list(filter(math.isfinite, values)), within=True)
    return True


# --- Q8_0 and Q4_K: their own modules, imported where a block is read (a safetensors file never
# loads the ggml codecs: tests/test_lazy_imports.py) -----------------------------------------

def _q8_0_stats(data: bytes) -> Stats | None:
    from .rawstats_q8_0 import q8_0_stats
    return q8_0_stats(data)


def _q8_0_add(binner: Binner, data: bytes, every_finite: bool) -> bool:
    from .rawstats_q8_0 import q8_0_add
    return q8_0_add(binner, data)


def _q4_k_stats(data: bytes) -> Stats | None:
    from .rawstats_q4_k import q4_k_stats
    return q4_k_stats(data)


def _q4_k_add(binner: Binner, data: bytes, every_finite: bool) -> bool:
    from .rawstats_q4_k import q4_k_add
    return q4_k_add(binner, data)


FAST = {"F32": (_f32_stats, _f32_add), "Q8_0": (_q8_0_stats, _q8_0_add), "Q4_K": (_q4_k_stats, _q4_k_add)}
