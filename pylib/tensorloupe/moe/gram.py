"""Cosine similarity of every pair of many long vectors (expert signatures), in pure Python.

A layer of 64 experts with signatures of 8,192 values is 2,016 dot products of 8,192 terms; float
products (math.sumprod's exact path is slow in wasm) took ~1 s a layer in Pyodide. Here they are
done on integers, a whole row of dot products per C-level loop:

  * fixed point: each vector is scaled by a power of two 2**e, the largest that keeps its largest
    magnitude within h - 1 (h = 2**(BITS-1)), rounded to integers and offset by h so that every
    value is positive. One float addition does all three: v + c with c = (2**52 + h) * 2**-e is a
    double of the same binade as c (spacing 2**-e), rounded to nearest, ties to even (IEEE 754:
    the same in CPython and Pyodide), and its 52-bit mantissa is q = h + round(v * 2**e). So the
    values never become Python ints one by one: `array` and `memoryview` move their bytes;
  * packing: the doubles of all vectors at position k are one integer, 64 bits per vector, plus
    a last field holding 1 (a product's last field is then the sum of the multiplier's values,
    which removes the offset h); the doubles' exponent bits, the same in every column, are one
    constant subtracted from each packed integer;
  * products: row i's dot products with the vectors after it are `sum(map(mul, q_i, packed))`
    (`math.sumprod` where Python has it), a C loop of small-by-large integer products whose
    64-bit fields never carry into each other (a field sums `length` products below
    2**(2 * BITS), and BITS is chosen so that this stays below 2**64). Only the upper triangle
    is computed: rows come in blocks of BLOCK_ROWS, multiplied by
    the packed integers shifted to the fields of the block's own and later vectors (a product's
    cost grows with its size, ~1 digit step per 30 bits in CPython and in Pyodide alike, whose
    ints also have 30-bit digits).

Integer arithmetic is exact and the last steps (int to float, sqrt, division) are correctly
rounded, so CPython and Pyodide give the same similarities bit for bit.

Precision (proven; tested against numpy float64): rounding moves each scaled value by at most 1/2
(one correctly rounded addition), and a scaled vector's norm is at least (h - 1) / 2 (its largest
value, scaled by the largest power of two that keeps it within h - 1), so a vector of `length`
values turns by an angle of at most asin(sqrt(length) / (h - 1)), and a cosine moves by at most
the sum of its two vectors' angles, plus ~1e-15 for the final float steps: `max_error(length)`.
For 8,192 values BITS is 25 and the bound is 1.1e-5 (1.3e-5 for 3 matrices of 4,096); half of it
is reached by a vector whose values all sit half a step off the grid (one outlier, the rest tiny
and aligned: tested); typical weights move by ~1e-8. Equal vectors, and power-of-two multiples
(the same grid), are exactly 1; other parallel vectors are within max_error**2 / 2 (second order)
+ 1e-15 of it. The same rounding moves a vector's norm by at most sqrt(length) / 2 steps, which is
sqrt(length) / (h - 1) <= max_error / 2 of the norm, and its sum by at most length / 2 steps, the
same fraction of sqrt(length) times the norm: `Gram.norms` and `Gram.sums` (the experts' rms and
mean, redundancy.py) are that close, from integers the products computed anyway.
"""

from __future__ import annotations

import math
import operator
import struct
from array import array
from itertools import repeat
from sys import byteorder
from typing import Iterator, NamedTuple

BLOCK_ROWS = 16
MAX_BITS = 30
MAX_LENGTH = 1 << 32
EXTREME_EXPONENT = 900
_MANTISSA = 52
_DOUBLE = struct.Struct("<d")


def _map_dot(a: list[int], b: list[int]) -> int:
    return sum(map(operator.mul, a, b))


# A row's dot products: math.sumprod (Python 3.12+, so Pyodide) is one C loop, ~10% faster in
# wasm than sum(map(mul)); on integers both are exact, so the answer is the same bit for bit.
_dot = getattr(math, "sumprod", None) or _map_dot


