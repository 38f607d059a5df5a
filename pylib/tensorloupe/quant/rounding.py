"""Whole-sequence helpers the decoders share: rounding float results to a narrower float type, and
cutting little-endian bit streams into codes, both at C speed (array, struct, bytes.translate,
big-int shifts) rather than one Python step per element.

Rounding by way of double is exact here: a product of a code (<= 8 bits) and a float32 is exact
in double, and for + - * a double result rounded to a format of p bits is the correctly rounded
result when 53 >= 2p + 2 (float32, float16 and bfloat16 all qualify), so emulating torch's or
MLX's float32/float16/bfloat16 arithmetic through Python floats gives the same bits.
"""

from __future__ import annotations

import math
import struct
from array import array
from functools import lru_cache


def round_to(dtype: str, values) -> list:
    """`values` rounded to `dtype` (F32, F16 or BF16; round to nearest even), as floats."""
    if dtype == "F16":
        n = len(values)
        try:
            return list(struct.unpack(f"<{n}e", struct.pack(f"<{n}e", *values)))
        except OverflowError:     # a product past float16's range: inf, as torch's f16 multiply gives
            return [_f16(v) for v in values]
    f32 = array("f", values)
    if dtype != "BF16":
        return list(f32)
    bits = array("I", f32.tobytes())
    # ties to even on the kept half; NaN never arises (finite codes times finite scales)
    kept = array("I", (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16 & 0xFFFFFFFF for b in bits))
    return list(array("f", kept.tobytes()))


def _f16(v: float) -> float:
    try:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    except OverflowError:     # struct refuses exactly where the rounded value is past 65504
        return math.copysign(math.inf, v)


@lru_cache(maxsize=None)
def _byte_table(shift: int, mask: int, left: int = 0) -> bytes:
    return bytes(((b >> shift) & mask) << left for b in range(256))


def codes(raw: bytes, bits: int) -> bytes:
    """The `bits`-bit codes (1..8) of a little-endian bit stream, one per byte, in order; `raw`
    holds whole periods of 8 codes (`bits` bytes). A code inside one byte is a translate of
    every `bits`-th byte; a code across two bytes ORs two translated strides, done as one
    big-integer OR (their bits are disjoint in every byte)."""
    if bits == 8:
        return bytes(raw)
    n = len(raw) // bits * 8
    out = bytearray(n)
    mask = (1 << bits) - 1
    for k in range(8):
        j, shift = divmod(k * bits, 8)
        low = raw[j::bits].translate(_byte_table(shift, mask))
        if shift + bits > 8:
            spill = shift + bits - 8
            high = raw[j + 1::bits].translate(_byte_table(0, (1 << spill) - 1, 8 - shift))
            both = int.from_bytes(low, "little") | int.from_bytes(high, "little")
            low = both.to_bytes(len(low), "little")
        out[k::8] = low
    return bytes(out)
