"""Python floats as the little-endian bytes of a float dtype, rounded as torch's `.to()` rounds.

  F32   C's double -> float conversion (round to nearest even), array("f") at C speed;
  F16   struct's "e" (CPython's PyFloat_Pack2: round to nearest even from the double, which
        for a float32 value is the same single rounding as torch's float -> half; NaN keeps its
        sign as 0x7e00, as c10's fp16_ieee_from_fp32_value does). struct refuses values past
        the largest half (65504 rounds up to infinity from 65520): those chunks are packed one
        value at a time, the overflowing ones as signed infinity, as IEEE rounding gives;
  BF16  the float32 bits rounded to their top half, to nearest even (c10's
        round_to_nearest_even); every NaN becomes 0xffff, as torch 2.13's CPU cast writes it
        (c10's scalar path would write 0x7fc0: both are NaN; we match the bytes torch gives).
"""

from __future__ import annotations

import math
import struct
import sys
from array import array

F16_INF = 0x7C00
BF16_NAN = 0xFFFF


def f32(values: list[float]) -> bytes:
    out = array("f", values)
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


def f16(values: list[float]) -> bytes:
    try:
        return struct.pack(f"<{len(values)}e", *values)
    except OverflowError:
        return b"".join(_f16_one(v) for v in values)


def _f16_one(v: float) -> bytes:
    try:
        return struct.pack("<e", v)
    except OverflowError:
        return struct.pack("<H", F16_INF | (0x8000 if math.copysign(1.0, v) < 0 else 0))


def bf16(values: list[float]) -> bytes:
    words = array("I" if array("I").itemsize == 4 else "L", f32(values))
    if sys.byteorder == "big":
        words.byteswap()
    out = array("H", [BF16_NAN if (w & 0x7FFFFFFF) > 0x7F800000 else
                      (w + 0x7FFF + ((w >> 16) & 1)) >> 16 for w in words])
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


ENCODERS = {"F32": f32, "F16": f16, "BF16": bf16}
TARGETS = tuple(ENCODERS)     # the dtypes `convert --dtype` writes