def value_bits(length: int) -> int:
    """Bits of each fixed-point value (offset included) for vectors of `length` values: a 64-bit
    field holds a sum of `length` products below 2**(2 * bits)."""
    return min(MAX_BITS, (64 - (max(length, 1) - 1).bit_length()) // 2)


def max_error(length: int) -> float:
    """The largest difference from the exact cosine (see the module docstring)."""
    half = 1 << (value_bits(length) - 1)
    return 2 * math.asin(min(1.0, math.sqrt(length) / (half - 1))) + 1e-15


class Gram(NamedTuple):
    """What gram_steps measures: the cosine of every pair, and each vector's Euclidean norm and
    sum, from the same fixed-point integers (each within max_error(length) / 2 of the exact
    value, relative to the norm: the rounding of one vector, as in the docstring's proof)."""
    cosines: list[list[float]]
    norms: list[float]
    sums: list[float]


def cosine_matrix(vectors: list[list[float]]) -> list[list[float]]:
    *_, matrix = cosine_steps(vectors)
    return matrix


def cosine_steps(vectors: list[list[float]]) -> Iterator[list[list[float]] | None]:
    """gram_steps, ending with the similarity matrix alone."""
    for step in gram_steps(vectors):
        yield step.cosines if step is not None else None


def gram_steps(vectors: list[list[float]]) -> Iterator[Gram | None]:
    """Yields None after each block of rows (a point where the caller may stop), then the Gram.
    Values must be finite; vectors of unequal length are zero-padded."""
    n = len(vectors)
    length = max(map(len, vectors), default=0)
    if length > MAX_LENGTH:
        raise ValueError(f"vectors of {length:,} values are longer than the {MAX_LENGTH:,} compared")
    bits = value_bits(length)
    half = 1 << (bits - 1)
    stride = n + 1                                    # fields per column: the vectors, then 1
    ones = float((1 << _MANTISSA) + 1)
    grid = array("d", [ones]) * (stride * length)     # column-major doubles
    exponents = _bits(ones) - 1 << 64 * n             # what each field holds above its q
    multipliers, shifts = [], []
    for j, v in enumerate(vectors):
        v, c, shift = _fixed(v, bits)
        shifts.append(shift)
        y = array("d", [x + c for x in v])   # a comprehension: map() calls cost more in wasm
        y.extend(array("d", [c]) * (length - len(v)))
        grid[j::stride] = y
        exponents += _bits(c) - half << 64 * j
        # a double's low 32 bits (its first or second half) are the low bits of its mantissa: q
        multipliers.append(memoryview(y).cast("B").cast("I")[byteorder == "big"::2].tolist())
    if byteorder == "big":
        grid.byteswap()
    data = memoryview(grid).cast("B")
    size = 8 * stride
    packed = [int.from_bytes(data[k:k + size], "little") for k in range(0, size * length, size)]
    packed = list(map(operator.sub, packed, repeat(exponents)))
    fields: list[tuple[int, ...]] = []     # fields[i][j - i]: sum(q_i q_j) for j >= i; last, sum(q_i)
    for start in range(0, n, BLOCK_ROWS):
        block = list(map(operator.rshift, packed, repeat(64 * start))) if start else packed
        width = 8 * (stride - start)
        for i in range(start, min(n, start + BLOCK_ROWS)):
            raw = _dot(multipliers[i], block).to_bytes(width, "little")
            fields.append(struct.unpack_from(f"<{stride - i}Q", raw, 8 * (i - start)))
        yield None
    cosines, squares, totals = _matrix(fields, half, length)
    yield Gram(cosines, [_scaled(math.sqrt(q), shift) for q, shift in zip(squares, shifts)],
               [_scaled(float(t - length * half), shift) for t, shift in zip(totals, shifts)])


def _fixed(v: list[float], bits: int) -> tuple[list[float], float, int]:
    """v (scaled by an exact power of two if its magnitude is extreme), the c that rounds it:
    (2**52 + h) * 2**-e for the largest e that keeps max|v| * 2**e within h - 1, and the shift
    that takes a fixed-point value back to v's own scale (v = (q - h) * 2**shift, rounded)."""
    half = 1 << (bits - 1)
    peak = max(max(v, default=0.0), -min(v, default=0.0))
    if not math.isfinite(peak):
        raise ValueError("cosine similarities need finite values")
    if not peak:
        return v, float((1 << _MANTISSA) + half), 0
    mantissa, exponent = math.frexp(peak)
    shift = 0
    if abs(exponent) > EXTREME_EXPONENT:      # c must stay a normal double: peak to ~1 first
        for step in (-exponent // 2, -exponent - -exponent // 2):   # 2**1074 is no double
            v = list(map(operator.mul, v, repeat(math.ldexp(1.0, step))))
        shift, exponent = exponent, 0
    e = bits - 1 - exponent
    if mantissa * half > half - 1:            # peak * 2**e would round to h: one too many
        e -= 1
    return v, math.ldexp((1 << _MANTISSA) + half, -e), shift - e


def _scaled(x: float, shift: int) -> float:
    """x * 2**shift (exact unless it leaves the doubles: then inf, or rounded towards 0)."""
    try:
        return math.ldexp(x, shift)
    except OverflowError:
        return math.copysign(math.inf, x)


def _bits(x: float) -> int:
    return int.from_bytes(_DOUBLE.pack(x), "little")


def _matrix(fields: list[tuple[int, ...]], half: int, length: int):
    """The cosines, and each vector's sum((q_i - h)**2) and sum(q_i)."""
    n = len(fields)
    totals = [row[-1] for row in fields]             # sum(q_i)
    offset = length * half * half
    # sum((q_i - h)(q_j - h)) = sum(q_i q_j) - h sum(q_i) - h sum(q_j) + length h h
    dots = [[row[j - i] - half * (totals[i] + totals[j]) + offset for j in range(i, n)]
            for i, row in enumerate(fields)]
    squares = [row[0] for row in dots]        # sum((q_i - h)**2)
    matrix = [[1.0] * n for _ in range(n)]
    for i, row in enumerate(dots):
        for j in range(i + 1, n):
            matrix[i][j] = matrix[j][i] = _cosine(row[j - i], squares[i], squares[j])
    return matrix, squares, totals


def _cosine(dot: int, a: int, b: int) -> float:
    if not a or not b:
        return 0.0
    if dot * dot == a * b:      # parallel vectors: exactly +-1, not 1 - 2e-16
        return 1.0 if dot > 0 else -1.0
    return max(-1.0, min(1.0, dot / math.sqrt(a * b)))
